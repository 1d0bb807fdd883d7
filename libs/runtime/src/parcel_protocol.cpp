// SPDX-License-Identifier: BSL-1.0
// The request/reply protocol, sending half: a remote call becomes a request parcel, runs as a
// task on its destination (handle_request) and comes back as a reply parcel that completes the
// caller's future. Receiving: parcel_receive.cpp. Layout of the parcels: locality_state.hpp.
#include "distributed.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "parcel_send.hpp"
#include "scheduler.hpp"
#include "traffic.hpp"

#include <courier/runtime/init.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <utility>

namespace courier::detail {

namespace {

/// The runtime's parcel options (parcel_options()): atomics, as init() may run again in a
/// process whose threads of an earlier runtime still read them.
std::atomic<std::size_t> g_parcel_threshold{4096};
std::atomic<bool> g_parcel_zero_copy{true};
std::atomic<std::size_t> g_parcel_deep_array_threshold{0};

/// The messages a thread builds its parcels in, kept from one parcel to the next: a parcel
/// that leaves in a batch or as an eager copy (the small ones) leaves the message with its
/// caller, who would otherwise give its buffer back to the pool and destroy it, and the next
/// parcel would take a buffer again (~200 instructions per post). Two per thread: one for
/// send_request, one for the replies of handle_request (held while the action runs, so that
/// the action's own calls still find the first). A parcel holds its spare while it is built
/// and sent, also while it waits for flow control or its action suspends. A call that finds
/// its thread's spare taken (by a call that has not ended, or that ended on another OS thread
/// and left it there) makes one; a call that ends on a thread that has one frees its own. So
/// each thread has one whenever none of its calls is in the middle of a parcel, and the extra
/// ones cost a small-object block each. A transport that keeps a message moves it away,
/// leaving the spare empty.
struct spare_message final : courier::detail::pooled {
    serialization::message m;
};
using spare_slot = std::unique_ptr<spare_message>;

thread_local spare_slot tl_request_spare;
thread_local spare_slot tl_reply_spare;

// A Courier thread may resume on another OS thread, so the address of a thread_local must not
// be kept across a suspension (flow control's wait, an action's): opaque accessors, which the
// empty asm also keeps from being treated as pure (and two calls merged into one).
[[gnu::noinline]] spare_slot& request_spare() noexcept {
    asm volatile("" ::: "memory");
    return tl_request_spare;
}
[[gnu::noinline]] spare_slot& reply_spare() noexcept {
    asm volatile("" ::: "memory");
    return tl_reply_spare;
}

/// The largest buffer a spare keeps (the message buffer pool's largest class): a parcel that
/// grew its message beyond it gives the buffer back, so that no thread holds more.
constexpr std::size_t spare_buffer_max = 64 * 1024;

/// One parcel's use of a spare message, given back (cleared: no reference it held stays
/// alive) to the thread the parcel's call ends on, if that thread has none.
class spare_lease {
public:
    explicit spare_lease(spare_slot& (*slot)() noexcept) noexcept : slot_(slot) {
        held_ = std::move(slot_());
        if (held_ == nullptr) {
            try {
                held_ = std::make_unique<spare_message>();
            } catch (std::bad_alloc const&) { // with() makes do with a message of its own
            }
        }
    }
    ~spare_lease() {
        if (held_ == nullptr || held_->m.capacity() > spare_buffer_max) {
            return; // freed with its buffer
        }
        held_->m.clear();
        if (spare_slot& s = slot_(); s == nullptr) {
            s = std::move(held_);
        }
    }
    spare_lease(spare_lease const&) = delete;
    spare_lease& operator=(spare_lease const&) = delete;
    /// Calls `f` with the spare message, or, when there was no memory for one, with a message
    /// of its own (made only then: an empty message's construction and destruction cost ~100
    /// instructions).
    template <class F>
    void with(F&& f) {
        if (held_ != nullptr) {
            f(held_->m);
            return;
        }
        serialization::message own;
        f(own);
    }

private:
    spare_slot& (*slot_)() noexcept;
    std::unique_ptr<spare_message> held_;
};

/// The head of every reply: its kind, the request it answers and whether a result follows (or
/// the exception's type name and message).
void write_reply_head(serialization::output_archive& ar, request_context const& r, bool ok) {
    ar.save(static_cast<std::uint8_t>(reply));
    ar.save(r.rid);
    ar.save(static_cast<std::uint8_t>(r.control));
    ar.save(static_cast<std::uint8_t>(ok ? status_ok : status_failed));
}

/// Sends a written reply; termination counts it unless it answers a control request (and
/// takes it off again if the send is refused, outright here or later: counted_send_failed).
/// A reply refused tells its caller that it is lost (send_reply_lost): a call must not wait
/// for ever for a reply that will never come from a locality that is alive.
void send_reply(request_context const& r, serialization::message&& m) {
    if (!r.control) {
        count_user_sent(here(), 1);
    }
    send_undo const undo = send_undo::reply_to(r.source, r.rid, r.control);
    try {
        send_parcel(r.source, std::move(m), 0, nullptr, undo);
    } catch (...) {
        if (!r.control) {
            count_user_sent(here(), -1);
        }
        send_reply_lost(undo); // refused outright: its caller would wait for it for ever
        throw;
    }
}

/// Answers `r` with an error (a posted action's failure is logged here instead).
void send_failure_reply(request_context const& r, std::string const& type,
                        std::string const& what) {
    if (r.rid == 0) {
        report_posted_action_failure(r.name, r.source, type, what);
        return;
    }
    serialization::message m;
    {
        serialization::output_archive ar(m, send_options(here(), r.source));
        write_reply_head(ar, r, false);
        ar.save(type);
        ar.save(what);
    }
    send_reply(r, std::move(m));
}

/// Answers `r` with the exception `error`: its type name and message.
void send_failure_reply(request_context const& r, std::exception_ptr error) {
    try {
        std::rethrow_exception(std::move(error));
    } catch (std::exception const& e) {
        send_failure_reply(r, serialization::detail::demangle(typeid(e).name()), e.what());
    } catch (...) {
        send_failure_reply(r, "unknown", "an exception of unknown type");
    }
}

/// The request whose action runs on this thread, for an action that answers later. Read by the
/// action before it can suspend (a suspended Courier thread may resume on another OS thread).
thread_local request_context* t_request = nullptr;

/// Offers `r` to the action about to run on this thread (current_request), for its duration.
class request_scope {
public:
    explicit request_scope(request_context& r) noexcept { t_request = &r; }
    ~request_scope() { t_request = nullptr; }
    request_scope(request_scope const&) = delete;
    request_scope& operator=(request_scope const&) = delete;
};

/// Runs a called action (`invoke(output_archive*)`), writing its result into `result` (empty),
/// and answers; on an exception, answers with it.
template <class Invoke>
void run_answering(serialization::message& result, request_context& ctx, Invoke&& invoke) {
    try {
        serialization::output_archive ar(result, send_options(here(), ctx.source));
        write_reply_head(ar, ctx, true);
        request_scope scope(ctx);
        invoke(&ar);
    } catch (...) {
        send_failure_reply(ctx, std::current_exception());
        return;
    }
    if (ctx.deferred) {
        return;
    }
    send_reply(ctx, std::move(result));
}

} // namespace

namespace {
/// A request's head where it lies in its stream: message header, kind, action id, request id.
constexpr std::size_t request_head_bytes =
    serialization::message_header_size + 1 + 2 * sizeof(std::uint64_t);
struct request_head {
    std::uint64_t action_id;
    std::uint64_t rid;
};
/// The head of `stream` if it is a request whose head handle_request reads in full.
std::optional<request_head> request_head_of(std::span<std::byte const> stream) noexcept {
    if (stream.size() < request_head_bytes ||
        std::to_integer<std::uint8_t>(stream[serialization::message_header_size]) != request) {
        return std::nullopt;
    }
    request_head h{};
    std::memcpy(&h.action_id, stream.data() + serialization::message_header_size + 1, 8);
    std::memcpy(&h.rid, stream.data() + serialization::message_header_size + 9, 8);
    return h;
}
/// A post whose flat arguments did not load (flat_invoker, malformed_post): logged, rate-limited.
void dropped_malformed_post(char const* action, std::uint32_t source, char const* what) noexcept {
    static logging::rate_limit limit;
    logging::error_limited(limit, "dropped a malformed post of {} from locality {}: {}", action,
                           source, what);
}

} // namespace

request_counts count_request(std::span<std::byte const> stream) noexcept {
    auto const h = request_head_of(stream);
    if (!h) {
        return {};
    }
    request_counts c;
    c.call = h->rid != 0;
    if (!is_control(h->action_id)) {
        try {
            serialization::message::header_threshold(stream); // as handle_parcel checks it first
            c.user = true;
        } catch (serialization::serialization_error const&) {
        }
    }
    return c;
}

bool handle_flat_request(std::uint32_t source, std::span<std::byte const> stream,
                         std::uint64_t* batch_flat) noexcept {
    auto const h = request_head_of(stream);
    if (!h || is_control(h->action_id)) {
        return false;
    }
    auto const found = find_action(h->action_id);
    if (found.flat == nullptr) {
        return false;
    }
    std::optional<serialization::flat_reader> in;
    try {
        in.emplace(stream); // checks the header: a stream not of ours is never counted
        in->skip(request_head_bytes - serialization::message_header_size);
    } catch (std::exception const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", source,
                               e.what());
        return true;
    }
    if (batch_flat == nullptr) {
        locality_state& st = here();
        count_user_received(st);
        flow_started(st, source, static_cast<std::int64_t>(stream.size()));
        count_flat_request_run(st, 1);
    } else if (h->rid != 0) {
        count_flat_request_run(here(), std::exchange(*batch_flat, 0) + 1);
    } else {
        ++*batch_flat;
    }
    request_context ctx{source, h->rid, false, found.name};
    if (h->rid != 0) {
        // A call: answered as handle_request answers it (a malformed one with its error).
        try {
            spare_lease(reply_spare).with([&](serialization::message& m) {
                run_answering(m, ctx, [&](serialization::output_archive* out) {
                    if (std::exception_ptr unread = found.flat(*in, out)) {
                        std::rethrow_exception(unread);
                    }
                });
            });
        } catch (std::exception const& e) { // its reply not sent (the runtime is stopping)
            static logging::rate_limit limit;
            logging::error_limited(limit, "could not answer a call of {} from locality {}: {}",
                                   found.name, source, e.what());
        } catch (...) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "could not answer a call of {} from locality {}",
                                   found.name, source);
        }
        return true;
    }
    try {
        request_scope scope(ctx);
        if (std::exception_ptr unread = found.flat(*in, nullptr)) {
            try {
                std::rethrow_exception(unread);
            } catch (std::exception const& e) {
                dropped_malformed_post(found.name, source, e.what());
            }
        }
    } catch (...) {
        send_failure_reply(ctx, std::current_exception()); // logs it
    }
    return true;
}

