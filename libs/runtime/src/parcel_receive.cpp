// SPDX-License-Identifier: BSL-1.0
// The receiving half of the request/reply protocol (parcel_protocol.cpp sends): a received
// parcel is a reply (completes its caller's future where it arrives), a request (runs as a
// task; a coalesced message's requests as one task), an ordered request (runs in its stream's
// order) or a control word (credits, heartbeats, goodbyes). Layout of the parcels:
// locality_state.hpp.
#include "locality_state.hpp"
#include "log.hpp"
#include "parcel_send.hpp"
#include "scheduler.hpp"
#include "trace.hpp"

#include <courier/common/small_alloc.hpp>
#include <courier/serialization/error.hpp>

#include <cstring>
#include <new>
#include <optional>
#include <span>

namespace courier::detail {

namespace {

/// The completion a reply from `source` to request `rid` answers, taken out of the table and
/// the reply counted (unless it answers a control request); empty, and logged, if the request
/// is not pending (handle_reply, deliver_flat_reply).
completion claim_reply(locality_state& st, std::uint32_t source, std::uint64_t rid, bool control) {
    if (!control) {
        count_user_received(st);
    }
    completion done = take_pending(rid);
    if (!done) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "reply from locality {} for unknown request {}", source, rid);
    }
    return done;
}

