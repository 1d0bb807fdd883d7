// SPDX-License-Identifier: BSL-1.0
// Liveness: every locality tells each peer it is alive and notices a peer that stopped saying
// so, whichever launcher started the job. A thread per locality ticks every peer_timeout/10:
// it drives the transport once (so heartbeats flow while every worker is busy in a long task),
// sends each peer a heartbeat (one queued at most per peer: a stopped peer cannot make them pile
// up; by send_control, which need not wake an idle peer: its own tick reads it), and declares
// failed a peer from which nothing (heartbeat or parcel) arrived for 8 ticks:
// detection within peer_timeout of a kill, SIGSTOP or cut link. A tick in which this locality
// could not receive (another thread inside one long progress pass) counts as no silence, up to
// 2 x peer_timeout in a row (silence_clock.hpp): a peer is not blamed for this locality's
// deafness. A pass longer than that is wedged, and the watchdog ends the locality then. A failed
// peer's requests fail with network_error (peer_failed); with on_peer_failure=exit this locality
// then ends with status 1 after peer_timeout/2, as MPI jobs end, so that a launcher waiting on a
// stopped process (mpirun, srun) ends the job instead of hanging. A locality leaving normally says
// goodbye first, and its silence is then no failure.
#include "distributed.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "silence_clock.hpp"
#include "transport_watch.hpp"

#include <courier/serialization/output_archive.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

