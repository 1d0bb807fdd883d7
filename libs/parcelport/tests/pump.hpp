// SPDX-License-Identifier: BSL-1.0
// Test helper: progresses two transports until a condition holds.
#pragma once

#include <chrono>

namespace courier::parcelport::test {

/// Calls progress() on each of `eps` until `done()` or until `limit` has passed; returns
/// whether `done()` held.
template <class Pred, class Rep, class Period, class... Eps>
bool pump_all(Pred&& done, std::chrono::duration<Rep, Period> limit, Eps&... eps) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        (eps.progress(), ...);
        if (std::chrono::steady_clock::now() > until) {
            return false;
        }
    }
    return true;
}

/// pump_all() of two endpoints.
template <class A, class B, class Pred, class Rep, class Period>
bool pump_both(A& a, B& b, Pred&& done, std::chrono::duration<Rep, Period> limit) {
    return pump_all(done, limit, a, b);
}

} // namespace courier::parcelport::test
