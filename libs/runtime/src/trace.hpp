// SPDX-License-Identifier: BSL-1.0
// --courier:trace=PATH: a per-locality record of tasks, parcels and RMA reads, written at
// shutdown as a Chrome trace-event JSON file (trace.cpp has the file's layout).
//
// Cost. Off, every hook is one load of g_active and a branch never taken (the scheduler picks
// its task loop once per batch of tasks). On, an event costs a stamp() and an append: a task
// one stamp (a slice ends where the next one on its worker begins), a suspension one more.
// Stamps are the TSC where the kernel keeps CLOCK_MONOTONIC on it (rdtsc: about a third of a
// clock_gettime on a KVM guest), else steady_clock; the file gets CLOCK_MONOTONIC. Each worker
// appends to its own buffer without a lock (one writer); threads that are not workers (the
// liveness thread, the main thread at shutdown) share one buffer under a mutex. Buffers grow
// in blocks reserved from a per-locality budget of events (the only atomic that writers
// share, touched once per block); past it, events are dropped and counted.
//
// Lifetime. init() creates the recorder before the workers start and publishes it; it takes it
// back and writes the file once every thread that records has been joined, so the buffers are
// read by one thread after their writers are gone.
#pragma once

#include <courier/serialization/message.hpp>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace courier::detail {
class scheduler;
class worker;
} // namespace courier::detail

namespace courier::detail::trace {

enum class event_kind : std::uint8_t { task, parcel_sent, parcel_received, rma_read };

/// One recorded event; times are stamps (stamp()).
struct event {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;        // tasks and RMA reads; = begin for parcels
    std::uint64_t bytes = 0;      // parcels: index + external chunks; RMA reads: bytes read
    std::uint64_t zero_copy = 0;  // parcels: bytes in pointer and rma chunks
    std::uint64_t request_id = 0; // parcels that carry one (requests, replies)
    std::uint32_t peer = 0;       // parcels and RMA reads: the other locality
    event_kind kind = event_kind::task;
    std::uint8_t parcel_kind = 0; // the parcel's first byte (locality_state.hpp's parcel_kind)
    bool flag = false;            // tasks: ran to completion (else suspended); parcels: control
};

/// Events of one writer, in blocks. Its counts may be read by any thread meanwhile; its events
/// only once the writer is gone. A cache line of its own: the workers' buffers are written at
/// once.
class alignas(64) buffer {
public:
    /// Appends `e`, taking a new block from `budget` when the current one is full; false (and
    /// counted) when the budget is spent.
    bool push(event const& e, std::atomic<std::int64_t>& budget);
    std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
    std::uint64_t size() const noexcept { return kept_.load(std::memory_order_relaxed); }
    template <class F>
    void for_each(F&& f) const {
        for (std::size_t b = 0; b < blocks_.size(); ++b) {
            std::size_t n = b + 1 == blocks_.size() ? used_ : blocks_[b].capacity;
            for (std::size_t i = 0; i < n; ++i) {
                f(blocks_[b].events[i]);
            }
        }
    }

private:
    struct unmap {
        std::size_t bytes;
        void operator()(event* p) const noexcept;
    };
    /// Mapped with its pages populated: the first write to an event costs no page fault.
    struct block {
        std::unique_ptr<event[], unmap> events;
        std::size_t capacity;
    };
    std::vector<block> blocks_;
    std::size_t used_ = 0;                            // in the last block
    std::atomic<std::uint64_t> kept_{0}, dropped_{0}; // one writer: load and store
};

class recorder {
public:
    /// Buffers for the workers of `s` and one for other threads; at most `max_events` events.
    recorder(scheduler const& s, std::uint64_t max_events);

    /// A task ran on the calling worker `w` from stamp `begin` to stamp `end`: it completed, or
    /// it suspended (`completed` false) and a later slice continues it.
    void task(worker& w, std::uint64_t begin, std::uint64_t end, bool completed) noexcept;
    /// A parcel to (sent) or from (received) `peer`, of `total` bytes, `zero_copy` of them
    /// in external chunks. Called on any thread.
    void parcel(bool sent, std::uint32_t peer, serialization::message const& m, std::uint64_t total,
                std::uint64_t zero_copy) noexcept;
    /// RMA reads of `bytes` from `peer`, the first posted at `begin`, just completed.
    void rma_read(std::uint32_t peer, std::uint64_t bytes,
                  std::chrono::steady_clock::time_point begin) noexcept;

    /// Events kept and dropped so far (exact once the writers are gone).
    std::uint64_t events() const;
    std::uint64_t dropped() const;
    std::uint64_t limit() const noexcept { return limit_; }

    /// Writes the Chrome trace-event JSON (once the writers are gone). Returns false (errno
    /// set) if the file cannot be written.
    bool write(std::string const& path, std::uint32_t locality) const;

private:
    void record(event const& e) noexcept;
    std::uint64_t total(std::uint64_t (buffer::*count)() const noexcept) const;

    /// Stamps to CLOCK_MONOTONIC nanoseconds: the stamp and the time at the recorder's start.
    std::uint64_t stamp0_, ns0_;
    std::uint64_t to_ns(std::uint64_t stamp, double ns_per_tick) const noexcept;
    double ns_per_tick() const noexcept;

    scheduler const& sched_;
    std::uint64_t limit_;
    std::atomic<std::int64_t> budget_;
    std::vector<std::unique_ptr<buffer>> workers_;
    mutable std::mutex others_mutex_;
    buffer others_;
};

/// The recorder of the running runtime; nullptr when tracing is off.
extern std::atomic<recorder*> g_active;
inline recorder* active() noexcept {
    return g_active.load(std::memory_order_acquire);
}

/// steady_clock now, in nanoseconds.
std::uint64_t now_ns() noexcept;

/// Whether stamp() reads the TSC (decided when a recorder is made, before the workers start).
extern bool g_tsc;
/// An event's timestamp: TSC ticks, or steady_clock nanoseconds.
inline std::uint64_t stamp() noexcept {
#if defined(__x86_64__)
    if (g_tsc) {
        return __rdtsc();
    }
#endif
    return now_ns();
}

/// PATH with ".LOCALITY" inserted before the file name's extension: "out/trace.json", 2 ->
/// "out/trace.2.json"; "trace" -> "trace.2".
std::string file_for_locality(std::string const& path, std::uint32_t locality);

} // namespace courier::detail::trace
