// SPDX-License-Identifier: BSL-1.0
// serialize_buffer: copy / reference / take, reference counting, zero copy from caller memory.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

namespace cs = courier::serialization;

TEST(serialize_buffer, copy_mode_owns_a_copy) {
    std::vector<int> src{1, 2, 3};
    cs::serialize_buffer<int> b(src.data(), src.size(), cs::serialize_buffer<int>::copy);
    src[0] = 99;
    EXPECT_EQ(b[0], 1);
    EXPECT_NE(b.data(), src.data());
}

TEST(serialize_buffer, reference_mode_aliases_caller_memory) {
    std::vector<int> src{1, 2, 3};
    cs::serialize_buffer<int> b(src.data(), src.size(), cs::serialize_buffer<int>::reference);
    src[0] = 99;
    EXPECT_EQ(b[0], 99);
    EXPECT_EQ(b.data(), src.data());
}

TEST(serialize_buffer, take_mode_frees_with_delete_or_the_given_deleter) {
    int calls = 0;
    {
        auto* p = new double[4]{1, 2, 3, 4};
        cs::serialize_buffer<double> a(p, 4, cs::serialize_buffer<double>::take);
        auto* q = new double[2]{5, 6};
        cs::serialize_buffer<double> b(q, 2, [&calls](double* d) {
            ++calls;
            delete[] d;
        });
        auto copy = b; // shares
        EXPECT_EQ(copy.data(), q);
        EXPECT_EQ(b.use_count(), 2);
    }
    EXPECT_EQ(calls, 1);
}

TEST(serialize_buffer, reference_mode_travels_as_a_pointer_chunk_from_caller_memory) {
    std::vector<char> payload(1 << 20, 'p');
    cs::serialize_buffer<char> b(payload.data(), payload.size(),
                                 cs::serialize_buffer<char>::reference);
    auto m = cs::save(b);
    ASSERT_EQ(m.external_chunk_count(), 1u);
    EXPECT_EQ(m.chunks()[1].address, reinterpret_cast<std::byte const*>(payload.data()));
    EXPECT_LT(m.index_size(), 16u);
    cs::serialize_buffer<char> out;
    cs::load(m, out);
    EXPECT_EQ(out, b);
    EXPECT_NE(out.data(), payload.data()); // no owner on an in-memory message: copied
}

TEST(serialize_buffer, message_keeps_owned_payload_alive) {
    cs::message m;
    std::weak_ptr<char[]> watch;
    {
        cs::serialize_buffer<char> b(8192);
        std::fill(b.begin(), b.end(), 'k');
        watch = b.owner();
        m = cs::save(b);
    }
    EXPECT_FALSE(watch.expired()); // the message holds a reference
    cs::serialize_buffer<char> out;
    cs::load(m, out);
    EXPECT_EQ(out[8191], 'k');
    m = cs::message();
    EXPECT_TRUE(watch.expired());
}

TEST(serialize_buffer, adopts_owned_chunk_memory_without_copying) {
    std::vector<std::uint64_t> v(4096, 7);
    auto m = cs::save(cs::serialize_buffer<std::uint64_t>(
        v.data(), v.size(), cs::serialize_buffer<std::uint64_t>::reference));
    // Play the receiver: the chunk's bytes live in memory owned by `received`.
    auto received = std::make_shared<std::vector<std::uint64_t>>(v);
    std::vector<cs::serialization_chunk> chunks(m.chunks().begin(), m.chunks().end());
    chunks[1].address = reinterpret_cast<std::byte const*>(received->data());
    auto rx = cs::message::from_parts(m.data(), chunks);
    rx.set_chunk_owner(1, received);
    cs::serialize_buffer<std::uint64_t> out;
    cs::load(rx, out);
    EXPECT_EQ(out.data(), received->data());
    EXPECT_EQ(out.size(), v.size());
    std::weak_ptr<void const> w = rx.chunk_owner(1);
    received.reset();
    rx = cs::message();
    EXPECT_FALSE(w.expired()); // out keeps it
    out = {};
    EXPECT_TRUE(w.expired());
}

