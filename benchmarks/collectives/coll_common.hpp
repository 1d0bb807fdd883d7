// SPDX-License-Identifier: BSL-1.0
// What the collective benchmarks share: osu_allreduce / osu_allgather's method. Per size,
// `skip` warm-up calls, then `iterations` timed calls between barriers; each rank's mean
// latency per call, averaged over the ranks (as OSU prints), in µs. One line per case:
//   RESULT <impl> <op> <bytes> <ranks> <avg_us> <min_us> <max_us>
// <bytes>: all_reduce: the vector reduced (doubles, summed); all_gather: each rank's part.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace coll {

inline std::vector<std::size_t> sizes() {
    return {8, 65536};
}
inline int iterations(std::size_t bytes) {
    return bytes <= 8192 ? 2000 : 300;
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
