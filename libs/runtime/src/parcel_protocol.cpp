// SPDX-License-Identifier: BSL-1.0
// The request/reply protocol: a remote call becomes a request parcel, runs as a task on its
// destination and comes back as a reply parcel that completes the caller's future. Layout of
// the parcels: locality_state.hpp.
#include "distributed.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "scheduler.hpp"
#include "transport_watch.hpp"

#include <courier/runtime/init.hpp>

#include <fmt/format.h>

#include <courier/common/small_alloc.hpp>
#include <courier/serialization/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace courier::detail {

namespace {

/// The runtime's parcel options (parcel_options()): atomics, as init() may run again in a
/// process whose threads of an earlier runtime still read them.
std::atomic<std::size_t> g_parcel_threshold{4096};
std::atomic<bool> g_parcel_zero_copy{true};
std::atomic<std::size_t> g_parcel_deep_array_threshold{0};

/// The options a parcel for `dest` is written with: its rail's (locality_state::
/// local_send_options for a locality of this host in a job across hosts), else the
/// runtime's (parcel_options()). The archive copies them.
serialization::options send_options(locality_state const& st, std::uint32_t dest) noexcept {
    return dest < st.same_host_dest.size() && st.same_host_dest[dest] != 0 ? st.local_send_options
                                                                           : parcel_options();
}

/// A parcel has left (or failed to): a failed request fails its caller's future at once.
void sent(std::uint64_t rid, std::error_code const& ec) {
    locality_state& st = here();
    if (ec && rid != 0) {
        if (completion done = take_pending(rid)) {
            // The exception is made in a statement of its own: a temporary living on until
            // after done() would share its message (a reference-counted string in libstdc++)
            // with the waiter, and free it on this thread after the waiter read it.
            auto error = std::make_exception_ptr(
                network_error("courier: sending to a locality failed: " + ec.message()));
            done(nullptr, std::move(error));
        }
    }
    st.in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

void send_parcel(std::uint32_t dest, serialization::message&& m, std::uint64_t rid,
                 std::function<void(std::error_code const&)> on_sent) {
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
    parcel_sent(st, dest, m);
    st.in_flight.fetch_add(1, std::memory_order_acq_rel);
    // One handler per parcel, built here: without a caller's callback it captures only the
    // request id (0 for a reply), which std::function stores inline; only a caller's own
    // callback costs an allocation.
    parcelport::transport::sent_handler handler;
    if (on_sent) {
        handler = [rid, cb = std::move(on_sent)](std::error_code ec) {
            cb(ec);
            sent(rid, ec);
        };
    } else {
        handler = [rid](std::error_code ec) { sent(rid, ec); };
    }
    // A worker polls the network regularly (when idle and every few tasks), so parcels it
    // sends may be coalesced; another thread's go out at once. A parcel held in a batch must
    // not wait for this worker's task to end: another worker sends it at its next progress
    // pass, and if every other worker sleeps, one is woken for it (the burst_then_compute
    // test). With a single worker per locality a batch waits until the task yields or ends.
    try {
        transport_watch::call in_transport;
        if (scheduler* s = current_scheduler();
            s != nullptr && detail::current_worker() != nullptr) {
            if (st.tp->send_coalesced(dest, std::move(m), std::move(handler))) {
                s->notify_one();
            }
            return;
        }
        st.tp->send(dest, std::move(m), std::move(handler));
    } catch (...) {
        // Refused outright: the handler never runs, so the send is not in flight (shutdown
        // waits for in_flight to reach 0).
        st.in_flight.fetch_sub(1, std::memory_order_acq_rel);
        throw;
    }
}

/// The head of every reply: its kind, the request it answers and whether a result follows (or
/// the exception's type name and message).
void write_reply_head(serialization::output_archive& ar, request_context const& r, bool ok) {
    ar.save(static_cast<std::uint8_t>(reply));
    ar.save(r.rid);
    ar.save(static_cast<std::uint8_t>(r.control));
    ar.save(static_cast<std::uint8_t>(ok ? status_ok : status_failed));
}

/// Sends a written reply; termination counts it unless it answers a control request.
void send_reply(request_context const& r, serialization::message&& m) {
    if (!r.control) {
        here().sent.fetch_add(1, std::memory_order_acq_rel);
    }
    send_parcel(r.source, std::move(m), 0, nullptr);
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

void handle_request(std::uint32_t source, serialization::input_archive& in, std::size_t bytes) {
    locality_state& st = here();
    auto action_id = in.load_value<std::uint64_t>();
    auto rid = in.load_value<std::uint64_t>();
    bool control = is_control(action_id);
    if (!control) {
        st.received.fetch_add(1, std::memory_order_acq_rel);
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
        } catch (...) {
            send_failure_reply(ctx, std::current_exception()); // logs it
        }
        return;
    }
    serialization::message result;
    try {
        serialization::output_archive ar(result, send_options(here(), ctx.source));
        write_reply_head(ar, ctx, true);
        request_scope scope(ctx);
        found.invoke(in, &ar);
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

namespace {

void handle_reply(std::uint32_t source, serialization::input_archive& in) {
    locality_state& st = here();
    auto rid = in.load_value<std::uint64_t>();
    bool control = in.load_value<std::uint8_t>() != 0;
    auto status = in.load_value<std::uint8_t>();
    if (!control) {
        st.received.fetch_add(1, std::memory_order_acq_rel);
    }
    completion done = take_pending(rid);
    if (!done) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "reply from locality {} for unknown request {}", source, rid);
        return;
    }
    if (status == status_ok) {
        done(&in, nullptr);
        return;
    }
    std::string type, what;
    in.load(type);
    in.load(what);
    // Made before done() runs, so that no temporary sharing the message outlives the wake-up
    // (see sent()).
    auto error = std::make_exception_ptr(remote_exception(type, what, source));
    done(nullptr, std::move(error));
}

/// Runs the requests of `source`'s ordered stream from `first` on (the stream is marked
/// running by the caller): each, then the next one if it has arrived, until one is missing.
void run_ordered(std::uint32_t source, ordered_state::stream& s, serialization::message first) {
    serialization::message m = std::move(first);
    for (;;) {
        try {
            serialization::input_archive in(m);
            auto kind = in.load_value<std::uint8_t>();
            in.load_value<std::uint64_t>(); // the sequence number
            if (kind == ordered_request) {
                handle_request(source, in, m.total_size());
            }
        } catch (std::exception const& e) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a malformed ordered parcel from locality {}: {}",
                                   source, e.what());
        }
        std::lock_guard g(s.mutex);
        ++s.next;
        auto it = s.early.begin();
        if (it == s.early.end() || it->first != s.next) {
            s.running = false;
            return;
        }
        m = std::move(it->second);
        s.early.erase(it);
    }
}

/// An ordered request or skip from `source`: runs now if its turn has come (and then the
/// early arrivals that follow it), else waits among the early arrivals.
void handle_ordered(std::uint32_t source, std::uint64_t seq, serialization::message& msg) {
    locality_state& st = here();
    auto& streams = ordered_streams(st);
    if (source >= streams.from.size()) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped an ordered parcel from unknown locality {}", source);
        return;
    }
    auto& s = *streams.from[source];
    {
        std::lock_guard g(s.mutex);
        // A working peer has at most its flow-control window of requests in flight here (and
        // a few sent over it from inside its progress), so that many early arrivals at most;
        // four windows is room to spare. A number far ahead, or one already run, or more early
        // arrivals than that, is not from a working peer: dropped, so it cannot pile up.
        constexpr std::uint64_t max_ahead = std::uint64_t{1} << 24;
        // (Calls to this locality itself take no window: they have no such bound.)
        std::int64_t const window = st.flow.window_parcels;
        std::size_t const max_early = window > 0 && source != st.rank
                                          ? static_cast<std::size_t>(4 * window + 64)
                                          : std::size_t{max_ahead};
        if (seq < s.next || seq - s.next > max_ahead || s.early.count(seq) != 0 ||
            (seq != s.next && s.early.size() >= max_early)) {
            static logging::rate_limit limit;
            logging::error_limited(
                limit,
                "dropped an ordered parcel from locality {}: sequence number {} (next is {}, {} "
                "early ones wait)",
                source, seq, s.next, s.early.size());
            return;
        }
        if (s.running || seq != s.next) {
            s.early.emplace(seq, std::move(msg));
            return;
        }
        s.running = true;
    }
    run_ordered(source, s, std::move(msg));
}

