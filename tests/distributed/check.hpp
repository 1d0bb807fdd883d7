// SPDX-License-Identifier: BSL-1.0
// CHECK(cond) for the multi-locality test programs: a failed condition is printed with its
// place and counted in `failures` (each program returns non-zero when it is not 0: verdict()).
#pragma once

#include <cstdio>

namespace courier_test {
inline int failures = 0;

/// Prints "NAME: ok" or "NAME: FAILED" and returns the program's status (1 after a failed
/// CHECK); the caller finalizes.
inline int verdict(char const* name) {
    std::printf("%s: %s\n", name, failures == 0 ? "ok" : "FAILED");
    std::fflush(stdout);
    return failures == 0 ? 0 : 1;
}
} // namespace courier_test

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++courier_test::failures;                                                              \
        }                                                                                          \
    } while (0)
