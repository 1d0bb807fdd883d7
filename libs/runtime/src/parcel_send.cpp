// SPDX-License-Identifier: BSL-1.0
// Sending one parcel of the request/reply protocol (send_parcel: locally, into a transport's
// batch, or as a message with the handler its kind needs), and what a send that fails gives
// back (sent() for a call, counted_send_failed() for a counted send: its counts, its window
// share, a kept credit, the skip of an ordered number, the notice of a lost reply). The
// protocol's requests and replies: parcel_protocol.cpp; flat requests: flat_send.cpp.
#include "parcel_send.hpp"

#include "distributed.hpp"
#include "flow_control.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "scheduler.hpp"
#include "traffic.hpp"
#include "transport_watch.hpp"

#include <courier/serialization/output_archive.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace courier::detail {

void fail_for_failed_peer(completion& done, std::uint32_t dest) {
    if (done) {
        auto error = std::make_exception_ptr(
            network_error("courier: locality " + std::to_string(dest) + " has failed"));
        done(nullptr, std::move(error)); // made first: see sent()
    }
}

void sent(std::uint64_t rid, std::error_code const& ec) {
    locality_state& st = here();
    if (ec && rid != 0) {
        completion done;
        if (auto* slot = st.pending.claim(rid); slot != nullptr) {
            // Still pending (no reply came): the request never reached its destination. Not
            // counted as sent (shutdown would wait for its arrival for ever), and its share of
            // the destination's window back (the destination returns credit only for what
            // it received).
            done = std::move(slot->value.done);
            bool const control = slot->value.control.load(std::memory_order_relaxed);
            std::uint32_t const dest = slot->value.dest.load(std::memory_order_relaxed);
            std::int64_t const flow = std::exchange(slot->value.flow_bytes, 0);
            st.pending.release(slot);
            if (!control) {
                count_user_sent(st, -1);
            }
            if (flow != 0) {
                flow_release(st, dest, flow);
            }
        }
        if (done) {
            // The exception is made in a statement of its own: a temporary living on until
            // after done() would share its message (a reference-counted string in libstdc++)
            // with the waiter, and free it on this thread after the waiter read it.
            auto error = std::make_exception_ptr(
                network_error("courier: sending to a locality failed: " + ec.message()));
            done(nullptr, std::move(error));
        }
    }
    count_send_ended(st);
}

void counted_send_failed(send_undo const& undo) noexcept {
    locality_state& st = here();
    using kind = send_undo::kind;
    char const* what = "control parcel";
    switch (undo.what) {
    case kind::post:
        what = "post";
        count_user_sent(st, -1);
        if (undo.bytes != 0) {
            flow_release(st, undo.dest, static_cast<std::int64_t>(undo.bytes));
        }
        break;
    case kind::reply:
        if (undo.notices == 0) {
            what = "reply";
            if (!undo.control_request) {
                count_user_sent(st, -1);
            }
        } else {
            what = "notice of a lost reply";
        }
        break;
    case kind::credit:
        // Kept: it goes again at the next pass (a credit lost for good would shrink the
        // peer's window to this locality for good).
        flow_keep_credit(st, undo.dest, static_cast<std::int64_t>(undo.parcels),
                         static_cast<std::int64_t>(undo.bytes));
        return;
    case kind::control:
        break;
    }
    // A lost reply's caller waits for it: told so.
    bool const told = undo.what == kind::reply && send_reply_lost(undo);
    static logging::rate_limit limit;
    logging::error_limited(limit,
                           "a {} to locality {} could not be sent (the transport refused it for "
                           "good or lost its connection); {}",
                           what, undo.dest, told ? "its caller is told" : "it is lost");
}

bool send_reply_lost(send_undo const& undo) noexcept {
    locality_state& st = here();
    // A failed caller's calls to this locality failed with it; one that has left waits for
    // nothing.
    bool const gone = has_failed(st, undo.dest) ||
                      (undo.dest < st.live.departed.size() && st.live.departed[undo.dest].load());
    if (gone || undo.notices >= send_undo::max_notices) {
        if (!gone) {
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "the reply to a call from locality {} was lost, and so were "
                                   "{} notices of its loss: that call waits until this locality "
                                   "or the link to it is found failed",
                                   undo.dest, undo.notices);
        }
        return false;
    }
    try {
        serialization::message m;
        {
            serialization::output_archive ar(m);
            ar.save(static_cast<std::uint8_t>(reply_lost));
            ar.save(undo.request);
        }
        send_undo notice = undo;
        ++notice.notices; // lost too, it is sent again (up to max_notices)
        send_parcel(undo.dest, std::move(m), 0, nullptr, notice);
        return true;
    } catch (std::exception const& e) { // the runtime is stopping, or out of memory
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "the reply to a call from locality {} was lost, and the notice of "
                               "its loss could not be sent: {}",
                               undo.dest, e.what());
        return false;
    }
}

