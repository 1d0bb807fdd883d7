// SPDX-License-Identifier: BSL-1.0
// Flat streams (flat_stream.hpp) write the bytes output_archive writes for the same values and
// options, so that a parcel written either way reads the same; and they refuse (not flat) any
// value that would leave the index.
#include <courier/serialization.hpp>
#include <courier/serialization/flat_stream.hpp>

#include <gtest/gtest.h>

#include <cstdint>
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