/// Runs a received request's action (`in` is after its kind byte; `bytes`: the parcel's size,
/// for flow control) and answers it unless it was posted.
void handle_request(std::uint32_t source, serialization::input_archive& in, std::size_t bytes,
                    bool counted) {
    locality_state& st = here();
    auto action_id = in.load_value<std::uint64_t>();
    auto rid = in.load_value<std::uint64_t>();
    bool control = is_control(action_id);
    if (!control && !counted) {
        count_user_received(st);
        flow_started(st, source, static_cast<std::int64_t>(bytes));
    }
    auto const found = find_action(action_id);
    request_context ctx{source, rid, control, found.name != nullptr ? found.name : "?"};
    if (found.invoke == nullptr) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "rejected a parcel from locality {}: unknown action id {:#018x}",
                               source, action_id);
        if (rid != 0) { // a posted one is logged once, above, not again as a failed action
            send_failure_reply(
                ctx, "courier::unknown_action",
                fmt::format("no action with id {:#018x} is registered on locality {}", action_id,
                            st.rank));
        }
        return;
    }
    // Run the action, writing the result into a fresh reply; on an exception, reply with it.
    // A posted action (rid 0) has nobody to answer: no reply is written. Its own path: one
    // shared with calls (an optional reply archive) cost ~120 more instructions per post
    // (callgrind, 8 B posts on shm).
    if (rid == 0) {
        try {
            request_scope scope(ctx);
            found.invoke(in, nullptr);
        } catch (malformed_post const& e) {
            dropped_malformed_post(found.name, source, e.what());
        } catch (...) {
            send_failure_reply(ctx, std::current_exception()); // logs it
        }
        return;
    }
    spare_lease(reply_spare).with([&](serialization::message& m) {
        run_answering(m, ctx, [&](serialization::output_archive* out) { found.invoke(in, out); });
    });
}

