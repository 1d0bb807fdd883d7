// SPDX-License-Identifier: BSL-1.0
// mutex, condition_variable, latch between Courier threads (and OS threads).
#include "runtime_fixture.hpp"

#include <gtest/gtest.h>

#include <thread>

using courier::testing::run_in_runtime;

TEST(mutex, protects_a_counter_across_many_tasks) {
    for (std::size_t threads : {1u, 2u}) {
        EXPECT_EQ(run_in_runtime(
                      threads,
                      [] {
                          courier::mutex m;
                          long counter = 0;
                          std::vector<courier::future<void>> fs;
                          for (int t = 0; t < 64; ++t) {
                              fs.push_back(courier::async([&] {
                                  for (int i = 0; i < 1000; ++i) {
                                      std::lock_guard g(m);
                                      long v = counter;
                                      if (i % 100 == 0) {
                                          courier::this_thread::yield(); // hold it across a switch
                                      }
                                      counter = v + 1;
                                  }
                              }));
                          }
                          courier::wait_all(fs);
                          EXPECT_EQ(counter, 64000);
                          EXPECT_TRUE(m.try_lock());
                          EXPECT_FALSE(m.try_lock());
                          m.unlock();
                      }),
                  0);
    }
}

TEST(condition_variable, ping_pong_between_tasks) {
    for (std::size_t threads : {1u, 2u}) {
        EXPECT_EQ(run_in_runtime(threads,
                                 [] {
                                     courier::mutex m;
                                     courier::condition_variable cv;
                                     int turn = 0;
                                     constexpr int rounds = 10000;
                                     auto player = [&](int me) {
                                         for (int i = 0; i < rounds; ++i) {
                                             std::unique_lock lk(m);
                                             cv.wait(lk, [&] { return turn == me; });
                                             turn = 1 - me;
                                             cv.notify_all();
                                         }
                                     };
                                     auto a = courier::async(player, 0);
                                     auto b = courier::async(player, 1);
                                     a.get();
                                     b.get();
                                     EXPECT_EQ(turn, 0);
                                 }),
                  0);
    }
}

TEST(latch, releases_all_waiters_at_zero) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 courier::latch l(10);
                                 std::atomic<int> passed{0};
                                 std::vector<courier::future<void>> fs;
                                 for (int i = 0; i < 5; ++i) {
                                     fs.push_back(courier::async([&] {
                                         l.wait();
                                         ++passed;
                                     }));
                                 }
                                 for (int i = 0; i < 10; ++i) {
                                     courier::post([&] { l.count_down(); });
                                 }
                                 courier::wait_all(fs);
                                 EXPECT_EQ(passed.load(), 5);
                                 EXPECT_TRUE(l.try_wait());
                                 EXPECT_THROW(l.count_down(), std::system_error);
                             }),
              0);
}

TEST(mutex, works_between_an_os_thread_and_tasks) {
    courier::mutex m;
    long counter = 0;
    std::atomic<bool> go{false};
    std::thread os([&] {
        while (!go) {
            std::this_thread::yield();
        }
        for (int i = 0; i < 20000; ++i) {
            std::lock_guard g(m);
            ++counter;
        }
    });
    EXPECT_EQ(run_in_runtime(2,
                             [&] {
                                 go = true;
                                 std::vector<courier::future<void>> fs;
                                 for (int t = 0; t < 4; ++t) {
                                     fs.push_back(courier::async([&] {
                                         for (int i = 0; i < 5000; ++i) {
                                             std::lock_guard g(m);
                                             ++counter;
                                         }
                                     }));
                                 }
                                 courier::wait_all(fs);
                             }),
              0);
    os.join();
    EXPECT_EQ(counter, 40000);
}

TEST(mutex, unlocking_an_unlocked_mutex_is_an_error) {
    courier::mutex m;
    EXPECT_THROW(m.unlock(), std::system_error);
}
