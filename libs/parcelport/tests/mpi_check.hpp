// SPDX-License-Identifier: BSL-1.0
// Test helpers of the MPI transport's programs run under mpirun (no gtest across processes):
// CHECK counts failures in `failures` and names the line; pump() progresses one transport.
#pragma once

#include "pump.hpp"

#include <courier/parcelport/transport.hpp>

#include <chrono>
#include <cstdio>

namespace courier::parcelport::test {

inline int failures = 0;

/// Progresses `tp` until `until()` holds or `limit` has passed; returns whether it held.
template <class Until>
bool pump(transport& tp, Until&& until, std::chrono::seconds limit) {
    return pump_all(until, limit, tp);
}

} // namespace courier::parcelport::test

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++courier::parcelport::test::failures;                                                 \
        }                                                                                          \
    } while (0)
