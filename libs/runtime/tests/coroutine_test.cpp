// SPDX-License-Identifier: BSL-1.0
// Coroutines returning future<T> and co_await on future / shared_future: values and void,
// eager start, chains, exceptions (local and remote), shared futures, when_all, the frame's
// lifetime, and long loops of awaits that must neither recurse nor resume in the setter.
#include "../src/in_process.hpp"
#include "runtime_fixture.hpp"

#include <courier/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using courier::testing::run_in_runtime;

namespace {

int remote_thrower(int x) {
    throw std::invalid_argument("refused " + std::to_string(x));
}
std::uint32_t remote_where() {
    return courier::get_locality_id();
}

} // namespace

COURIER_PLAIN_ACTION(remote_thrower, coroutine_test_thrower_action);
COURIER_PLAIN_ACTION(remote_where, coroutine_test_where_action);

namespace {

void in_runtime(std::size_t threads, std::function<void()> body) {
    EXPECT_EQ(run_in_runtime(threads, std::move(body)), 0);
}

courier::future<int> add_later(int a, int b) {
    int x = co_await courier::async([a] { return a; });
    int y = co_await courier::async([b] { return b; });
    co_return x + y;
}

courier::future<int> sum_of(courier::future<int> a, courier::future<int> b) {
    co_return co_await std::move(a) + co_await std::move(b);
}

courier::future<void> store_when_ready(courier::future<int> f, int& out) {
    out = co_await f; // an lvalue: moved out
}

TEST(coroutine, returns_a_value_and_void) {
    in_runtime(2, [] {
        EXPECT_EQ(add_later(20, 22).get(), 42);
        courier::promise<int> a;
        auto sum = sum_of(a.get_future(), courier::async([] { return 2; }));
        a.set_value(40);
        EXPECT_EQ(sum.get(), 42);
        courier::promise<int> p;
        int out = 0;
        auto done = store_when_ready(p.get_future(), out);
        EXPECT_FALSE(done.is_ready()); // suspended until the promise is set
        p.set_value(7);
        done.get();
        EXPECT_EQ(out, 7);
    });
}

courier::future<int> traced(std::vector<int>& trace, courier::future<int> gate) {
    trace.push_back(1);
    int v = co_await std::move(gate);
    trace.push_back(2);
    co_return v;
}

TEST(coroutine, body_runs_eagerly_until_its_first_suspension) {
    in_runtime(1, [] {
        std::vector<int> trace;
        courier::promise<int> p;
        auto f = traced(trace, p.get_future());
        EXPECT_EQ(trace, std::vector<int>{1});
        EXPECT_FALSE(f.is_ready());
        p.set_value(5);
        EXPECT_EQ(f.get(), 5);
        EXPECT_EQ(trace, (std::vector<int>{1, 2}));
    });
}

TEST(coroutine, outside_the_runtime_ready_futures_complete_at_once) {
    std::vector<int> trace;
    auto f = traced(trace, courier::make_ready_future(3));
    EXPECT_TRUE(f.is_ready());
    EXPECT_EQ(trace, (std::vector<int>{1, 2}));
    EXPECT_EQ(f.get(), 3);
    // Not ready: with no runtime to run a task, the thread that sets the value resumes it.
    trace.clear();
    courier::promise<int> p;
    auto g = traced(trace, p.get_future());
    EXPECT_FALSE(g.is_ready());
    std::thread setter([&p] { p.set_value(4); });
    setter.join();
    EXPECT_TRUE(g.is_ready());
    EXPECT_EQ(g.get(), 4);
}

/// Each level first awaits a task that cannot have run yet (one worker), so it suspends and
/// continues on a fresh task: neither the descent nor the completions nest on one stack.
courier::future<int> chain(int depth) {
    co_await courier::async([] {});
    if (depth == 0) {
        co_return 0;
    }
    co_return 1 + co_await chain(depth - 1);
}

TEST(coroutine, a_chain_of_10000_coroutines_awaiting_each_other) {
    in_runtime(1, [] { EXPECT_EQ(chain(10000).get(), 10000); });
}

courier::future<std::string> catch_at_await(courier::future<int> f) {
    try {
        int v = co_await std::move(f);
        co_return "value " + std::to_string(v);
    } catch (std::runtime_error const& e) {
        co_return std::string("caught ") + e.what();
    }
}

courier::future<int> plus_one(courier::future<int> f) {
    co_return co_await std::move(f) + 1;
}

courier::future<int> throw_before_suspending(bool fail) {
    if (fail) {
        throw std::logic_error("at once");
    }
    co_return co_await courier::make_ready_future(1);
}

courier::future<void> throw_after_suspending() {
    co_await courier::async([] {});
    throw std::out_of_range("late");
}

int fail_with_boom() {
    throw std::runtime_error("boom");
}

template <class E, class F>
std::string what_is_thrown(F&& f) {
    try {
        f();
    } catch (E const& e) {
        return e.what();
    }
    return "nothing thrown";
}

TEST(coroutine, exceptions_are_rethrown_at_co_await_and_escape_into_the_future) {
    in_runtime(2, [] {
        EXPECT_EQ(catch_at_await(courier::async(fail_with_boom)).get(), "caught boom");
        EXPECT_EQ(catch_at_await(courier::async([] { return 2; })).get(), "value 2");

        auto g = plus_one(courier::async(fail_with_boom));
        g.wait();
        EXPECT_TRUE(g.has_exception());
        EXPECT_EQ(what_is_thrown<std::runtime_error>([&] { g.get(); }), "boom");

        courier::future<int> early;
        EXPECT_NO_THROW(early = throw_before_suspending(true));
        EXPECT_TRUE(early.has_exception());
        EXPECT_EQ(what_is_thrown<std::logic_error>([&] { early.get(); }), "at once");
        EXPECT_EQ(throw_before_suspending(false).get(), 1);

        auto late = throw_after_suspending();
        EXPECT_EQ(what_is_thrown<std::out_of_range>([&] { late.get(); }), "late");
    });
}

courier::future<std::vector<int> const*>
address_of_shared(courier::shared_future<std::vector<int>> s) {
    auto const& v = co_await s; // an lvalue: a reference to the shared value
    co_return &v;
}
courier::future<std::vector<int>> copy_of_shared(courier::shared_future<std::vector<int>> s) {
    co_return co_await std::move(s);
}
courier::future<std::string> shared_failure(courier::shared_future<void> s) {
    try {
        co_await s;
    } catch (std::runtime_error const& e) {
        co_return e.what();
    }
    co_return "no exception";
}

TEST(coroutine, a_shared_future_is_awaited_by_several_coroutines) {
    in_runtime(2, [] {
        courier::promise<std::vector<int>> p;
        courier::shared_future<std::vector<int>> s = p.get_future().share();
        std::vector<courier::future<std::vector<int> const*>> refs;
        std::vector<courier::future<std::vector<int>>> copies;
        for (int i = 0; i < 8; ++i) {
            refs.push_back(address_of_shared(s));
            copies.push_back(copy_of_shared(s));
        }
        for (auto const& f : refs) {
            EXPECT_FALSE(f.is_ready());
        }
        p.set_value(std::vector<int>{1, 2, 3});
        for (auto& f : refs) {
            EXPECT_EQ(f.get(), &s.get());
        }
        for (auto& f : copies) {
            EXPECT_EQ(f.get(), (std::vector<int>{1, 2, 3}));
        }
        EXPECT_TRUE(s.valid());

        courier::promise<void> q;
        courier::shared_future<void> sv = q.get_future();
        std::vector<courier::future<std::string>> failures;
        for (int i = 0; i < 8; ++i) {
            failures.push_back(shared_failure(sv));
        }
        q.set_exception(std::make_exception_ptr(std::runtime_error("shared failure")));
        for (auto& f : failures) {
            EXPECT_EQ(f.get(), "shared failure");
        }
    });
}

courier::future<long> sum_of_all(std::vector<courier::future<int>> fs) {
    auto ready = co_await courier::when_all(std::move(fs));
    long sum = 0;
    for (auto& f : ready) {
        sum += f.get();
    }
    co_return sum;
}

courier::future<std::string> join_three(courier::future<int> a, courier::future<std::string> b,
                                        courier::future<void> c) {
    auto [x, y, z] = co_await courier::when_all(std::move(a), std::move(b), std::move(c));
    z.get();
    co_return y.get() + std::to_string(x.get());
}

TEST(coroutine, co_await_when_all_of_several_futures) {
    in_runtime(2, [] {
        std::vector<courier::promise<int>> ps(100);
        std::vector<courier::future<int>> fs;
        for (auto& p : ps) {
            fs.push_back(p.get_future());
        }
        auto sum = sum_of_all(std::move(fs));
        EXPECT_FALSE(sum.is_ready());
        for (std::size_t i = 0; i < ps.size(); ++i) {
            courier::post([&ps, i] { ps[i].set_value(static_cast<int>(i)); });
        }
        EXPECT_EQ(sum.get(), 99 * 100 / 2);

        courier::promise<std::string> name;
        auto joined =
            join_three(courier::async([] { return 7; }), name.get_future(), courier::async([] {}));
        EXPECT_FALSE(joined.is_ready());
        name.set_value("agent ");
        EXPECT_EQ(joined.get(), "agent 7");
    });
}

courier::future<std::tuple<int, bool, bool>> await_lvalue_and_invalid() {
    courier::future<int> f = courier::async([] { return 11; });
    int v = co_await f;
    bool moved_out = !f.valid();
    bool no_state = false;
    try {
        co_await f; // moved out above: no state
    } catch (std::future_error const& e) {
        no_state = e.code() == std::future_errc::no_state;
    }
    co_return std::tuple{v, moved_out, no_state};
}

TEST(coroutine, an_lvalue_future_is_moved_out_and_an_invalid_one_throws_no_state) {
    in_runtime(2, [] {
        auto [v, moved_out, no_state] = await_lvalue_and_invalid().get();
        EXPECT_EQ(v, 11);
        EXPECT_TRUE(moved_out);
        EXPECT_TRUE(no_state);
    });
}

struct tracked {
    static inline std::atomic<int> live{0};
    tracked() { ++live; }
    tracked(tracked const&) { ++live; }
    ~tracked() { --live; }
};

courier::future<int> hold_tracked(tracked, courier::future<int> f) {
    tracked local;
    int v = co_await std::move(f);
    if (v < 0) {
        throw std::runtime_error("negative");
    }
    co_return v;
}

TEST(coroutine, the_frame_is_destroyed_when_the_body_ends) {
    // One worker: the resumed body, its end and the frame's destruction run in one task,
    // before the waiting test body can run again.
    in_runtime(1, [] {
        for (int v : {3, -3}) {
            courier::promise<int> p;
            auto f = hold_tracked(tracked{}, p.get_future());
            EXPECT_EQ(tracked::live.load(), 2); // the parameter's copy and the local
            p.set_value(v);
            f.wait();
            EXPECT_EQ(tracked::live.load(), 0);
            EXPECT_EQ(f.has_exception(), v < 0);
        }
    });
}

std::atomic<int> g_setters_done{0};

/// Awaits `n` futures, each set by a task posted just before the await.
courier::future<long> await_posted_setters(int n, int& not_ready_at_await,
                                           int& resumed_after_setter_returned) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        courier::promise<int> p;
        auto f = p.get_future();
        courier::post([p = std::move(p), i]() mutable {
            p.set_value(i);
            g_setters_done.fetch_add(1);
        });
        not_ready_at_await += !f.is_ready();
        sum += co_await std::move(f);
        resumed_after_setter_returned += g_setters_done.load() == i + 1;
    }
    co_return sum;
}

