// SPDX-License-Identifier: BSL-1.0
// future / shared_future / promise, inside and outside the runtime.
#include "runtime_fixture.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

using courier::testing::run_in_runtime;

TEST(future, promise_sets_value_across_os_threads_outside_the_runtime) {
    courier::promise<int> p;
    auto f = p.get_future();
    EXPECT_FALSE(f.is_ready());
    std::thread t([&] { p.set_value(42); });
    EXPECT_EQ(f.get(), 42);
    EXPECT_FALSE(f.valid());
    t.join();
}

TEST(future, ready_and_exceptional_futures) {
    auto f = courier::make_ready_future(std::string("x"));
    EXPECT_TRUE(f.is_ready());
    EXPECT_TRUE(f.has_value());
    EXPECT_EQ(f.get(), "x");
    auto v = courier::make_ready_future();
    v.get();
    auto e = courier::make_exceptional_future<int>(std::runtime_error("boom"));
    EXPECT_TRUE(e.has_exception());
    EXPECT_THROW(e.get(), std::runtime_error);
}

namespace {
struct counted_error : std::runtime_error {
    static inline std::atomic<int> alive{0};
    counted_error() : std::runtime_error("counted") { ++alive; }
    counted_error(counted_error const& o) : std::runtime_error(o) { ++alive; }
    ~counted_error() override { --alive; }
};
} // namespace

// get() on a unique future takes the exception out of the shared state: it dies with the
// caller's handler, on the caller's thread, even while the producer still holds the state.
TEST(future, get_takes_the_exception_out_of_the_state) {
    counted_error::alive = 0;
    courier::promise<int> p;
    auto f = p.get_future();
    p.set_exception(std::make_exception_ptr(counted_error{}));
    EXPECT_EQ(counted_error::alive.load(), 1);
    EXPECT_THROW((void)f.get(), counted_error);
    EXPECT_EQ(counted_error::alive.load(), 0); // the promise still holds the state
}

TEST(future, broken_promise_and_double_set_and_double_retrieve) {
    courier::future<int> f;
    {
        courier::promise<int> p;
        f = p.get_future();
        EXPECT_THROW(p.get_future(), std::future_error);
    }
    try {
        f.get();
        FAIL();
    } catch (std::future_error const& e) {
        EXPECT_EQ(e.code(), std::future_errc::broken_promise);
    }
    courier::promise<int> p;
    p.set_value(1);
    EXPECT_THROW(p.set_value(2), std::future_error);
    courier::future<int> empty;
    EXPECT_THROW(empty.get(), std::future_error);
}

TEST(future, shared_future_gets_many_times_and_shares_exceptions) {
    courier::promise<std::vector<int>> p;
    courier::shared_future<std::vector<int>> s = p.get_future().share();
    auto s2 = s;
    p.set_value(std::vector<int>{1, 2});
    EXPECT_EQ(s.get().size(), 2u);
    EXPECT_EQ(&s.get(), &s2.get());
    courier::promise<void> q;
    courier::shared_future<void> sv = q.get_future();
    q.set_exception(std::make_exception_ptr(std::logic_error("shared")));
    EXPECT_THROW(sv.get(), std::logic_error);
    EXPECT_THROW(sv.get(), std::logic_error);
}

TEST(future, then_outside_the_runtime_runs_inline) {
    auto f =
        courier::make_ready_future(20).then([](courier::future<int> x) { return x.get() + 1; });
    EXPECT_EQ(f.get(), 21);
}

TEST(future, then_chains_unwraps_and_propagates_exceptions_inside_the_runtime) {
    int rc = run_in_runtime(2, [] {
        courier::promise<int> p;
        auto f = p.get_future()
                     .then([](courier::future<int> x) { return x.get() * 2; })
                     .then([](courier::future<int> x) {
                         return courier::async([v = x.get()] { return v + 1; });
                     });
        static_assert(std::is_same_v<decltype(f), courier::future<int>>);
        p.set_value(10);
        EXPECT_EQ(f.get(), 21);

        auto g = courier::make_ready_future(1).then(
            [](courier::future<int>) -> int { throw std::runtime_error("in continuation"); });
        EXPECT_THROW(g.get(), std::runtime_error);
        auto h = courier::make_exceptional_future<int>(std::runtime_error("first"))
                     .then([](courier::future<int> x) { return x.get() + 1; });
        try {
            h.get();
            FAIL();
        } catch (std::runtime_error const& e) {
            EXPECT_STREQ(e.what(), "first");
        }
    });
    EXPECT_EQ(rc, 0);
}

TEST(future, get_inside_a_task_suspends_it_instead_of_blocking_the_worker) {
    // One worker: the waiting task must yield the worker to the task that sets the value.
    int rc = run_in_runtime(1, [] {
        courier::promise<int> p;
        auto f = p.get_future();
        courier::post([&p] { p.set_value(7); });
        EXPECT_EQ(f.get(), 7);
    });
    EXPECT_EQ(rc, 0);
}

TEST(future, os_thread_waits_on_a_value_produced_by_a_task) {
    courier::promise<int> ready;
    auto f = ready.get_future();
    std::thread waiter([&] { EXPECT_EQ(f.get(), 5); });
    int rc = run_in_runtime(1, [&] {
        courier::this_thread::sleep_for(std::chrono::milliseconds(5));
        ready.set_value(5);
    });
    waiter.join();
    EXPECT_EQ(rc, 0);
}

