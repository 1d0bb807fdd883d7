// SPDX-License-Identifier: BSL-1.0
// in_process_job: several localities in one process, each with its own scheduler and
// locality_state, joined by the loopback transport (courier/parcelport/loopback.hpp), for fast
// unit tests of remote actions, components and collectives, with faults injected through the
// hub. The runtime's code runs unchanged: a worker finds its locality through its scheduler
// (scheduler::locality), so here(), find_here() and the parcel protocol act for the locality
// whose worker runs them. The multi-process tests over real libfabric providers stay; this is
// beside them, not instead.
//
// Thread safety: construct, run_on and destroy from one (non-worker) thread, while no
// courier::init runtime runs in the process (the constructor throws std::logic_error then). Errors:
// run_on rethrows what the body threw; the destructor stops every locality even when work is left
// (after waiting up to drain_timeout for it).
#pragma once

#include "locality_state.hpp"
#include "scheduler.hpp"

#include <courier/parcelport/loopback.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace courier::detail {

struct in_process_options {
    std::uint32_t localities = 3;
    std::size_t threads = 1; ///< workers per locality
    std::uint64_t seed = 1;  ///< the loopback hub's fault generator
    std::chrono::milliseconds drain_timeout{10000};
    /// Flow control's window of each pair (parcels, bytes); 0 parcels: none (the default).
    std::int64_t flow_window_parcels = 0;
    std::int64_t flow_window_bytes = 0;
    /// Sees every parcel a locality receives, (destination, source, parcel), on the receiving
    /// worker before the runtime handles it (the wire fuzzer's corpus generator records them).
    std::function<void(std::uint32_t, std::uint32_t, serialization::message const&)> observer{};
};

class in_process_job {
public:
    explicit in_process_job(in_process_options const& o);
    ~in_process_job();
    in_process_job(in_process_job const&) = delete;
    in_process_job& operator=(in_process_job const&) = delete;

    parcelport::loopback_hub& hub() noexcept { return *hub_; }
    std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(localities_.size()); }

    /// Runs `f` as a Courier task on locality `rank`, waits for it, and returns its result
    /// (rethrowing what it threw).
    template <class F>
    auto run_on(std::uint32_t rank, F f) -> decltype(f()) {
        using R = decltype(f());
        if constexpr (std::is_void_v<R>) {
            run_task(rank, std::move(f));
        } else {
            std::optional<R> r;
            run_task(rank, [&] { r.emplace(f()); });
            return std::move(*r);
        }
    }
    /// Runs `f(rank)` as a task on every locality at once (SPMD: collectives) and waits for
    /// all; rethrows the first exception.
    void run_everywhere(std::function<void(std::uint32_t)> const& f);
    /// Waits until no task runs, no send or request is outstanding and no message is queued on
    /// any locality (twice in a row); false if that does not happen within `limit`.
    /// Checks every `poll`.
    bool drain(std::chrono::milliseconds limit,
               std::chrono::microseconds poll = std::chrono::milliseconds(1));
    /// Locality `rank`'s state (statistics, counts), for the tests' assertions.
    locality_state& state(std::uint32_t rank) { return localities_.at(rank)->state; }
    /// Locality `rank`'s termination counts (summed over its workers).
    termination_counts counts(std::uint32_t rank) {
        auto& l = *localities_.at(rank);
        return termination_counts_of(l.state, l.sched.get());
    }

private:
    struct locality {
        std::unique_ptr<scheduler> sched;
        locality_state state;
        std::size_t hook = static_cast<std::size_t>(-1);
    };
    void run_task(std::uint32_t rank, std::function<void()> body);

    in_process_options opts_;
    std::shared_ptr<parcelport::loopback_hub> hub_;
    std::vector<std::unique_ptr<locality>> localities_;
};

} // namespace courier::detail
