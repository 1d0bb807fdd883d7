// SPDX-License-Identifier: BSL-1.0
// The chunker: index chunks, pointer chunks at the threshold, options, growth, reuse.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <thread>

namespace cs = courier::serialization;

namespace {

std::vector<double> iota(std::size_t n) {
    std::vector<double> v(n);
    std::iota(v.begin(), v.end(), 0.5);
    return v;
}

} // namespace

TEST(archive, small_values_stay_in_one_index_chunk) {
    auto m = cs::save(std::int32_t{7}, std::string("hello"), 2.5);
    ASSERT_EQ(m.chunks().size(), 1u);
    EXPECT_EQ(m.chunks()[0].type, cs::chunk_type::index);
    EXPECT_EQ(m.chunks()[0].offset, 0u);
    EXPECT_EQ(m.chunks()[0].size, m.index_size());
    // header 8 + int32 4 + (varint 1 + 5 chars) + double 8
    EXPECT_EQ(m.index_size(), 8u + 4 + 6 + 8);
    std::int32_t i = 0;
    std::string s;
    double d = 0;
    cs::load(m, i, s, d);
    EXPECT_EQ(i, 7);
    EXPECT_EQ(s, "hello");
    EXPECT_EQ(d, 2.5);
}

TEST(archive, growing_vectors_load_their_elements_at_any_offset_and_from_any_chunk) {
    // A vector loaded into one smaller than it is assigned from the received bytes (not zeroed
    // first): from index bytes at every alignment, from a pointer chunk; a vector as large or
    // larger is overwritten in place. Each element and the bytes around it must come through.
    for (std::size_t n : {100u, 128u, 129u, 500u, 511u, 4096u}) { // 800 B .. 32 KiB
        auto v = iota(n);
        for (std::size_t pad = 0; pad < 8; ++pad) {
            std::string before(pad, 'b');
            auto m = cs::save(before, v, std::int16_t{-3});
            for (std::size_t start : {std::size_t{0}, n / 2, n, n + 7}) {
                std::string b2;
                std::vector<double> v2(start, -1.0);
                std::int16_t after = 0;
                cs::load(m, b2, v2, after);
                ASSERT_EQ(v2, v) << n << " elements after " << pad << " bytes into " << start;
                EXPECT_EQ(b2, before);
                EXPECT_EQ(after, -3);
            }
        }
    }
    // Elements wider than their alignment.
    std::vector<std::array<std::uint8_t, 3>> odd(700);
    for (std::size_t i = 0; i < odd.size(); ++i) {
        odd[i] = {static_cast<std::uint8_t>(i), static_cast<std::uint8_t>(i >> 8), 7};
    }
    decltype(odd) back;
    char c = 0;
    cs::load(cs::save(char{'x'}, odd), c, back);
    EXPECT_EQ(back, odd);
    EXPECT_EQ(c, 'x');
}

TEST(archive, large_bitwise_block_becomes_pointer_chunk_referencing_caller_memory) {
    auto v = iota(1024); // 8 KiB >= 4096
    int before = 1, after = 2;
    auto m = cs::save(before, v, after);
    ASSERT_EQ(m.chunks().size(), 3u);
    EXPECT_EQ(m.chunks()[0].type, cs::chunk_type::index);
    EXPECT_EQ(m.chunks()[1].type, cs::chunk_type::pointer);
    EXPECT_EQ(m.chunks()[1].address, reinterpret_cast<std::byte const*>(v.data()));
    EXPECT_EQ(m.chunks()[1].size, v.size() * sizeof(double));
    EXPECT_EQ(m.chunks()[2].type, cs::chunk_type::index);
    EXPECT_EQ(m.chunks()[2].offset, m.chunks()[0].size);
    EXPECT_EQ(m.external_chunk_count(), 1u);
    EXPECT_EQ(m.total_size(), m.index_size() + 8192);
    // The payload is not in the index buffer.
    EXPECT_LT(m.index_size(), 64u);
    int b2 = 0, a2 = 0;
    std::vector<double> v2;
    cs::load(m, b2, v2, a2);
    EXPECT_EQ(v2, v);
    EXPECT_EQ(b2, 1);
    EXPECT_EQ(a2, 2);
}

TEST(archive, threshold_is_inclusive_and_configurable) {
    std::vector<char> at(100, 'x'), below(99, 'y');
    cs::options o{100, true};
    auto m = cs::save(o, at, below);
    EXPECT_EQ(m.external_chunk_count(), 1u);
    EXPECT_EQ(m.recorded_threshold(), 100u);
    std::vector<char> a2, b2;
    cs::load(m, a2, b2);
    EXPECT_EQ(a2, at);
    EXPECT_EQ(b2, below);
}

TEST(archive, zero_copy_off_copies_everything_into_the_index) {
    auto v = iota(100000);
    auto m = cs::save(cs::options{4096, false}, v);
    EXPECT_EQ(m.external_chunk_count(), 0u);
    EXPECT_EQ(m.chunks().size(), 1u);
    EXPECT_GE(m.index_size(), v.size() * sizeof(double));
    EXPECT_EQ(m.recorded_threshold(), std::numeric_limits<std::size_t>::max());
    std::vector<double> v2;
    cs::load(m, v2);
    EXPECT_EQ(v2, v);
}

TEST(archive, process_default_options_apply_to_save) {
    auto saved = cs::default_options();
    cs::set_default_options({64, true});
    std::vector<std::uint8_t> v(64, 3);
    auto m = cs::save(v);
    cs::set_default_options(saved);
    EXPECT_EQ(m.external_chunk_count(), 1u);
    auto m2 = cs::save(v);
    EXPECT_EQ(m2.external_chunk_count(), 0u);
}