void handle_reply(std::uint32_t source, serialization::input_archive& in) {
    auto rid = in.load_value<std::uint64_t>();
    bool control = in.load_value<std::uint8_t>() != 0;
    auto status = in.load_value<std::uint8_t>();
    completion done = claim_reply(here(), source, rid, control);
    if (!done) {
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

/// A notice from `source` that its reply to the request of short id `request` was lost (its
/// send failed for good there, after the action ran): that call fails with network_error, as
/// it would if `source` had failed, instead of waiting for ever. The request keeps its slot
/// while it waits, so the slot at the short id's index holds it; the generation bits and the
/// destination tell it from a later request in that slot (a notice for a reply that arrived
/// after all finds nothing, short of 2^15 reuses of the slot meanwhile).
void handle_reply_lost(std::uint32_t source, std::uint64_t request) {
    locality_state& st = here();
    constexpr unsigned index_bits = send_undo::index_bits;
    auto const index = static_cast<std::uint32_t>(request & send_undo::mask(index_bits));
    std::uint64_t const id = st.pending.live_id_at(index);
    auto* slot =
        id != 0 && send_undo::short_request_id(id) == request ? st.pending.find(id) : nullptr;
    completion done;
    if (slot != nullptr && slot->value.dest.load(std::memory_order_relaxed) == source) {
        done = take_pending(id);
    }
    if (!done) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "notice of a lost reply from locality {} for no request "
                               "waiting (short id {})",
                               source, request);
        return;
    }
    // Made before done() runs (see handle_reply).
    auto error = std::make_exception_ptr(
        network_error("courier: the reply of locality " + std::to_string(source) +
                      " to this call was lost (its send failed there for good; the action ran)"));
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

/// `counted`: a request's receipt was counted already (handle_request).
void handle_parcel(std::uint32_t source, serialization::message& msg,
                   bool counted = false) noexcept {
    try {
        serialization::input_archive in(msg);
        auto kind = in.load_value<std::uint8_t>();
        if (kind == request) {
            handle_request(source, in, msg.total_size(), counted);
        } else if (kind == ordered_request || kind == ordered_skip) {
            handle_ordered(source, in.load_value<std::uint64_t>(), msg);
        } else if (kind == reply) {
            handle_reply(source, in);
        } else if (kind == reply_lost) {
            handle_reply_lost(source, in.load_value<std::uint64_t>());
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
        auto const chunks = self->msg.chunks();
        // A stream of one index chunk, not one whose large blocks loaders may adopt
        // (index_owner): a request of flat arguments is read where it lies.
        bool const flat = chunks.size() == 1 &&
                          chunks[0].type == serialization::chunk_type::index &&
                          chunks[0].size == self->msg.index_size() && !self->msg.index_owner();
        if (!flat || !handle_flat_request(self->source, self->msg.data(), nullptr)) {
            handle_parcel(self->source, self->msg);
        }
        delete self;
    }
    static void drop_it(task* t) noexcept { delete static_cast<parcel_task*>(t); }
};

/// The requests of one received coalesced message, run one after another by one task: one
/// allocation and one task per message instead of a message buffer and a task per parcel
/// (Per-parcel cost in benchmarks/RESULTS.md). Each request is read where it lies: by
/// handle_flat_request if its action's arguments are flat, else through a message that views
/// it.
///
/// In order, yet never stuck behind one request: while a request runs, the rest of the batch
/// (this same task, from the next request on) waits in the worker's queue, where an idle worker
/// can take it, and where this worker finds it if the request blocks. When the request returns
/// and the rest is still the newest item of the queue, the task takes it back and goes on
/// (retract(): a pop, no allocation). Every queued copy holds a reference; the last to finish
/// frees the block.
///
/// Their receipt is counted, and their flow-control credit returned, once for all of them when
/// the batch starts (count_once): before any of them runs, so before any can suspend, as each
/// would do it for itself (two atomic updates per batch instead of per request).
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
    std::uint32_t user_requests = 0; // count_request's user requests, and their bytes
    std::uint32_t user_bytes = 0;
    std::uint32_t calls = 0; // requests that want a reply (request id not 0)
    bool counted = false;    // by the first run, before any copy is queued

    request_batch(std::uint32_t src, std::uint32_t bytes) noexcept
        : task{&run_it, &drop_it}, source(src), size(bytes) {}
    std::byte* records() noexcept { return reinterpret_cast<std::byte*>(this + 1); }
    /// The next request's bytes (one record's), `next` moved past it.
    std::span<std::byte const> take_record() noexcept {
        std::byte* r = records() + next;
        std::uint32_t n = 0;
        std::memcpy(&n, r, sizeof n);
        next += static_cast<std::uint32_t>(record_bytes(n));
        return {r + prefix, n};
    }

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

    /// The rest of a batch that a request's action suspended in the middle of, made a task of
    /// its own (on_suspend): with one worker no thief could take it meanwhile, so it is queued
    /// only when the action suspends, not before every request as with several workers (a push,
    /// a pop with its compare-exchange and two reference counts per request: 5 locked
    /// instructions, 35-50 ns on the AMD EPYC guest).
    struct deferred_rest {
        request_batch* b;
        bool queued = false;
        static void queue(void* p) noexcept {
            auto* d = static_cast<deferred_rest*>(p);
            d->b->refs.fetch_add(1, std::memory_order_relaxed);
            try {
                spawn(d->b);
                d->queued = true;
            } catch (...) { // not queued (the runtime is stopping): the rest runs on resume
                d->b->refs.fetch_sub(1, std::memory_order_relaxed);
            }
        }
    };

    /// The batch's receipt counted and credited (see above), once; and with two calls or more,
    /// their replies gathered into one message (transport::gather), which the last request's
    /// end posts (run_record): the first replies would otherwise leave alone, each a message
    /// of its own (tcp: osu_bw 1.07 / 1.09 / 1.13x at 8 B / 1 / 2 KiB, 7 paired rounds;
    /// latency level).
    void count_once() noexcept {
        if (counted) {
            return;
        }
        counted = true;
        locality_state& st = here();
        if (calls >= 2 && st.tp) {
            st.tp->gather(source);
        }
        if (user_requests != 0) {
            count_user_received(st, user_requests);
            flow_started(st, source, user_bytes, user_requests);
        }
    }
    /// Runs the request `rec` of the batch (counted); `view` is the batch's reusable view,
    /// made by the first request not read where it lies (an empty message's construction,
    /// move and destruction cost ~290 instructions per batch of posts that need none), `flat`
    /// the run's count of requests read where they lie not yet counted (handle_flat_request).
    /// After the `last` request the replies count_once gathered go.
    void run_record(std::span<std::byte const> rec, std::optional<serialization::message>& view,
                    std::uint64_t& flat, bool last) noexcept {
        if (!handle_flat_request(source, rec, &flat)) {
            if (!view) {
                view.emplace();
            }
            view->view(rec);
            handle_parcel(source, *view, true);
        }
        if (last && calls >= 2) {
            if (auto const& tp = here().tp) {
                tp->send_gathered(source);
            }
        }
    }
    /// The posts that one run of the batch's task read where they lie, counted once per run
    /// (an atomic-free add to the worker's counters, but ~35 instructions per request).
    static void count_flat(std::uint64_t n) noexcept {
        if (n != 0) {
            count_flat_request_run(here(), n);
        }
    }

    static void run_it(task* t) noexcept {
        auto* b = static_cast<request_batch*>(t);
        b->count_once();
        if (fiber_ctx* self = current_fiber(); self != nullptr && current_worker() != nullptr &&
                                               current_worker()->sched.workers().size() == 1) {
            run_deferring(b, *self);
            return;
        }
        std::optional<serialization::message> view;
        std::uint64_t flat = 0;
        for (;;) {
            std::span<std::byte const> const rec = b->take_record();
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
            b->run_record(rec, view, flat, last);
            if (last || (queued && !retract(b))) {
                break; // done, or the rest runs elsewhere (it may have already)
            }
            if (queued) {
                b->refs.fetch_sub(1, std::memory_order_relaxed); // the queued copy's, taken back
            }
            progress_point();
        }
        count_flat(flat);
        view.reset(); // before the bytes it views can go
        unref(b);
    }
    /// run_it on a locality of one worker: the requests one after the other, the rest of the
    /// batch queued only if one suspends (deferred_rest).
    static void run_deferring(request_batch* b, fiber_ctx& self) noexcept {
        std::optional<serialization::message> view;
        std::uint64_t flat = 0;
        for (;;) {
            std::span<std::byte const> const rec = b->take_record();
            bool const last = b->next >= b->size;
            deferred_rest rest{b};
            if (!last) {
                self.on_suspend = &deferred_rest::queue;
                self.on_suspend_arg = &rest;
            }
            b->run_record(rec, view, flat, last);
            // The same fiber_ctx after a suspension, whichever worker resumed it.
            self.on_suspend = nullptr;
            if (last || rest.queued) {
                break; // done, or the rest runs as its own task (it may have already)
            }
            progress_point();
        }
        count_flat(flat);
        view.reset();
        unref(b);
    }
    static void drop_it(task* t) noexcept { unref(static_cast<request_batch*>(t)); }
};

/// Replies whose index data is at most this large and that have no external chunk are handled
/// where they arrive.
constexpr std::size_t inline_reply_bytes = 4096;

} // namespace

