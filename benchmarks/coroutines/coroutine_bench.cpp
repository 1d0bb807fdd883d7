// SPDX-License-Identifier: BSL-1.0
// Cost per awaited call of a coroutine loop (co_await) against the same sequential loop written
// with .then continuations (each continuation makes the next call) and with .get() in a Courier
// task, in interleaved rounds (the order rotates each round):
//   remote: a trivial action on locality 1 (int -> int), one call outstanding at a time;
//   local:  a future made ready by another local task, posted just before the wait.
//   courier-run -n 2 coroutine_bench [--rounds=N] [--remote-calls=N] [--local-calls=N] [--quick]
// Prints µs per call (median and best round) and the ratios co_await/get and co_await/then
// (median and range of the per-round ratios). Run with one locality, "remote" calls go to
// locality 0 itself.
#include <courier/courier.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

int answer(int x) {
    return x + 1;
}

} // namespace

COURIER_PLAIN_ACTION(answer, coroutine_bench_answer_action);

namespace {

using clk = std::chrono::steady_clock;

/// The next value of a loop: a remote call.
struct remote_source {
    courier::id_type where;
    courier::future<int> operator()(int i) const {
        return courier::async<coroutine_bench_answer_action>(where, i);
    }
};

/// The next value of a loop: a promise that a posted task sets.
struct local_source {
    courier::future<int> operator()(int i) const {
        courier::promise<int> p;
        auto f = p.get_future();
        courier::post([p = std::move(p), i]() mutable { p.set_value(i + 1); });
        return f;
    }
};

template <class Source>
courier::future<long> await_loop(Source next, int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        sum += co_await next(i);
    }
    co_return sum;
}

template <class Source>
long co_await_case(Source next, int n) {
    return await_loop(next, n).get();
}

/// Each continuation makes the next call; the last sets `done`, after which nothing touches
/// the chain (the waiting caller destroys it).
template <class Source>
struct then_chain {
    then_chain(Source s, int calls) : next(s), n(calls) {}
    Source next;
    int n;
    long sum = 0;
    courier::promise<long> done;
    void step(int i) {
        next(i).then([this, i](courier::future<int> f) {
            sum += f.get();
            if (i + 1 < n) {
                step(i + 1);
            } else {
                done.set_value(sum);
            }
        });
    }
};

template <class Source>
long then_case(Source next, int n) {
    then_chain<Source> c(next, n);
    auto f = c.done.get_future();
    c.step(0);
    return f.get();
}

template <class Source>
long get_case(Source next, int n) {
    return courier::async([next, n] {
               long sum = 0;
               for (int i = 0; i < n; ++i) {
                   sum += next(i).get();
               }
               return sum;
           })
        .get();
}

struct summary {
    double median = 0, best = 0, worst = 0;
};
summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v.front(), v.back()};
}

int failures = 0;

/// Runs the three cases `rounds` times, interleaved, and prints their µs per call and ratios.
template <class Source>
void compare(char const* title, Source next, int n, int rounds) {
    using case_fn = long (*)(Source, int);
    constexpr std::array<case_fn, 3> cases = {&co_await_case<Source>, &then_case<Source>,
                                              &get_case<Source>};
    constexpr std::array<char const*, 3> names = {"co_await in a coroutine", ".then chaining",
                                                  ".get() in a Courier task"};
    long const expected = static_cast<long>(n) * (n + 1) / 2;
    for (auto c : cases) { // warm-up: stacks, pools, connections
        c(next, std::max(1, n / 10));
    }
    std::array<std::vector<double>, 3> us;
    std::vector<double> vs_get, vs_then;
    for (int r = 0; r < rounds; ++r) {
        std::array<double, 3> t{};
        for (int k = 0; k < 3; ++k) {
            int c = (k + r) % 3;
            auto t0 = clk::now();
            long sum = cases[static_cast<std::size_t>(c)](next, n);
            t[static_cast<std::size_t>(c)] =
                std::chrono::duration<double, std::micro>(clk::now() - t0).count() / n;
            if (sum != expected) {
                std::fprintf(stderr, "%s: %s summed %ld, expected %ld\n", title,
                             names[static_cast<std::size_t>(c)], sum, expected);
                ++failures;
            }
        }
        for (std::size_t c = 0; c < 3; ++c) {
            us[c].push_back(t[c]);
        }
        vs_get.push_back(t[0] / t[2]);
        vs_then.push_back(t[0] / t[1]);
    }
    std::printf("%s: %d sequential calls per case and round, %d rounds\n", title, n, rounds);
    std::printf("  %-28s %14s %14s\n", "case", "median µs/call", "best µs/call");
    for (std::size_t c = 0; c < 3; ++c) {
        auto s = summarize(us[c]);
        std::printf("  %-28s %14.3f %14.3f\n", names[c], s.median, s.best);
    }
    auto g = summarize(vs_get);
    auto t = summarize(vs_then);
    std::printf("  %-28s %14.2f   (rounds %.2f .. %.2f)\n", "co_await / .get(), paired", g.median,
                g.best, g.worst);
    std::printf("  %-28s %14.2f   (rounds %.2f .. %.2f)\n", "co_await / .then, paired", t.median,
                t.best, t.worst);
}

int option(int argc, char** argv, std::string_view name, int fallback) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=') {
            return std::atoi(argv[i] + name.size() + 1);
        }
    }
    return fallback;
}

bool flag(int argc, char** argv, std::string_view name) {
    return std::find(argv + 1, argv + argc, name) != argv + argc;
}

} // namespace

int courier_main(int argc, char** argv) {
    bool quick = flag(argc, argv, "--quick");
    int rounds = option(argc, argv, "--rounds", quick ? 3 : 9);
    int remote_calls = option(argc, argv, "--remote-calls", quick ? 2000 : 20000);
    int local_calls = option(argc, argv, "--local-calls", quick ? 20000 : 200000);
    auto all = courier::find_all_localities();
    std::printf("coroutine_bench: %zu localities, %zu workers on locality 0\n", all.size(),
                courier::get_os_thread_count());
    bool two = all.size() > 1;
    compare(two ? "remote (locality 0 -> 1)" : "remote (locality 0 -> itself)",
            remote_source{two ? all[1] : all[0]}, remote_calls, rounds);
    compare("local (set by a posted task)", local_source{}, local_calls, rounds);
    std::printf("%s\n", failures == 0 ? "all sums right" : "WRONG SUMS");
    courier::finalize();
    return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
