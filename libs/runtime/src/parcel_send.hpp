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

} // namespace courier::detail