void deliver(std::uint32_t source, serialization::message&& m) {
    // A small reply only fulfils a promise (resuming the waiting thread, or queueing its
    // continuations as tasks): handled at once, on the thread that received it, it costs no
    // task and no switch. Requests (actions may block) and large replies (their loading
    // copies) run as tasks, so that progress passes stay short (deliver_flat_reply leaves
    // every reply of 4 KiB or more to this path).
    locality_state& st = here();
    heard_from(st, source);
    parcel_received(st, source, m);
    auto d = m.data();
    if (d.size() > serialization::message_header_size && d.size() <= inline_reply_bytes &&
        m.external_chunk_count() == 0) {
        auto kind = std::to_integer<std::uint8_t>(d[serialization::message_header_size]);
        if (kind == reply || kind == reply_lost) {
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
/// A successful reply whose stream is `p` (one index chunk, under 4 KiB), completed where it
/// lies: what deliver() and handle_reply() do with it, less the message and the input archive
/// (~600 instructions on the caller of an 8 B echo), where the caller's result loads from a
/// flat stream; other results go through a message, as before. False, with nothing done, for
/// any other parcel (deliver_one takes it), a failure's reply, a head that does not read, a
/// traced run (the trace records each message), or a stream of shareable_index_min bytes or
/// more: its message shares its index with the loaders (a serialize_buffer adopts its bytes:
/// no second copy, no allocation), where a flat read would copy them into a buffer of their
/// own (an allocation per reply beyond the small-object pool's 64 KiB).
bool deliver_flat_reply(std::uint32_t source, std::span<std::byte const> p) noexcept {
    constexpr std::size_t at = serialization::message_header_size;
    constexpr std::size_t head = 1 + sizeof(std::uint64_t) + 1 + 1; // kind, rid, control, status
    if (p.size() < at + head || p.size() >= serialization::message::shareable_index_min ||
        std::to_integer<std::uint8_t>(p[at]) != reply ||
        std::to_integer<std::uint8_t>(p[at + head - 1]) != status_ok ||
        trace::active() != nullptr) {
        return false;
    }
    std::optional<serialization::flat_reader> in;
    try {
        in.emplace(p); // checks the header
        in->skip(head);
    } catch (std::exception const&) {
        return false;
    }
    std::uint64_t rid = 0;
    std::memcpy(&rid, p.data() + at + 1, sizeof rid);
    bool const control = std::to_integer<std::uint8_t>(p[at + 1 + sizeof rid]) != 0;
    locality_state& st = here();
    heard_from(st, source);
    parcels_received(st, source, 1, p.size());
    completion done = claim_reply(st, source, rid, control);
    if (!done) {
        return true;
    }
    if (done.reads_flat()) {
        count_flat_reply(st);
        done(*in); // a result that does not load fails the future with the error
        return true;
    }
    // A result that loads only from an archive: through a message of its own, as before.
    std::optional<serialization::message> m;
    std::optional<serialization::input_archive> ar;
    try {
        m.emplace(serialization::message::from_bytes(p)); // small: loaded here, as deliver() does
        ar.emplace(*m);
        ar->load_value<std::uint8_t>();  // kind
        ar->load_value<std::uint64_t>(); // rid
        ar->load_value<std::uint8_t>();  // control
        ar->load_value<std::uint8_t>();  // status
    } catch (...) {
        done(nullptr, std::current_exception());
        return true;
    }
    done(&*ar, nullptr); // a result that does not load fails the future with the error
    return true;
}

/// One parcel of a batch on the usual path (a message of its own).
void deliver_one(std::uint32_t source, std::span<std::byte const> p) {
    // The message goes from from_bytes() straight into deliver() (which throws no
    // serialization_error): a named one, assigned, cost a move and a destruction more (~225
    // instructions per parcel).
    try {
        deliver(source, serialization::message::from_bytes(p));
    } catch (serialization::serialization_error const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", source,
                               e.what());
    }
}

/// deliver_batch for a run of parcels whose `requests` requests (`bytes`, `record_bytes` as
/// records) fit one request_batch. A request alone goes in a batch of its own too: copied once
/// into the batch's small-object block and read where it lies there, where a message of its
/// own (deliver_one) cost a pooled buffer's copy, a message and a parcel task (the callee's
/// receipt of an 8 B call 982 -> 622 instructions, callgrind; a lone request as a batch of one
/// had measured 0.97x at 8 B posts before requests were read where they lie).
void deliver_run(std::uint32_t source, std::span<std::span<std::byte const> const> parcels,
                 std::size_t requests, std::size_t bytes, std::size_t record_bytes) {
    if (requests == 0) {
        for (auto p : parcels) {
            if (!deliver_flat_reply(source, p)) {
                deliver_one(source, p);
            }
        }
        return;
    }
    locality_state& st = here();
    heard_from(st, source);
    request_batch* b = request_batch::make(source, record_bytes);
    std::byte* at = b->records();
    for (auto p : parcels) {
        if (!is_request(p)) {
            // replies and control words at once, as deliver() does
            if (!deliver_flat_reply(source, p)) {
                deliver_one(source, p);
            }
            continue;
        }
        auto n = static_cast<std::uint32_t>(p.size());
        request_counts const c = count_request(p);
        if (c.user) {
            ++b->user_requests;
            b->user_bytes += n;
        }
        b->calls += c.call ? 1 : 0;
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
    if (parcels.size() == 1 && !is_request(parcels[0])) {
        // A lone small parcel that is no request (the transport's batch of one): a reply read
        // where it lies, else a message of its own, as deliver() would have had it. A lone
        // request goes on as a batch of one (deliver_run).
        if (!deliver_flat_reply(source, parcels[0])) {
            deliver_one(source, parcels[0]);
        }
        return;
    }
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

} // namespace courier::detail
