// SPDX-License-Identifier: BSL-1.0
// wait_coverage: what a transport's wait fd can miss (transport::wait_fd_coverage()), so that
// a thread sleeping on it knows how long it may sleep before it polls anyway. Its own header
// because the runtime's scheduler, which knows no transport, bounds its sleeps by it.
#pragma once

#include <cstdint>

namespace courier::parcelport {

/// Ordered from the most to the least complete: a transport over others reports the greatest
/// of its parts'.
enum class wait_coverage : std::uint8_t {
    complete,    ///< readable whenever progress() has work: a sleep needs no bound
    rare_misses, ///< misses only on faults (a lost datagram, a retransmitted segment): long bound
    partial,     ///< some arrivals never ring it (peers that cannot): short bound
};

} // namespace courier::parcelport
