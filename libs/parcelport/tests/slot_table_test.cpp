// SPDX-License-Identifier: BSL-1.0
// slot_table: ids, publication, exactly-once claims, reuse under new generations, capacity,
// and the same properties with threads racing (run under TSan in CI).
#include <courier/parcelport/detail/slot_table.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace {

using courier::parcelport::detail::slot_table;

struct entry {
    int payload = 0;
    std::atomic<int> holders{0}; // callers holding the slot right now (must stay <= 1)
    std::atomic<int> claims{0};  // successful claims of the current id
};

TEST(slot_table, ids_are_unique_non_zero_and_a_released_slot_returns_under_a_new_id) {
    slot_table<entry, 4, 4> t;
    std::set<std::uint64_t> ids;
    std::vector<slot_table<entry, 4, 4>::slot*> held;
    for (int i = 0; i < 10; ++i) {
        auto* s = t.acquire();
        EXPECT_NE(s->id(), 0u);
        EXPECT_TRUE(ids.insert(s->id()).second);
        held.push_back(s);
    }
    auto* first = held.front();
    std::uint64_t old_id = first->id();
    t.release(first);
    auto* again = t.acquire();
    EXPECT_EQ(again, first); // the free list hands the slot back
    EXPECT_NE(again->id(), old_id);
    EXPECT_EQ(static_cast<std::uint32_t>(again->id()), static_cast<std::uint32_t>(old_id));
    EXPECT_EQ(t.capacity_used(), 10u);
}

TEST(slot_table, only_published_ids_are_found_and_a_claim_succeeds_once) {
    slot_table<entry, 4, 4> t;
    auto* s = t.acquire();
    std::uint64_t id = s->id();
    EXPECT_EQ(t.find(id), nullptr); // not published yet
    s->value.payload = 7;
    t.publish(s);
    ASSERT_EQ(t.find(id), s);
    EXPECT_EQ(t.find(0), nullptr);
    EXPECT_EQ(t.find(id + (std::uint64_t{1} << 32)), nullptr); // another generation
    EXPECT_EQ(t.find(id + 1000), nullptr);                     // a slot never taken
    EXPECT_EQ(t.find(~std::uint64_t{0}), nullptr);
    auto* mine = t.claim(id);
    ASSERT_EQ(mine, s);
    EXPECT_EQ(mine->value.payload, 7);
    EXPECT_EQ(t.claim(id), nullptr); // once only
    EXPECT_FALSE(t.claim(s, id));
    t.release(mine);
    auto* next = t.acquire();
    t.publish(next);
    EXPECT_EQ(t.find(id), nullptr); // the stale id does not find the slot's new life
    EXPECT_EQ(t.find(next->id()), next);
}

TEST(slot_table, more_in_flight_than_its_capacity_is_an_error_not_a_corruption) {
    slot_table<entry, 2, 2> t; // 4 slots
    std::vector<slot_table<entry, 2, 2>::slot*> held;
    for (int i = 0; i < 4; ++i) {
        held.push_back(t.acquire());
    }
    EXPECT_THROW(t.acquire(), std::length_error);
    EXPECT_THROW(t.acquire(), std::length_error);
    t.release(held[2]);
    EXPECT_EQ(t.acquire(), held[2]);
    EXPECT_EQ(t.capacity_used(), 4u);
}

TEST(slot_table, for_each_published_lists_what_is_published) {
    slot_table<entry, 4, 4> t;
    std::set<std::uint64_t> published;
    for (int i = 0; i < 9; ++i) {
        auto* s = t.acquire();
        if (i % 3 != 0) {
            t.publish(s);
            published.insert(s->id());
        }
    }
    std::set<std::uint64_t> seen;
    t.for_each_published([&](auto& slot, std::uint64_t id) {
        EXPECT_EQ(slot.id(), id);
        seen.insert(id);
    });
    EXPECT_EQ(seen, published);
}

TEST(slot_table, racing_owners_and_claimers_claim_every_id_exactly_once) {
    slot_table<entry> t;
    constexpr int threads = 4, rounds = 20000;
    std::atomic<int> published{0}, claimed{0}, overlaps{0}, double_claims{0};
    std::atomic<bool> stop{false};
    auto take = [&](slot_table<entry>::slot* s) {
        if (s->value.claims.fetch_add(1) != 0) {
            ++double_claims;
        }
        ++claimed;
        s->value.claims.store(0);
        s->value.holders.fetch_sub(1);
        t.release(s);
    };
    std::vector<std::thread> owners;
    for (int w = 0; w < threads; ++w) {
        owners.emplace_back([&, w] {
            for (int i = 0; i < rounds; ++i) {
                auto* s = t.acquire();
                if (s->value.holders.fetch_add(1) != 0) {
                    ++overlaps; // two holders of one slot at once
                }
                std::uint64_t id = s->id();
                t.publish(s);
                ++published;
                if ((i + w) % 2 == 0) { // half are claimed back by their owner, if still there
                    if (auto* mine = t.claim(id)) {
                        take(mine);
                    }
                }
            }
        });
    }
    std::thread scavenger([&] { // claims whatever it sees published, as peer_failed() does
        while (!stop.load()) {
            t.for_each_published([&](auto& slot, std::uint64_t id) {
                if (t.claim(&slot, id)) {
                    take(&slot);
                }
            });
        }
    });
    for (auto& o : owners) {
        o.join();
    }
    stop = true;
    scavenger.join();
    t.for_each_published([&](auto& slot, std::uint64_t id) {
        if (t.claim(&slot, id)) {
            take(&slot);
        }
    });
    EXPECT_EQ(published.load(), threads * rounds);
    EXPECT_EQ(claimed.load(), threads * rounds);
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(double_claims.load(), 0);
    // Slots are reused: far fewer were ever taken than ids issued.
    EXPECT_LT(t.capacity_used(), static_cast<std::size_t>(threads * rounds));
}

} // namespace
