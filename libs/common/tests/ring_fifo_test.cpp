// SPDX-License-Identifier: BSL-1.0
// The ring FIFO (ring_fifo.hpp): order kept across growth and wrap-around, push_front, and no
// allocation once its high-water mark is reached (std::deque allocates a block every 64
// pointers of a steady flow, which this queue exists to avoid).
#include <courier/common/ring_fifo.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <random>
#include <vector>

namespace cd = courier::detail;

namespace {
// Counts the allocations of the element type's allocator through a type whose moves are counted
// too, to see that growth moves and destroys each element once.
int g_live = 0;
struct counted {
    std::unique_ptr<int> v;
    explicit counted(int x) : v(std::make_unique<int>(x)) { ++g_live; }
    counted(counted&& o) noexcept : v(std::move(o.v)) { ++g_live; }
    counted& operator=(counted&&) = delete;
    ~counted() { --g_live; }
};
} // namespace

TEST(ring_fifo, keeps_order_through_growth_wrap_and_push_front) {
    cd::ring_fifo<int> q;
    std::deque<int> model;
    std::mt19937 rng(7);
    int next = 0;
    for (int step = 0; step < 20000; ++step) {
        switch (rng() % 5) {
        case 0:
        case 1:
            q.push_back(next);
            model.push_back(next++);
            break;
        case 2:
            q.push_front(next);
            model.push_front(next++);
            break;
        default:
            if (!model.empty()) {
                ASSERT_EQ(q.front(), model.front());
                q.pop_front();
                model.pop_front();
            }
        }
        ASSERT_EQ(q.size(), model.size());
        if (!model.empty()) {
            ASSERT_EQ(q.front(), model.front());
            ASSERT_EQ(q.back(), model.back());
        }
    }
    std::vector<int> seen;
    for (int v : q) {
        seen.push_back(v);
    }
    EXPECT_EQ(seen, std::vector<int>(model.begin(), model.end()));
}

TEST(ring_fifo, a_steady_flow_keeps_its_capacity) {
    cd::ring_fifo<int*> q;
    int x = 0;
    for (int i = 0; i < 100; ++i) { // the high-water mark: 100 elements
        q.push_back(&x);
    }
    std::size_t const cap = q.capacity();
    EXPECT_GE(cap, 100u);
    EXPECT_LT(cap, 256u);
    while (!q.empty()) {
        q.pop_front();
    }
    // A million elements through it, never more than 100 at once: the ring is not replaced.
    for (int round = 0; round < 10000; ++round) {
        for (int i = 0; i < 100; ++i) {
            q.push_back(&x);
        }
        for (int i = 0; i < 100; ++i) {
            q.pop_front();
        }
        ASSERT_EQ(q.capacity(), cap) << "round " << round;
    }
}

TEST(ring_fifo, elements_are_destroyed_once) {
    {
        cd::ring_fifo<counted> q;
        for (int i = 0; i < 50; ++i) {
            q.emplace_back(i); // grows from 16 to 32 to 64, moving the elements
        }
        EXPECT_EQ(g_live, 50);
        for (int i = 0; i < 10; ++i) {
            EXPECT_EQ(*q.front().v, i);
            q.pop_front();
        }
        EXPECT_EQ(g_live, 40);
        cd::ring_fifo<counted> moved(std::move(q));
        EXPECT_TRUE(q.empty());
        EXPECT_EQ(*moved.front().v, 10);
        moved.clear();
        EXPECT_EQ(g_live, 0);
        moved.emplace_back(99);
        EXPECT_EQ(g_live, 1);
    }
    EXPECT_EQ(g_live, 0); // the destructor destroys what is left
}