// Every field set is the one read back (--courier:deep_array_threshold reaches deep copies
// through it; it was dropped, with the tracking choice, before).
TEST(archive, process_default_options_keep_every_field) {
    auto saved = cs::default_options();
    cs::set_default_options({512, true, cs::pointer_tracking::std_unordered_map, 12345});
    auto got = cs::default_options();
    cs::set_default_options(saved);
    EXPECT_EQ(got.zero_copy_threshold, 512u);
    EXPECT_TRUE(got.zero_copy);
    EXPECT_EQ(got.tracking, cs::pointer_tracking::std_unordered_map);
    EXPECT_EQ(got.deep_array_threshold, 12345u);
}

TEST(archive, many_pointer_chunks_interleave_with_index_chunks_in_stream_order) {
    std::vector<std::vector<double>> vs;
    for (int i = 0; i < 5; ++i) {
        vs.push_back(iota(1000 + i));
    }
    auto m = cs::save(vs);
    // count, then per vector: size varint (index), data (pointer)
    ASSERT_EQ(m.external_chunk_count(), 5u);
    std::size_t expect_offset = 0;
    int kinds = 0;
    for (auto const& c : m.chunks()) {
        if (c.type == cs::chunk_type::index) {
            EXPECT_EQ(c.offset, expect_offset);
            expect_offset += c.size;
        }
        ++kinds;
    }
    EXPECT_EQ(kinds, 10);
    EXPECT_EQ(expect_offset, m.index_size());
    std::vector<std::vector<double>> out;
    cs::load(m, out);
    EXPECT_EQ(out, vs);
}

TEST(archive, reused_message_keeps_capacity_and_does_not_grow) {
    cs::message m;
    std::vector<std::string> strings(200, std::string(86, 'k'));
    cs::save_into(m, cs::options{}, strings);
    auto cap = m.capacity();
    EXPECT_GT(cap, 200u * 86);
    cs::save_into(m, cs::options{}, strings);
    EXPECT_EQ(m.capacity(), cap);
    EXPECT_EQ(m.growth_copied_bytes(), 0u);
}

TEST(archive, a_small_messages_buffer_is_reused_by_the_next_message_on_the_thread) {
    std::byte const* first = nullptr;
    {
        auto m = cs::save(42, std::string("x"));
        ASSERT_EQ(m.capacity(), cs::message::pooled_capacity);
        first = m.data().data();
    }
    auto again = cs::save(7);
    EXPECT_EQ(again.data().data(), first); // from the thread's cache, not from malloc
    int v = 0;
    cs::load(again, v);
    EXPECT_EQ(v, 7);
    // A message that grew past the pooled size is freed, not cached: the next message still
    // gets a buffer of exactly the pooled size.
    { auto m = cs::save(std::string(10000, 'b')); }
    auto next = cs::save(1);
    EXPECT_EQ(next.capacity(), cs::message::pooled_capacity);
    // Threads that cache buffers and exit free them (LSan checks this in the ASan build).
    std::thread t([] {
        for (int i = 0; i < 40; ++i) {
            std::vector<cs::message> ms(20);
            for (auto& m : ms) {
                m = cs::save(i);
            }
        }
    });
    t.join();
}

TEST(archive, growth_copies_only_index_bytes_never_pointer_chunks) {
    // 16 MiB of payload in pointer chunks, ~100 KB of index data: growth moves index bytes only.
    std::vector<double> big(2 * 1024 * 1024, 1.0);
    std::vector<std::string> small(1000, std::string(100, 's'));
    auto m = cs::save(big, small, big);
    EXPECT_EQ(m.external_chunk_count(), 2u);
    EXPECT_LT(m.growth_copied_bytes(), 2 * m.index_size());
}

TEST(archive, operators_and_call_syntax_are_equivalent) {
    cs::message m1, m2;
    {
        cs::output_archive ar(m1);
        ar & 1 & std::string("a");
    }
    {
        cs::output_archive ar(m2);
        ar(1, std::string("a"));
    }
    ASSERT_EQ(m1.index_size(), m2.index_size());
    EXPECT_TRUE(std::equal(m1.data().begin(), m1.data().end(), m2.data().begin()));
    int i = 0;
    std::string s;
    cs::input_archive in(m1);
    in >> i >> s;
    in.finish();
    EXPECT_EQ(i, 1);
    EXPECT_EQ(s, "a");
}

TEST(archive, rma_blocks_carry_their_key) {
    std::vector<std::byte> registered(8192);
    cs::message m;
    {
        cs::output_archive ar(m);
        ar.save_size(registered.size());
        ar.save_rma_block(registered.data(), registered.size(), 0xfeedu);
    }
    ASSERT_EQ(m.external_chunk_count(), 1u);
    auto const& c = m.chunks()[1];
    EXPECT_EQ(c.type, cs::chunk_type::rma);
    EXPECT_EQ(c.rkey, 0xfeedu);
    EXPECT_EQ(c.address, registered.data());
    cs::input_archive in(m);
    auto n = in.load_count(1);
    auto blk = in.take_block(n);
    EXPECT_EQ(blk.type, cs::chunk_type::rma);
    EXPECT_EQ(blk.rkey, 0xfeedu);
    EXPECT_EQ(blk.data, registered.data());
    in.finish();
}

TEST(archive, small_rma_blocks_are_copied_like_any_small_block) {
    std::vector<std::byte> registered(16, std::byte{9});
    cs::message m;
    {
        cs::output_archive ar(m);
        ar.save_rma_block(registered.data(), registered.size(), 7);
    }
    EXPECT_EQ(m.external_chunk_count(), 0u);
}
