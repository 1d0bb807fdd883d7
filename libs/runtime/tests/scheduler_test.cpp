// SPDX-License-Identifier: BSL-1.0
// Stress and behaviour of the scheduler: a million tasks, deep fork-join on one worker, yield,
// sleep_for, progress hooks (and their wait fds), shutdown rules, stack overflow.
#include "../src/scheduler.hpp"
#include "runtime_fixture.hpp"

#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#include <sys/mman.h>
#define COURIER_LSAN_DISABLE() __lsan_disable()
#define COURIER_LSAN_ENABLE() __lsan_enable()
#else
#define COURIER_LSAN_DISABLE()
#define COURIER_LSAN_ENABLE()
#endif

using courier::testing::run_in_runtime;

namespace {
std::uint64_t fib(int n) {
    if (n < 2) {
        return static_cast<std::uint64_t>(n);
    }
    auto left = courier::async(fib, n - 1);
    std::uint64_t right = fib(n - 2);
    return left.get() + right;
}
} // namespace

TEST(scheduler, a_million_tasks) {
    for (std::size_t threads : {1u, 2u}) {
        EXPECT_EQ(run_in_runtime(threads,
                                 [] {
                                     constexpr int n = 1'000'000;
                                     std::atomic<int> ran{0};
                                     std::vector<courier::future<void>> fs;
                                     fs.reserve(n);
                                     for (int i = 0; i < n; ++i) {
                                         fs.push_back(courier::async([&ran] {
                                             ran.fetch_add(1, std::memory_order_relaxed);
                                         }));
                                     }
                                     courier::wait_all(fs);
                                     EXPECT_EQ(ran.load(), n);
                                 }),
                  0);
    }
}

TEST(scheduler, deep_fork_join_on_one_worker_does_not_deadlock) {
    // Every task blocks in get() on a task created after it, on a single worker.
    EXPECT_EQ(run_in_runtime(1, [] { EXPECT_EQ(fib(22), 17711u); }), 0);
    EXPECT_EQ(run_in_runtime(2, [] { EXPECT_EQ(fib(22), 17711u); }), 0);
}

TEST(scheduler, deep_chain_of_waiting_tasks) {
    // 10000 tasks each waiting for the next: 10000 suspended stacks at once. ThreadSanitizer
    // maps ~1.2 MB of trace per fiber, so its build uses a shorter chain.
#if defined(__SANITIZE_THREAD__)
    constexpr int depth = 1000;
#else
    constexpr int depth = 10000;
#endif
    EXPECT_EQ(run_in_runtime(1,
                             [&] {
                                 std::function<int(int)> chain = [&](int left) -> int {
                                     if (left == 0) {
                                         return 0;
                                     }
                                     return courier::async(chain, left - 1).get() + 1;
                                 };
                                 EXPECT_EQ(chain(depth), depth);
                             }),
              0);
}

TEST(scheduler, a_hundred_thousand_suspended_tasks) {
    // More suspended stacks than vm.max_map_count allows with one guard mapping per stack
    // (stacks are mapped in slabs with guard regions where the kernel supports them).
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "ThreadSanitizer maps ~1.2 MB of trace per fiber: 100k fibers exceed memory";
#else
    EXPECT_EQ(run_in_runtime(1,
                             [] {
                                 constexpr int n = 100'000;
                                 courier::promise<void> gate;
                                 auto open = gate.get_future().share();
                                 std::vector<courier::future<int>> fs;
                                 fs.reserve(n);
                                 for (int i = 0; i < n; ++i) {
                                     fs.push_back(courier::async([open] {
                                         open.get();
                                         return 1;
                                     }));
                                 }
                                 courier::this_thread::sleep_for(std::chrono::milliseconds(10));
                                 gate.set_value();
                                 int sum = 0;
                                 for (auto& f : fs) {
                                     sum += f.get();
                                 }
                                 EXPECT_EQ(sum, n);
                             }),
              0);
#endif
}

