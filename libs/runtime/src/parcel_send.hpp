// SPDX-License-Identifier: BSL-1.0
// What the request/reply protocol's senders share (parcel_protocol.cpp: requests as messages,
// replies; flat_send.cpp: requests written straight into a transport's batch): the options a
// parcel is written with, the end of a request's send, and a call's failure to a failed peer.
#pragma once

#include "locality_state.hpp"

#include <courier/serialization.hpp>

#include <cstddef>
#include <cstdint>
#include <system_error>

namespace courier::detail {

/// The options a parcel for `dest` is written with: its rail's (locality_state::
/// local_send_options for a locality of this host in a job across hosts), else the
/// runtime's (parcel_options()). The archive copies them.
inline serialization::options send_options(locality_state const& st, std::uint32_t dest) noexcept {
    return dest < st.same_host_dest.size() && st.same_host_dest[dest] != 0 ? st.local_send_options
                                                                           : parcel_options();
}

/// Fails `done` (if any) as a call to `dest`, a locality that has failed, fails.
void fail_for_failed_peer(completion& done, std::uint32_t dest);

/// A request's send has ended (failed, if `ec`): a failed call still pending fails its
/// caller's future, leaves the termination count and gives its share of `dest`'s window back.
/// Any thread.
void sent(std::uint64_t rid, std::error_code const& ec);

/// What a counted send (a post, a reply or a control parcel from a worker, whose end is only
/// counted: transport::send_counted) gives back if it fails, packed into the tag the transport
/// hands back then (transport::set_counted_failure_handler): whether termination counted it
/// as the program's traffic (count_user_sent), and a post's share of its destination's window.
struct send_undo {
    bool user = false;      ///< counted by count_user_sent
    std::uint32_t dest = 0; ///< where it went
    std::uint64_t flow = 0; ///< its share of dest's window (flow_acquire), 0 if none

    static constexpr unsigned flow_bits = 38; // 256 GiB
    static constexpr unsigned dest_bits = 24; // 16 M localities
    /// Whether it fits a tag (a parcel under 256 GiB to one of the first 2^24 localities);
    /// one that does not is sent with a handler of its own instead.
    bool fits() const noexcept { return flow >> flow_bits == 0 && dest >> dest_bits == 0; }
    std::uint64_t tag() const noexcept {
        return std::uint64_t{user} << 63 | std::uint64_t{dest} << flow_bits | flow;
    }
    static send_undo of(std::uint64_t tag) noexcept {
        return {
            (tag >> 63) != 0,
            static_cast<std::uint32_t>(tag >> flow_bits & ((std::uint64_t{1} << dest_bits) - 1)),
            tag & ((std::uint64_t{1} << flow_bits) - 1)};
    }
};

/// A counted send failed (its batch or message refused for good, its connection lost): gives
/// back what it counted, as sent() does for a call, so that shutdown does not wait for its
/// arrival for ever, and logs it (rate-limited). Any thread (the transport's progress).
void counted_send_failed(send_undo const& undo) noexcept;

} // namespace courier::detail
