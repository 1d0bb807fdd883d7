// SPDX-License-Identifier: BSL-1.0
// The parcel counters behind get_counters (counters.cpp): each worker counts the parcels it
// sends and receives in its own traffic_counters (one writer: plain loads and stores, no
// read-modify-write); other threads add to their locality's shared one. Readers sum them.
#pragma once

#include <courier/common/single_writer.hpp>
#include <courier/serialization/message.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace courier::detail {

struct locality_state;
class scheduler;

/// A cache line of its own: written on every parcel, beside fields other threads read.
struct alignas(64) traffic_counters {
    std::atomic<std::uint64_t> parcels_sent{0};
    std::atomic<std::uint64_t> bytes_sent{0};
    std::atomic<std::uint64_t> zero_copy_bytes{0}; // sent in pointer and rma chunks
    std::atomic<std::uint64_t> flat_sent{0};       // of the parcels sent: written flat
    std::atomic<std::uint64_t> parcels_received{0};
    std::atomic<std::uint64_t> bytes_received{0};
    std::atomic<std::uint64_t> flat_requests_run{0}; // of the received: read where they lie
    std::atomic<std::uint64_t> flat_replies{0};      // replies whose result was read so
    // Termination's counts: user parcels (not the runtime's control parcels) sent and received;
    // and sends handed to the transport and ended (completed or refused), whose difference is
    // what shutdown waits for. Summed over the workers, not one atomic each: a read-modify-write
    // per parcel costs ~10 ns where a locked instruction does (2 vCPU AMD EPYC guest), a
    // quarter of a small post's time with the others on its path.
    std::atomic<std::uint64_t> user_sent{0};
    std::atomic<std::uint64_t> user_received{0};
    std::atomic<std::uint64_t> sends_started{0};
    std::atomic<std::uint64_t> sends_ended{0};
};

/// Locality `st` hands a parcel to its transport for `dest` (not for itself): counted, and
/// traced when tracing is on. Any thread. `send_started`: the transport's send of it starts
/// now, counted for termination (sends_started; its end by count_send_ended).
void parcel_sent(locality_state& st, std::uint32_t dest, serialization::message const& m,
                 bool send_started = false) noexcept;
/// The same for a request written as a flat stream of `bytes` (send_post_flat,
/// send_call_flat) whose send starts now, while tracing is off, and its count_user_sent(st, 1):
/// one look for the counters.
void flat_request_sent(locality_state& st, std::uint64_t bytes) noexcept;
/// The same, into `c`: the calling worker's own counters, that worker being one of st's
/// (the flat senders know it already; one writer, so plain loads and stores).
inline void flat_request_sent(traffic_counters& c, std::uint64_t bytes) noexcept {
    add_single_writer(c.user_sent, 1);
    add_single_writer(c.parcels_sent, 1);
    add_single_writer(c.flat_sent, 1);
    add_single_writer(c.bytes_sent, bytes);
    add_single_writer(c.sends_started, 1);
}
/// A parcel from `source` reaches locality `st` (its own parcels are not counted).
void parcel_received(locality_state& st, std::uint32_t source,
                     serialization::message const& m) noexcept;
/// The same for `count` parcels of a single index chunk, `bytes` in all, while tracing is off.
void parcels_received(locality_state& st, std::uint32_t source, std::uint64_t count,
                      std::uint64_t bytes) noexcept;

/// Termination's counts of locality `st` (traffic_counters), on any thread: added to the calling
/// worker's counters if it is one of st's workers, else to st's shared ones. `sent` may be
/// negative: a counted parcel the transport refused.
void count_user_sent(locality_state& st, std::int64_t sent) noexcept;
void count_user_received(locality_state& st, std::uint64_t requests = 1) noexcept;
/// `requests` ran from their streams where they lie (handle_flat_request).
void count_flat_request_run(locality_state& st, std::uint64_t requests) noexcept;
/// A reply's result was read from its stream where it lies (deliver_flat_reply).
void count_flat_reply(locality_state& st) noexcept;
void count_send_ended(locality_state& st, std::uint64_t sends = 1) noexcept;
/// Their sums over st's shared counts and the workers of `s` (st's scheduler; nullptr: the
/// shared counts only).
struct termination_counts {
    std::uint64_t user_sent = 0;
    std::uint64_t user_received = 0;
    std::uint64_t sends_in_flight = 0; // handed to the transport and not ended
};
termination_counts termination_counts_of(locality_state& st, scheduler const* s) noexcept;

/// Every counter of locality `st`, whose workers are `s`'s (nullptr: none running).
std::map<std::string, double> local_counters(locality_state& st, scheduler const* s);

/// --courier:print_counters: writes this locality's local_counters() to stdout, one
/// "locality#R NAME VALUE" line each, sorted by name, in writes that whole lines never straddle.
void print_counters(scheduler const& s);

} // namespace courier::detail
