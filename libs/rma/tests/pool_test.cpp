// SPDX-License-Identifier: BSL-1.0
#include "../src/size_classes.hpp"
#include "counting_registrar.hpp"

#include <courier/rma/pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace rma = courier::rma;
using rma::testing::counting_registrar;

TEST(size_classes, round_up_by_at_most_a_quarter) {
    for (std::size_t n = 1; n < (std::size_t{1} << 24); n = n * 3 / 2 + 1) {
        unsigned c = rma::detail::class_of(n);
        ASSERT_LT(c, rma::detail::class_count);
        std::size_t size = rma::detail::class_size(c);
        EXPECT_GE(size, n);
        if (n > 64) {
            EXPECT_LE(size, n + n / 4 + 1) << n;
        }
        if (c > 0) {
            EXPECT_LT(rma::detail::class_size(c - 1), n) << "not the smallest class for " << n;
        }
    }
}

TEST(pool, memory_is_usable_aligned_and_reused) {
    auto before = rma::get_pool_statistics();
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t n : {1ul, 64ul, 100ul, 4096ul, 5000ul, 70000ul, 300000ul, 3000000ul}) {
        void* p = rma::allocate(n);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
        std::memset(p, 0xab, n);
        EXPECT_TRUE(rma::contains(p, n));
        blocks.emplace_back(p, n);
    }
    auto mid = rma::get_pool_statistics();
    EXPECT_EQ(mid.allocations - before.allocations, blocks.size());
    EXPECT_GE(mid.bytes_in_use - before.bytes_in_use, 3000000u + 300000u);
    EXPECT_GE(mid.peak_bytes_in_use, mid.bytes_in_use);
    for (auto [p, n] : blocks) {
        rma::deallocate(p, n);
    }
    auto after = rma::get_pool_statistics();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
    // The same sizes again come from what was freed: hits, no new memory.
    for (auto [p, n] : blocks) {
        void* q = rma::allocate(n);
        EXPECT_TRUE(rma::contains(q, n));
        rma::deallocate(q, n);
    }
    auto again = rma::get_pool_statistics();
    EXPECT_EQ(again.cache_hits - after.cache_hits, blocks.size());
    EXPECT_EQ(again.cache_misses, after.cache_misses);
    EXPECT_EQ(again.bytes_registered, after.bytes_registered);
}

TEST(pool, honours_alignment_up_to_a_page) {
    for (std::size_t a = 16; a <= 4096; a *= 2) {
        void* p = rma::allocate(100, a);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % a, 0u) << a;
        rma::deallocate(p, 100, a);
    }
    EXPECT_THROW(rma::allocate(100, 8192), std::invalid_argument);
    EXPECT_THROW(rma::allocate(100, 48), std::invalid_argument);
}

TEST(pool, find_reports_the_region_and_nothing_outside) {
    void* p = rma::allocate(1000);
    auto r = rma::find(p, 1000);
    ASSERT_TRUE(r.has_value());
    EXPECT_LE(r->base, static_cast<std::byte*>(p));
    EXPECT_GE(r->base + r->size, static_cast<std::byte*>(p) + 1000);
    int on_stack = 0;
    EXPECT_FALSE(rma::contains(&on_stack));
    std::vector<char> heap(100);
    EXPECT_FALSE(rma::contains(heap.data(), heap.size()));
    rma::deallocate(p, 1000);
}

TEST(pool, attach_registers_existing_and_new_memory_and_detach_deregisters) {
    void* early = rma::allocate(2000);
    counting_registrar reg;
    ASSERT_TRUE(rma::attach(reg));
    EXPECT_EQ(rma::attached_registrar(), &reg);
    counting_registrar other;
    EXPECT_FALSE(rma::attach(other)) << "one registrar at a time";
    auto r = rma::find(early, 2000);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->registrar, &reg);
    EXPECT_TRUE(reg.is_live(r->reg.key));
    std::size_t live = reg.live();
    void* large = rma::allocate(std::size_t{8} << 20); // its own region: one registration
    EXPECT_EQ(reg.live(), live + 1);
    auto rl = rma::find(large, std::size_t{8} << 20);
    ASSERT_TRUE(rl.has_value());
    EXPECT_EQ(rl->registrar, &reg);
    rma::detach(reg);
    EXPECT_EQ(reg.live(), 0u);
    EXPECT_EQ(rma::attached_registrar(), nullptr);
    auto after = rma::find(early, 2000);
    ASSERT_TRUE(after.has_value()) << "memory stays valid after detach";
    EXPECT_EQ(after->registrar, nullptr);
    std::memset(early, 1, 2000);
    rma::deallocate(early, 2000);
    rma::deallocate(large, std::size_t{8} << 20);
}

