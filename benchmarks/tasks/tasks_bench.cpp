// SPDX-License-Identifier: BSL-1.0
// Tasking costs of Courier's runtime against their baselines, in the same run:
//   (a) spawn + run + join of 1M empty tasks (async + wait_all), 1 and 2 workers;
//   (b) promise/future ping-pong between two tasks (one round trip = two context switches);
//   (c) fib(n) by fork-join async, no cutoff;
//   (d) wake-up latency of a sleeping vs a spinning worker;
// baselines: a raw boost::context::fiber switch loop (the floor), Boost.Fiber (pooled stacks),
// oneTBB task_group, std::async.
//   tasks_bench [--quick] [--pingpong]   (--pingpong: only the raw switch and the same-worker
//                                         ping-pong, for callgrind and repeated runs)
#include <courier/runtime.hpp>

#include <boost/context/fiber.hpp>
#include <boost/fiber/all.hpp>
#include <tbb/global_control.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
double ns_since(clk::time_point t0) {
    return std::chrono::duration<double, std::nano>(clk::now() - t0).count();
}

struct stats {
    double median = 0, min = 0;
};
stats summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v.front()};
}

int reps = 5;
bool quick = false;
int failures = 0;
void target(bool ok, std::string const& what) {
    std::printf("  [%s] %s\n", ok ? "met " : "MISS", what.c_str());
    failures += !ok;
}

// Runs `body` as courier_main with `threads` workers.
void in_courier(std::size_t threads, std::function<void()> body, int spin_us = 50,
                bool bind = true) {
    std::vector<std::string> args = {"tasks_bench", "--courier:threads=" + std::to_string(threads),
                                     "--courier:idle_spin_us=" + std::to_string(spin_us),
                                     std::string("--courier:bind=") + (bind ? "cores" : "none")};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    int rc = courier::init(
        [&](int, char**) {
            body();
            return courier::finalize();
        },
        static_cast<int>(args.size()), argv.data());
    if (rc != 0) {
        std::fprintf(stderr, "courier::init returned %d\n", rc);
        std::exit(1);
    }
}

// ---- Courier workloads ---------------------------------------------------------------------

stats courier_spawn_join(std::size_t threads, int n) {
    std::vector<double> ns;
    in_courier(threads, [&] {
        std::vector<courier::future<void>> fs;
        fs.reserve(static_cast<std::size_t>(n));
        for (int r = 0; r < reps + 1; ++r) {
            auto t0 = clk::now();
            for (int i = 0; i < n; ++i) {
                fs.push_back(courier::async([] {}));
            }
            courier::wait_all(fs);
            fs.clear();
            if (r > 0) { // the first repetition warms stacks and allocator caches
                ns.push_back(ns_since(t0) / n);
            }
        }
    });
    return summarize(ns);
}

// A ring of promise pairs, each rebuilt two rounds ahead of its use: every hop uses a fresh
// promise/future pair (as the anchor's "new pair per hop"), and the working set stays in cache.
template <template <class> class Promise, template <class> class Future>
struct ping_pong_ring {
    struct round {
        Promise<void> ping, pong;
        Future<void> ping_f = ping.get_future(), pong_f = pong.get_future();
    };
    static constexpr int k = 4;
    std::unique_ptr<round> r[k];
    ping_pong_ring() {
        for (auto& x : r) {
            x = std::make_unique<round>();
        }
    }
    // Side A, round i.
    void a(int i) {
        r[(i + 2) % k] = std::make_unique<round>(); // B is done with it (round i-2)
        r[i % k]->ping.set_value();
        r[i % k]->pong_f.get();
    }
    // Side B, round i.
    void b(int i) {
        r[i % k]->ping_f.get();
        r[i % k]->pong.set_value();
    }
};

