// SPDX-License-Identifier: BSL-1.0
// Attacks on the parser: truncation at every length, flipped bytes, absurd lengths, bad tags,
// bad headers, bad chunk lists, trailing garbage. Every case must end in serialization_error,
// never a crash, a hang or a huge allocation (this file runs under ASan/UBSan in CI).
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace cs = courier::serialization;

namespace {

struct payload {
    std::vector<std::string> names;
    std::map<int, std::vector<double>> table;
    std::optional<std::variant<int, std::string>> choice;
    std::shared_ptr<std::string> shared_a, shared_b;
    std::unique_ptr<std::list<int>> owned;
    std::vector<bool> flags;
    std::set<std::string> set;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& names& table& choice& shared_a& shared_b& owned& flags& set;
    }
};

payload sample() {
    payload p;
    p.names = {"alpha", "beta", std::string(40, 'g')};
    p.table = {{1, {1.0, 2.0}}, {2, {}}};
    p.choice = std::variant<int, std::string>(std::string("chosen"));
    p.shared_a = std::make_shared<std::string>("shared");
    p.shared_b = p.shared_a;
    p.owned = std::make_unique<std::list<int>>(std::list<int>{4, 5, 6});
    p.flags = {true, false, true};
    p.set = {"s1", "s2"};
    return p;
}

std::vector<std::byte> bytes_of(cs::message const& m) {
    return {m.data().begin(), m.data().end()};
}

// Loads `bytes` as a payload; returns true if it was rejected with serialization_error.
bool rejected(std::vector<std::byte> const& bytes) {
    try {
        auto m = cs::message::from_bytes(bytes);
        payload p;
        cs::load(m, p);
        return false;
    } catch (cs::serialization_error const&) {
        return true;
    }
}

std::string error_of(std::vector<std::byte> const& bytes) {
    try {
        auto m = cs::message::from_bytes(bytes);
        std::vector<std::string> v;
        cs::load(m, v);
    } catch (cs::serialization_error const& e) {
        return e.what();
    }
    return "no error";
}

} // namespace

TEST(bad_input, truncation_at_every_length_is_rejected) {
    auto full = bytes_of(cs::save(sample()));
    for (std::size_t n = 0; n < full.size(); ++n) {
        EXPECT_TRUE(rejected({full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)}))
            << "truncated to " << n << " of " << full.size();
    }
    EXPECT_FALSE(rejected(full));
}

TEST(bad_input, trailing_garbage_is_rejected) {
    auto full = bytes_of(cs::save(sample()));
    full.push_back(std::byte{0});
    EXPECT_TRUE(rejected(full));
    std::vector<std::byte> v = bytes_of(cs::save(std::vector<std::string>{"x"}));
    v.push_back(std::byte{1});
    v.push_back(std::byte{2});
    EXPECT_NE(error_of(v).find("trailing garbage: 2"), std::string::npos) << error_of(v);
}

TEST(bad_input, random_byte_flips_never_crash) {
    auto full = bytes_of(cs::save(sample()));
    std::mt19937 rng(12345);
    int rejected_count = 0;
    for (int trial = 0; trial < 5000; ++trial) {
        auto b = full;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) {
            b[rng() % b.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
        rejected_count += rejected(b); // either outcome is fine; crashing or hanging is not
    }
    EXPECT_GT(rejected_count, 0);
}

TEST(bad_input, absurd_lengths_are_rejected_before_allocating) {
    // A vector<double> claiming 2^60 elements, with 3 bytes behind it.
    std::vector<std::byte> b = bytes_of(cs::save());
    std::byte huge[] = {std::byte{0x80}, std::byte{0x80}, std::byte{0x80}, std::byte{0x80},
                        std::byte{0x80}, std::byte{0x80}, std::byte{0x80}, std::byte{0x80},
                        std::byte{0x10}, std::byte{1},    std::byte{2},    std::byte{3}};
    b.insert(b.end(), std::begin(huge), std::end(huge));
    auto m = cs::message::from_bytes(b);
    std::vector<double> v;
    try {
        cs::load(m, v);
        FAIL();
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("cannot fit"), std::string::npos) << e.what();
    }
    EXPECT_EQ(v.capacity(), 0u);
    // Same for strings, maps and vectors of empty types.
    std::string s;
    EXPECT_THROW(cs::load(m, s), cs::serialization_error);
    std::map<int, int> mp;
    EXPECT_THROW(cs::load(m, mp), cs::serialization_error);
    std::vector<std::monostate> empties;
    EXPECT_THROW(cs::load(m, empties), cs::serialization_error);
}

