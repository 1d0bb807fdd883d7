// SPDX-License-Identifier: BSL-1.0
// What the three OSU-style programs (Courier, native libfabric, MPI) share: the sizes, the
// iteration counts and the output format, so that their figures compare one to one.
//
// Methodology (OSU micro-benchmarks 5.x):
//   latency  ping-pong of `size` bytes each way; one-way latency = round trip / 2 (us)
//   bw       the sender keeps a window of 64 messages in flight, waits for all of them and for a
//            short acknowledgement; bandwidth = size * window * loops / time (MB/s = 1e6 B/s)
//            (--window=N: N messages a window instead; not osu_fabric, whose window is fixed)
//   bibw     both sides run the bw window towards each other at once; the sum of both directions
//   mr       (osu_mbw_mr) every sender of N pairs keeps windows of 64 one-way messages going to
//            its partner, each window closed by a short acknowledgement; messages per second
//            over all pairs = N * window * loops / time (loops: 4 * bw's)
// Every test runs `skip` untimed warm-up iterations first.
//
// Output: one line per measurement,
//   RESULT <implementation> <provider> <threads> <test> <size> <value>
// which benchmarks/osu/run.sh collects into a CSV and plot.py draws.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace osu {

/// OSU's window: the messages a bw, bibw or mr window sends before its acknowledgement.
inline constexpr int default_window = 64;
/// This run's window (--window=N; the same in every process of the run, which all parse the
/// same arguments). A window of w messages takes w times a message's cost plus the round trip
/// that closes it: two windows tell the two apart (benchmarks/RESULTS.md, "Message rate").
inline int window = default_window;

struct plan {
    std::vector<std::size_t> sizes;
    std::vector<std::string> tests{"latency", "bw", "bibw"};
    bool quick = false;
    int scale = 1; ///< --scale=N multiplies the iteration counts (for profiling)

    int latency_iterations(std::size_t size) const {
        if (quick) {
            return 20;
        }
        return (size <= 8192 ? 1000 : 100) * scale;
    }
    int latency_skip(std::size_t size) const { return quick ? 2 : size <= 8192 ? 100 : 10; }
    int bw_loops(std::size_t size) const {
        if (quick) {
            return 2;
        }
        return (size <= 8192 ? 20 : 10) * scale;
    }
    int bw_skip(std::size_t) const { return quick ? 1 : 2; }
    std::size_t max_size() const { return sizes.empty() ? 0 : sizes.back(); }
};

/// Parses --quick, --tests=latency,bw,bibw, --max-size=N, --min-size=N, --window=N, --sizes=N,N,...
/// (an explicit list instead of the powers of two). Unknown arguments are left to the caller
/// (returned).
inline plan parse(int argc, char** argv, std::vector<std::string>* rest = nullptr) {
    plan p;
    std::size_t lo = 1, hi = std::size_t{4} << 20;
    std::vector<std::size_t> listed;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--quick") {
            p.quick = true;
        } else if (a.rfind("--tests=", 0) == 0) {
            p.tests.clear();
            std::string s(a.substr(8));
            std::size_t start = 0;
            while (start <= s.size()) {
                auto comma = s.find(',', start);
                if (comma == std::string::npos) {
                    comma = s.size();
                }
                if (comma > start) {
                    p.tests.push_back(s.substr(start, comma - start));
                }
                start = comma + 1;
            }
        } else if (a.rfind("--window=", 0) == 0) {
            window = std::atoi(argv[i] + 9);
            if (window < 1 || window > 4096) {
                std::fprintf(stderr, "%s: --window: expected 1 to 4096 messages\n", argv[0]);
                std::exit(2);
            }
        } else if (a.rfind("--scale=", 0) == 0) {
            p.scale = std::max(1, std::atoi(argv[i] + 8));
        } else if (a.rfind("--max-size=", 0) == 0) {
            hi = std::strtoull(argv[i] + 11, nullptr, 10);
        } else if (a.rfind("--min-size=", 0) == 0) {
            lo = std::strtoull(argv[i] + 11, nullptr, 10);
        } else if (a.rfind("--sizes=", 0) == 0) {
            for (char* at = argv[i] + 8; *at != '\0';) {
                char* end = nullptr;
                auto n = std::strtoull(at, &end, 10);
                if (end == at || n == 0 || (*end != ',' && *end != '\0')) {
                    std::fprintf(stderr, "%s: --sizes: expected sizes in bytes, e.g. 4096,6000\n",
                                 argv[0]);
                    std::exit(2);
                }
                listed.push_back(n);
                at = *end == ',' ? end + 1 : end;
            }
        } else if (rest != nullptr) {
            rest->emplace_back(a);
        }
    }
    if (!listed.empty()) {
        std::sort(listed.begin(), listed.end());
        p.sizes = listed;
        return p;
    }
    for (std::size_t s = 1; s <= hi; s *= 2) {
        if (s >= lo) {
            p.sizes.push_back(s);
        }
        if (p.quick && s >= 1024) {
            s *= 16; // a few sizes only: 1 B ... 4 MiB in big steps
        }
    }
    return p;
}

inline void report(char const* impl, std::string const& provider, int threads,
                   std::string const& test, std::size_t size, double value) {
    std::printf("RESULT %s %s %d %s %zu %.3f\n", impl, provider.c_str(), threads, test.c_str(),
                size, value);
    std::fflush(stdout);
}

} // namespace osu