// Preallocated pairs, in chunks of 1000 round trips whose promises are built before the clock
// starts: the cost of the switch and the synchronization alone, cache-hot.
template <template <class> class Promise, template <class> class Future, class Spawn>
double chunked_ping_pong(int n, Spawn&& spawn_b) {
    constexpr int chunk = 1000;
    double total = 0;
    for (int done = 0; done < n; done += chunk) {
        std::vector<Promise<void>> ping(chunk), pong(chunk);
        std::vector<Future<void>> ping_f, pong_f;
        for (int i = 0; i < chunk; ++i) {
            ping_f.push_back(ping[static_cast<std::size_t>(i)].get_future());
            pong_f.push_back(pong[static_cast<std::size_t>(i)].get_future());
        }
        auto t0 = clk::now();
        auto joiner = spawn_b([&] {
            for (std::size_t i = 0; i < chunk; ++i) {
                ping_f[i].get();
                pong[i].set_value();
            }
        });
        for (std::size_t i = 0; i < chunk; ++i) {
            ping[i].set_value();
            pong_f[i].get();
        }
        joiner();
        total += ns_since(t0);
    }
    return total / n;
}

stats courier_ping_pong(std::size_t threads, int n, bool fresh_pairs) {
    std::vector<double> ns;
    in_courier(threads, [&] {
        for (int r = 0; r < reps; ++r) {
            if (!fresh_pairs) {
                ns.push_back(chunked_ping_pong<courier::promise, courier::future>(n, [](auto f) {
                    auto fut = std::make_shared<courier::future<void>>(courier::async(f));
                    return [fut] { fut->get(); };
                }));
                continue;
            }
            ping_pong_ring<courier::promise, courier::future> ring;
            auto t0 = clk::now();
            auto b = courier::async([&] {
                for (int i = 0; i < n; ++i) {
                    ring.b(i);
                }
            });
            for (int i = 0; i < n; ++i) {
                ring.a(i);
            }
            b.get();
            ns.push_back(ns_since(t0) / n);
        }
    });
    return summarize(ns);
}

std::uint64_t courier_fib(int n) {
    if (n < 2) {
        return static_cast<std::uint64_t>(n);
    }
    auto left = courier::async(courier_fib, n - 1);
    std::uint64_t right = courier_fib(n - 2);
    return left.get() + right;
}

stats courier_fib_ms(std::size_t threads, int n, std::uint64_t expect) {
    std::vector<double> ms;
    in_courier(threads, [&] {
        for (int r = 0; r < reps; ++r) {
            auto t0 = clk::now();
            auto v = courier_fib(n);
            ms.push_back(ns_since(t0) / 1e6);
            if (v != expect) {
                std::fprintf(stderr, "fib mismatch\n");
                std::exit(1);
            }
        }
    });
    return summarize(ms);
}

// Wake-up latency: an OS thread sets a promise a task waits on, after the workers went idle.
// Workers are not pinned here: the setter thread is created by a worker and would inherit its
// core, competing with the very worker it is meant to wake.
stats courier_wakeup_us(int spin_us, int samples) {
    std::vector<double> us;
    in_courier(
        1,
        [&] {
            for (int s = 0; s < samples; ++s) {
                courier::promise<clk::time_point> p;
                auto f = p.get_future();
                auto waiter = courier::async([&f] { return ns_since(f.get()); });
                std::thread setter([&p] {
                    std::this_thread::sleep_for(std::chrono::microseconds(300));
                    p.set_value(clk::now());
                });
                double ns = waiter.get();
                setter.join();
                us.push_back(ns / 1000);
            }
        },
        spin_us, false);
    return summarize(us);
}

// ---- baselines -----------------------------------------------------------------------------

/// One timing of `n` resume-and-back round trips of a raw fiber, each side calling `per_switch`
/// before it switches: ns per switch.
template <class F>
double switch_loop_once(int n, F per_switch) {
    namespace ctx = boost::context;
    ctx::fiber f([&per_switch](ctx::fiber&& m) {
        for (;;) {
            per_switch();
            m = std::move(m).resume();
        }
        return std::move(m);
    });
    auto t0 = clk::now();
    for (int i = 0; i < n; ++i) {
        per_switch();
        f = std::move(f).resume();
    }
    double ns = ns_since(t0) / (2.0 * n); // two switches per resume-and-back
    // f is abandoned suspended: unwinding it would throw through the loop; leak the stack.
    new ctx::fiber(std::move(f));
    return ns;
}

double raw_switch_once(int n) {
    return switch_loop_once(n, [] {});
}