void handle_parcel(std::uint32_t source, serialization::message& msg) noexcept {
    try {
        serialization::input_archive in(msg);
        auto kind = in.load_value<std::uint8_t>();
        if (kind == request) {
            handle_request(source, in, msg.total_size());
        } else if (kind == ordered_request || kind == ordered_skip) {
            handle_ordered(source, in.load_value<std::uint64_t>(), msg);
        } else if (kind == reply) {
            handle_reply(source, in);
        } else {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a parcel of unknown kind {} from locality {}",
                                   kind, source);
        }
    } catch (std::exception const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", source,
                               e.what());
    } catch (...) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a parcel from locality {}: unknown exception",
                               source);
    }
}

/// A received parcel waiting to be handled: the message moves in once (post() would move it
/// into a lambda, then into its wrapper, then into the task) and handle_parcel catches
/// everything.
struct parcel_task final : task, pooled {
    std::uint32_t source;
    serialization::message msg;
    parcel_task(std::uint32_t s, serialization::message&& m) noexcept
        : task{&run_it, &drop_it}, source(s), msg(std::move(m)) {}
    static void run_it(task* t) noexcept {
        auto* self = static_cast<parcel_task*>(t);
        handle_parcel(self->source, self->msg);
        delete self;
    }
    static void drop_it(task* t) noexcept { delete static_cast<parcel_task*>(t); }
};