TEST(bad_input, overlong_varint_is_rejected) {
    std::vector<std::byte> b = bytes_of(cs::save());
    for (int i = 0; i < 11; ++i) {
        b.push_back(std::byte{0xff});
    }
    EXPECT_NE(error_of(b).find("varint"), std::string::npos) << error_of(b);
}

TEST(bad_input, bad_tags_are_rejected) {
    auto with = [](std::initializer_list<int> tail) {
        auto b = bytes_of(cs::save());
        for (int x : tail) {
            b.push_back(static_cast<std::byte>(x));
        }
        return cs::message::from_bytes(b);
    };
    bool bl = false;
    EXPECT_THROW(cs::load(with({2}), bl), cs::serialization_error);
    std::optional<int> o;
    EXPECT_THROW(cs::load(with({2, 0, 0, 0, 0}), o), cs::serialization_error);
    std::variant<int, double> v;
    try {
        cs::load(with({5, 0, 0, 0, 0}), v);
        FAIL();
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("variant alternative index 5 out of range"),
                  std::string::npos);
    }
    std::unique_ptr<int> u;
    EXPECT_THROW(cs::load(with({3, 0, 0, 0, 0}), u), cs::serialization_error);
    std::bitset<4> bits;
    EXPECT_THROW(cs::load(with({0xf0}), bits), cs::serialization_error);
}

TEST(bad_input, bad_headers_are_rejected_with_what_was_found) {
    auto good = bytes_of(cs::save(1));
    auto expect = [&](std::size_t at, std::uint8_t value, std::string const& needle) {
        auto b = good;
        b[at] = std::byte{value};
        std::string what;
        try {
            (void)cs::message::from_bytes(b);
        } catch (cs::serialization_error const& e) {
            what = e.what();
        }
        EXPECT_NE(what.find(needle), std::string::npos) << "byte " << at << ": " << what;
    };
    expect(0, 'X', "bad message magic");
    expect(2, 7, "format version 7");
    expect(3, 1, "big-endian host");
    expect(3, 4, "unknown flags");
    auto b = good;
    b[4] = b[5] = b[6] = b[7] = std::byte{0};
    EXPECT_THROW((void)cs::message::from_bytes(b), cs::serialization_error);
    EXPECT_THROW((void)cs::message::from_bytes(std::vector<std::byte>(5)), cs::serialization_error);
}

