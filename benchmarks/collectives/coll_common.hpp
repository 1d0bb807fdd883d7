// SPDX-License-Identifier: BSL-1.0
// What the collective benchmarks share: osu_allreduce / osu_allgather's method. Per size,
// `skip` warm-up calls, then `iterations` timed calls between barriers; each rank's mean
// latency per call, averaged over the ranks (as OSU prints), in µs. One line per case:
//   RESULT <impl> <op> <bytes> <ranks> <avg_us> <min_us> <max_us>
// <bytes>: all_reduce: the vector reduced (doubles, summed); all_gather: each rank's part.
// allreduce-elementwise: Courier's all_reduce with elementwise(std::plus<>{}) (reduce-scatter
// and all-gather from 4 KiB), against the same MPI_Allreduce as allreduce (whose sum is a
// function over whole vectors, as an HPX program's).
// Options of both programs: --sizes=8,65536 (bytes, the default) and
// --ops=allreduce,allreduce-elementwise,allgather (the default), to run (and profile) one case
// alone; --iterations=N timed calls per case
// (default 2000 up to 8 KiB, 300 above).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace coll {

/// The cases chosen on the command line.
struct selection {
    std::vector<std::size_t> sizes{8, 65536};
    std::string ops = "allreduce,allreduce-elementwise,allgather";
    int forced_iterations = 0; ///< --iterations (0: by size)
    /// The sizes to run `op` at: none unless --ops names it.
    std::vector<std::size_t> sizes_of(std::string_view op) const {
        for (std::size_t at = 0; at <= ops.size();) {
            std::size_t end = ops.find(',', at);
            if (end == std::string::npos) {
                end = ops.size();
            }
            if (std::string_view(ops).substr(at, end - at) == op) {
                return sizes;
            }
            at = end + 1;
        }
        return {};
    }
    int iterations(std::size_t bytes) const {
        if (forced_iterations > 0) {
            return forced_iterations;
        }
        return bytes <= 8192 ? 2000 : 300;
    }
};
inline selection select(int argc, char** argv) {
    selection s;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.starts_with("--sizes=")) {
            s.sizes.clear();
            for (char const* p = argv[i] + 8; *p != 0;) {
                char* end = nullptr;
                s.sizes.push_back(std::strtoull(p, &end, 10));
                if (end == p) {
                    std::fprintf(stderr, "bad --sizes: %s\n", argv[i]);
                    std::exit(2);
                }
                p = *end == ',' ? end + 1 : end;
            }
        } else if (a.starts_with("--ops=")) {
            s.ops = argv[i] + 6;
        } else if (a.starts_with("--iterations=")) {
            s.forced_iterations = std::atoi(argv[i] + 13);
            if (s.forced_iterations <= 0) {
                std::fprintf(stderr, "bad --iterations: %s\n", argv[i]);
                std::exit(2);
            }
        }
    }
    return s;
}
inline int skip(std::size_t bytes) {
    return bytes <= 8192 ? 200 : 30;
}
/// Prints the RESULT line from every rank's mean µs (gathered on rank 0).
inline void report(char const* impl, char const* op, std::size_t bytes,
                   std::vector<double> const& per_rank_us) {
    double sum = 0, lo = per_rank_us.front(), hi = per_rank_us.front();
    for (double v : per_rank_us) {
        sum += v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    std::printf("RESULT %s %s %zu %zu %.2f %.2f %.2f\n", impl, op, bytes, per_rank_us.size(),
                sum / double(per_rank_us.size()), lo, hi);
    std::fflush(stdout);
}

} // namespace coll
