// SPDX-License-Identifier: BSL-1.0
// poll_pacer: how often a quiet network rail reads its completion queue. Over tcp every fi_cq_read
// runs the provider's progress, an epoll_wait over its sockets (a system call). In a job across
// hosts one progress loop serves both rails, and reading the tcp queue on every pass made a call to
// a locality on the same host (shm rings, no system call) take 2.1x as long as in a one-host job
// (1.31 against 0.61 us at 8 B), and 3.5x on a machine whose system calls cost more (5.2 against
// 1.5 us; benchmarks/RESULTS.md, "Across hosts"). So while the rail is quiet (nothing found and
// nothing sent for `quiet_after`, and no transfer of its own under way) it reads its queue once per
// interval; any activity brings it back to every pass.
//
// The interval is fixed, or (auto) `share` times the measured cost of a quiet read, within
// [min_interval, max_interval]: a quiet rail then takes about 1/share of the loop's time, on a host
// where a system call costs 0.2 us (an interval of 4 us) as on one where it costs 2 us (40 us).
//
// `quiet_after` (2 ms) is longer than an idle worker spins before it sleeps by default (50 us,
// 1 ms after it found work; --courier:idle_spin_us): a worker with nothing else to do sleeps on
// the rails' wait fds before its rail turns quiet, and a worker woken by one (or after a sleep)
// finds its last read older than the interval. So the pacing only acts while other work (the same
// host's traffic, tasks) keeps the loop going, and then adds at most one interval to a message that
// ends a quiet spell.
//
// Thread safety: due() and polled() by the transport's poller (under its poll lock); kick() on any
// thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace courier::parcelport::fabric {

class poll_pacer {
public:
    using clock = std::chrono::steady_clock;
    static constexpr std::int64_t share = 20;
    static constexpr std::int64_t min_interval = 2'000;   // ns
    static constexpr std::int64_t max_interval = 100'000; // ns

    /// `interval`: 0 reads on every pass (no pacing); negative: auto (from the read's cost).
    poll_pacer(std::chrono::nanoseconds interval, std::chrono::nanoseconds quiet_after) noexcept
        : auto_(interval.count() < 0), enabled_(interval.count() != 0),
          interval_(auto_ ? min_interval : interval.count()), quiet_after_(quiet_after.count()) {}

    bool enabled() const noexcept { return enabled_; }
    /// The current interval between quiet reads, ns (by the poller).
    std::int64_t interval() const noexcept { return interval_; }

    /// Something was sent: the next pass reads (its completion, and the reply it may bring).
    void kick() noexcept {
        if (enabled() && !kicked_.load(std::memory_order_relaxed)) {
            kicked_.store(true, std::memory_order_relaxed);
        }
    }

    /// Whether this pass reads the queue, at `now_ns`; `busy()` (called only when the rest says
    /// no): a transfer of this rail is under way, whose bytes move only while it is progressed.
    template <class Busy>
    bool due(std::int64_t now_ns, Busy const& busy) {
        if (!enabled()) {
            return true;
        }
        if (kicked_.load(std::memory_order_relaxed)) {
            kicked_.store(false, std::memory_order_relaxed);
            last_active_ = now_ns;
            return true;
        }
        return now_ns - last_active_ < quiet_after_ || now_ns - last_read_ >= interval_ || busy();
    }

    /// Whether a read now would be a quiet one (whose cost polled() should be told).
    bool quiet(std::int64_t now_ns) const noexcept {
        return auto_ && now_ns - last_active_ >= quiet_after_;
    }

    /// The queue was read at `now_ns`; `found`: it had completions. `cost_ns` (auto, quiet
    /// reads that found nothing; else 0): how long the read took.
    void polled(std::int64_t now_ns, bool found, std::int64_t cost_ns = 0) noexcept {
        last_read_ = now_ns;
        if (found) {
            last_active_ = now_ns;
        } else if (auto_ && cost_ns > 0) {
            // A moving average over ~8 reads: one descheduled read does not set the interval.
            cost_ = cost_ == 0 ? cost_ns : cost_ + (cost_ns - cost_) / 8;
            interval_ = std::clamp(share * cost_, min_interval, max_interval);
        }
    }

    static std::int64_t now() noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch())
            .count();
    }

private:
    bool const auto_;
    bool const enabled_;
    std::int64_t interval_; // by the poller
    std::int64_t const quiet_after_;
    std::atomic<bool> kicked_{false};
    std::int64_t last_read_ = 0;   // by the poller
    std::int64_t last_active_ = 0; // by the poller
    std::int64_t cost_ = 0;        // by the poller: the average quiet read, ns
};

} // namespace courier::parcelport::fabric
