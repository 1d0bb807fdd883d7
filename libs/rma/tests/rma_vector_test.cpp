// SPDX-License-Identifier: BSL-1.0
#include <courier/rma.hpp>
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace rma = courier::rma;
namespace ser = courier::serialization;
using courier::rma_object;
using courier::rma_vector;

TEST(rma_vector, behaves_like_a_vector) {
    rma_vector<int> v;
    EXPECT_TRUE(v.empty());
    for (int i = 0; i < 1000; ++i) {
        v.push_back(i);
    }
    ASSERT_EQ(v.size(), 1000u);
    EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0), 999 * 1000 / 2);
    EXPECT_TRUE(rma::contains(v.data(), v.size() * sizeof(int)));
    v.resize(1500);
    EXPECT_EQ(v[1499], 0) << "resize value-initializes";
    v.resize(10);
    EXPECT_EQ(v.back(), 9);
    v.insert(v.begin() + 2, 3, -1);
    EXPECT_EQ((std::vector<int>(v.begin(), v.end())),
              (std::vector<int>{0, 1, -1, -1, -1, 2, 3, 4, 5, 6, 7, 8, 9}));
    v.erase(v.begin(), v.begin() + 5);
    EXPECT_EQ(v.front(), 2);
    v.pop_back();
    EXPECT_EQ(v.size(), 7u);
    EXPECT_THROW((void)v.at(7), std::out_of_range);
    v.insert(v.end(), v.begin(), v.end()); // the source aliases the vector
    EXPECT_EQ((std::vector<int>(v.begin(), v.end())),
              (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8}));
    rma_vector<double> w(5, 2.5);
    EXPECT_EQ(w, (rma_vector<double>{2.5, 2.5, 2.5, 2.5, 2.5}));
    w.clear();
    EXPECT_TRUE(w.empty());
    v.push_back(v[0]); // an element of the vector itself, across a reallocation
    EXPECT_EQ(v.back(), 2);
}

TEST(rma_vector, copies_share_the_storage_and_clone_does_not) {
    rma_vector<int> a{1, 2, 3};
    rma_vector<int> b = a;
    EXPECT_TRUE(b.shares_storage_with(a));
    EXPECT_EQ(a.use_count(), 2);
    b[0] = 42;
    EXPECT_EQ(a[0], 42);
    b.push_back(4); // a reallocation through one handle is seen through the other
    for (int i = 0; i < 100; ++i) {
        b.push_back(i);
    }
    EXPECT_EQ(a.size(), 104u);
    EXPECT_EQ(a.data(), b.data());
    rma_vector<int> c = a.clone();
    EXPECT_FALSE(c.shares_storage_with(a));
    c[0] = 7;
    EXPECT_EQ(a[0], 42);
    EXPECT_EQ(c.size(), a.size());
    rma_vector<int> d = std::move(c);
    EXPECT_EQ(c.size(), 0u); // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(d[0], 7);
    c.push_back(1); // a moved-from handle is usable again
    EXPECT_EQ(c.size(), 1u);
}

TEST(rma_vector, memory_returns_to_the_pool_when_the_last_handle_goes) {
    auto before = rma::get_pool_statistics().bytes_in_use;
    {
        rma_vector<double> v(100000);
        rma_vector<double> w = v;
        EXPECT_GE(rma::get_pool_statistics().bytes_in_use, before + 800000);
    }
    EXPECT_EQ(rma::get_pool_statistics().bytes_in_use, before);
}

TEST(rma_vector, large_vectors_serialize_as_rma_chunks_small_ones_inline) {
    rma_vector<double> big(10000);
    std::iota(big.begin(), big.end(), 0.5);
    rma_vector<double> small{1.0, 2.0};
    auto m = ser::save(big, small);
    int rma_chunks = 0;
    for (auto const& c : m.chunks()) {
        if (c.type == ser::chunk_type::rma) {
            ++rma_chunks;
            EXPECT_EQ(c.address, reinterpret_cast<std::byte const*>(big.data()));
            EXPECT_EQ(c.size, big.size() * sizeof(double));
        }
    }
    EXPECT_EQ(rma_chunks, 1);
    auto copies_before = rma::get_pool_statistics().copied_loads;
    rma_vector<double> big2, small2;
    ser::load(m, big2, small2);
    EXPECT_EQ(big2, big);
    EXPECT_EQ(small2, small);
    EXPECT_FALSE(big2.shares_storage_with(big));
    EXPECT_NE(big2.data(), big.data()) << "a local load has no owner to adopt: it copies";
    EXPECT_TRUE(rma::contains(big2.data(), big2.size() * sizeof(double)));
    EXPECT_EQ(rma::get_pool_statistics().copied_loads, copies_before + 1);
}

