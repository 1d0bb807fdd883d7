// SPDX-License-Identifier: BSL-1.0
#include "counting_registrar.hpp"

#include <courier/rma/registration_cache.hpp>

#include <gtest/gtest.h>

#include <vector>

using courier::rma::registration_cache;
using courier::rma::testing::counting_registrar;

TEST(registration_cache, reuses_a_registration_that_covers_the_range) {
    counting_registrar reg;
    registration_cache cache(reg, 16, 1 << 30);
    std::vector<char> buf(100000);
    auto a = cache.acquire(buf.data(), buf.size());
    auto key = a.reg().key;
    cache.release(a);
    auto b = cache.acquire(buf.data(), 5000); // a prefix: covered
    EXPECT_EQ(b.reg().key, key);
    auto c = cache.acquire(buf.data() + 100, 5000); // inside: covered
    EXPECT_EQ(c.reg().key, key);
    cache.release(b);
    cache.release(c);
    auto s = cache.stats();
    EXPECT_EQ(s.hits, 2u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(reg.registered(), 1u);
}

TEST(registration_cache, a_longer_range_replaces_the_shorter_entry) {
    counting_registrar reg;
    registration_cache cache(reg, 16, 1 << 30);
    std::vector<char> buf(100000);
    auto a = cache.acquire(buf.data(), 1000);
    auto b = cache.acquire(buf.data(), 50000); // not covered: registers, replaces
    EXPECT_NE(a.reg().key, b.reg().key);
    EXPECT_TRUE(reg.is_live(a.reg().key)) << "in use: not deregistered yet";
    auto old = a.reg().key;
    cache.release(a);
    EXPECT_FALSE(reg.is_live(old)) << "replaced and released: deregistered";
    auto kb = b.reg().key;
    cache.release(b);
    auto c = cache.acquire(buf.data(), 1000);
    EXPECT_EQ(c.reg().key, kb);
    cache.release(c);
    EXPECT_EQ(cache.stats().entries, 1u);
}

TEST(registration_cache, evicts_the_least_recently_used_idle_entry) {
    counting_registrar reg;
    registration_cache cache(reg, 3, 1 << 30);
    std::vector<std::vector<char>> bufs(5, std::vector<char>(4096));
    std::vector<std::uint64_t> keys;
    for (int i = 0; i < 3; ++i) {
        auto l = cache.acquire(bufs[i].data(), 4096);
        keys.push_back(l.reg().key);
        cache.release(l);
    }
    auto touch = cache.acquire(bufs[0].data(), 4096); // 0 becomes most recent
    cache.release(touch);
    auto l3 = cache.acquire(bufs[3].data(), 4096); // evicts 1, the least recently used
    EXPECT_FALSE(reg.is_live(keys[1]));
    EXPECT_TRUE(reg.is_live(keys[0]));
    EXPECT_TRUE(reg.is_live(keys[2]));
    EXPECT_EQ(cache.stats().evictions, 1u);
    EXPECT_EQ(cache.stats().entries, 3u);
    cache.release(l3);
}

TEST(registration_cache, never_evicts_an_entry_in_use_and_bounds_bytes) {
    counting_registrar reg;
    registration_cache cache(reg, 100, 10000);
    std::vector<char> a(8000), b(8000);
    auto la = cache.acquire(a.data(), a.size());
    auto lb = cache.acquire(b.data(), b.size()); // over the byte bound, but both in use
    EXPECT_TRUE(reg.is_live(la.reg().key));
    EXPECT_TRUE(reg.is_live(lb.reg().key));
    auto ka = la.reg().key;
    cache.release(la); // now idle and over the bound: evicted
    EXPECT_FALSE(reg.is_live(ka));
    EXPECT_LE(cache.stats().bytes, 10000u);
    cache.release(lb);
}

TEST(registration_cache, passes_through_for_networks_that_pin_pages) {
    counting_registrar reg(/*va=*/false);
    registration_cache cache(reg, 16, 1 << 30);
    EXPECT_FALSE(cache.stats().caching);
    std::vector<char> buf(4096);
    for (int i = 0; i < 3; ++i) {
        auto l = cache.acquire(buf.data(), buf.size());
        EXPECT_TRUE(reg.is_live(l.reg().key));
        cache.release(l);
        EXPECT_EQ(reg.live(), 0u);
    }
    EXPECT_EQ(reg.registered(), 3u);
    EXPECT_EQ(cache.stats().hits, 0u);
}

TEST(registration_cache, invalidate_drops_overlapping_entries) {
    counting_registrar reg;
    registration_cache cache(reg, 16, 1 << 30);
    std::vector<char> buf(100000);
    auto whole = cache.acquire(buf.data(), buf.size());
    auto k = whole.reg().key;
    cache.release(whole);
    cache.invalidate(buf.data() + 50000, 10); // overlaps the middle of the entry
    EXPECT_FALSE(reg.is_live(k));
    auto again = cache.acquire(buf.data(), buf.size());
    EXPECT_NE(again.reg().key, k);
    cache.release(again);
    EXPECT_EQ(cache.stats().misses, 2u);
}

TEST(registration_cache, a_failed_registration_leaves_no_entry) {
    counting_registrar reg;
    registration_cache cache(reg, 16, 1 << 30);
    reg.fail(true);
    std::vector<char> buf(100);
    EXPECT_THROW((void)cache.acquire(buf.data(), buf.size()), std::runtime_error);
    EXPECT_EQ(cache.stats().entries, 0u);
    reg.fail(false);
    auto l = cache.acquire(buf.data(), buf.size());
    EXPECT_TRUE(l);
    cache.release(l);
}
