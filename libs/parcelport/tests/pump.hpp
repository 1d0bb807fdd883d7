// SPDX-License-Identifier: BSL-1.0
// Test helper: progresses two transports until a condition holds.
#pragma once

#include <chrono>

namespace courier::parcelport::test {

/// Calls a.progress() and b.progress() until `done()` or until `limit` has passed; returns
/// whether `done()` held.
template <class A, class B, class Pred, class Rep, class Period>
bool pump_both(A& a, B& b, Pred&& done, std::chrono::duration<Rep, Period> limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        a.progress();
        b.progress();
        if (std::chrono::steady_clock::now() > until) {
            return false;
        }
    }
    return true;
}

} // namespace courier::parcelport::test
