// SPDX-License-Identifier: BSL-1.0
// Failed localities: what this locality waits for when the job overruns (diagnosis), and failing
// every request to a locality the launcher reported dead.
#include "locality_state.hpp"
#include "log.hpp"
#include "scheduler.hpp"

#include <fmt/format.h>

namespace courier::detail {

// The launcher's job time limit ran out: say what this locality is waiting for.
void log_diagnosis() {
    locality_state& st = here();
    std::size_t pending = 0, control = 0;
    std::string dests;
    st.pending.for_each_published([&](auto& slot, std::uint64_t id) {
        ++(slot.value.control.load(std::memory_order_relaxed) ? control : pending);
        if (dests.size() < 200) {
            dests += fmt::format(" {}->{}", id, slot.value.dest.load(std::memory_order_relaxed));
        }
    });
    bool exiting = false;
    {
        std::lock_guard lk(st.exit_mutex);
        exiting = st.exit_requested;
    }
    auto* s = current_scheduler();
    // The counts live partly in the workers: without the scheduler (stopped) they are unknown.
    std::string counts = "unknown (no scheduler)";
    if (s != nullptr) {
        termination_counts const t = termination_counts_of(st, s);
        counts = fmt::format("sent {} received {}, sends in flight {}", t.user_sent,
                             t.user_received, t.sends_in_flight);
    }
    log(log_level::error,
        "diagnosis of locality {}: live tasks {}, requests awaiting replies {} (+{} control){}, "
        "user parcels {}, exit requested {}; transport: {}",
        st.rank, s != nullptr ? s->live_tasks() : 0, pending, control, dests, counts, exiting,
        st.tp->debug_state());
}

// A locality is gone: every request waiting on it fails with network_error, and so will every
// later one; a task blocked in get() on it wakes up with the exception.
void peer_failed(std::uint32_t rank) {
    locality_state& st = here();
    if (rank >= st.dead.size() || st.dead[rank].exchange(true)) {
        return;
    }
    log(log_level::error, "locality {} has failed", rank);
    if (st.tp) {
        st.tp->peer_failed(rank); // e.g. its mapped memory, which would stay resident
    }
    flow_peer_failed(st, rank); // senders waiting for its credits wake up and fail
    collectives_peer_failed(st, rank);
    std::vector<completion> failed;
    st.pending.for_each_published([&](auto& slot, std::uint64_t id) {
        // dest was read after the id: if the slot is claimed (and reused) meanwhile, the
        // claim fails, so a dest of another request never takes this one.
        if (slot.value.dest.load(std::memory_order_relaxed) == rank) {
            if (completion done = take_pending(id)) {
                failed.push_back(std::move(done));
            }
        }
    });
    for (auto& done : failed) {
        // Made before done() runs: a temporary alive during the wake-up would share its
        // message with the waiter and free it here after the waiter read it.
        auto error = std::make_exception_ptr(
            network_error("courier: locality " + std::to_string(rank) + " has failed"));
        done(nullptr, std::move(error));
    }
}

} // namespace courier::detail