/// The requests of one received coalesced message, run one after another by one task: one
/// allocation and one task per message instead of a message buffer and a task per parcel
/// (Per-parcel cost in benchmarks/RESULTS.md). Each request is read where it lies, through a
/// message that views it.
///
/// In order, yet never stuck behind one request: while a request runs, the rest of the batch
/// (this same task, from the next request on) waits in the worker's queue, where an idle worker
/// can take it, and where this worker finds it if the request blocks. When the request returns
/// and the rest is still the newest item of the queue, the task takes it back and goes on
/// (retract(): a pop, no allocation). Every queued copy holds a reference; the last to finish
/// frees the block.
///
/// Layout: this header, then the requests, each its size (u32, then 4 zero bytes) and its
/// bytes, padded to 8.
struct request_batch final : task {
    static constexpr std::size_t prefix = 8;
    static constexpr std::size_t record_bytes(std::size_t n) noexcept {
        return prefix + (n + 7) / 8 * 8;
    }

    std::uint32_t source;
    std::uint32_t size;     // bytes of records after the header
    std::uint32_t next = 0; // offset of the next request to run (the queued copy's to change)
    std::atomic<std::uint32_t> refs{1};

    request_batch(std::uint32_t src, std::uint32_t bytes) noexcept
        : task{&run_it, &drop_it}, source(src), size(bytes) {}
    std::byte* records() noexcept { return reinterpret_cast<std::byte*>(this + 1); }

    /// A batch with room for `bytes` of records (record_bytes() each): a small-object block,
    /// as deliver_batch keeps batches within one. Throws std::bad_alloc.
    static request_batch* make(std::uint32_t source, std::size_t bytes) {
        return ::new (small_alloc(sizeof(request_batch) + bytes))
            request_batch(source, static_cast<std::uint32_t>(bytes));
    }
    static void unref(request_batch* b) noexcept {
        if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::size_t const n = sizeof(request_batch) + b->size;
            b->~request_batch();
            small_free(b, n);
        }
    }

    static void run_it(task* t) noexcept {
        auto* b = static_cast<request_batch*>(t);
        serialization::message view;
        for (;;) {
            std::byte* r = b->records() + b->next;
            std::uint32_t n = 0;
            std::memcpy(&n, r, sizeof n);
            b->next += static_cast<std::uint32_t>(record_bytes(n));
            bool const last = b->next >= b->size;
            bool queued = false;
            if (!last) {
                b->refs.fetch_add(1, std::memory_order_relaxed);
                try {
                    spawn(b);
                    queued = true;
                } catch (...) { // not queued (the runtime is stopping): the rest runs here
                    b->refs.fetch_sub(1, std::memory_order_relaxed);
                }
            }
            view.view({r + prefix, n});
            handle_parcel(b->source, view);
            if (last || (queued && !retract(b))) {
                break; // done, or the rest runs elsewhere (it may have already)
            }
            if (queued) {
                b->refs.fetch_sub(1, std::memory_order_relaxed); // the queued copy's, taken back
            }
            progress_point();
        }
        view = serialization::message(); // before the bytes it views can go
        unref(b);
    }
    static void drop_it(task* t) noexcept { unref(static_cast<request_batch*>(t)); }
};