TEST(coroutine, awaits_100000_futures_set_by_other_tasks_without_stack_growth) {
    // One worker, so each setter runs only once the coroutine has suspended: every await
    // suspends, and a resumption nested in the setter (or in the previous resumption) would
    // show in the counts, or overflow the 64 KiB stack.
    in_runtime(1, [] {
        constexpr int n = 100000;
        int not_ready = 0, after_setter = 0;
        g_setters_done = 0;
        EXPECT_EQ(await_posted_setters(n, not_ready, after_setter).get(), long{n} * (n - 1) / 2);
        EXPECT_EQ(not_ready, n);
        EXPECT_EQ(after_setter, n);
    });
}

courier::future<long> await_ready_futures(int n) {
    auto shared = courier::make_ready_future(1).share();
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        sum += co_await courier::make_ready_future(i);
        sum += co_await shared;
    }
    co_return sum;
}

TEST(coroutine, awaits_100000_ready_futures_without_suspending) {
    in_runtime(1, [] {
        constexpr int n = 100000;
        auto f = await_ready_futures(n);
        EXPECT_TRUE(f.is_ready()); // never suspended: completed within the call
        EXPECT_EQ(f.get(), long{n} * (n - 1) / 2 + n);
    });
}

courier::future<int> await_os_thread_setters(int n, int& suspended) {
    int on_a_worker = 0;
    for (int i = 0; i < n; ++i) {
        courier::promise<int> p;
        auto f = p.get_future();
        std::thread setter([&p] {
            std::this_thread::sleep_for(std::chrono::microseconds(500));
            p.set_value(1);
        });
        suspended += !f.is_ready();
        int one = co_await std::move(f);
        on_a_worker += one * (courier::this_thread::get_worker_id() >= 0);
        setter.join();
    }
    co_return on_a_worker;
}

