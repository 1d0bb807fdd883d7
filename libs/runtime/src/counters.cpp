// SPDX-License-Identifier: BSL-1.0
// Performance counters (courier/runtime/counters.hpp): the parcel counts kept here, the
// scheduler's, and the statistics structs of the transport, flow control and rma pool, under
// HPX-style names; read here or through an action on another locality.
#include "traffic.hpp"
#include <courier/common/single_writer.hpp>

#include "gid.hpp"
#include "locality_state.hpp"
#include "scheduler.hpp"
#include "trace.hpp"

#include <courier/common/fd_io.hpp>
#include <courier/rma/pool.hpp>
#include <courier/runtime/counters.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

namespace courier::detail {

namespace {

/// The calling thread's counters for locality `st`: its worker's if it is one of that
/// locality's workers (one writer), else nullptr (the shared ones, added to atomically).
traffic_counters* own_counters(locality_state& st) noexcept {
    return own_counters_of(current_worker(), st);
}

std::uint64_t external_bytes(serialization::message const& m) noexcept {
    std::uint64_t n = 0;
    for (auto const& c : m.chunks()) {
        if (c.type != serialization::chunk_type::index) {
            n += c.size;
        }
    }
    return n;
}

} // namespace

void parcel_sent(locality_state& st, std::uint32_t dest, serialization::message const& m,
                 bool send_started) noexcept {
    std::uint64_t const zero_copy = external_bytes(m);
    std::uint64_t const total = m.index_size() + zero_copy;
    if (traffic_counters* c = own_counters(st)) {
        add_single_writer(c->parcels_sent, 1);
        add_single_writer(c->bytes_sent, total);
        add_single_writer(c->zero_copy_bytes, zero_copy);
        if (send_started) {
            add_single_writer(c->sends_started, 1);
        }
    } else {
        st.traffic.parcels_sent.fetch_add(1, std::memory_order_relaxed);
        st.traffic.bytes_sent.fetch_add(total, std::memory_order_relaxed);
        st.traffic.zero_copy_bytes.fetch_add(zero_copy, std::memory_order_relaxed);
        if (send_started) {
            st.traffic.sends_started.fetch_add(1, std::memory_order_acq_rel);
        }
    }
    if (trace::recorder* tracer = trace::active()) [[unlikely]] {
        tracer->parcel(true, dest, m, total, zero_copy);
    }
}

void flat_request_sent(locality_state& st, std::uint64_t bytes) noexcept {
    if (traffic_counters* c = own_counters(st)) {
        flat_request_sent(*c, bytes);
    } else {
        st.traffic.user_sent.fetch_add(1, std::memory_order_acq_rel);
        st.traffic.parcels_sent.fetch_add(1, std::memory_order_relaxed);
        st.traffic.flat_sent.fetch_add(1, std::memory_order_relaxed);
        st.traffic.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
        st.traffic.sends_started.fetch_add(1, std::memory_order_acq_rel);
    }
}

namespace {
/// Adds `by` to the `field` of the calling worker's counters (one writer: a load and a store),
/// or of st's shared ones (atomically) on any other thread.
void count(locality_state& st, std::atomic<std::uint64_t> traffic_counters::*field,
           std::uint64_t by) noexcept {
    if (traffic_counters* c = own_counters(st)) {
        add_single_writer(c->*field, by);
    } else {
        (st.traffic.*field).fetch_add(by, std::memory_order_acq_rel);
    }
}
} // namespace

void count_user_sent(locality_state& st, std::int64_t sent) noexcept {
    if (sent < 0) {
        // Modulo 2^64 on the shared count: a refusal's -1 cancels its +1 in a worker's count.
        st.traffic.user_sent.fetch_add(static_cast<std::uint64_t>(sent), std::memory_order_acq_rel);
        return;
    }
    count(st, &traffic_counters::user_sent, static_cast<std::uint64_t>(sent));
}

void count_user_received(locality_state& st, std::uint64_t requests) noexcept {
    count(st, &traffic_counters::user_received, requests);
}

void count_flat_request_run(locality_state& st, std::uint64_t requests) noexcept {
    count(st, &traffic_counters::flat_requests_run, requests);
}

void count_flat_reply(locality_state& st) noexcept {
    count(st, &traffic_counters::flat_replies, 1);
}

void count_send_ended(locality_state& st, std::uint64_t sends) noexcept {
    count(st, &traffic_counters::sends_ended, sends);
}

termination_counts termination_counts_of(locality_state& st, scheduler const* s) noexcept {
    // The ends first, then the starts: a send's start happens before its end, so any end these
    // reads see has its start seen too, and the difference never falls below the sends truly
    // in flight at some moment of the reads (never a false 0 while one is).
    std::uint64_t ended = st.traffic.sends_ended.load(std::memory_order_acquire);
    if (s != nullptr) {
        for (auto const& w : s->workers()) {
            ended += w->traffic.sends_ended.load(std::memory_order_acquire);
        }
    }
    termination_counts t;
    std::uint64_t started = st.traffic.sends_started.load(std::memory_order_acquire);
    t.user_sent = st.traffic.user_sent.load(std::memory_order_acquire);
    t.user_received = st.traffic.user_received.load(std::memory_order_acquire);
    if (s != nullptr) {
        for (auto const& w : s->workers()) {
            auto const& wt = w->traffic;
            started += wt.sends_started.load(std::memory_order_acquire);
            t.user_sent += wt.user_sent.load(std::memory_order_acquire);
            t.user_received += wt.user_received.load(std::memory_order_acquire);
        }
    }
    t.sends_in_flight = started - ended;
    return t;
}

void parcels_received(locality_state& st, std::uint32_t source, std::uint64_t count,
                      std::uint64_t bytes) noexcept {
    if (source == st.rank) {
        return;
    }
    if (traffic_counters* c = own_counters(st)) {
        add_single_writer(c->parcels_received, count);
        add_single_writer(c->bytes_received, bytes);
    } else {
        st.traffic.parcels_received.fetch_add(count, std::memory_order_relaxed);
        st.traffic.bytes_received.fetch_add(bytes, std::memory_order_relaxed);
    }
}

void parcel_received(locality_state& st, std::uint32_t source,
                     serialization::message const& m) noexcept {
    if (source == st.rank) {
        return; // its own parcel, delivered without the network
    }
    std::uint64_t const zero_copy = external_bytes(m);
    std::uint64_t const total = m.index_size() + zero_copy;
    parcels_received(st, source, 1, total);
    if (trace::recorder* tracer = trace::active()) [[unlikely]] {
        tracer->parcel(false, source, m, total, zero_copy);
    }
}

std::map<std::string, double> local_counters(locality_state& st, scheduler const* s) {
    std::map<std::string, double> c;
    auto put = [&](char const* name, auto value) { c[name] = static_cast<double>(value); };

    // Parcels: the shared counts plus every worker's.
    auto const& t = st.traffic;
    std::uint64_t sent = t.parcels_sent.load(std::memory_order_relaxed);
    std::uint64_t bytes_sent = t.bytes_sent.load(std::memory_order_relaxed);
    std::uint64_t zero_copy = t.zero_copy_bytes.load(std::memory_order_relaxed);
    std::uint64_t flat = t.flat_sent.load(std::memory_order_relaxed);
    std::uint64_t flat_run = t.flat_requests_run.load(std::memory_order_relaxed);
    std::uint64_t flat_replies = t.flat_replies.load(std::memory_order_relaxed);
    std::uint64_t received = t.parcels_received.load(std::memory_order_relaxed);
    std::uint64_t bytes_received = t.bytes_received.load(std::memory_order_relaxed);
    std::uint64_t executed = 0, idle_ns = 0;
    std::uint64_t const now = trace::now_ns();
    std::size_t workers = 0;
    double elapsed_ns = 0;
    if (s != nullptr) {
        auto const& ws = s->workers();
        workers = ws.size();
        for (auto const& w : ws) {
            auto const& wt = w->traffic;
            sent += wt.parcels_sent.load(std::memory_order_relaxed);
            bytes_sent += wt.bytes_sent.load(std::memory_order_relaxed);
            zero_copy += wt.zero_copy_bytes.load(std::memory_order_relaxed);
            flat += wt.flat_sent.load(std::memory_order_relaxed);
            flat_run += wt.flat_requests_run.load(std::memory_order_relaxed);
            flat_replies += wt.flat_replies.load(std::memory_order_relaxed);
            received += wt.parcels_received.load(std::memory_order_relaxed);
            bytes_received += wt.bytes_received.load(std::memory_order_relaxed);
            executed += w->completed.load(std::memory_order_relaxed);
            // The finished periods, then the current one (read in this order, a period that
            // ends in between is missed rather than counted twice).
            idle_ns += w->idle_ns.load(std::memory_order_acquire);
            std::uint64_t since = w->idle_since_ns.load(std::memory_order_acquire);
            if (since != 0 && since < now) {
                idle_ns += now - since;
            }
        }
        std::uint64_t start = s->started_ns(), stop = s->stopped_ns();
        std::uint64_t end = stop != 0 ? stop : now;
        elapsed_ns = start != 0 && end > start ? static_cast<double>(end - start) : 0.0;
    }
    put("/parcels/count/sent", sent);
    put("/parcels/count/received", received);
    put("/parcels/bytes/sent", bytes_sent);
    put("/parcels/bytes/received", bytes_received);
    put("/parcels/bytes/zero-copy", zero_copy);
    put("/parcels/count/sent-flat", flat);
    put("/parcels/count/received-flat", flat_run);
    put("/parcels/count/replies-flat", flat_replies);

    collective_rings::statistics rs = st.rings ? st.rings->stats() : collective_rings::statistics{};
    put("/collectives/count/shm-sent", rs.sent);
    put("/collectives/count/shm-received", rs.received);
    put("/collectives/count/shm-nudges", rs.nudges);
    put("/collectives/bytes/shm-read", rs.bytes_read);

    put("/threads/count/executed", executed);
    put("/threads/count/os-threads", workers);
    double busy_ns = elapsed_ns * static_cast<double>(workers);
    put("/threads/idle-rate",
        busy_ns > 0 ? std::clamp(static_cast<double>(idle_ns) / busy_ns, 0.0, 1.0) : 0.0);
    put("/threads/time/idle", static_cast<double>(idle_ns) * 1e-9);
    put("/runtime/uptime", elapsed_ns * 1e-9);

    // The transport's statistics (all zero in a one-locality run).
    parcelport::statistics p = st.tp ? st.tp->stats() : parcelport::statistics{};
    put("/parcels/bytes/rma-read", p.rma_bytes_read);
    put("/parcelport/count/messages-sent", p.messages_sent);
    put("/parcelport/count/messages-received", p.messages_received);
    put("/parcelport/bytes/eager-sent", p.eager_bytes_sent);
    put("/parcelport/bytes/rma-read", p.rma_bytes_read);
    put("/parcelport/count/rma-reads", p.rma_reads);
    put("/parcelport/count/stalled-reads", p.stalled_reads);
    put("/parcelport/count/read-retries", p.read_retries);
    put("/parcelport/count/rendezvous-sends", p.rendezvous_sends);
    put("/parcelport/count/registrations", p.registrations);
    put("/parcelport/count/eagain-retries", p.eagain_retries);
    put("/parcelport/count/batches-sent", p.batches_sent);
    put("/parcelport/count/parcels-in-batches", p.parcels_in_batches);
    put("/parcelport/count/lone-batches", p.lone_batches);
    put("/parcelport/bytes/copied-on-send", p.bytes_copied_on_send);
    put("/parcelport/count/receive-buffers-reused", p.receive_buffers_reused);
    put("/parcelport/count/deferred-rendezvous", p.deferred_rendezvous);
    put("/parcelport/count/refused-parcels", p.refused_parcels);
    put("/parcelport/count/pool-chunks-sent", p.pool_chunks_sent);
    put("/parcelport/count/registration-cache-hits", p.registration_cache_hits);
    put("/parcelport/count/registration-cache-misses", p.registration_cache_misses);
    put("/parcelport/count/pool-receive-buffers", p.pool_receive_buffers);
    put("/parcelport/count/doorbell-rings", p.doorbell_rings);
    put("/parcelport/count/split-sends", p.split_sends);
    put("/parcelport/count/completion-queue-reads", p.completion_queue_reads);
    put("/parcelport/count/outbox-chunks-sent", p.outbox_chunks_sent);
    put("/parcelport/count/outbox-chunks-received", p.outbox_chunks_received);
    put("/parcelport/bytes/outbox-received", p.outbox_bytes_received);
    put("/parcelport/bytes/mapped-read", p.mapped_read_bytes);
    put("/parcelport/count/direct-reads", p.direct_reads);
    put("/parcelport/count/done-messages", p.done_messages);
    put("/parcelport/count/pushed-sends", p.pushed_sends);
    put("/parcelport/count/pushed-receives", p.pushed_receives);
    put("/parcelport/count/pushed-bytes-received", p.pushed_bytes_received);
    put("/parcelport/count/ring-messages-sent", p.ring_messages_sent);
    put("/parcelport/count/ring-messages-received", p.ring_messages_received);
    put("/parcelport/count/ring-refusals", p.ring_refusals);
    put("/parcelport/count/ring-lone-writes", p.ring_lone_writes);

    // Flow control (get_flow_statistics' fields, read from `st`).
    auto const& f = st.flow;
    std::int64_t out_parcels = 0, out_bytes = 0, in_parcels = 0, in_bytes = 0;
    for (auto const& k : f.out) {
        auto const [parcels, bytes] = k.load();
        out_parcels += parcels;
        out_bytes += bytes;
    }
    for (auto const& k : f.in) {
        auto const [parcels, bytes] = k.load();
        in_parcels += parcels;
        in_bytes += bytes;
    }
    put("/flow/window/parcels", f.window_parcels);
    put("/flow/window/bytes", f.window_bytes);
    put("/flow/in-flight/parcels", out_parcels);
    put("/flow/in-flight/bytes", out_bytes);
    put("/flow/unreturned/parcels", in_parcels);
    put("/flow/unreturned/bytes", in_bytes);
    put("/flow/count/waits", f.waits.load(std::memory_order_relaxed));
    put("/flow/count/overdrafts", f.overdrafts.load(std::memory_order_relaxed));
    put("/flow/count/credits-sent", f.credits_sent.load(std::memory_order_relaxed));
    put("/flow/count/credits-received", f.credits_received.load(std::memory_order_relaxed));

    // The process's rma pool.
    rma::pool_statistics r = rma::get_pool_statistics();
    put("/rma/pool/bytes-in-use", r.bytes_in_use);
    put("/rma/pool/bytes-registered", r.bytes_registered);
    put("/rma/pool/bytes-shared", r.bytes_shared);
    put("/rma/pool/bytes-peak-in-use", r.peak_bytes_in_use);
    put("/rma/pool/count/allocations", r.allocations);
    put("/rma/pool/count/registrations", r.registrations);
    put("/rma/pool/count/deregistrations", r.deregistrations);
    put("/rma/pool/count/cache-hits", r.cache_hits);
    put("/rma/pool/count/cache-misses", r.cache_misses);
    put("/rma/pool/count/refused", r.refused);
    put("/rma/pool/count/adopted-loads", r.adopted_loads);
    put("/rma/pool/count/copied-loads", r.copied_loads);

    if (trace::recorder* tracer = trace::active()) {
        put("/trace/count/events", tracer->events());
        put("/trace/count/dropped", tracer->dropped());
    }
    return c;
}

void print_counters(scheduler const& s) {
    locality_state& st = here();
    auto counters = local_counters(st, &s);
    // Lines go out in writes of whole lines of at most PIPE_BUF bytes, which a pipe never
    // interleaves with another locality's writes.
    std::string chunk;
    auto flush = [&] {
        (void)io::write_all(STDOUT_FILENO, chunk.data(), chunk.size()); // stdout gone: lost
        chunk.clear();
    };
    std::fflush(stdout); // what the program printed comes first
    for (auto const& [name, value] : counters) {
        // Whole values (counts, and a rate or time that happens to be whole) without decimals,
        // the others with six.
        bool integral = value == std::floor(value) && std::fabs(value) < 9.007199254740992e15;
        std::string line = integral ? fmt::format("locality#{} {} {:.0f}\n", st.rank, name, value)
                                    : fmt::format("locality#{} {} {:.6f}\n", st.rank, name, value);
        if (chunk.size() + line.size() > PIPE_BUF) {
            flush();
        }
        chunk += line;
    }
    flush();
}

std::map<std::string, double> counters_here() {
    return local_counters(here(), current_scheduler());
}

} // namespace courier::detail

COURIER_PLAIN_ACTION(courier::detail::counters_here, courier_get_counters_action);

namespace courier {

std::map<std::string, double> get_counters(id_type const& locality) {
    if (get_locality_id(locality) == get_locality_id()) {
        return detail::counters_here();
    }
    return get_counters_async(locality).get();
}

future<std::map<std::string, double>> get_counters_async(id_type const& locality) {
    std::uint32_t rank = get_locality_id(locality);
    if (rank == get_locality_id()) {
        return make_ready_future(detail::counters_here());
    }
    return async<courier_get_counters_action>(detail::locality_id(rank));
}

} // namespace courier