void send_ordered_skip(std::uint32_t dest, std::uint64_t seq) noexcept {
    try {
        serialization::message skip;
        {
            serialization::output_archive ar(skip);
            ar.save(static_cast<std::uint8_t>(ordered_skip));
            ar.save(seq);
        }
        send_parcel(dest, std::move(skip), 0, nullptr, send_undo{send_undo::kind::control, dest});
    } catch (std::exception const& e) {
        log(log_level::error,
            "ordered calls to locality {} are stuck: sequence number {} was refused and so was "
            "its skip: {}",
            dest, seq, e.what());
    }
}

void send_parcel(std::uint32_t dest, serialization::message&& m, std::uint64_t rid,
                 std::function<void(std::error_code const&)> on_sent, send_undo const& undo,
                 std::optional<std::uint64_t> ordered_seq) {
    locality_state& st = here();
    if (dest == st.rank) {
        // Local target: the same parcel path without the network (no copy: the message still
        // references the sender's arguments, kept alive by it).
        deliver(dest, std::move(m));
        if (on_sent) {
            on_sent({});
        }
        return;
    }
    if (!st.tp) {
        // Closing: the transport is gone (a handler its destructor ran, on a send it ended,
        // wanted to send a skip or a notice in its place).
        throw network_error("courier: the transport is closed");
    }
    parcel_sent(st, dest, m, true); // and the send started
    bool const worker = current_scheduler() != nullptr && detail::current_worker() != nullptr;
    // A post, a reply or a control parcel from a worker: its end is only counted (sent() has
    // nothing else to do for rid 0), by the transport's counted handler, once per batch where
    // it coalesces; if it fails, its tag says what to give back. Other parcels get a handler,
    // built here: without a caller's callback or an ordered number it captures at most two
    // words, which std::function stores inline; only those cost an allocation.
    bool const counted = rid == 0 && !on_sent && !ordered_seq && worker && undo.fits();
    parcelport::transport::sent_handler handler;
    if (rid == 0 && !on_sent && !counted && undo.fits()) {
        // A post, reply or control parcel not from a worker, or an ordered post: what a
        // counted send's tag would say, and the ordered number + 1 (0: none). Two words.
        handler = [tag = undo.tag(),
                   next = ordered_seq ? *ordered_seq + 1 : 0](std::error_code ec) {
            if (ec) {
                send_undo const u = send_undo::of(tag);
                counted_send_failed(u);
                if (next != 0) {
                    send_ordered_skip(u.dest, next - 1);
                }
            }
            sent(0, ec);
        };
    } else if (rid != 0 && !on_sent && !ordered_seq) {
        handler = [rid](std::error_code ec) { sent(rid, ec); };
    } else if (rid != 0 && !on_sent && *ordered_seq >> 40 == 0 && dest >> 24 == 0) {
        // An ordered call: its number and destination packed, two words (sent() fails it).
        handler = [rid, packed = *ordered_seq << 24 | dest](std::error_code ec) {
            if (ec) {
                send_ordered_skip(static_cast<std::uint32_t>(packed & 0xffffff), packed >> 24);
            }
            sent(rid, ec);
        };
    } else if (!counted) {
        // The rest (a caller's callback, numbers too large to pack): one allocation.
        handler = [rid, undo, ordered_seq, cb = std::move(on_sent)](std::error_code ec) {
            if (cb) {
                cb(ec);
            }
            if (ec) {
                if (rid == 0) {
                    counted_send_failed(undo);
                }
                if (ordered_seq) {
                    send_ordered_skip(undo.dest, *ordered_seq);
                }
            }
            sent(rid, ec);
        };
    }
    // A worker polls the network regularly (when idle and every few tasks), so parcels it
    // sends may be coalesced; another thread's go out at once. A parcel held in a batch must
    // not wait for this worker's task to end: another worker sends it at its next progress
    // pass, and if every other worker sleeps, one is woken for it (the burst_then_compute
    // test). With a single worker per locality a batch waits until the task yields or ends.
    try {
        transport_watch::call in_transport;
        if (worker) {
            bool const held = counted
                                  ? st.tp->send_counted(dest, std::move(m), undo.tag())
                                  : st.tp->send_coalesced(dest, std::move(m), std::move(handler));
            if (held) {
                current_scheduler()->notify_one();
            }
            return;
        }
        st.tp->send(dest, std::move(m), std::move(handler));
    } catch (...) {
        // Refused outright: the handler never runs, so the send is not in flight (shutdown
        // waits for the sends in flight to end).
        count_send_ended(st);
        throw;
    }
}

} // namespace courier::detail