serialization::options parcel_options() noexcept {
    serialization::options o;
    o.zero_copy_threshold = g_parcel_threshold.load(std::memory_order_relaxed);
    o.zero_copy = g_parcel_zero_copy.load(std::memory_order_relaxed);
    o.deep_array_threshold = g_parcel_deep_array_threshold.load(std::memory_order_relaxed);
    return o;
}

void set_parcel_options(serialization::options const& o) noexcept {
    g_parcel_threshold.store(std::max<std::size_t>(o.zero_copy_threshold, 1),
                             std::memory_order_relaxed);
    g_parcel_zero_copy.store(o.zero_copy, std::memory_order_relaxed);
    g_parcel_deep_array_threshold.store(o.deep_array_threshold, std::memory_order_relaxed);
}

request_context* current_request() noexcept {
    request_context* r = t_request;
    t_request = nullptr; // one reader: the action that runs now
    return r;
}

void send_deferred_reply(request_context const& r,
                         function_ref<void(serialization::output_archive&)> write,
                         std::exception_ptr error) noexcept {
    try {
        if (error) {
            send_failure_reply(r, std::move(error));
            return;
        }
        if (r.rid == 0) {
            return;
        }
        serialization::message m;
        try {
            serialization::output_archive ar(m, send_options(here(), r.source));
            write_reply_head(ar, r, true);
            write(ar);
        } catch (...) {
            send_failure_reply(r, std::current_exception());
            return;
        }
        send_reply(r, std::move(m));
    } catch (std::exception const& e) {
        // The caller's locality is gone or the runtime is stopping: its future fails there.
        log(log_level::warn, "could not send the reply of action {} to locality {}: {}", r.name,
            r.source, e.what());
    }
}

