// SPDX-License-Identifier: BSL-1.0
// Termination: locality 0 probes every locality for {idle, parcels sent, parcels received}
// (user parcels only) until two consecutive rounds agree and sent == received (or received
// exceeds sent: forged parcels), then tells every locality to exit; the others wait for that
// word. Stopping waits for the last sends.
#include "distributed.hpp"
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "scheduler.hpp"

#include <courier/runtime/init.hpp>

#include <chrono>
#include <thread>
#include <tuple>

namespace courier::detail {
std::tuple<bool, std::uint64_t, std::uint64_t> quiescence_probe();
void exit_locality();
} // namespace courier::detail

COURIER_PLAIN_ACTION(courier::detail::quiescence_probe, courier_quiescence_probe_action);
COURIER_PLAIN_ACTION(courier::detail::exit_locality, courier_exit_locality_action);

namespace courier::detail {

static_assert(courier_quiescence_probe_action::id == quiescence_probe_id);
static_assert(courier_exit_locality_action::id == exit_locality_id);

std::tuple<bool, std::uint64_t, std::uint64_t> quiescence_probe() {
    locality_state& st = here();
    scheduler* s = current_scheduler();
    bool idle = s->live_tasks() <= 1 && pending_requests() == 0;
    termination_counts const t = termination_counts_of(st, s);
    return {idle, t.user_sent, t.user_received};
}

void exit_locality() {
    locality_state& st = here();
    std::lock_guard lk(st.exit_mutex);
    st.exit_requested = true;
    st.exit_cv.notify_all();
}

namespace {
/// Calls control action `Action` at locality `k` again when its call fails while `k` has not
/// failed (its request or reply lost with the link: both actions may run twice), up to a few
/// times; a failed locality's error goes to the caller.
template <class Action>
auto call_control(locality_state& st, std::uint32_t k) {
    constexpr int attempts = 5;
    for (int i = 1;; ++i) {
        try {
            return async<Action>(locality_id(k)).get();
        } catch (network_error const& e) {
            if (i == attempts || has_failed(st, k)) {
                throw;
            }
            log(log_level::warn, "shutdown: a call to locality {} failed ({}); calling again", k,
                e.what());
        }
    }
}
} // namespace

void distributed_shutdown_all() {
    locality_state& st = here();
    if (st.size <= 1) {
        return;
    }
    std::tuple<std::uint64_t, std::uint64_t> previous{~0ull, ~0ull};
    for (;;) {
        scheduler* sched = current_scheduler();
        bool idle = sched->live_tasks() == 0 && pending_requests() == 0;
        termination_counts const t = termination_counts_of(st, sched);
        std::uint64_t sent = t.user_sent, received = t.user_received;
        for (std::uint32_t k = 1; k < st.size; ++k) {
            auto [i, s, r] = call_control<courier_quiescence_probe_action>(st, k);
            idle = idle && i;
            sent += s;
            received += r;
        }
        std::tuple<std::uint64_t, std::uint64_t> now{sent, received};
        // More received than sent: parcels no locality of the job sent (forged by a peer that
        // holds the job token, or damaged into a request). Waiting for equality would wait
        // forever; a job whose counts stopped changing is quiet all the same.
        if (idle && sent <= received && now == previous) {
            if (sent < received) {
                log(log_level::error,
                    "the localities received {} more parcels than they sent (forged or damaged "
                    "ones, see the lines about rejected parcels)",
                    received - sent);
            }
            break;
        }
        previous = now;
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    for (std::uint32_t k = 1; k < st.size; ++k) {
        call_control<courier_exit_locality_action>(st, k);
    }
}

void distributed_wait_for_exit() {
    locality_state& st = here();
    std::unique_lock lk(st.exit_mutex);
    st.exit_cv.wait(lk, [&] { return st.exit_requested; });
}

void distributed_stop() {
    locality_state& st = here();
    // Let the last replies leave before the endpoint closes; a send to a failed locality may
    // never complete, so with a dead peer the wait is bounded.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (st.tp && termination_counts_of(st, current_scheduler()).sends_in_flight != 0) {
        if (any_peer_failed(st) && std::chrono::steady_clock::now() > until) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    liveness_stop(st); // its goodbyes still need the progress hook
    if (st.hook != static_cast<std::size_t>(-1)) {
        unregister_progress_hook(st.hook);
        st.hook = static_cast<std::size_t>(-1);
    }
}

} // namespace courier::detail