/// Replies whose index data is at most this large and that have no external chunk are handled
/// where they arrive.
constexpr std::size_t inline_reply_bytes = 4096;

} // namespace

void send_credit(std::uint32_t dest, std::int64_t parcels, std::int64_t bytes) {
    serialization::message m;
    {
        serialization::output_archive ar(m);
        ar.save(static_cast<std::uint8_t>(credit));
        ar.save(parcels);
        ar.save(bytes);
    }
    try {
        send_parcel(dest, std::move(m), 0, nullptr);
    } catch (std::exception const& e) {
        log(log_level::warn, "could not return credits to locality {}: {}", dest, e.what());
    }
}

void deliver(std::uint32_t source, serialization::message&& m) {
    // A small reply only fulfils a promise (resuming the waiting thread, or queueing its
    // continuations as tasks): handled at once, on the thread that received it, it costs no
    // task and no switch. Requests (actions may block) and large replies (their loading
    // copies) run as tasks, so that progress passes stay short.
    locality_state& st = here();
    heard_from(st, source);
    parcel_received(st, source, m);
    auto d = m.data();
    if (d.size() > serialization::message_header_size && d.size() <= inline_reply_bytes &&
        m.external_chunk_count() == 0) {
        auto kind = std::to_integer<std::uint8_t>(d[serialization::message_header_size]);
        if (kind == reply) {
            handle_parcel(source, m);
            return;
        }
        if (kind == heartbeat) {
            return;
        }
        if (kind == credit) {
            try {
                serialization::input_archive in(m);
                in.load_value<std::uint8_t>();
                auto parcels = in.load_value<std::int64_t>();
                auto bytes = in.load_value<std::int64_t>();
                st.flow.credits_received.fetch_add(1, std::memory_order_relaxed);
                flow_credit(st, source, parcels, bytes);
            } catch (std::exception const& e) {
                static logging::rate_limit limit;
                logging::error_limited(limit,
                                       "dropped a malformed credit parcel from locality {}: {}",
                                       source, e.what());
            }
            return;
        }
        if (kind == goodbye) {
            if (source < st.live.departed.size()) {
                st.live.departed[source].store(true, std::memory_order_relaxed);
            }
            return;
        }
    }
    // A request may wait in the task queue a while (up to a flow-control window of them):
    // it keeps only the bytes it carries, not the receive path's pooled 4 KiB buffer.
    m.shrink_to_fit();
    auto* t = new parcel_task(source, std::move(m));
    try {
        spawn(t);
    } catch (...) { // the runtime is stopping
        parcel_task::drop_it(t);
        throw;
    }
}

namespace {
/// A request a request_batch takes: not one of shareable_index_min bytes or more, which goes
/// as a message of its own (deliver_one), whose large blocks a loader adopts
/// (message::from_bytes): in a batch its bytes were copied twice, into the batch and out.
bool is_request(std::span<std::byte const> p) noexcept {
    return p.size() > serialization::message_header_size &&
           p.size() < serialization::message::shareable_index_min &&
           std::to_integer<std::uint8_t>(p[serialization::message_header_size]) == request;
}
/// One parcel of a batch on the usual path (a message of its own).
void deliver_one(std::uint32_t source, std::span<std::byte const> p) {
    serialization::message m;
    try {
        m = serialization::message::from_bytes(p);
    } catch (serialization::serialization_error const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", source,
                               e.what());
        return;
    }
    deliver(source, std::move(m));
}
} // namespace