// The completion of request `rid`, taken out of the table (empty if no longer pending: it was
// answered, failed or never issued). Exactly one caller gets it.
completion take_pending(std::uint64_t rid) {
    locality_state& st = here();
    auto* slot = st.pending.claim(rid);
    if (slot == nullptr) {
        return {};
    }
    completion done = std::move(slot->value.done); // leaves the slot's handler empty
    st.pending.release(slot);
    return done;
}

void send_credit(std::uint32_t dest, std::int64_t parcels, std::int64_t bytes) {
    serialization::message m;
    {
        serialization::output_archive ar(m);
        ar.save(static_cast<std::uint8_t>(credit));
        ar.save(parcels);
        ar.save(bytes);
    }
    // Its parcels and bytes were taken from what `dest` is owed: lost after it left, they are
    // kept for the next pass (counted_send_failed), as a credit refused outright is.
    send_parcel(dest, std::move(m), 0, nullptr,
                send_undo{send_undo::kind::credit, dest, static_cast<std::uint64_t>(bytes),
                          static_cast<std::uint64_t>(parcels)});
}

namespace {
/// send_request, building the parcel in `m` (empty).
void send_request_in(serialization::message& m, std::uint32_t dest, std::uint64_t action_id,
                     function_ref<void(serialization::output_archive&)> write_args,
                     completion& complete, std::function<void(std::error_code const&)>& on_sent,
                     bool wants_reply, bool ordered) {
    locality_state& st = here();
    if (!runtime_running()) {
        throw std::logic_error("courier: remote actions need a running runtime");
    }
    if (dest >= st.size) {
        throw std::out_of_range("courier: locality " + std::to_string(dest) + " does not exist (" +
                                std::to_string(st.size) + " localities)");
    }
    bool control = is_control(action_id);
    auto dead = [&] { return has_failed(st, dest); };
    auto fail_dead = [&](completion& done) {
        fail_for_failed_peer(done, dest);
        if (on_sent) {
            on_sent(std::make_error_code(std::errc::host_unreachable));
        }
    };
    if (dead()) {
        fail_dead(complete);
        return;
    }
    // The request's slot first: its id goes into the message. Until published, a failure
    // gives it back.
    locality_state::pending_table::slot* slot = wants_reply ? st.pending.acquire() : nullptr;
    std::uint64_t rid = slot != nullptr ? slot->id() : 0;
    try {
        serialization::output_archive ar(m, send_options(st, dest));
        if (ordered) {
            ar.save(static_cast<std::uint8_t>(ordered_request));
            ar.save(std::uint64_t{0}); // the sequence number, written once it is taken
        } else {
            ar.save(static_cast<std::uint8_t>(request));
        }
        ar.save(action_id);
        ar.save(rid);
        write_args(ar);
    } catch (...) {
        if (slot != nullptr) {
            st.pending.release(slot);
        }
        throw;
    }
    // Flow control: wait (suspending this Courier thread) until the destination's window
    // has room for the parcel. The slot is not yet published, so a failure meanwhile finds
    // nothing of it in the table.
    bool counted = dest != st.rank && !control;
    auto const bytes = static_cast<std::int64_t>(m.total_size());
    if (counted && !flow_acquire(st, dest, bytes)) {
        if (slot != nullptr) {
            st.pending.release(slot);
        }
        fail_dead(complete);
        return;
    }
    if (slot != nullptr) {
        slot->value.done = std::move(complete);
        slot->value.control.store(control, std::memory_order_relaxed);
        slot->value.dest.store(dest, std::memory_order_relaxed);
        slot->value.flow_bytes = counted ? bytes : 0;
        st.pending.publish(slot);
        if (dead()) {
            // The peer failed after the first check and peer_failed() may have scanned the
            // table before this request was in it: fail it here (unless that scan took it).
            completion done = take_pending(rid);
            fail_dead(done);
            return;
        }
    }
    if (!control) {
        count_user_sent(st, 1);
    }
    // A send the transport refuses (say, a message it cannot describe) must not leave a
    // request pending or a parcel counted: shutdown would wait for them forever.
    auto undo = [&] {
        if (wants_reply) {
            take_pending(rid);
        }
        if (!control) {
            count_user_sent(st, -1);
        }
        if (counted) {
            flow_release(st, dest, bytes);
        }
    };
    // An ordered request takes its number last, just before it leaves: the numbers a
    // destination waits for are the ones sent. One refused after taking it leaves a skip in
    // its place.
    std::uint64_t seq = 0;
    if (ordered) {
        seq = ordered_streams(st).next_seq[dest].fetch_add(1, std::memory_order_acq_rel);
        std::memcpy(m.index_buffer() + serialization::message_header_size + 1, &seq, sizeof seq);
    }
    try {
        send_parcel(dest, std::move(m), rid, std::move(on_sent),
                    control ? send_undo{send_undo::kind::control, dest}
                            : send_undo{send_undo::kind::post, dest,
                                        counted ? static_cast<std::uint64_t>(bytes) : 0},
                    ordered ? std::optional<std::uint64_t>(seq) : std::nullopt);
    } catch (...) {
        undo();
        if (ordered) {
            send_ordered_skip(dest, seq);
        }
        throw;
    }
}

} // namespace

void send_request(std::uint32_t dest, std::uint64_t action_id,
                  function_ref<void(serialization::output_archive&)> write_args,
                  completion complete, std::function<void(std::error_code const&)> on_sent,
                  bool wants_reply, bool ordered) {
    spare_lease(request_spare).with([&](serialization::message& m) {
        send_request_in(m, dest, action_id, write_args, complete, on_sent, wants_reply, ordered);
    });
}

ordered_state& ordered_streams(locality_state& st) {
    std::call_once(st.ordered.sized, [&st] {
        st.ordered.next_seq = std::vector<std::atomic<std::uint64_t>>(st.size);
        for (std::uint32_t r = 0; r < st.size; ++r) {
            st.ordered.from.push_back(std::make_unique<ordered_state::stream>());
        }
    });
    return st.ordered;
}

std::size_t pending_requests(locality_state& st) {
    std::size_t n = 0;
    st.pending.for_each_published([&](auto& slot, std::uint64_t) {
        n += !slot.value.control.load(std::memory_order_relaxed);
    });
    return n;
}

std::size_t pending_requests() {
    return pending_requests(here());
}

} // namespace courier::detail
