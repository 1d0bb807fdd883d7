// SPDX-License-Identifier: BSL-1.0
// Flat streams (flat_stream.hpp) write the bytes output_archive writes for the same values and
// options, so that a parcel written either way reads the same; and they refuse (not flat) any
// value that would leave the index.
#include <courier/serialization.hpp>
#include <courier/serialization/flat_stream.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace cs = courier::serialization;

namespace {

enum class colour : std::uint16_t { red = 3, green = 500 };

enum class named : std::uint8_t { a, b };

} // namespace

// A user's own serializer, a template as flat streams' are, that saves what only an output
// archive can (a string): never taken for a flat stream.
template <>
struct courier::serialization::serializer<named> {
    template <class Archive>
    static void save(Archive& ar, named v) {
        ar.save(std::string(v == named::a ? "a" : "b"));
    }
    static void load(input_archive& ar, named& v) {
        std::string s;
        ar.load(s);
        v = s == "a" ? named::a : named::b;
    }
};

namespace {

struct user {
    int a;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& a;
    }
};

/// The values' stream written flat (header included), or empty if they are not flat.
template <class... T>
std::vector<std::byte> flat(cs::options const& o, T const&... v) {
    cs::stream_threshold const t = cs::stream_threshold_of(o);
    cs::flat_sizer sizer(t.threshold);
    (sizer.save(v), ...);
    if (!sizer.flat()) {
        return {};
    }
    // One byte past the end, checked after: the writer stays within what the sizer counted.
    std::vector<std::byte> out(cs::message_header_size + sizer.size() + 1, std::byte{0x5a});
    cs::write_stream_header(out.data(), t.recorded);
    cs::flat_writer w(out.data() + cs::message_header_size, t.threshold);
    (w.save(v), ...);
    EXPECT_EQ(w.position(), out.data() + out.size() - 1);
    EXPECT_EQ(out.back(), std::byte{0x5a});
    out.pop_back();
    return out;
}

template <class... T>
std::vector<std::byte> archived(cs::options const& o, T const&... v) {
    cs::message m = cs::save(o, v...);
    EXPECT_EQ(m.chunks().size(), 1u);
    return {m.data().begin(), m.data().end()};
}

cs::serialize_buffer<char> filled(std::size_t n) {
    cs::serialize_buffer<char> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = static_cast<char>('a' + i % 26);
    }
    return b;
}

} // namespace

TEST(flat_stream, numbers_enums_and_bools_as_the_archive_writes_them) {
    cs::options const o;
    std::uint8_t const u8 = 0xab;
    std::int16_t const i16 = -2;
    std::uint64_t const u64 = 0x0102030405060708ull;
    double const d = 1.5;
    EXPECT_EQ(flat(o, u8, i16, u64, d, colour::green, true, false),
              archived(o, u8, i16, u64, d, colour::green, true, false));
    EXPECT_EQ(flat(o), archived(o)); // the header alone
}

TEST(flat_stream, small_buffers_as_the_archive_writes_them) {
    cs::options const o; // threshold 4096
    // Sizes around the varint's one-byte limit (127 / 128) and just below the threshold.
    for (std::size_t n : {0, 1, 8, 127, 128, 1000, 4095}) {
        auto const b = filled(n);
        auto const f = flat(o, 7, b, colour::red);
        ASSERT_FALSE(f.empty()) << n;
        EXPECT_EQ(f, archived(o, 7, b, colour::red)) << n;
    }
    cs::options const low{256, true};
    EXPECT_EQ(flat(low, filled(255)), archived(low, filled(255)));
}

TEST(flat_stream, a_buffer_at_the_threshold_is_not_flat) {
    cs::options const o;
    EXPECT_TRUE(flat(o, filled(4096)).empty());
    EXPECT_TRUE(flat(o, 1, filled(8), filled(5000)).empty());
    cs::options const low{64, true};
    EXPECT_TRUE(flat(low, filled(64)).empty());
    EXPECT_FALSE(flat(low, filled(63)).empty());
}