TEST(pool, a_failing_registration_at_attach_leaves_nothing_registered) {
    void* p = rma::allocate(3000);
    counting_registrar reg;
    reg.fail(true);
    EXPECT_THROW(rma::attach(reg), std::runtime_error);
    EXPECT_EQ(rma::attached_registrar(), nullptr);
    EXPECT_EQ(reg.live(), 0u);
    rma::deallocate(p, 3000);
}

struct restore_options {
    rma::pool_options o = rma::current_options();
    ~restore_options() { rma::configure(o); }
};

TEST(pool, the_limit_is_a_clear_error_and_trim_gives_memory_back) {
    restore_options restore;
    auto o = restore.o;
    rma::trim(); // no cached regions: the limit below is exact
    auto s = rma::get_pool_statistics();
    rma::pool_options tight = o;
    tight.limit = s.bytes_registered + (std::size_t{16} << 20);
    rma::configure(tight);
    void* a = rma::allocate(std::size_t{12} << 20);
    try {
        (void)rma::allocate(std::size_t{12} << 20);
        FAIL() << "a request over the limit was granted";
    } catch (rma::pool_exhausted const& e) {
        EXPECT_NE(std::string(e.what()).find("rma_pool_limit"), std::string::npos) << e.what();
    }
    EXPECT_GE(rma::get_pool_statistics().refused, s.refused + 1);
    // Freed, the region is cached; a request of another class needs its room: the pool
    // releases the cached region and grants it.
    rma::deallocate(a, std::size_t{12} << 20);
    void* b = rma::allocate(std::size_t{14} << 20);
    EXPECT_TRUE(rma::contains(b, std::size_t{14} << 20));
    rma::deallocate(b, std::size_t{14} << 20);
    auto before_trim = rma::get_pool_statistics().bytes_registered;
    rma::trim();
    EXPECT_LE(rma::get_pool_statistics().bytes_registered, before_trim - (std::size_t{14} << 20));
}

TEST(pool, rejects_absurd_sizes_and_bad_options) {
    EXPECT_THROW((void)rma::allocate(std::size_t{1} << 50), rma::pool_exhausted);
    rma::pool_options bad;
    bad.block_size = 1000;
    EXPECT_THROW(rma::configure(bad), std::invalid_argument);
}

TEST(pool, many_threads_allocate_and_free_concurrently) {
    counting_registrar reg;
    ASSERT_TRUE(rma::attach(reg));
    constexpr int threads = 4, rounds = 20000;
    std::atomic<int> corrupt{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
        ts.emplace_back([t, &corrupt] {
            std::mt19937 rng(static_cast<unsigned>(t));
            std::vector<std::pair<unsigned char*, std::size_t>> held;
            for (int i = 0; i < rounds; ++i) {
                if (held.size() < 64 && (rng() % 3 != 0 || held.empty())) {
                    std::size_t n = 1 + rng() % (rng() % 8 == 0 ? 400000 : 5000);
                    auto* p = static_cast<unsigned char*>(rma::allocate(n));
                    std::memset(p, t + 1, n);
                    held.emplace_back(p, n);
                } else {
                    std::size_t k = rng() % held.size();
                    auto [p, n] = held[k];
                    if (p[0] != t + 1 || p[n - 1] != t + 1) {
                        ++corrupt;
                    }
                    rma::deallocate(p, n);
                    held[k] = held.back();
                    held.pop_back();
                }
            }
            for (auto [p, n] : held) {
                rma::deallocate(p, n);
            }
        });
    }
    for (auto& th : ts) {
        th.join();
    }
    EXPECT_EQ(corrupt.load(), 0) << "two threads were handed the same memory";
    auto s = rma::get_pool_statistics();
    EXPECT_GT(s.thread_cache_hits, 0u);
    rma::detach(reg);
    EXPECT_EQ(reg.live(), 0u);
}

TEST(pool, memory_lies_on_the_callers_numa_node) {
    unsigned nodes = rma::numa_node_count();
    ASSERT_GE(nodes, 1u);
    void* p = rma::allocate(std::size_t{1} << 20);
    std::memset(p, 0, std::size_t{1} << 20); // first touch
    int node = rma::numa_node_of(p);
    if (nodes == 1) {
        std::printf("this machine has one NUMA node: placement is trivially local\n");
        EXPECT_TRUE(node == 0 || node == -1);
    } else {
        EXPECT_GE(node, 0);
    }
    rma::deallocate(p, std::size_t{1} << 20);
}
