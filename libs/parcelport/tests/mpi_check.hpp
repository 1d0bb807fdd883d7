// SPDX-License-Identifier: BSL-1.0
// Test helpers of the MPI transport's programs run under mpirun (no gtest across processes):
// CHECK counts failures in `failures` and names the line; pump() progresses one transport.
#pragma once

#include "pump.hpp"

#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace courier::parcelport::test {

inline int failures = 0;

/// Progresses `tp` until `until()` holds or `limit` has passed; returns whether it held.
template <class Until>
bool pump(transport& tp, Until&& until, std::chrono::seconds limit) {
    return pump_all(until, limit, tp);
}

/// Gives `tp` its peers, the two ranks of `mpirun -np 2`: this rank, or -1 on any other count
/// (said on stderr, naming `program`; the caller exits with 2).
inline int connect_two_ranks(transport& tp, char const* program) {
    auto addresses = mpi_allgather(tp.address());
    if (addresses.size() != 2) {
        std::fprintf(stderr, "%s runs on 2 ranks (mpirun -np 2)\n", program);
        return -1;
    }
    auto const rank = static_cast<std::uint32_t>(mpi_world_info().rank);
    tp.set_peers(addresses, rank);
    return static_cast<int>(rank);
}

} // namespace courier::parcelport::test

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++courier::parcelport::test::failures;                                                 \
        }                                                                                          \
    } while (0)
