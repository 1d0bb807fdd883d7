// SPDX-License-Identifier: BSL-1.0
// Which liveness ticks count toward a peer's silence (liveness.cpp).
//
// A peer is declared failed after 8 ticks in which nothing arrived from it. But nothing can
// arrive while this locality does not receive: when another thread has been inside one
// progress pass since before the tick (libfabric's tcp provider serving RMA reads of a 2 GiB
// argument sends for seconds within one fi_cq_read on two busy cores: its receive loop serves
// read requests while the socket has more, and the reader keeps posting them), the peer's
// heartbeats wait unread, and counting those ticks declared live peers failed. Such a deaf
// tick is not counted, up to `allowance` in a row: a pass that never ends (a transport wedged
// for good) delays detection by that many ticks, no more.
#pragma once

#include <cstdint>

namespace courier::detail {

class silence_clock {
public:
    explicit silence_clock(std::uint32_t allowance) noexcept : allowance_(allowance) {}

    /// A tick has passed; `deaf`: this locality was not receiving during it. Returns whether
    /// the tick counts toward silence.
    bool tick(bool deaf) noexcept {
        if (!deaf) {
            deaf_in_a_row_ = 0;
            return true;
        }
        if (deaf_in_a_row_ < allowance_) {
            ++deaf_in_a_row_;
            ++uncounted_;
            return false;
        }
        return true;
    }

    /// Deaf ticks not counted so far.
    std::uint64_t uncounted() const noexcept { return uncounted_; }

private:
    std::uint32_t allowance_;
    std::uint32_t deaf_in_a_row_ = 0;
    std::uint64_t uncounted_ = 0;
};

} // namespace courier::detail
