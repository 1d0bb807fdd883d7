// SPDX-License-Identifier: BSL-1.0
// Requests of flat arguments written straight into a transport's batch (send_post_flat,
// send_call_flat): what send_request does for the same request, less the message. The
// request/reply protocol's other senders: parcel_protocol.cpp.
#include "distributed.hpp"
#include "flow_control.hpp"
#include "locality_state.hpp"
#include "parcel_send.hpp"
#include "scheduler.hpp"
#include "trace.hpp"
#include "traffic.hpp"
#include "transport_watch.hpp"

#include <courier/runtime/actions.hpp>

#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace courier::detail {

namespace {
/// send_post_flat (Call false: `complete` null) and send_call_flat: two instantiations, so that
/// a post pays nothing for a call's slot and sent handler (~45 instructions per 8 B post).
template <bool Call>
[[gnu::always_inline]] inline bool send_flat_as(std::uint32_t dest, std::uint64_t action_id,
                                                flat_arguments const& args,
                                                reply_handler* complete) {
    locality_state& st = here();
    worker* const self = current_worker();
    // What send_request would do with the same request, less the message: the checks it makes
    // (any it would fail, it fails itself), flow control, a call's pending slot, the counts,
    // then the stream goes into the batch the transport holds for `dest`, or, to a destination
    // it holds nothing for, leaves at once as a batch of its own (transport::send_stream, which
    // decides under the batch's lock: a batch's post, not a message's whole send path). One
    // too large for a batch pays only a few looks more.
    // (A worker's thread has a scheduler, current_scheduler() at least the worker's: the
    // runtime runs, as runtime_running() would ask.)
    if (self == nullptr || dest >= st.size || dest == st.rank || st.tp == nullptr ||
        trace::active() != nullptr || is_control(action_id) || has_failed(st, dest)) {
        return false;
    }
    serialization::stream_threshold const t =
        serialization::stream_threshold_of(send_options(st, dest));
    std::uint64_t rid = 0; // a post's; a call's is its pending slot's id, taken below
    auto const head = [action_id, &rid](auto& ar) {
        ar.save(static_cast<std::uint8_t>(request));
        ar.save(action_id);
        ar.save(rid);
    };
    serialization::flat_sizer sizer(t.threshold);
    head(sizer);
    args.size(args.args, sizer);
    std::size_t const n = serialization::message_header_size + sizer.size();
    if (!sizer.flat()) {
        return false;
    }
    // takes_streams()'s answer, kept per destination (transport::stream_limit).
    if (dest >= st.stream_limits.size() || n > st.stream_limits[dest]) {
        return false;
    }
    // The window's room now, without waiting: the arguments are read again below, under the
    // batch's lock, so nothing may suspend this thread between the two reads (another of its
    // tasks could change what the caller passed, as a global or through a reference). A
    // request that would wait goes as a message, written before it waits (send_request).
    auto const bytes = static_cast<std::int64_t>(n);
    // A post's counted end gives back, if its send fails, its termination count and its
    // window share (a call's, its sent handler: sent()).
    if (!send_undo::post_fits(dest, n)) {
        return false;
    }
    // The common case inline (a small parcel that fits as the window stands), else the rules.
    if (!flow_take_fitting(st.flow, dest, bytes) && !flow_try_acquire(st, dest, bytes)) {
        return false;
    }
    // A call's slot, published before its request can leave (its reply may come at once).
    // From here on the request is taken: a failure ends it as send_request's would.
    if constexpr (Call) {
        locality_state::pending_table::slot* slot = nullptr;
        try {
            slot = st.pending.acquire();
        } catch (...) {
            flow_release(st, dest, bytes);
            throw;
        }
        rid = slot->id();
        slot->value.done = std::move(*complete);
        slot->value.control.store(false, std::memory_order_relaxed);
        slot->value.dest.store(dest, std::memory_order_relaxed);
        slot->value.flow_bytes = bytes;
        st.pending.publish(slot);
        if (has_failed(st, dest)) {
            // The peer failed after the first check and peer_failed() may have scanned the
            // table before this request was in it: fail it here (unless that scan took it).
            flow_release(st, dest, bytes);
            completion done = take_pending(rid);
            fail_for_failed_peer(done, dest);
            return true;
        }
    }
    // Counted, and its send started (a post's end is counted with its batch's): into this
    // worker's own counters when it is one of st's.
    if (traffic_counters* own = own_counters_of(self, st)) {
        flat_request_sent(*own, n);
    } else {
        flat_request_sent(st, n);
    }
    // A request the transport did not take leaves nothing counted, pending or in the window
    // (see send_request_in); a call's reply handler is returned.
    auto const untake = [&] {
        count_send_ended(st);
        count_user_sent(st, -1);
        flow_release(st, dest, bytes);
        if constexpr (Call) {
            return take_pending(rid);
        } else {
            return completion{};
        }
    };
    struct stream {
        decltype(head) const& write_head;
        flat_arguments const& args;
        serialization::stream_threshold t;
    } const parcel{head, args, t};
    parcelport::transport::stream_writer const write = [](void const* p, std::byte* at) {
        auto const& s = *static_cast<stream const*>(p);
        serialization::write_stream_header(at, s.t.recorded);
        serialization::flat_writer w(at + serialization::message_header_size, s.t.threshold);
        s.write_head(w);
        s.args.write(s.args.args, w);
    };
    // A call's send ends in sent(): a failed one fails its future (a post's is only counted).
    [[maybe_unused]] std::conditional_t<Call, parcelport::transport::sent_handler, char> on_sent{};
    parcelport::transport::sent_handler* handler = nullptr;
    if constexpr (Call) {
        on_sent = [rid](std::error_code ec) { sent(rid, ec); };
        handler = &on_sent;
    }
    parcelport::transport::stream_sent taken{};
    try {
        transport_watch::call in_transport;
        taken = st.tp->send_stream(dest, n, write, &parcel, handler, send_undo::post_tag(dest, n));
    } catch (...) {
        untake();
        throw;
    }
    switch (taken) {
    case parcelport::transport::stream_sent::held:
        current_scheduler()->notify_one(); // as send_parcel does for a parcel it holds
        return true;
    case parcelport::transport::stream_sent::posted:
        return true;
    case parcelport::transport::stream_sent::refused:
        break;
    }
    // Not taken after all (a transport that refused within its stream_limit(), which none of
    // today's does: kept for one that may): the caller
    // sends it as a message (send_request), a call with its reply handler back.
    if constexpr (Call) {
        *complete = untake();
    } else {
        untake();
    }
    return false;
}
} // namespace

bool send_post_flat(std::uint32_t dest, std::uint64_t action_id, flat_arguments const& args) {
    return send_flat_as<false>(dest, action_id, args, nullptr);
}

bool send_call_flat(std::uint32_t dest, std::uint64_t action_id, flat_arguments const& args,
                    reply_handler& complete) {
    return send_flat_as<true>(dest, action_id, args, &complete);
}

} // namespace courier::detail