TEST(bad_input, inconsistent_chunk_lists_are_rejected) {
    std::vector<double> big(1000, 1.0);
    auto m = cs::save(big);
    std::vector<cs::serialization_chunk> chunks(m.chunks().begin(), m.chunks().end());
    auto try_chunks = [&](std::vector<cs::serialization_chunk> c) {
        try {
            auto r = cs::message::from_parts(m.data(), std::move(c));
            std::vector<double> out;
            cs::load(r, out);
        } catch (cs::serialization_error const& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(try_chunks(chunks), "no error");
    auto c = chunks;
    c[1].size += 8; // pointer chunk longer than the vector claims
    EXPECT_NE(try_chunks(c).find("expected a 8000-byte chunk, found chunk 1 of 8008"),
              std::string::npos)
        << try_chunks(c);
    c[1].size -= 16; // shorter: the count no longer fits in what remains
    EXPECT_NE(try_chunks(c).find("cannot fit"), std::string::npos) << try_chunks(c);
    c = chunks;
    c.pop_back(); // the pointer chunk is missing
    EXPECT_NE(try_chunks(c).find("cannot fit"), std::string::npos) << try_chunks(c);
    c = chunks;
    c[0].size += 1; // index chunk overruns the buffer
    EXPECT_NE(try_chunks(c).find("does not continue"), std::string::npos);
    c = chunks;
    c[1].address = nullptr;
    EXPECT_NE(try_chunks(c).find("no address"), std::string::npos);
    c = chunks;
    c[1].type = static_cast<cs::chunk_type>(9);
    EXPECT_NE(try_chunks(c).find("unknown chunk type"), std::string::npos);
    c = chunks;
    c.push_back(c[1]); // an extra chunk nobody reads
    EXPECT_NE(try_chunks(c).find("trailing chunks"), std::string::npos);
}

// A received message whose chunks were refused (the receiver had no memory for them, or they
// were over its limit): it validates, and reading a refused chunk throws with the reason, also
// after the message was moved; a serialize_buffer (which adopts chunks) is refused the same way.
TEST(bad_input, refused_chunks_fail_their_load_with_the_reason) {
    std::vector<double> big(1000, 1.0);
    auto m = cs::save(big);
    std::vector<cs::serialization_chunk> chunks(m.chunks().begin(), m.chunks().end());
    ASSERT_EQ(chunks.size(), 2u);
    chunks[1].address = nullptr;
    auto r = cs::message::with_index_buffer(m.index_size());
    std::memcpy(r.index_buffer(), m.data().data(), m.index_size());
    r.set_refused();
    r.complete_parts(chunks); // validates: no throw
    r.set_chunk_owner(1, std::make_shared<std::string const>("over the limit"));
    ASSERT_TRUE(r.refused());
    cs::message moved = std::move(r);
    EXPECT_EQ(moved.total_size(), m.total_size()); // flow control counts what was sent
    std::vector<double> out;
    try {
        cs::load(moved, out);
        ADD_FAILURE() << "a refused chunk loaded";
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("chunk 1 (8000 bytes) was not received: over the "
                                             "limit"),
                  std::string::npos)
            << e.what();
    }
    auto b = cs::save(courier::serialize_buffer<double>(big.data(), big.size()));
    std::vector<cs::serialization_chunk> bc(b.chunks().begin(), b.chunks().end());
    for (auto& c : bc) {
        if (c.type != cs::chunk_type::index) {
            c.address = nullptr;
        }
    }
    auto rb = cs::message::with_index_buffer(b.index_size());
    std::memcpy(rb.index_buffer(), b.data().data(), b.index_size());
    rb.set_refused();
    rb.complete_parts(bc);
    courier::serialize_buffer<double> got;
    EXPECT_THROW(cs::load(rb, got), cs::serialization_error); // (no reason given: still fails)
    rb.clear(); // a cleared message is no longer refused
    EXPECT_FALSE(rb.refused());
    // Without the mark, a chunk without an address is malformed.
    auto unmarked = cs::message::with_index_buffer(m.index_size());
    std::memcpy(unmarked.index_buffer(), m.data().data(), m.index_size());
    EXPECT_THROW(unmarked.complete_parts(chunks), cs::serialization_error);
}

// A message remembers that check() passed (its input archive does not check a received parcel
// twice); a change through index_buffer() must be checked again.
TEST(bad_input, a_header_changed_after_a_passed_check_is_checked_again) {
    auto m = cs::message::from_bytes(bytes_of(cs::save(std::string("checked"))));
    std::string s;
    cs::load(m, s); // passes, and is remembered
    EXPECT_EQ(s, "checked");
    m.index_buffer()[0] = std::byte{'X'};
    std::string what;
    try {
        cs::load(m, s);
    } catch (cs::serialization_error const& e) {
        what = e.what();
    }
    EXPECT_NE(what.find("bad message magic"), std::string::npos) << what;
    // Moving carries the (failed) state: still refused, never a stale pass.
    auto moved = std::move(m);
    EXPECT_THROW(cs::load(moved, s), cs::serialization_error);
}

// A message of one chunk holds it inline: it must survive moves, and a second chunk (a pointer
// chunk after the index) must move both to the list in order.
TEST(bad_input, one_inline_chunk_survives_moves_and_a_second_chunk_joins_it) {
    auto one = cs::save(std::uint64_t{42});
    ASSERT_EQ(one.chunks().size(), 1u);
    auto moved = std::move(one);
    cs::message again;
    again = std::move(moved);
    ASSERT_EQ(again.chunks().size(), 1u);
    EXPECT_EQ(again.chunks()[0].type, cs::chunk_type::index);
    EXPECT_EQ(again.chunks()[0].size, again.index_size());
    std::uint64_t v = 0;
    cs::load(again, v);
    EXPECT_EQ(v, 42u);

    std::vector<double> big(1000, 2.5);
    // index, then a pointer chunk (into `sent`, which outlives the message), then index again
    auto const sent = std::make_pair(big, std::uint32_t{7});
    auto two = cs::save(sent);
    auto list = two.chunks();
    ASSERT_GE(list.size(), 2u);
    EXPECT_EQ(list[0].type, cs::chunk_type::index);
    EXPECT_EQ(list[1].type, cs::chunk_type::pointer);
    EXPECT_EQ(list[1].size, big.size() * sizeof(double));
    auto carried = std::move(two);
    std::pair<std::vector<double>, std::uint32_t> out;
    cs::load(carried, out);
    EXPECT_EQ(out.first, big);
    EXPECT_EQ(out.second, 7u);
}

// A received vector of bitwise elements that grows its destination is assigned straight from
// the received block (vector.hpp). Too few bytes behind its count, in the index (truncated at
// every 7th length) or in its pointer chunk, is a serialization_error whatever the destination
// held: never a load of the wrong elements.
TEST(bad_input, a_vector_loaded_over_one_it_outgrows_rejects_too_few_bytes) {
    std::vector<double> const big(300, 2.5); // 2400 bytes: past the 1 KiB of the assign path
    auto load_into = [](cs::message const& m, std::size_t had) {
        std::vector<double> out(had, -1.0);
        try {
            cs::load(m, out);
        } catch (cs::serialization_error const& e) {
            return std::string(e.what());
        }
        return out.size() == 300 && out[0] == 2.5 && out[299] == 2.5 ? std::string("loaded")
                                                                     : std::string("wrong");
    };
    cs::options in_index = cs::default_options();
    in_index.zero_copy = false;
    auto const full = bytes_of(cs::save(in_index, big));
    for (std::size_t had : {0u, 10u, 299u, 500u}) {
        EXPECT_EQ(load_into(cs::message::from_bytes(full), had), "loaded") << had;
        for (std::size_t n = cs::message_header_size; n < full.size(); n += 7) {
            std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
            auto const got = load_into(cs::message::from_bytes(cut), had);
            EXPECT_TRUE(got != "loaded" && got != "wrong")
                << "index truncated to " << n << ", destination of " << had << ": " << got;
        }
    }
    cs::options chunked = cs::default_options();
    chunked.zero_copy_threshold = 1024; // the elements in a pointer chunk
    auto const m = cs::save(chunked, big);
    ASSERT_EQ(m.chunks().size(), 2u);
    std::vector<cs::serialization_chunk> chunks(m.chunks().begin(), m.chunks().end());
    for (std::size_t short_by : {8u, 16u, 2392u}) {
        auto c = chunks;
        c[1].size -= short_by;
        auto r = cs::message::from_parts(m.data(), std::move(c));
        for (std::size_t had : {0u, 10u, 500u}) {
            EXPECT_NE(load_into(r, had).find("cannot fit"), std::string::npos)
                << "pointer chunk " << short_by << " bytes short, destination of " << had;
        }
    }
}
