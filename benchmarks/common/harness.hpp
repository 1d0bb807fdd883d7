// SPDX-License-Identifier: BSL-1.0
// A small timing harness: every case runs in repetitions interleaved with the other cases of
// its group (so drift hits all alike), and reports the median and the range of ns per op.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace courier::bench {

struct result {
    std::string name;
    double median_ns = 0, min_ns = 0, max_ns = 0;
    std::size_t bytes = 0;
};

/// The median of `v` (the upper one of an even count).
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class T>
inline void do_not_optimize(T const& v) {
    asm volatile("" : : "r,m"(v) : "memory");
}

struct timed_case {
    std::string name;
    std::function<void()> op;
    std::size_t bytes = 0;
};

/// Runs each case `reps` times, interleaved; each repetition runs the op for about
/// `rep_seconds`. Returns one result per case.
inline std::vector<result> run_group(std::vector<timed_case> const& cases, int reps,
                                     double rep_seconds) {
    using clock = std::chrono::steady_clock;
    std::vector<std::vector<double>> samples(cases.size());
    std::vector<std::size_t> iters(cases.size(), 1);
    // Calibrate: how many iterations fill rep_seconds.
    for (std::size_t i = 0; i < cases.size(); ++i) {
        for (;;) {
            auto t0 = clock::now();
            for (std::size_t k = 0; k < iters[i]; ++k) {
                cases[i].op();
            }
            double s = std::chrono::duration<double>(clock::now() - t0).count();
            if (s > rep_seconds / 4 || iters[i] > (std::size_t{1} << 30)) {
                iters[i] = std::max<std::size_t>(
                    1, static_cast<std::size_t>(double(iters[i]) * rep_seconds / s));
                break;
            }
            iters[i] *= 4;
        }
    }
    for (int r = 0; r < reps; ++r) {
        for (std::size_t i = 0; i < cases.size(); ++i) {
            auto t0 = clock::now();
            for (std::size_t k = 0; k < iters[i]; ++k) {
                cases[i].op();
            }
            double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
            samples[i].push_back(ns / double(iters[i]));
        }
    }
    std::vector<result> out;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        auto s = samples[i];
        std::sort(s.begin(), s.end());
        out.push_back({cases[i].name, s[s.size() / 2], s.front(), s.back(), cases[i].bytes});
    }
    return out;
}

} // namespace courier::bench