/// The raw switch plus the least synchronization a thread-safe future hand-off needs per hop:
/// one atomic exchange (publishing a value) and one compare-exchange (registering a waiter).
/// Not a target; it shows how much of the ping-pong is the cost of atomics where it runs.
stats raw_switch_with_atomics_ns(int n) {
    static std::atomic<std::uintptr_t> word{0};
    auto sync = [] {
        word.exchange(1, std::memory_order_acq_rel);
        std::uintptr_t e = 1;
        word.compare_exchange_strong(e, 0, std::memory_order_acq_rel);
    };
    std::vector<double> ns;
    for (int r = 0; r < reps; ++r) {
        ns.push_back(switch_loop_once(n, sync));
    }
    return summarize(ns);
}

stats raw_switch_ns(int n) {
    std::vector<double> ns;
    for (int r = 0; r < reps; ++r) {
        ns.push_back(raw_switch_once(n));
    }
    return summarize(ns);
}

/// The ping-pong target's ratio measured in pairs: each repetition times the raw switch and
/// then the same-worker ping-pong back to back on the same worker thread, so a noisy phase of
/// the machine moves both; the ratio is taken per pair.
stats paired_ping_pong_ratio(int n_pp, int n_raw) {
    std::vector<double> ratios;
    in_courier(1, [&] {
        for (int r = 0; r < reps; ++r) {
            double raw = raw_switch_once(n_raw);
            double pp = chunked_ping_pong<courier::promise, courier::future>(n_pp, [](auto f) {
                auto fut = std::make_shared<courier::future<void>>(courier::async(f));
                return [fut] { fut->get(); };
            });
            ratios.push_back(pp / (2 * raw));
        }
    });
    return summarize(ratios);
}

stats boost_fiber_spawn_join(int n) {
    std::vector<double> ns;
    boost::fibers::pooled_fixedsize_stack stacks(128 * 1024);
    for (int r = 0; r < reps + 1; ++r) {
        auto t0 = clk::now();
        std::vector<boost::fibers::fiber> batch;
        batch.reserve(1000);
        for (int i = 0; i < n; i += 1000) {
            for (int k = 0; k < 1000; ++k) {
                batch.emplace_back(std::allocator_arg, stacks, [] {});
            }
            for (auto& f : batch) {
                f.join();
            }
            batch.clear();
        }
        if (r > 0) {
            ns.push_back(ns_since(t0) / n);
        }
    }
    return summarize(ns);
}

stats boost_fiber_ping_pong(int n, bool fresh_pairs) {
    std::vector<double> ns;
    for (int r = 0; r < reps; ++r) {
        if (!fresh_pairs) {
            ns.push_back(
                chunked_ping_pong<boost::fibers::promise, boost::fibers::future>(n, [](auto f) {
                    auto fib = std::make_shared<boost::fibers::fiber>(f);
                    return [fib] { fib->join(); };
                }));
            continue;
        }
        ping_pong_ring<boost::fibers::promise, boost::fibers::future> ring;
        auto t0 = clk::now();
        boost::fibers::fiber b([&] {
            for (int i = 0; i < n; ++i) {
                ring.b(i);
            }
        });
        for (int i = 0; i < n; ++i) {
            ring.a(i);
        }
        b.join();
        ns.push_back(ns_since(t0) / n);
    }
    return summarize(ns);
}

std::uint64_t boost_fib(int n) {
    if (n < 2) {
        return static_cast<std::uint64_t>(n);
    }
    auto left = boost::fibers::async(boost::fibers::launch::post, boost_fib, n - 1);
    std::uint64_t right = boost_fib(n - 2);
    return left.get() + right;
}

stats boost_fib_ms(int n) {
    std::vector<double> ms;
    for (int r = 0; r < std::min(reps, 3); ++r) {
        auto t0 = clk::now();
        volatile auto v = boost_fib(n);
        (void)v;
        ms.push_back(ns_since(t0) / 1e6);
    }
    return summarize(ms);
}

stats tbb_spawn_join(std::size_t threads, int n) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::vector<double> ns;
    for (int r = 0; r < reps + 1; ++r) {
        tbb::task_group g;
        auto t0 = clk::now();
        for (int i = 0; i < n; ++i) {
            g.run([] {});
        }
        g.wait();
        if (r > 0) {
            ns.push_back(ns_since(t0) / n);
        }
    }
    return summarize(ns);
}

std::uint64_t tbb_fib(int n) {
    if (n < 2) {
        return static_cast<std::uint64_t>(n);
    }
    std::uint64_t left = 0;
    tbb::task_group g;
    g.run([&] { left = tbb_fib(n - 1); });
    std::uint64_t right = tbb_fib(n - 2);
    g.wait();
    return left + right;
}