namespace {
/// deliver_batch for a run of parcels whose `requests` requests (`bytes`, `record_bytes` as
/// records) fit one request_batch.
void deliver_run(std::uint32_t source, std::span<std::span<std::byte const> const> parcels,
                 std::size_t requests, std::size_t bytes, std::size_t record_bytes) {
    if (requests < 2) {
        for (auto p : parcels) {
            deliver_one(source, p);
        }
        return;
    }
    locality_state& st = here();
    heard_from(st, source);
    request_batch* b = request_batch::make(source, record_bytes);
    std::byte* at = b->records();
    for (auto p : parcels) {
        if (!is_request(p)) {
            deliver_one(source, p); // replies and control words at once, as deliver() does
            continue;
        }
        auto n = static_cast<std::uint32_t>(p.size());
        std::memcpy(at, &n, sizeof n);
        std::memset(at + sizeof n, 0, request_batch::prefix - sizeof n);
        std::memcpy(at + request_batch::prefix, p.data(), p.size());
        at += request_batch::record_bytes(p.size());
    }
    parcels_received(st, source, requests, bytes);
    try {
        spawn(b);
    } catch (...) { // the runtime is stopping
        request_batch::drop_it(b);
        throw;
    }
}
} // namespace

void deliver_batch(std::uint32_t source, std::span<std::span<std::byte const> const> parcels) {
    // Requests go in request_batches of one small-object block each: a larger one would cost a
    // malloc per batch (tcp's batches reach ~100 KiB). A run ends before the request that would
    // not fit; every request fits an empty batch (is_request: under 4 KiB).
    constexpr std::size_t room = small_alloc_max - sizeof(request_batch);
    static_assert(request_batch::record_bytes(serialization::message::shareable_index_min) <= room);
    std::size_t begin = 0, requests = 0, bytes = 0, record_bytes = 0;
    for (std::size_t i = 0; i < parcels.size(); ++i) {
        if (!is_request(parcels[i])) {
            continue;
        }
        std::size_t const rb = request_batch::record_bytes(parcels[i].size());
        if (record_bytes + rb > room) {
            deliver_run(source, parcels.subspan(begin, i - begin), requests, bytes, record_bytes);
            begin = i;
            requests = bytes = record_bytes = 0;
        }
        ++requests;
        bytes += parcels[i].size();
        record_bytes += rb;
    }
    deliver_run(source, parcels.subspan(begin), requests, bytes, record_bytes);
}

void send_request(std::uint32_t dest, std::uint64_t action_id,
                  function_ref<void(serialization::output_archive&)> write_args,
                  completion complete, std::function<void(std::error_code const&)> on_sent,
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
        if (done) {
            auto error = std::make_exception_ptr(
                network_error("courier: locality " + std::to_string(dest) + " has failed"));
            done(nullptr, std::move(error)); // made first: see sent()
        }
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
    serialization::message m;
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
        st.sent.fetch_add(1, std::memory_order_acq_rel);
    }
    // A send the transport refuses (say, a message it cannot describe) must not leave a
    // request pending or a parcel counted: shutdown would wait for them forever.
    auto undo = [&] {
        if (wants_reply) {
            take_pending(rid);
        }
        if (!control) {
            st.sent.fetch_sub(1, std::memory_order_acq_rel);
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
        send_parcel(dest, std::move(m), rid, std::move(on_sent));
    } catch (...) {
        undo();
        if (ordered) {
            serialization::message skip;
            {
                serialization::output_archive ar(skip);
                ar.save(static_cast<std::uint8_t>(ordered_skip));
                ar.save(seq);
            }
            try {
                send_parcel(dest, std::move(skip), 0, nullptr);
            } catch (std::exception const& e) {
                log(log_level::error,
                    "ordered calls to locality {} are stuck: sequence number {} was refused "
                    "and so was its skip: {}",
                    dest, seq, e.what());
            }
        }
        throw;
    }
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
