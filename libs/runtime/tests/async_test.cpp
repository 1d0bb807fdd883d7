// SPDX-License-Identifier: BSL-1.0
// async, post, when_all, when_any, wait_all, dataflow.
#include "runtime_fixture.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

using courier::testing::run_in_runtime;

TEST(async, values_void_and_arguments_by_copy) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 std::string s = "abc";
                                 auto f = courier::async(
                                     [](std::string x, int n) { return x.size() + n; }, s, 4);
                                 s = "changed";
                                 EXPECT_EQ(f.get(), 7u);
                                 std::atomic<int> hit{0};
                                 courier::async([&hit] { hit = 1; }).get();
                                 EXPECT_EQ(hit.load(), 1);
                                 auto moved =
                                     courier::async([](std::unique_ptr<int> p) { return *p; },
                                                    std::make_unique<int>(9));
                                 EXPECT_EQ(moved.get(), 9);
                             }),
              0);
}

TEST(async, exceptions_travel_through_the_future) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 auto f = courier::async(
                                     []() -> int { throw std::invalid_argument("bad"); });
                                 EXPECT_THROW(f.get(), std::invalid_argument);
                             }),
              0);
}

TEST(async, outside_the_runtime_is_an_error) {
    EXPECT_THROW(courier::async([] { return 1; }), std::logic_error);
    EXPECT_THROW(courier::post([] {}), std::logic_error);
}

TEST(post, an_escaping_exception_is_reported_and_fails_the_program) {
    testing::internal::CaptureStderr();
    int rc = run_in_runtime(2, [] { courier::post([] { throw std::runtime_error("lost?"); }); });
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("lost?"), std::string::npos) << err;
}

TEST(when_all, vector_and_variadic) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 std::vector<courier::future<int>> fs;
                                 for (int i = 0; i < 100; ++i) {
                                     fs.push_back(courier::async([i] { return i; }));
                                 }
                                 auto all = courier::when_all(std::move(fs)).get();
                                 int sum = 0;
                                 for (auto& f : all) {
                                     EXPECT_TRUE(f.is_ready());
                                     sum += f.get();
                                 }
                                 EXPECT_EQ(sum, 4950);
                                 auto [a, b] =
                                     courier::when_all(courier::async([] { return 1; }),
                                                       courier::make_ready_future(std::string("b")))
                                         .get();
                                 EXPECT_EQ(a.get(), 1);
                                 EXPECT_EQ(b.get(), "b");
                                 auto none =
                                     courier::when_all(std::vector<courier::future<int>>{}).get();
                                 EXPECT_TRUE(none.empty());
                             }),
              0);
}

TEST(when_all, keeps_exceptions_inside_the_futures) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 std::vector<courier::future<int>> fs;
                                 fs.push_back(courier::async([] { return 1; }));
                                 fs.push_back(courier::async(
                                     []() -> int { throw std::runtime_error("x"); }));
                                 auto all = courier::when_all(std::move(fs)).get();
                                 EXPECT_EQ(all[0].get(), 1);
                                 EXPECT_THROW(all[1].get(), std::runtime_error);
                             }),
              0);
}

TEST(when_any, picks_a_ready_future_under_races) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 for (int round = 0; round < 200; ++round) {
                                     std::vector<courier::promise<int>> ps(4);
                                     std::vector<courier::future<int>> fs;
                                     for (auto& p : ps) {
                                         fs.push_back(p.get_future());
                                     }
                                     auto any = courier::when_any(std::move(fs));
                                     // Two setters race from different tasks.
                                     int a = round % 4, b = (round + 1) % 4;
                                     auto t1 = courier::async([&ps, a] { ps[a].set_value(a); });
                                     auto t2 = courier::async([&ps, b] { ps[b].set_value(b); });
                                     auto r = any.get();
                                     ASSERT_TRUE(r.index == static_cast<std::size_t>(a) ||
                                                 r.index == static_cast<std::size_t>(b));
                                     ASSERT_TRUE(r.futures[r.index].is_ready());
                                     EXPECT_EQ(r.futures[r.index].get(), static_cast<int>(r.index));
                                     t1.get();
                                     t2.get();
                                 }
                                 auto empty =
                                     courier::when_any(std::vector<courier::future<int>>{}).get();
                                 EXPECT_EQ(empty.index, static_cast<std::size_t>(-1));
                             }),
              0);
}

TEST(wait_all_and_dataflow, compose) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 auto a = courier::async([] { return 2; });
                                 auto b = courier::async([] { return 3; });
                                 courier::wait_all(a, b);
                                 EXPECT_TRUE(a.is_ready() && b.is_ready());
                                 auto c = courier::dataflow(
                                     [](courier::future<int> x, courier::future<int> y) {
                                         return x.get() * y.get();
                                     },
                                     std::move(a), std::move(b));
                                 EXPECT_EQ(c.get(), 6);
                             }),
              0);
}

TEST(async, tasks_run_on_every_worker) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 std::mutex m;
                                 std::set<int> seen;
                                 std::vector<courier::future<void>> fs;
                                 for (int i = 0; i < 2000; ++i) {
                                     fs.push_back(courier::async([&] {
                                         volatile double x = 0;
                                         for (int k = 0; k < 2000; ++k) {
                                             x = x + k;
                                         }
                                         std::lock_guard g(m);
                                         seen.insert(courier::this_thread::get_worker_id());
                                     }));
                                 }
                                 courier::wait_all(fs);
                                 EXPECT_EQ(seen.size(), 2u); // stealing happened
                             }),
              0);
}