stats tbb_fib_ms(std::size_t threads, int n) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        auto t0 = clk::now();
        volatile auto v = tbb_fib(n);
        (void)v;
        ms.push_back(ns_since(t0) / 1e6);
    }
    return summarize(ms);
}

stats std_async_us(int n) {
    std::vector<double> us;
    for (int r = 0; r < std::min(reps, 3); ++r) {
        auto t0 = clk::now();
        for (int i = 0; i < n; i += 100) {
            std::vector<std::future<void>> fs;
            for (int k = 0; k < 100; ++k) {
                fs.push_back(std::async(std::launch::async, [] {}));
            }
            for (auto& f : fs) {
                f.get();
            }
        }
        us.push_back(ns_since(t0) / n / 1000);
    }
    return summarize(us);
}

stats os_condvar_wakeup_us(int samples) {
    std::vector<double> us;
    for (int s = 0; s < samples; ++s) {
        std::mutex m;
        std::condition_variable cv;
        bool ready = false;
        clk::time_point sent;
        double got = 0;
        std::thread waiter([&] {
            std::unique_lock g(m);
            cv.wait(g, [&] { return ready; });
            got = ns_since(sent) / 1000;
        });
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        {
            std::lock_guard g(m);
            sent = clk::now();
            ready = true;
        }
        cv.notify_one();
        waiter.join();
        us.push_back(got);
    }
    return summarize(us);
}

void row(char const* name, stats s, char const* unit) {
    std::printf("  %-46s %12.1f %12.1f  %s\n", name, s.median, s.min, unit);
}

/// The rows of the same-worker ping-pong and its floors; returns the paired ratios.
stats same_worker_ping_pong(int n) {
    int const n_raw = quick ? 2'000'000 : 10'000'000;
    row("raw boost::context::fiber switch (floor)", raw_switch_ns(n_raw), "ns/switch");
    row("raw switch + exchange + compare-exchange", raw_switch_with_atomics_ns(n_raw), "ns/switch");
    row("courier, same worker", courier_ping_pong(1, n, false), "ns/round trip");
    auto pr = paired_ping_pong_ratio(n, n_raw);
    std::printf("  %-46s %12.2f %12.2f  x\n", "courier same worker / raw round trip, paired",
                pr.median, pr.min);
    return pr;
}

} // namespace

