// SPDX-License-Identifier: BSL-1.0
// Work handed to a worker by another thread (as the thread that polls a transport hands over
// received parcels) allocates nothing in the steady state: the worker's inbox keeps its
// capacity from one drain to the next. Counted with the executable's own malloc.
#include "runtime_fixture.hpp"

#include <courier/common/sanitizers.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

namespace {
std::atomic<std::uint64_t> g_news{0};
} // namespace

#if !defined(COURIER_ASAN) && !defined(COURIER_TSAN)
constexpr bool counts_news = true;
// The executable's malloc wins over glibc's; operator new calls it.
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* malloc(std::size_t n) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
#else
constexpr bool counts_news = false;
#endif

TEST(scheduler, work_from_another_thread_allocates_nothing_in_the_steady_state) {
    if (!counts_news) {
        GTEST_SKIP() << "sanitizer builds replace malloc themselves";
    }
    constexpr int warmup = 100, measured = 300, burst = 64;
    std::uint64_t news = 0;
    EXPECT_EQ(courier::testing::run_in_runtime(
                  1,
                  [&] {
                      std::atomic<int> ran{0};
                      courier::promise<void> done;
                      auto finished = done.get_future();
                      std::thread outside([&] {
                          std::uint64_t before = 0;
                          for (int b = 0; b < warmup + measured; ++b) {
                              if (b == warmup) {
                                  before = g_news.load();
                              }
                              for (int i = 0; i < burst; ++i) {
                                  courier::post([&ran] { ran.fetch_add(1); });
                              }
                              while (ran.load() < (b + 1) * burst) {
                                  std::this_thread::yield();
                              }
                          }
                          news = g_news.load() - before;
                          done.set_value();
                      });
                      finished.get(); // suspends: the worker stays free
                      outside.join();
                  }),
              0);
    // Before the inbox kept its capacity: at least one per burst (the first push into the
    // emptied inbox), 7 per burst of 64 as it doubled.
    EXPECT_LT(news, static_cast<std::uint64_t>(measured / 10)) << news << " allocations";
}