TEST(coroutine, resumes_on_a_worker_when_an_os_thread_sets_the_value) {
    in_runtime(2, [] {
        int suspended = 0;
        EXPECT_EQ(await_os_thread_setters(100, suspended).get(), 100);
        EXPECT_GT(suspended, 0);
    });
}

courier::future<long> await_stolen_setters(int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        courier::promise<int> p;
        auto f = p.get_future();
        courier::post([p = std::move(p), i]() mutable { p.set_value(i); });
        sum += co_await std::move(f);
    }
    co_return sum;
}

TEST(coroutine, many_coroutines_race_their_setters_on_two_workers) {
    in_runtime(2, [] {
        constexpr int n = 20000;
        std::vector<courier::future<long>> fs;
        for (int c = 0; c < 6; ++c) {
            fs.push_back(await_stolen_setters(n));
        }
        for (auto& f : fs) {
            EXPECT_EQ(f.get(), long{n} * (n - 1) / 2);
        }
    });
}

courier::future<std::string> call_remote_thrower(courier::id_type where) {
    std::uint32_t there = co_await courier::async<coroutine_test_where_action>(where);
    try {
        co_await courier::async<coroutine_test_thrower_action>(where, 9);
        co_return "no exception";
    } catch (courier::remote_exception const& e) {
        co_return e.message() + " on " + std::to_string(e.locality()) + "/" + std::to_string(there);
    }
}

TEST(coroutine, a_remote_exception_is_rethrown_at_co_await) {
    courier::detail::in_process_job job({.localities = 2});
    auto got = job.run_on(
        0, [] { return call_remote_thrower(courier::find_all_localities().at(1)).get(); });
    EXPECT_EQ(got, "refused 9 on 1/1");
}

} // namespace
