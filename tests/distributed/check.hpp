// SPDX-License-Identifier: BSL-1.0
// CHECK(cond) for the multi-locality test programs: a failed condition is printed with its
// place and counted in `failures` (each program returns non-zero when it is not 0).
#pragma once

#include <cstdio>

namespace courier_test {
inline int failures = 0;
} // namespace courier_test

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++courier_test::failures;                                                              \
        }                                                                                          \
    } while (0)