namespace courier::detail {

serialization::message control_word(parcel_kind kind) {
    serialization::message m;
    serialization::output_archive ar(m);
    ar.save(static_cast<std::uint8_t>(kind));
    return m;
}

namespace {

constexpr std::uint32_t ticks_per_timeout = 10;
constexpr std::uint32_t silent_ticks = 8; // declared after [7, 9) ticks of silence, < timeout

void beat(locality_state& st, std::uint32_t r) {
    auto& flag = st.live.beat_in_flight[r];
    if (flag.exchange(true, std::memory_order_acq_rel)) {
        return;
    }
    try {
        auto m = control_word(heartbeat);
        parcel_sent(st, r, m);
        transport_watch::call inside;
        // Never behind a long progress pass (an MPI call that copies a large message whole):
        // a heartbeat that waited for it would let the peer declare this locality failed.
        st.tp->send_control(r, std::move(m), [&flag](std::error_code) {
            flag.store(false, std::memory_order_release);
        });
    } catch (std::exception const&) {
        flag.store(false, std::memory_order_release); // refused: tried again next tick
    }
}

// What a killed locality leaves in /dev/shm.
void remove_shared_memory_of(std::string const& job_id, std::uint32_t rank) {
    std::error_code ec;
    std::string const name = shm_name(job_id, rank);
    std::filesystem::remove("/dev/shm/" + name, ec);
    std::filesystem::remove("/dev/shm/" + name + "-bell", ec);
    std::filesystem::remove("/dev/shm/" + name + "-outbox", ec);
    std::filesystem::remove("/dev/shm/" + name + "-rings", ec);
    std::filesystem::remove("/dev/shm/" + collective_inbox_name(job_id, rank), ec);
}

} // namespace

[[noreturn]] void end_now(locality_state& st) {
    static std::atomic<bool> ending{false};
    if (ending.exchange(true)) {
        transport_watch::sleep_for_good(); // the watchdog and the liveness thread may both end it
    }
    // Ending while a thread sends would leave the lock it holds in a peer's shared memory taken.
    transport_watch::close(std::chrono::seconds(1));
    parcelport::remove_shared_memory_files();
    for (std::uint32_t r = 0; r < st.size && !st.job_id.empty(); ++r) {
        if (r != st.rank && has_failed(st, r)) {
            remove_shared_memory_of(st.job_id, r);
        }
    }
    std::fflush(nullptr);
    std::_Exit(1);
}

namespace {

[[noreturn]] void end_locality(locality_state& st, std::uint32_t failed) {
    log(log_level::error,
        "ending locality {} with status 1 because locality {} failed "
        "(--courier:on_peer_failure=continue keeps it running)",
        st.rank, failed);
    end_now(st);
}

void run(locality_state& st) {
    // This thread's passes stay short (a transport leaves long work to the workers): its
    // heartbeats leave after them.
    parcelport::set_short_progress_only(true);
    auto const tick = std::max(st.live.timeout / ticks_per_timeout, std::chrono::milliseconds(10));
    auto exit_at = std::chrono::steady_clock::time_point::max();
    std::uint32_t first_failed = 0;
    silence_clock silence(2 * ticks_per_timeout); // the watchdog's limit (watch())
    std::unique_lock lk(st.live.mutex);
    while (!st.live.stopping) {
        st.live.cv.wait_for(lk, tick, [&] { return st.live.stopping; });
        if (st.live.stopping) {
            break;
        }
        lk.unlock();
        // Deaf: another thread has been inside one progress pass for the whole tick (this
        // thread's own pass below returns at once then: the transport's progress is one at a
        // time), so whatever peers sent meanwhile is still unread.
        // stuck_for() counts whole periods from the one the call began in: it may exceed the
        // time inside by up to one period, so one is taken off (a lower bound).
        bool deaf = transport_watch::progress_stuck_for() >= tick + transport_watch::period;
        std::uint32_t now = silence.tick(deaf)
                                ? st.live.tick.fetch_add(1, std::memory_order_relaxed) + 1
                                : st.live.tick.load(std::memory_order_relaxed);
        {
            transport_watch::call in_transport(transport_watch::kind::progress);
            progress_scope inside;
            st.tp->progress();
        }
        if (st.rings) {
            st.rings->unlink_when_mapped();
            st.rings->release_taken();
        }
        for (std::uint32_t r = 0; r < st.size; ++r) {
            if (r == st.rank || st.dead[r].load() || st.live.departed[r].load()) {
                continue;
            }
            std::uint32_t silent = now - st.live.heard[r].load(std::memory_order_relaxed);
            if (silent >= silent_ticks) {
                log(log_level::error,
                    "nothing arrived from locality {} for {:.1f} s (--courier:peer_timeout={}): "
                    "declaring it failed",
                    r, static_cast<double>(silent * tick.count()) / 1000.0,
                    static_cast<double>(st.live.timeout.count()) / 1000.0);
                peer_failed(r);
                if (st.live.exit_on_failure && exit_at == exit_at.max()) {
                    first_failed = r;
                    exit_at = std::chrono::steady_clock::now() + st.live.timeout / 2;
                }
                continue;
            }
            beat(st, r);
        }
        if (std::chrono::steady_clock::now() >= exit_at) {
            end_locality(st, first_failed);
        }
        // The messages this tick's pass freed (sends it completed: on tcp a pushed parcel's,
        // once the socket took it) go back to where the workers that build messages find them
        // (alloc.tcp.steady_parcels_do_not_allocate.100000B: up to 422 allocations per 14,400
        // parcels under load without this), and what the heartbeats took with them.
        serialization::message::return_thread_cache();
        lk.lock();
    }
}

/// Watches every thread's transport calls from outside the transport (transport_watch.hpp).
/// A transport call can block for good: libfabric's shm provider takes a spin lock in the
/// receiver's shared memory, and a peer stopped (SIGSTOP) or ended while holding it leaves
/// every sender to that receiver spinning. A worker stuck so is lost to the job, and the
/// liveness thread stuck so never beats nor checks: this locality would never end. A call
/// inside for 2 x peer_timeout, or for 2-5 s once a peer is known to have failed (no call blocks;
/// the longest that work, progress passes serving a peer's reads of gigabytes over tcp, take
/// seconds on busy cores), ends the locality with status 1 under on_peer_failure=exit, and is
/// logged in both modes.
void watch(locality_state& st) {
    auto const normal = 2 * st.live.timeout;
    // After a failure, a pass may also free what a dropped parcel held: ThreadSanitizer took
    // over 2 s to free a 2 GiB landing buffer (its meta map, range by range), so the limit
    // grows with peer_timeout (sanitized test runs set 20 s), from 2 s up to 5 s.
    auto const after_failure = std::min<std::chrono::milliseconds>(
        normal, std::clamp<std::chrono::milliseconds>(st.live.timeout / 4, std::chrono::seconds(2),
                                                      std::chrono::seconds(5)));
    bool said = false;
    std::unique_lock lk(st.live.mutex);
    while (!st.live.watchdog_stopping) {
        st.live.cv.wait_for(lk, transport_watch::period, [&] { return st.live.watchdog_stopping; });
        transport_watch::advance();
        if (st.live.watchdog_stopping) {
            break;
        }
        auto stuck = transport_watch::stuck_for();
        if (stuck.count() == 0) {
            said = false; // a stuck call that returned after all is said again next time
            continue;
        }
        std::int64_t failed = first_failed_peer(st);
        if (said || stuck < (failed >= 0 ? after_failure : normal)) {
            continue;
        }
        said = true;
        log(log_level::error,
            "a thread has been inside a transport call for {:.1f} s ({}): a peer that ended or "
            "stopped while holding a lock in shared memory leaves its senders spinning",
            std::chrono::duration<double>(stuck).count(),
            failed >= 0 ? fmt::format("locality {} has failed", failed)
                        : fmt::format("--courier:peer_timeout={}",
                                      static_cast<double>(st.live.timeout.count()) / 1000.0));
        if (st.live.exit_on_failure) {
            log(log_level::error,
                "ending locality {} with status 1 (--courier:on_peer_failure=continue keeps it "
                "running)",
                st.rank);
            lk.unlock();
            end_now(st);
        }
    }
}

} // namespace

void liveness_start(locality_state& st) {
    if (st.live.timeout.count() == 0 || st.size < 2) {
        return;
    }
    st.live.thread = std::thread([&st] { run(st); });
    st.live.watchdog = std::thread([&st] { watch(st); });
}

namespace {
/// Raises `flag` (under the liveness mutex, which both threads wait on) and joins `t`.
void stop_thread(locality_state& st, bool& flag, std::thread& t) {
    {
        std::lock_guard lk(st.live.mutex);
        flag = true;
        st.live.cv.notify_all();
    }
    t.join();
}
} // namespace

void liveness_stop(locality_state& st) {
    if (!st.live.thread.joinable()) {
        return;
    }
    // A peer that is not told misses this locality only if it outlives it by peer_timeout.
    auto left = std::make_shared<std::atomic<int>>(0);
    { // inside the transport for the goodbyes only, not while joining the threads below
        transport_watch::call in_transport;
        for (std::uint32_t r = 0; r < st.size; ++r) {
            if (r != st.rank && !st.dead[r].load()) {
                left->fetch_add(1);
                try {
                    auto m = control_word(goodbye);
                    parcel_sent(st, r, m);
                    st.tp->send(r, std::move(m), [left](std::error_code) { left->fetch_sub(1); });
                } catch (std::exception const&) {
                    left->fetch_sub(1);
                }
            }
        }
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
        progress_scope inside;
        while (left->load() > 0 && std::chrono::steady_clock::now() < until) {
            if (!st.tp->progress()) {
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
        }
    }
    // The heartbeat thread may be wedged in a transport call (a heartbeat sent just before the
    // peer's failure was known, to a peer that died holding the lock of its shared memory):
    // then this never returns, and the watchdog, still running, ends the locality
    // (on_peer_failure=exit; with continue it only logs the wedge).
    stop_thread(st, st.live.stopping, st.live.thread);
}

void watchdog_stop(locality_state& st) {
    if (st.live.watchdog.joinable()) {
        stop_thread(st, st.live.watchdog_stopping, st.live.watchdog);
    }
}

bool distributed_failed() {
    locality_state& st = here();
    return st.live.exit_on_failure && any_peer_failed(st);
}

std::int64_t first_failed_peer(locality_state const& st) {
    for (std::uint32_t r = 0; r < st.dead.size(); ++r) {
        if (st.dead[r].load()) {
            return r;
        }
    }
    return -1;
}

bool any_peer_failed(locality_state& st) {
    return first_failed_peer(st) >= 0;
}

} // namespace courier::detail
