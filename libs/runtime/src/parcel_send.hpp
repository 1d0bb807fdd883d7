// SPDX-License-Identifier: BSL-1.0
// What the request/reply protocol's senders share (parcel_protocol.cpp: requests as messages,
// replies; flat_send.cpp: requests written straight into a transport's batch): the options a
// parcel is written with, the end of a request's send, and a call's failure to a failed peer.
#pragma once

#include "distributed.hpp"
#include "locality_state.hpp"

#include <courier/serialization.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
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
/// termination count and a notice of its loss to the caller waiting for it, a credit the
/// parcels and bytes it returned (kept for the next pass).
struct send_undo {
    enum class kind : std::uint8_t {
        control, ///< nothing to give back (a skip, a goodbye)
        reply,   ///< a reply (the program's counted by count_user_sent), or a notice of its loss
        post,    ///< the program's, with `bytes` of dest's window (flow_acquire)
        credit,  ///< a flow-control credit of `parcels` and `bytes`
    };
    kind what = kind::control;
    std::uint32_t dest = 0;
    std::uint64_t bytes = 0;
    std::uint64_t parcels = 0;
    /// A reply's: the request it answers (short_request_id), whether that was a control
    /// request (its reply is not counted), and how many notices of the reply's loss went
    /// before this send (0: this is the reply; 1 to max_notices: the notice, resent).
    std::uint64_t request = 0;
    bool control_request = false;
    std::uint8_t notices = 0;

    // The tag: [63:62] kind, [61:38] dest, [37:0] a post's bytes, a credit's parcels [37:26]
    // and bytes [25:0], or a reply's control flag [37], notices [36:35] and request [34:0].
    static constexpr unsigned payload_bits = 38, dest_bits = 24, credit_byte_bits = 26;
    static constexpr unsigned request_bits = 35, index_bits = 20;
    static constexpr std::uint8_t max_notices = 3;
    static constexpr std::uint64_t mask(unsigned bits) noexcept {
        return (std::uint64_t{1} << bits) - 1;
    }
    static_assert(locality_state::pending_table::capacity <= std::uint64_t{1} << index_bits);
    /// Request id `rid` in request_bits: its slot's index and the low bits of its generation.
    /// A request waiting for its reply keeps its slot, so a short id finds it (the generation
    /// bits tell it from a request that had the slot after it: see handle_reply_lost).
    static std::uint64_t short_request_id(std::uint64_t rid) noexcept {
        return (rid >> 32 & mask(request_bits - index_bits)) << index_bits |
               (rid & mask(index_bits));
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
        case kind::reply:
            return request <= mask(request_bits) && notices <= max_notices;
        default:
            return true;
        }
    }
    std::uint64_t tag() const noexcept {
        std::uint64_t payload = bytes;
        if (what == kind::credit) {
            payload = parcels << credit_byte_bits | bytes;
        } else if (what == kind::reply) {
            payload = std::uint64_t{control_request} << 37 | std::uint64_t{notices} << 35 | request;
        }
        return std::uint64_t{static_cast<std::uint8_t>(what)} << 62 |
               std::uint64_t{dest} << payload_bits | payload;
    }
    /// tag() of a post of `bytes` to `dest` (fits() checked), without the struct: a post's
    /// send builds its tag on every call (~25 instructions fewer than constructing one).
    static std::uint64_t post_tag(std::uint32_t dest, std::uint64_t bytes) noexcept {
        return std::uint64_t{static_cast<std::uint8_t>(kind::post)} << 62 |
               std::uint64_t{dest} << payload_bits | bytes;
    }
    /// fits() of that post.
    static bool post_fits(std::uint32_t dest, std::uint64_t bytes) noexcept {
        return dest <= mask(dest_bits) && bytes <= mask(payload_bits);
    }
    static send_undo of(std::uint64_t tag) noexcept {
        send_undo u;
        u.what = static_cast<kind>(tag >> 62);
        u.dest = static_cast<std::uint32_t>(tag >> payload_bits & mask(dest_bits));
        std::uint64_t const payload = tag & mask(payload_bits);
        if (u.what == kind::credit) {
            u.parcels = payload >> credit_byte_bits;
            u.bytes = payload & mask(credit_byte_bits);
        } else if (u.what == kind::reply) {
            u.control_request = (payload >> 37) != 0;
            u.notices = static_cast<std::uint8_t>(payload >> 35 & 3);
            u.request = payload & mask(request_bits);
        } else {
            u.bytes = payload;
        }
        return u;
    }
    /// What the reply to request context `rid` (from `source`; `control`: a control request's)
    /// gives back if its send fails.
    static send_undo reply_to(std::uint32_t source, std::uint64_t rid, bool control) noexcept {
        send_undo u{kind::reply, source};
        u.request = short_request_id(rid);
        u.control_request = control;
        return u;
    }
};

/// A counted send failed (its batch or message refused for good, its connection lost): gives
/// back what it counted, as sent() does for a call (shutdown must not wait for its arrival for
/// ever), keeps a credit for the next pass, tells the caller of a lost reply that it is lost
/// (send_reply_lost), and logs it (rate-limited). Any thread (the transport's progress).
void counted_send_failed(send_undo const& undo) noexcept;

/// Sends `m` to `dest`: a request `rid` (0: a post, or a reply or control parcel), ending in
/// `on_sent` if given, then in sent(); a send of none of these is only counted, and if it fails
/// gives back what `undo` says (counted_send_failed). An ordered request (`ordered_seq`, its
/// number) whose send fails once taken sends the skip of its number in its place. Refused
/// outright, it throws (nothing of it counted as in flight).
void send_parcel(std::uint32_t dest, serialization::message&& m, std::uint64_t rid,
                 std::function<void(std::error_code const&)> on_sent, send_undo const& undo,
                 std::optional<std::uint64_t> ordered_seq = std::nullopt);

/// Sends the skip of ordered request `seq` to `dest` (one that will never arrive), so that
/// the requests after it run; logs it if even that is refused.
void send_ordered_skip(std::uint32_t dest, std::uint64_t seq) noexcept;

/// Tells the caller waiting for the reply `undo` describes that the reply is lost (a
/// reply_lost parcel; its future fails with network_error there), unless that caller's
/// locality has failed (its calls fail anyway) or left, or max_notices notices were lost
/// already. Returns whether the notice went.
bool send_reply_lost(send_undo const& undo) noexcept;

} // namespace courier::detail