TEST(flat_stream, zero_copy_off_keeps_every_buffer_in_the_index) {
    cs::options const off{4096, false};
    auto const b = filled(10000);
    auto const f = flat(off, b);
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(f, archived(off, b));
}

TEST(flat_stream, what_it_writes_reads_back) {
    cs::options const o;
    auto const b = filled(300);
    auto bytes = flat(o, std::int32_t{-9}, b, 2.25);
    cs::message m = cs::message::from_bytes(bytes);
    std::int32_t i = 0;
    cs::serialize_buffer<char> r;
    double d = 0;
    cs::load(m, i, r, d);
    EXPECT_EQ(i, -9);
    ASSERT_EQ(r.size(), b.size());
    EXPECT_TRUE(std::equal(r.begin(), r.end(), b.begin()));
    EXPECT_EQ(d, 2.25);
}

TEST(flat_stream, only_serializers_written_for_any_archive_are_flat) {
    static_assert(cs::flat_savable<int>);
    static_assert(cs::flat_savable<colour>);
    static_assert(cs::flat_savable<cs::serialize_buffer<double>>);
    static_assert(!cs::flat_savable<std::vector<int>>);
    static_assert(!cs::flat_savable<user>);
    static_assert(!cs::flat_savable<named>);
    SUCCEED();
}

namespace {

/// The error an input archive gives reading `values` from `bytes` (a message of one index
/// chunk, viewed: no header check first), and flat_reader's; "" for none.
template <class... T>
std::pair<std::string, std::string> errors_reading(std::vector<std::byte> const& bytes,
                                                   T&... values) {
    std::string archive_error, flat_error;
    try {
        cs::message m;
        m.view(bytes);
        cs::input_archive in(m);
        (in.load(values), ...);
        in.finish();
    } catch (cs::serialization_error const& e) {
        archive_error = e.what();
    }
    try {
        cs::flat_reader r(bytes);
        (r.load(values), ...);
        r.finish();
    } catch (cs::serialization_error const& e) {
        flat_error = e.what();
    }
    return {archive_error, flat_error};
}

} // namespace

TEST(flat_reader, reads_what_the_archive_wrote) {
    cs::options const o;
    for (std::size_t n : {0, 1, 127, 128, 4095}) {
        auto const b = filled(n);
        auto const bytes = archived(o, std::int32_t{-9}, b, colour::green, true, 2.25);
        cs::flat_reader r(bytes);
        std::int32_t i = 0;
        cs::serialize_buffer<char> got;
        colour c = colour::red;
        bool flag = false;
        double d = 0;
        r.load(i);
        r.load(got);
        r.load(c);
        r.load(flag);
        r.load(d);
        EXPECT_NO_THROW(r.finish()) << n;
        EXPECT_EQ(i, -9);
        EXPECT_TRUE(got == b) << n;
        EXPECT_EQ(c, colour::green);
        EXPECT_TRUE(flag);
        EXPECT_EQ(d, 2.25);
        EXPECT_EQ(r.remaining(), 0u);
    }
    cs::options const off{4096, false}; // zero copy off: a large buffer is in the index too
    auto const big = filled(10000);
    auto const bytes = archived(off, big);
    cs::flat_reader r(bytes);
    cs::serialize_buffer<char> got;
    r.load(got);
    r.finish();
    EXPECT_TRUE(got == big);
}