TEST(future, every_kind_of_waiter_on_one_state_is_woken_exactly_once) {
    // Parked tasks, OS threads and continuations register on one shared state while another
    // task publishes it: each waiter runs exactly once whether it registered before or after
    // the value arrived (the lock-free waiter stack's two races). Repeated to vary the timing.
    constexpr int rounds = 200, tasks = 8, threads = 2, continuations = 8;
    std::atomic<int> woken{0};
    std::atomic<bool> go{false};
    std::vector<courier::promise<int>> ps(rounds);
    std::vector<courier::shared_future<int>> sf;
    for (auto& p : ps) {
        sf.push_back(p.get_future().share());
    }
    std::vector<std::thread> os;
    for (int t = 0; t < threads; ++t) {
        os.emplace_back([&] {
            while (!go.load()) {
                std::this_thread::yield();
            }
            for (int r = 0; r < rounds; ++r) {
                if (sf[static_cast<std::size_t>(r)].get() == r) {
                    woken.fetch_add(1);
                }
            }
        });
    }
    int rc = run_in_runtime(2, [&] {
        go.store(true);
        for (int r = 0; r < rounds; ++r) {
            auto s = sf[static_cast<std::size_t>(r)];
            std::vector<courier::future<void>> fs;
            for (int i = 0; i < tasks; ++i) {
                fs.push_back(courier::async([s, r, &woken] {
                    if (s.get() == r) {
                        woken.fetch_add(1);
                    }
                }));
            }
            for (int i = 0; i < continuations; ++i) {
                fs.push_back(s.then([r, &woken](courier::shared_future<int> x) {
                    if (x.get() == r) {
                        woken.fetch_add(1);
                    }
                }));
            }
            courier::post([&ps, r] { ps[static_cast<std::size_t>(r)].set_value(r); });
            courier::wait_all(fs);
        }
    });
    for (auto& t : os) {
        t.join();
    }
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(woken.load(), rounds * (tasks + threads + continuations));
}

TEST(future, waiters_are_notified_in_the_order_they_registered) {
    // Outside the runtime, continuations run inline at publication: their order is the order
    // of registration.
    courier::promise<void> p;
    auto s = p.get_future().share();
    std::vector<int> order;
    std::vector<courier::future<void>> fs;
    for (int i = 0; i < 5; ++i) {
        fs.push_back(s.then([i, &order](courier::shared_future<void>) { order.push_back(i); }));
    }
    p.set_value();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

namespace {
// Counts live instances: a state that leaks or is freed twice shows in the count (and under
// ASan/LSan as an error).
struct counted {
    static inline std::atomic<int> live{0};
    int v = 0;
    explicit counted(int x) : v(x) { live.fetch_add(1); }
    counted(counted&& o) noexcept : v(o.v) { live.fetch_add(1); }
    counted(counted const&) = delete;
    ~counted() { live.fetch_sub(1); }
};
} // namespace

TEST(future, states_are_freed_once_whichever_side_lets_go_last) {
    { // the future takes the value: it frees the state
        courier::promise<counted> p;
        auto f = p.get_future();
        p.set_value(counted(1));
        EXPECT_EQ(f.get().v, 1);
    }
    { // the future is dropped first
        courier::promise<counted> p;
        { auto f = p.get_future(); }
        p.set_value(counted(2));
        EXPECT_THROW(p.set_value(counted(3)), std::future_error);
    }
    { // the promise is dropped unsatisfied: broken_promise, then the future frees it
        courier::future<counted> f;
        {
            courier::promise<counted> p;
            f = p.get_future();
        }
        EXPECT_THROW(f.get(), std::future_error);
        EXPECT_FALSE(f.valid());
    }
    { // get_future after set_value, and share() before and after the value
        courier::promise<counted> p;
        p.set_value(counted(4));
        EXPECT_EQ(p.get_future().get().v, 4);
        courier::promise<counted> q;
        auto s = q.get_future().share();
        q.set_value(counted(5));
        auto s2 = s;
        EXPECT_EQ(s2.get().v, 5);
        courier::promise<counted> r;
        auto fr = r.get_future();
        r.set_value(counted(6));
        auto sr = fr.share();
        EXPECT_EQ(sr.get().v, 6);
    }
    { // move-assigning over a pending paired future leaves its pair
        courier::promise<counted> a, b;
        auto f = a.get_future();
        f = b.get_future();
        a.set_value(counted(7));
        b.set_value(counted(8));
        EXPECT_EQ(f.get().v, 8);
    }
    EXPECT_EQ(counted::live.load(), 0);
    // Races between the two sides on different OS threads: drop, take or set concurrently.
    for (int i = 0; i < 2000; ++i) {
        courier::promise<counted> p;
        auto f = p.get_future();
        std::thread setter([&p, i] { p.set_value(counted(i)); });
        if (i % 2 == 0) {
            EXPECT_EQ(f.get().v, i);
        } else {
            f = courier::future<counted>(); // dropped while the value may be arriving
        }
        setter.join();
    }
    EXPECT_EQ(counted::live.load(), 0);
}
