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

/// What a counted send (a post, a reply, a credit or another control parcel from a worker,
/// whose end is only counted: transport::send_counted) gives back if it fails, packed into the
/// tag the transport hands back then (transport::set_counted_failure_handler): a post its
/// termination count (count_user_sent) and its share of its destination's window, a reply its
/// termination count, a credit the parcels and bytes it returned (kept for the next pass).
struct send_undo {
    enum class kind : std::uint8_t {
        control, ///< nothing to give back (a control request's reply, a skip, a goodbye)
        reply,   ///< the program's: counted by count_user_sent
        post,    ///< the program's, with `bytes` of dest's window (flow_acquire)
        credit,  ///< a flow-control credit of `parcels` and `bytes`
    };
    kind what = kind::control;
    std::uint32_t dest = 0;
    std::uint64_t bytes = 0;
    std::uint64_t parcels = 0;

    // The tag: [63:62] kind, [61:38] dest, [37:0] a post's bytes, or a credit's parcels
    // [37:26] and bytes [25:0].
    static constexpr unsigned payload_bits = 38, dest_bits = 24, credit_byte_bits = 26;
    static constexpr std::uint64_t mask(unsigned bits) noexcept {
        return (std::uint64_t{1} << bits) - 1;
    }
    /// Whether it fits a tag (a post under 256 GiB, a credit under 4096 parcels and 64 MiB, to
    /// one of the first 2^24 localities); one that does not is sent with a handler of its own.
    bool fits() const noexcept {
        if (dest > mask(dest_bits)) {
            return false;
        }
        switch (what) {
        case kind::post:
            return bytes <= mask(payload_bits);
        case kind::credit:
            return parcels <= mask(payload_bits - credit_byte_bits) &&
                   bytes <= mask(credit_byte_bits);
        default:
            return true;
        }
    }
    std::uint64_t tag() const noexcept {
        std::uint64_t payload = what == kind::credit ? parcels << credit_byte_bits | bytes : bytes;
        return std::uint64_t{static_cast<std::uint8_t>(what)} << 62 |
               std::uint64_t{dest} << payload_bits | payload;
    }
    static send_undo of(std::uint64_t tag) noexcept {
        send_undo u;
        u.what = static_cast<kind>(tag >> 62);
        u.dest = static_cast<std::uint32_t>(tag >> payload_bits & mask(dest_bits));
        std::uint64_t const payload = tag & mask(payload_bits);
        if (u.what == kind::credit) {
            u.parcels = payload >> credit_byte_bits;
            u.bytes = payload & mask(credit_byte_bits);
        } else {
            u.bytes = payload;
        }
        return u;
    }
};

/// A counted send failed (its batch or message refused for good, its connection lost): gives
/// back what it counted, as sent() does for a call (shutdown must not wait for its arrival for
/// ever), keeps a credit for the next pass, and logs it (rate-limited). Any thread (the
/// transport's progress).
void counted_send_failed(send_undo const& undo) noexcept;

} // namespace courier::detail