int main(int argc, char** argv) {
    bool pingpong_only = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--quick") {
            quick = true;
            reps = 3;
        } else if (std::string(argv[i]) == "--pingpong") {
            pingpong_only = true;
        } else {
            std::fprintf(stderr, "usage: tasks_bench [--quick] [--pingpong]\n");
            return 2;
        }
    }
    if (pingpong_only) {
        same_worker_ping_pong(quick ? 20'000 : 100'000);
        return 0;
    }
    int const n_spawn = quick ? 200'000 : 1'000'000;
    int const n_pp = quick ? 20'000 : 100'000;
    int const fib_n = quick ? 25 : 30;
    std::uint64_t const fib_expect = quick ? 75025 : 832040;
    int const boost_fib_n = quick ? 20 : 24;
    std::printf("Courier tasking benchmark (median and best of %d; quick=%d)\n", reps, quick);
    std::printf("  %-46s %12s %12s\n", "case", "median", "best");

    std::printf("(a) spawn + run + join, %d empty tasks\n", n_spawn);
    auto c1 = courier_spawn_join(1, n_spawn);
    row("courier async + wait_all, 1 worker", c1, "ns/task");
    auto c2 = courier_spawn_join(2, n_spawn);
    row("courier async + wait_all, 2 workers", c2, "ns/task");
    auto bf = boost_fiber_spawn_join(n_spawn / 4);
    row("Boost.Fiber fiber + join, pooled stacks", bf, "ns/task");
    auto t1 = tbb_spawn_join(1, n_spawn);
    row("TBB task_group run + wait, 1 thread", t1, "ns/task");
    auto t2 = tbb_spawn_join(2, n_spawn);
    row("TBB task_group run + wait, 2 threads", t2, "ns/task");
    auto sa = std_async_us(quick ? 500 : 2000);
    row("std::async(launch::async), batches of 100", sa, "us/task");

    std::printf("(b) promise/future ping-pong, %d round trips (preallocated pairs, chunks of "
                "1000)\n",
                n_pp);
    auto pr = same_worker_ping_pong(n_pp);
    auto p2 = courier_ping_pong(2, n_pp, false);
    row("courier, 2 workers", p2, "ns/round trip");
    auto bp = boost_fiber_ping_pong(n_pp, false);
    row("Boost.Fiber, 1 thread", bp, "ns/round trip");
    std::printf("  with a new promise pair per hop (allocation included):\n");
    auto p1f = courier_ping_pong(1, n_pp, true);
    row("courier, same worker", p1f, "ns/round trip");
    auto bpf = boost_fiber_ping_pong(n_pp, true);
    row("Boost.Fiber, 1 thread", bpf, "ns/round trip");

    std::printf("(c) fork-join fib, no cutoff\n");
    auto f1 = courier_fib_ms(1, fib_n, fib_expect);
    auto f2 = courier_fib_ms(2, fib_n, fib_expect);
    auto tf1 = tbb_fib_ms(1, fib_n);
    auto tf2 = tbb_fib_ms(2, fib_n);
    auto bfib = boost_fib_ms(boost_fib_n);
    std::string l = "courier fib(" + std::to_string(fib_n) + "), 1 worker";
    row(l.c_str(), f1, "ms");
    l = "courier fib(" + std::to_string(fib_n) + "), 2 workers";
    row(l.c_str(), f2, "ms");
    l = "TBB fib(" + std::to_string(fib_n) + "), 1 thread";
    row(l.c_str(), tf1, "ms");
    l = "TBB fib(" + std::to_string(fib_n) + "), 2 threads";
    row(l.c_str(), tf2, "ms");
    l = "Boost.Fiber fib(" + std::to_string(boost_fib_n) + ") post, 1 thread";
    row(l.c_str(), bfib, "ms");
    auto spawns = [](int n) { // fib(n) spawns fib(n+1)-1 tasks
        double a = 0, b = 1;
        for (int i = 0; i < n + 1; ++i) {
            double c = a + b;
            a = b;
            b = c;
        }
        return a - 1;
    };
    std::printf("  per spawn: courier %.0f ns (1 worker), TBB %.0f ns, Boost.Fiber %.0f ns\n",
                f1.median * 1e6 / spawns(fib_n), tf1.median * 1e6 / spawns(fib_n),
                bfib.median * 1e6 / spawns(boost_fib_n));

    std::printf("(d) wake-up latency: an OS thread sets a promise a waiting task needs\n");
    int samples = quick ? 50 : 200;
    auto w_sleep = courier_wakeup_us(0, samples);
    row("courier, worker asleep (idle_spin_us=0)", w_sleep, "us");
    auto w_default = courier_wakeup_us(50, samples);
    row("courier, default (spin 50 us, then sleep)", w_default, "us");
    auto w_spin = courier_wakeup_us(5000, samples);
    row("courier, worker spinning (idle_spin_us=5000)", w_spin, "us");
    auto os = os_condvar_wakeup_us(samples);
    row("OS thread on a condition_variable (floor)", os, "us");

    std::printf("\ntargets (issue 3; best repetition, the ping-pong on paired ratios):\n");
    target(c1.min <= 150,
           "spawn+run+join <= 150 ns/task on one worker: " + std::to_string(c1.min) + " ns");
    target(pr.median <= 10,
           "same-worker ping-pong <= 10x the raw switch round trip (2 switches), median of " +
               std::to_string(reps) + " paired measurements: " + std::to_string(pr.median) +
               "x (best " + std::to_string(pr.min) + "x)");
    target(f1.min <= 3 * tf1.min,
           "fib(" + std::to_string(fib_n) +
               ") within 3x of TBB on one worker: " + std::to_string(f1.min / tf1.min) + "x");
    double courier_per_spawn = f1.min * 1e6 / spawns(fib_n);
    double boost_per_spawn = bfib.min * 1e6 / spawns(boost_fib_n);
    target(courier_per_spawn * 5 <= boost_per_spawn,
           "fib far ahead of Boost.Fiber (>= 5x per spawn): " +
               std::to_string(boost_per_spawn / courier_per_spawn) + "x");
    std::printf("\n%s\n", failures == 0 ? "all targets met" : "SOME TARGETS MISSED");
    return 0;
}