TEST(scheduler, yield_lets_other_tasks_run) {
    EXPECT_EQ(run_in_runtime(1,
                             [] {
                                 std::atomic<bool> flag{false};
                                 courier::post([&] { flag = true; });
                                 int spins = 0;
                                 while (!flag) {
                                     courier::this_thread::yield();
                                     ++spins;
                                 }
                                 EXPECT_GE(spins, 1);
                             }),
              0);
}

TEST(scheduler, sleep_for_suspends_for_at_least_the_duration) {
    EXPECT_EQ(run_in_runtime(1,
                             [] {
                                 std::atomic<int> others{0};
                                 auto t0 = std::chrono::steady_clock::now();
                                 auto sleeper = courier::async([] {
                                     courier::this_thread::sleep_for(std::chrono::milliseconds(30));
                                 });
                                 for (int i = 0; i < 100; ++i) {
                                     courier::post([&] { ++others; });
                                 }
                                 sleeper.get();
                                 EXPECT_GE(std::chrono::steady_clock::now() - t0,
                                           std::chrono::milliseconds(30));
                                 EXPECT_EQ(others.load(),
                                           100); // the worker ran them while the sleeper slept
                             }),
              0);
}

TEST(scheduler, progress_hooks_run_when_idle_and_their_fd_wakes_sleepers) {
    EXPECT_EQ(run_in_runtime(2,
                             [] {
                                 int fd = ::eventfd(0, EFD_NONBLOCK);
                                 std::atomic<int> polls{0};
                                 courier::promise<void> got;
                                 std::atomic<bool> fired{false};
                                 auto id = courier::register_progress_hook(
                                     [&]() -> bool {
                                         ++polls;
                                         std::uint64_t v;
                                         if (::read(fd, &v, sizeof v) == sizeof v &&
                                             !fired.exchange(true)) {
                                             got.set_value();
                                             return true;
                                         }
                                         return false;
                                     },
                                     fd);
                                 auto f = got.get_future();
                                 // Let every worker fall asleep (idle spin is 0 here), then signal
                                 // the fd from an OS thread: a sleeping worker must notice through
                                 // poll().
                                 std::this_thread::sleep_for(std::chrono::milliseconds(50));
                                 std::thread signaller([fd] {
                                     std::uint64_t one = 1;
                                     EXPECT_EQ(::write(fd, &one, sizeof one), 8);
                                 });
                                 f.get();
                                 signaller.join();
                                 EXPECT_GT(polls.load(), 0);
                                 courier::unregister_progress_hook(id);
                                 ::close(fd);
                             },
                             {"--courier:idle_spin_us=0"}),
              0);
}

// Passes scan the hook slots only up to the last one registered: a hook in the last slot keeps
// running when those before it go, and one that takes a freed slot, or a slot past the last,
// runs too. Each hook is waited for (bounded) until a pass has reached it.
TEST(scheduler, progress_hooks_in_any_slot_run_as_others_come_and_go) {
    EXPECT_EQ(
        run_in_runtime(1,
                       [] {
                           std::atomic<int> counts[4] = {};
                           auto hook = [&counts](int i) {
                               return courier::register_progress_hook([&counts, i] {
                                   counts[i].fetch_add(1, std::memory_order_relaxed);
                                   return false;
                               });
                           };
                           // True once hook i ran after this call (within 10 s).
                           auto runs = [&counts](int i) {
                               int const before = counts[i].load();
                               auto const until =
                                   std::chrono::steady_clock::now() + std::chrono::seconds(10);
                               while (counts[i].load() == before) {
                                   if (std::chrono::steady_clock::now() > until) {
                                       return false;
                                   }
                                   courier::this_thread::sleep_for(std::chrono::milliseconds(1));
                               }
                               return true;
                           };
                           auto a = hook(0);
                           auto b = hook(1);
                           EXPECT_GT(b, a);
                           courier::unregister_progress_hook(a);
                           EXPECT_TRUE(runs(1)) << "the last slot's hook, the one before it gone";
                           auto c = hook(2); // a's slot again
                           EXPECT_EQ(c, a);
                           courier::unregister_progress_hook(b);
                           EXPECT_TRUE(runs(2)) << "a hook in a freed slot, the last one gone";
                           auto d = hook(3); // past the last registered slot
                           EXPECT_TRUE(runs(3)) << "a hook past the last slot";
                           EXPECT_TRUE(runs(2));
                           int const gone = counts[1].load();
                           courier::this_thread::sleep_for(std::chrono::milliseconds(20));
                           EXPECT_EQ(counts[1].load(), gone) << "an unregistered hook ran";
                           courier::unregister_progress_hook(c);
                           courier::unregister_progress_hook(d);
                       },
                       {"--courier:idle_spin_us=1000000"}),
        0);
}