TEST(rma_vector, the_message_keeps_the_memory_alive_across_a_reallocation) {
    rma_vector<char> v(100000, 'x');
    auto m = ser::save(v);
    v.clear();
    v.shrink_to_fit(); // frees the old buffer if nothing else held it
    for (int i = 0; i < 10; ++i) {
        rma_vector<char> other(100000, 'y'); // would reuse the freed memory
    }
    rma_vector<char> back;
    ser::load(m, back);
    ASSERT_EQ(back.size(), 100000u);
    EXPECT_EQ(back[0], 'x');
    EXPECT_EQ(back[99999], 'x');
}

TEST(rma_vector, adopts_pool_memory_owned_by_the_message) {
    // What the parcelport does: the chunk's bytes lie in pool memory owned by the message.
    rma_vector<int> src(5000);
    std::iota(src.begin(), src.end(), 0);
    auto sent = ser::save(src);
    auto buffer = rma::allocate_shared(src.size() * sizeof(int));
    std::vector<ser::serialization_chunk> chunks(sent.chunks().begin(), sent.chunks().end());
    std::size_t external = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        if (chunks[i].type == ser::chunk_type::rma) {
            std::memcpy(buffer.get(), chunks[i].address, chunks[i].size);
            chunks[i].address = buffer.get();
            external = i;
        }
    }
    auto received = ser::message::from_parts(sent.data(), std::move(chunks));
    received.set_chunk_owner(external, buffer);
    auto adopted_before = rma::get_pool_statistics().adopted_loads;
    rma_vector<int> dst;
    ser::load(received, dst);
    EXPECT_EQ(static_cast<void const*>(dst.data()), static_cast<void const*>(buffer.get()))
        << "the vector adopts the received buffer";
    EXPECT_EQ(dst, src);
    EXPECT_EQ(rma::get_pool_statistics().adopted_loads, adopted_before + 1);
    dst.push_back(5000); // growing an adopted vector reallocates into fresh pool memory
    EXPECT_EQ(dst.size(), 5001u);
    EXPECT_EQ(dst[4999], 4999);
}

TEST(rma_vector, corrupted_counts_are_rejected_before_allocating) {
    rma_vector<double> v(3, 1.0);
    auto m = ser::save(v);
    auto bytes = std::vector<std::byte>(m.data().begin(), m.data().end());
    bytes[ser::message_header_size] = std::byte{0x7f}; // claims 127 elements
    auto bad = ser::message::from_bytes(bytes);
    rma_vector<double> out;
    EXPECT_THROW(ser::load(bad, out), ser::serialization_error);
    EXPECT_TRUE(out.empty());
}

struct grid {
    double cells[1024];
    int step;
};

TEST(rma_object, shares_and_serializes_as_one_rma_chunk) {
    auto g = courier::make_rma_object<grid>();
    EXPECT_EQ(g->cells[5], 0.0) << "value-initialized";
    EXPECT_TRUE(rma::contains(g.get(), sizeof(grid)));
    g->cells[5] = 3.0;
    g->step = 9;
    auto h = g;
    EXPECT_EQ(h->cells[5], 3.0);
    EXPECT_EQ(g.use_count(), 2);
    auto m = ser::save(g);
    ASSERT_EQ(m.external_chunk_count(), 1u);
    rma_object<grid> back;
    ser::load(m, back);
    EXPECT_NE(back.get(), g.get());
    EXPECT_EQ(back->cells[5], 3.0);
    EXPECT_EQ(back->step, 9);
    auto c = g.clone();
    c->step = 1;
    EXPECT_EQ(g->step, 9);
}

struct small_pod {
    int a;
    float b;
};

TEST(rma_object, small_objects_travel_inline) {
    auto s = courier::make_rma_object<small_pod>(small_pod{3, 1.5f});
    auto m = ser::save(s);
    EXPECT_EQ(m.external_chunk_count(), 0u);
    rma_object<small_pod> back;
    ser::load(m, back);
    EXPECT_EQ(back->a, 3);
    EXPECT_EQ(back->b, 1.5f);
}

TEST(rma_allocator, std_vector_uses_pool_memory) {
    std::vector<double, courier::rma_allocator<double>> v(20000, 1.0);
    EXPECT_TRUE(rma::contains(v.data(), v.size() * sizeof(double)));
    auto m = ser::save(v);
    ASSERT_EQ(m.external_chunk_count(), 1u);
    std::vector<double, courier::rma_allocator<double>> w;
    ser::load(m, w);
    EXPECT_EQ(w, v);
}
