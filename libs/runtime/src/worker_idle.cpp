// SPDX-License-Identifier: BSL-1.0
// An idle worker (scheduler.hpp): it polls the progress hooks and looks for work for a while,
// then sleeps in ppoll() on its eventfd and the hooks' wait fds until woken, a timer is due or a
// bounded backoff ends.
#include "scheduler.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <thread>

namespace courier::detail {

namespace {

/// A worker's time in idle(), for /threads/idle-rate: the owner adds each period when it ends;
/// the start of the current one lets readers count it while it lasts.
class idle_period {
public:
    idle_period(worker& w, std::chrono::steady_clock::time_point begin) noexcept
        : w_(w), begin_(ns_of(begin)) {
        w_.idle_since_ns.store(begin_, std::memory_order_relaxed);
    }
    ~idle_period() {
        std::uint64_t end = ns_of(std::chrono::steady_clock::now());
        // The open period closes before its time is added: a reader may miss it, never see it
        // twice (both in idle_ns and from idle_since_ns).
        w_.idle_since_ns.store(0, std::memory_order_release);
        w_.idle_ns.store(w_.idle_ns.load(std::memory_order_relaxed) + (end - begin_),
                         std::memory_order_release);
    }
    idle_period(idle_period const&) = delete;
    idle_period& operator=(idle_period const&) = delete;

private:
    worker& w_;
    std::uint64_t begin_;
};

} // namespace

bool worker_has_work(worker const& w) noexcept {
    if (w.stash != 0 || w.deque.maybe_nonempty() ||
        w.inbox_size.load(std::memory_order_seq_cst) > 0 || !w.yielded.empty()) {
        return true;
    }
    for (auto const& v : w.sched.workers()) {
        if (v.get() != &w &&
            (v->deque.maybe_nonempty() || v->inbox_size.load(std::memory_order_seq_cst) > 0)) {
            return true;
        }
    }
    return false;
}

bool worker::poll_once() {
    bool polled = false;
    if (sched.has_hooks()) {
        // A pass now: the next one forced between tasks (progress_interval) counts from here,
        // not from the last forced one. A locality that goes idle between short bursts (a
        // stream of batches) polled here and again a few tasks into the next burst, where that
        // pass mostly found nothing (~90 instructions per request of an 8 B message stream).
        since_progress = 0;
        polled = sched.run_hooks();
    }
    if (polled || worker_has_work(*this) || sched.stopping()) {
        blind_sleep_us = 0;
        safety_sleep_us = 0;
        worked_since_sleep = true;
        return true;
    }
    return !timers.empty() && timers.top().first <= std::chrono::steady_clock::now();
}

void worker::idle() {
    auto spin = sched.options().idle_spin;
    if (worked_since_sleep && sched.has_hooks()) {
        // Work was found since the last sleep and a network hook is registered: keep polling
        // for up to 1 ms, so that a conversation in progress does not wait for a sleep to end.
        // A wake-up through ppoll costs 100s of µs on a VM, whether a wait fd (tcp) or the
        // doorbell (shm) rings it, and a hook without an fd backs off up to 1 ms: more than the
        // gaps between the messages of a transfer, so sleeping in them would add that to every
        // large message. Only a locality idle for longer than that sleeps.
        spin = std::max<std::chrono::microseconds>(spin, std::chrono::microseconds(1000));
    }
    // One pass before the idle period's clock is read (a pending timer is still checked
    // against it): a busy locality comes here between every two tasks and its first pass
    // mostly finds work (a clock read costs ~26 ns under kvm-clock, two per visit). Such a pass
    // is progress, not idle time: the idle period starts after it. With idle_spin_us=0 a worker
    // makes five passes before it sleeps (the deadline is read every fourth).
    if (poll_once()) {
        return;
    }
    auto const entered = std::chrono::steady_clock::now();
    idle_period period(*this, entered);
    auto until = entered + spin;
    for (unsigned pass = 1;; ++pass) {
        if (poll_once()) {
            return;
        }
        // No PAUSE here: under KVM, pause-loop exiting deschedules a vCPU that spins on PAUSE,
        // which costs far more wake-up latency than the spin saves.
        if (sched.options().oversubscribed) {
            std::this_thread::yield(); // a runnable worker of ours or of another locality
        }
        // The deadline every 4th pass: a pass is 0.1-0.3 us, the spin at least tens of us.
        if (pass % 4 == 0 && std::chrono::steady_clock::now() >= until) {
            break;
        }
    }

    sleeping.store(true, std::memory_order_seq_cst);
    sched.sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (worker_has_work(*this) || sched.stopping() ||
        (sched.has_hooks() && !sched.hooks_allow_sleep())) {
        sleeping.store(false, std::memory_order_relaxed);
        sched.sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        return;
    }
    pollfd fds[1 + scheduler::max_hooks];
    nfds_t nfds = 0;
    fds[nfds++] = {event_fd, POLLIN, 0};
    bool blind = false; // a hook that nothing can wake us for: sleep briefly, poll again
    auto coverage = parcelport::wait_coverage::complete; // the least complete fd's
    for (auto& h : sched.hooks_) {
        if (!h.active.load(std::memory_order_acquire)) {
            continue;
        }
        int fd = h.fd.load(std::memory_order_acquire);
        if (fd >= 0) {
            fds[nfds++] = {fd, POLLIN, 0};
            coverage = std::max(coverage, h.fd_coverage.load(std::memory_order_acquire));
        } else {
            blind = true;
        }
    }
    // Every wake-up costs (100s of us of CPU in a VM guest), so a sleep lasts as long as what
    // the fds may miss allows. An fd that some peers never ring (MPI across hosts): 10 ms, the
    // latency an idle locality adds for them. One that misses only on faults (a doorbell's lost
    // datagram): 10 ms after the last work, doubling to 100 ms while nothing happens, so that
    // an idle locality wakes ~10 times a second and a miss soon after a conversation still
    // costs little.
    long long timeout_us = 100'000;
    if (coverage == parcelport::wait_coverage::partial) {
        timeout_us = 10'000;
    } else if (coverage == parcelport::wait_coverage::rare_misses) {
        safety_sleep_us =
            safety_sleep_us == 0 ? 10'000 : std::min<std::uint32_t>(safety_sleep_us * 2, 100'000);
        timeout_us = safety_sleep_us;
    }
    if (blind) {
        // Bounded backoff: 50 us after the last work, doubling to 1 ms while nothing happens.
        // Wake-up latency of an idle locality is then at most 1 ms, at ~1000 wake-ups/s.
        blind_sleep_us =
            blind_sleep_us == 0 ? 50 : std::min<std::uint32_t>(blind_sleep_us * 2, 1000);
        timeout_us = blind_sleep_us;
    }
    if (!timers.empty()) {
        auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                        timers.top().first - std::chrono::steady_clock::now())
                        .count();
        timeout_us = std::clamp<long long>(left + 1, 0, timeout_us);
    }
    timespec ts{static_cast<time_t>(timeout_us / 1'000'000),
                static_cast<long>(timeout_us % 1'000'000 * 1000)};
    ::ppoll(fds, nfds, &ts, nullptr);
    worked_since_sleep = false;
    std::uint64_t drained;
    ssize_t ignored = ::read(event_fd, &drained, sizeof drained);
    (void)ignored;
    sleeping.store(false, std::memory_order_relaxed);
    sched.sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

void worker::wake() noexcept {
    if (sleeping.exchange(false, std::memory_order_acq_rel)) {
        std::uint64_t one = 1;
        ssize_t ignored = ::write(event_fd, &one, sizeof one);
        (void)ignored;
    }
}

} // namespace courier::detail