// How long an idle worker sleeps on a hook's wait fd that nothing signals follows what the fd
// may miss: 10 ms sleeps on one that some peers never ring (partial), sleeps lengthening from
// 10 to 100 ms on one that misses only on faults (a doorbell), 100 ms on one that misses
// nothing. Counted as the sleeps (gaps of over 5 ms between the hook's polls) of one worker in
// an idle second after 200 ms: ~10 for a doorbell (10 + 20 + 40 + 80 ms, then 100 ms each),
// ~100 for a partial fd. Load only makes a sleeper wake later than asked, so the upper bounds
// hold on a busy machine; the partial fd's lower bound is a third of what it should reach.
TEST(scheduler, idle_sleeps_on_a_hooks_fd_last_as_long_as_what_it_may_miss_allows) {
    using courier::detail::scheduler;
    using courier::detail::scheduler_options;
    using courier::parcelport::wait_coverage;
    using clock = std::chrono::steady_clock;
    auto sleeps_in_an_idle_second = [](wait_coverage coverage) {
        scheduler s(scheduler_options{
            .threads = 1, .bind = false, .idle_spin = std::chrono::microseconds(0)});
        int fd = ::eventfd(0, EFD_NONBLOCK); // never written: only timeouts end a sleep
        std::atomic<int> sleeps{0};
        clock::time_point last{};
        s.start();
        auto id = s.register_hook(
            [&] {
                auto now = clock::now(); // one worker: only it calls the hook
                if (now - last > std::chrono::milliseconds(5)) {
                    sleeps.fetch_add(1, std::memory_order_relaxed);
                }
                last = now;
                return false;
            },
            fd, nullptr, coverage);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        int const before = sleeps.load();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        int const n = sleeps.load() - before;
        s.unregister_hook(id);
        s.stop();
        ::close(fd);
        return n;
    };
    int const doorbell = sleeps_in_an_idle_second(wait_coverage::rare_misses);
    int const partial = sleeps_in_an_idle_second(wait_coverage::partial);
    int const complete = sleeps_in_an_idle_second(wait_coverage::complete);
    std::printf("sleeps in an idle second: %d doorbell, %d partial, %d complete\n", doorbell,
                partial, complete);
    EXPECT_LE(doorbell, 15);
    EXPECT_LE(complete, 15);
    EXPECT_GE(partial, 33);
}

TEST(init, courier_main_result_and_arguments) {
    std::vector<std::string> args = {"prog", "a", "--courier:threads=1", "b"};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    int rc = courier::init(
        [](int argc, char** av) {
            EXPECT_EQ(argc, 3);
            EXPECT_STREQ(av[1], "a");
            EXPECT_STREQ(av[2], "b");
            EXPECT_EQ(av[3], nullptr);
            EXPECT_EQ(courier::get_os_thread_count(), 1u);
            courier::finalize();
            return 7;
        },
        static_cast<int>(argv.size()), argv.data());
    EXPECT_EQ(rc, 7);
}