TEST(flat_reader, rejects_what_the_archive_rejects_with_its_words) {
    cs::options const o;
    auto const good = archived(o, std::uint32_t{7}, true, filled(24));
    std::uint32_t u = 0;
    bool flag = false;
    cs::serialize_buffer<char> b;
    auto check = [&](std::vector<std::byte> const& bytes, char const* expected) {
        auto const [archive_error, flat_error] = errors_reading(bytes, u, flag, b);
        EXPECT_NE(flat_error.find(expected), std::string::npos) << expected << ": " << flat_error;
        EXPECT_EQ(flat_error, archive_error);
    };
    std::size_t const flag_at = cs::message_header_size + 4;

    auto truncated = good;
    truncated.resize(truncated.size() - 5);
    check(truncated, "element count 24 cannot fit: 19 bytes remain");
    auto trailing = good;
    trailing.insert(trailing.end(), 3, std::byte{0});
    check(trailing, "trailing garbage: 3 index bytes left unread");
    auto bad_bool = good;
    bad_bool[flag_at] = std::byte{2};
    check(bad_bool, "expected a bool (0 or 1), found 2");
    auto absurd = good;
    absurd.erase(absurd.begin() + static_cast<std::ptrdiff_t>(flag_at) + 1);
    std::byte const count[] = {std::byte{0x80}, std::byte{0x80}, std::byte{0x80},
                               std::byte{0x80}, std::byte{0x80}, std::byte{0x20}};
    absurd.insert(absurd.begin() + static_cast<std::ptrdiff_t>(flag_at) + 1, std::begin(count),
                  std::end(count));
    check(absurd, "element count 1099511627776 cannot fit");
    auto endless = good;
    endless.resize(flag_at + 1);
    endless.insert(endless.end(), 11, std::byte{0xff});
    check(endless, "varint overflows 64 bits");
    auto low_threshold = good; // the 24-byte block would be a pointer chunk
    low_threshold[4] = std::byte{4};
    low_threshold[5] = low_threshold[6] = low_threshold[7] = std::byte{0};
    check(low_threshold, "expected a pointer or rma chunk of 24 bytes");
    auto magic = good;
    magic[1] = std::byte{'X'};
    check(magic, "bad message magic");
    auto zero_threshold = good;
    std::fill(zero_threshold.begin() + 4, zero_threshold.begin() + 8, std::byte{0});
    check(zero_threshold, "zero-copy threshold 0 is invalid");
    check({good.begin(), good.begin() + 5}, "shorter than its 8-byte header");
}

TEST(flat_reader, reads_only_what_its_serializers_say_they_read) {
    static_assert(cs::flat_loadable<int>);
    static_assert(cs::flat_loadable<bool>);
    static_assert(cs::flat_loadable<colour>);
    static_assert(cs::flat_loadable<cs::serialize_buffer<double>>);
    static_assert(!cs::flat_loadable<std::vector<int>>);
    static_assert(!cs::flat_loadable<std::string>);
    static_assert(!cs::flat_loadable<user>);
    static_assert(!cs::flat_loadable<named>);
    SUCCEED();
}

TEST(flat_stream, blocks_of_every_small_size_are_written_whole_and_alone) {
    // Blocks of up to 16 bytes are copied inline (two overlapping words, or three bytes): every
    // size from 0 to 40 at every offset within a word, against a plain copy, with the bytes
    // around the block untouched.
    std::vector<std::byte> src(64);
    for (std::size_t i = 0; i < src.size(); ++i) {
        src[i] = static_cast<std::byte>(0x40 + i);
    }
    for (std::size_t n = 0; n <= 40; ++n) {
        for (std::size_t offset = 0; offset < 8; ++offset) {
            std::vector<std::byte> out(80, std::byte{0xee});
            cs::flat_writer w(out.data() + 8 + offset, 4096);
            w.save_block(src.data() + offset, n);
            ASSERT_EQ(w.position(), out.data() + 8 + offset + n);
            for (std::size_t i = 0; i < out.size(); ++i) {
                bool const inside = i >= 8 + offset && i < 8 + offset + n;
                std::byte const want = inside ? src[offset + (i - 8 - offset)] : std::byte{0xee};
                ASSERT_EQ(out[i], want) << n << " bytes at offset " << offset << ", byte " << i;
            }
        }
    }
}