TEST(serialize_buffer, small_buffers_are_copied_into_the_index) {
    cs::serialize_buffer<int> b(16);
    std::fill(b.begin(), b.end(), 3);
    auto m = cs::save(b);
    EXPECT_EQ(m.external_chunk_count(), 0u);
    cs::serialize_buffer<int> out;
    cs::load(m, out);
    EXPECT_EQ(out, b);
}

namespace {
/// A message as the transport delivers an eager parcel: its whole stream, received, copied by
/// from_bytes. `bytes` of 'e' in a serialize_buffer, with zero copy off (inline in the index).
cs::message received_inline(std::size_t bytes, std::size_t more = 0) {
    cs::options o;
    o.zero_copy = false;
    cs::serialize_buffer<char> b(bytes);
    std::fill(b.begin(), b.end(), 'e');
    std::vector<char> rest(more, 'r');
    auto sent = cs::save(o, b, rest);
    return cs::message::from_bytes(sent.data());
}
} // namespace

TEST(serialize_buffer, adopts_a_large_block_of_a_received_index_without_a_second_copy) {
    auto rx = received_inline(32768);
    ASSERT_TRUE(rx.index_owner());
    auto const* index = rx.data().data();
    cs::serialize_buffer<char> out;
    std::vector<char> rest;
    cs::load(rx, out, rest);
    ASSERT_EQ(out.size(), 32768u);
    // Adopted: the buffer lies in the index the message received, and outlives the message.
    EXPECT_GE(reinterpret_cast<std::byte const*>(out.data()), index);
    EXPECT_LE(reinterpret_cast<std::byte const*>(out.data() + out.size()), index + rx.index_size());
    std::weak_ptr<void const> w = rx.index_owner();
    rx = cs::message();
    EXPECT_FALSE(w.expired());
    EXPECT_EQ(std::count(out.begin(), out.end(), 'e'), 32768);
    out = {};
    EXPECT_TRUE(w.expired());
}

TEST(serialize_buffer, copies_a_block_under_half_of_a_received_index) {
    // An adopted block keeps the whole index alive: a small part of a large one is copied.
    auto rx = received_inline(8192, 20000);
    ASSERT_TRUE(rx.index_owner());
    cs::serialize_buffer<char> out;
    std::vector<char> rest;
    cs::load(rx, out, rest);
    auto const* p = reinterpret_cast<std::byte const*>(out.data());
    EXPECT_TRUE(p < rx.data().data() || p >= rx.data().data() + rx.index_size());
    EXPECT_EQ(std::count(out.begin(), out.end(), 'e'), 8192);
    EXPECT_EQ(rest.size(), 20000u);
}

TEST(serialize_buffer, small_received_indexes_are_not_shared) {
    auto rx = received_inline(1000);
    EXPECT_FALSE(rx.index_owner());
    cs::serialize_buffer<char> out;
    std::vector<char> rest;
    cs::load(rx, out, rest);
    EXPECT_EQ(std::count(out.begin(), out.end(), 'e'), 1000);
}

TEST(serialize_buffer, a_shared_index_is_copied_before_it_is_written) {
    // A writer (an output archive appending) must not change bytes an adopted buffer shares.
    auto rx = received_inline(32768);
    cs::serialize_buffer<char> out;
    std::vector<char> rest;
    cs::load(rx, out, rest);
    {
        cs::output_archive ar(rx);
        ar.save(std::vector<char>(100, 'w'));
    }
    EXPECT_FALSE(rx.index_owner());
    EXPECT_EQ(std::count(out.begin(), out.end(), 'e'), 32768);
}

TEST(serialize_buffer, a_truncated_shared_index_fails_cleanly_and_keeps_nothing_alive) {
    // A large eager parcel cut short: the shared index is made, the block's size runs past its
    // end, the load throws before anything adopts it, and the block goes with the message.
    cs::options o;
    o.zero_copy = false;
    cs::serialize_buffer<char> b(32768);
    std::fill(b.begin(), b.end(), 'e');
    auto sent = cs::save(o, b);
    auto rx = cs::message::from_bytes(sent.data().first(20000));
    ASSERT_TRUE(rx.index_owner());
    std::weak_ptr<void const> w = rx.index_owner();
    cs::serialize_buffer<char> out;
    EXPECT_THROW(cs::load(rx, out), cs::serialization_error);
    EXPECT_TRUE(out.empty());
    rx = cs::message();
    EXPECT_TRUE(w.expired());
}