TEST(init, missing_finalize_and_exceptions_fail_the_program) {
    std::vector<std::string> args = {"prog", "--courier:threads=1"};
    std::vector<char*> argv{args[0].data(), args[1].data()};
    testing::internal::CaptureStderr();
    int rc = courier::init([](int, char**) { return 0; }, 2, argv.data());
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 1);
    EXPECT_NE(err.find("without calling courier::finalize"), std::string::npos) << err;
    testing::internal::CaptureStderr();
    rc = courier::init(
        [](int, char**) -> int {
            courier::finalize();
            throw std::runtime_error("main blew up");
        },
        2, argv.data());
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 1);
    EXPECT_NE(err.find("main blew up"), std::string::npos) << err;
}

TEST(init, a_task_that_can_never_resume_is_reported_not_hung) {
    testing::internal::CaptureStderr();
    auto t0 = std::chrono::steady_clock::now();
    static courier::promise<void>* forever = nullptr;
    int rc = run_in_runtime(1, [] {
        // The stuck task's allocation is leaked on purpose (it can never finish); one worker,
        // so this lightweight thread stays on the OS thread whose LSan state it toggles.
        COURIER_LSAN_DISABLE();
        forever = new courier::promise<void>();
        courier::post([] {
            courier::future<void> f = forever->get_future();
            f.get();
        });
        COURIER_LSAN_ENABLE();
    });
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 1);
    EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(scheduler, stack_overflow_dies_with_a_clear_message) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(run_in_runtime(1,
                                [] {
                                    std::function<int(int)> deep = [&](int n) -> int {
                                        volatile char pad[1024];
                                        pad[0] = static_cast<char>(n);
                                        return n == 0 ? 0 : deep(n - 1) + pad[0];
                                    };
                                    courier::async(deep, 1 << 20).get();
                                },
                                {"--courier:stack_size=65536"}),
                 "stack overflow in a Courier thread \\(its stack is 64 KiB\\)");
}

TEST(scheduler, memory_that_held_stacks_carries_no_stack_poison_after_shutdown) {
    // A Courier thread's last frames never return (it switches away for good), so their
    // redzones stay poisoned in AddressSanitizer's shadow. Once the stacks are unmapped, whatever
    // the address range is mapped for next (a libfabric or PMIx region, read at exit) must not
    // inherit that poison: it read as a false "stack-buffer-overflow".
#if !defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "checks AddressSanitizer's shadow: meaningful only in the ASan build";
#else
    std::vector<std::uintptr_t> frames;
    std::mutex m;
    ASSERT_EQ(run_in_runtime(2,
                             [&] {
                                 std::vector<courier::future<void>> fs;
                                 for (int i = 0; i < 64; ++i) {
                                     fs.push_back(courier::async([&] {
                                         volatile char local[256];
                                         local[0] = 1;
                                         std::lock_guard g(m);
                                         frames.push_back(
                                             reinterpret_cast<std::uintptr_t>(&local[0]));
                                     }));
                                 }
                                 for (auto& f : fs) {
                                     f.get();
                                 }
                             }),
              0);
    ASSERT_FALSE(frames.empty());
    auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    std::size_t checked = 0;
    for (std::uintptr_t a : frames) {
        // The stack's top part, where a thread's first and last frames live.
        std::uintptr_t lo = (a & ~(page - 1)) - 4 * page;
        std::size_t len = 8 * page;
        void* p = ::mmap(reinterpret_cast<void*>(lo), len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED) {
            continue; // still mapped by something else: not the case under test
        }
        ++checked;
        void* bad = __asan_region_is_poisoned(p, len);
        EXPECT_EQ(bad, nullptr) << "poisoned byte at offset "
                                << (static_cast<char*>(bad) - static_cast<char*>(p))
                                << " of a fresh mapping where a Courier stack was";
        ::munmap(p, len);
    }
    EXPECT_GT(checked, 0U) << "no former stack address could be mapped again";
#endif
}
