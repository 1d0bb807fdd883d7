// SPDX-License-Identifier: BSL-1.0
// The scheduler: one worker OS thread per core, each with a Chase-Lev deque (new tasks and
// resumed threads, LIFO for the owner, FIFO for thieves), an inbox for work from other threads,
// a timer heap and a yield queue. Tasks run on "runner" fibers that execute task after task from
// the local deque without a context switch; a runner is only switched out when its task blocks
// (it keeps the task's stack) or when the deque has no new task. Idle workers run the progress
// hooks, spin for --courier:idle_spin_us, then sleep in poll() on an eventfd plus the hooks'
// wait fds.
#pragma once

#include "stack_pool.hpp"
#include "traffic.hpp"
#include "work_stealing_deque.hpp"

#include <courier/common/ring_fifo.hpp>
#include <courier/parcelport/wait_coverage.hpp>
#include <courier/runtime/detail/spinlock.hpp>
#include <courier/runtime/detail/task.hpp>

#include <boost/context/fiber.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <vector>

namespace courier::detail {
struct locality_state;
}

namespace courier::detail {

/// steady_clock nanoseconds of `t` (the idle and start/stop times).
inline std::uint64_t ns_of(std::chrono::steady_clock::time_point t) noexcept {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

struct fiber_ctx {
    enum class state : std::uint8_t { running, suspended, idle };
    boost::context::fiber cont; // where to resume it while it is switched out
    std::atomic<state> st{state::running};
    std::uintptr_t guard_lo = 0, guard_hi = 0;
    bool exit = false;
    void* tsan_fiber = nullptr; // ThreadSanitizer's handle (null in other builds)
    void* asan_save = nullptr;  // AddressSanitizer's fake-stack slot
    void const* stack_bottom = nullptr;
    std::size_t stack_size = 0;
    std::uint64_t trace_begin = 0; // tracing: the stamp at which its current slice began
    /// Called (and cleared) when this thread next suspends, before the worker moves on: the
    /// running task publishes work it kept to itself while it did not (request_batch).
    /// Must not throw.
    void (*on_suspend)(void*) noexcept = nullptr;
    void* on_suspend_arg = nullptr;
};

struct scheduler_options {
    std::size_t threads = 1;
    std::size_t stack_size = 64 * 1024;
    bool bind = true;
    std::size_t first_core = 0; ///< worker i is pinned to core first_core + i (mod cores)
    std::chrono::microseconds idle_spin{50};
    /// How long a task waiting in a collective (for a message, or for a receiver's copy of a
    /// value it lent) polls before it sleeps: its peers are in the same collective and answer
    /// soon, and a sleeper's wake-up costs 0.1-0.3 ms on a virtual machine.
    std::chrono::microseconds collective_spin{1000};
    /// More workers on this machine than cores (several localities, or --courier:threads
    /// above the core count): an idle worker yields its core while it spins.
    bool oversubscribed = false;
};

class scheduler;

class worker {
public:
    worker(scheduler& s, std::size_t index);
    ~worker();

    scheduler& sched;
    std::size_t const index;

    work_stealing_deque deque;
    // Work handed over by other threads.
    spinlock inbox_lock;
    std::vector<std::uintptr_t> inbox;
    std::atomic<std::size_t> inbox_size{0};
    // Owner-only state.
    // What this worker took from an inbox (its own or a victim's), swapped with it: the two
    // vectors trade buffers, so pushing and draining allocate nothing once both have grown.
    std::vector<std::uintptr_t> inbox_taken;
    boost::context::fiber sched_cont; // the worker's own context while a runner runs
    task* handoff = nullptr;          // the task a starting runner picks up
    void* handoff_stack = nullptr;    // the stack a new runner was given (for its guard)
    void* handoff_tsan = nullptr;     // ThreadSanitizer handle for a new runner
    void* tsan_self = nullptr;        // ThreadSanitizer handle of the worker's own context
    void* asan_save = nullptr;        // AddressSanitizer: the worker's own context
    void const* os_stack_bottom = nullptr;
    std::size_t os_stack_size = 0;
    bool asan_arrived = false; // a resume_with lambda already confirmed the switch
    std::uintptr_t stash = 0;  // an item a runner found but left to the scheduler
    std::vector<fiber_ctx*> idle_runners;
    std::vector<void*> stack_cache;
    ring_fifo<fiber_ctx*> yielded;
    using timer = std::pair<std::chrono::steady_clock::time_point, fiber_ctx*>;
    std::priority_queue<timer, std::vector<timer>, std::greater<>> timers;
    std::atomic<std::size_t> timer_count{0};
    std::uint32_t rng;
    std::uint32_t since_progress = 0;
    std::uint32_t blind_sleep_us = 0;  // backoff of sleeps with a hook that has no wait fd
    std::uint32_t safety_sleep_us = 0; // backoff of sleeps on fds that miss only on faults
    bool worked_since_sleep = true;    // found work since it last slept
    std::uint64_t trace_handoff = 0;   // tracing: the stamp a direct hand-off's slices share
    // Accounting (written by the owner, read by anyone).
    std::atomic<std::uint64_t> spawned{0};
    std::atomic<std::uint64_t> completed{0};
    std::atomic<std::uint64_t> idle_ns{0};       // time spent in idle(), finished periods
    std::atomic<std::uint64_t> idle_since_ns{0}; // start of the current period (0: busy)
    traffic_counters traffic;                    // parcels this worker sent and received
    // Sleeping.
    std::atomic<bool> sleeping{false};
    int event_fd = -1;

    std::thread thread;

    void main();
    void push_inbox(std::uintptr_t item);
    void drain_inbox();
    std::uintptr_t find_work();
    void idle();
    /// One idle pass: the progress hooks, then work anywhere, then a due timer (the clock is
    /// read only while a timer is pending); true if any.
    bool poll_once();
    void run_item(std::uintptr_t item);
    void start_task(task* t);
    void switch_to(fiber_ctx* f);
    void wake() noexcept;
};

struct progress_hook {
    std::function<bool()> poll;
    std::function<bool()> can_sleep;
    std::atomic<int> fd{-1}; // read by sleeping workers without the hook's running count
    /// What the fd may miss: how long a sleep on it may last (worker::idle()).
    std::atomic<parcelport::wait_coverage> fd_coverage{parcelport::wait_coverage::complete};
    std::atomic<bool> active{false};
    std::atomic<int> running{0};
};

/// Counts a call from outside the workers while it runs: ~scheduler waits for none to remain.
class external_op {
public:
    explicit external_op(std::atomic<int>& ops) noexcept : ops_(ops) {
        ops_.fetch_add(1, std::memory_order_acq_rel);
    }
    ~external_op() { ops_.fetch_sub(1, std::memory_order_release); }
    external_op(external_op const&) = delete;
    external_op& operator=(external_op const&) = delete;

private:
    std::atomic<int>& ops_;
};

class scheduler {
public:
    explicit scheduler(scheduler_options const& o);
    ~scheduler();

    void start();
    /// Stops the workers (after the caller established that no work remains) and joins them.
    void stop();

    void spawn(task* t);
    void make_ready(fiber_ctx* f) noexcept;
    /// Wakes one sleeping worker, if any.
    void notify_one() noexcept;
    bool has_sleepers() const noexcept { return sleepers_.load(std::memory_order_seq_cst) > 0; }

    /// Tasks spawned and not finished (a suspended task counts).
    std::int64_t live_tasks() const noexcept;
    /// True when every worker sleeps and nothing is queued or timed.
    bool all_idle() const noexcept;

    /// `fd`: readable when poll() has work (-1: none); `coverage`: what the fd may miss. A
    /// sleeper wakes to poll anyway after at most 100 ms on a complete fd, after 10 ms on a
    /// partial one, and on one that misses only on faults after 10 ms doubling to 100 ms while
    /// nothing happens.
    std::size_t
    register_hook(std::function<bool()> poll, int fd, std::function<bool()> can_sleep = nullptr,
                  parcelport::wait_coverage coverage = parcelport::wait_coverage::complete);
    /// Asks every hook whether a worker may block now (false: keep polling).
    bool hooks_allow_sleep();
    void unregister_hook(std::size_t id);
    /// Runs the progress hooks; true if one reported work.
    bool run_hooks();
    bool has_hooks() const noexcept { return hook_end_.load(std::memory_order_acquire) > 0; }

    scheduler_options const& options() const noexcept { return opts_; }
    stack_pool& stacks() noexcept { return stacks_; }
    std::vector<std::unique_ptr<worker>>& workers() noexcept { return workers_; }
    std::vector<std::unique_ptr<worker>> const& workers() const noexcept { return workers_; }
    bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }
    /// steady_clock nanoseconds at start() and at the end of stop() (0: not yet).
    std::uint64_t started_ns() const noexcept {
        return started_ns_.load(std::memory_order_acquire);
    }
    std::uint64_t stopped_ns() const noexcept {
        return stopped_ns_.load(std::memory_order_acquire);
    }

    std::atomic<int> sleepers_{0};
    /// The locality these workers serve when several run in one process (in_process.hpp);
    /// nullptr: the process's one locality (locality_state.hpp, here()).
    locality_state* locality = nullptr;

    static constexpr std::size_t max_hooks = 16;

private:
    friend class worker;
    friend bool worker_has_work(worker const&) noexcept;
    scheduler_options opts_;
    stack_pool stacks_;
    std::vector<std::unique_ptr<worker>> workers_;
    std::atomic<bool> stopping_{false};
    std::atomic<std::uint64_t> started_ns_{0}, stopped_ns_{0};
    std::atomic<std::uint64_t> external_spawned_{0};
    // Spawns/resumes from non-worker threads still touching the scheduler after publishing their
    // item (its task may already have finished): shutdown waits for them.
    std::atomic<int> external_ops_{0};
    std::atomic<std::size_t> next_inbox_{0};
    progress_hook hooks_[max_hooks];
    // One past the highest active slot (0: no hooks), changed under hooks_lock_: passes scan
    // only this far (most jobs have one hook; a pass scanning all sixteen slots cost ~80
    // instructions more, and the receiver of small posts makes one per one to three parcels).
    std::atomic<std::size_t> hook_end_{0};
    spinlock hooks_lock_;
    void* topology_ = nullptr;
};

bool worker_has_work(worker const& w) noexcept;

/// The running runtime's scheduler; while none runs, the calling worker thread's (an
/// in_process_job's locality); nullptr when neither.
scheduler* current_scheduler() noexcept;
/// `w`'s own counters if `w` is one of locality `st`'s workers (one writer), else nullptr (the
/// shared ones, added to atomically). `w` may be null (not a worker's thread).
inline traffic_counters* own_counters_of(worker* w, locality_state const& st) noexcept {
    if (w != nullptr && (w->sched.locality == nullptr || w->sched.locality == &st)) {
        return &w->traffic;
    }
    return nullptr;
}
/// For a task that does many small things in a row (the parcels of a coalesced message): counts
/// one toward the calling worker's next progress pass and runs it when due, as between tasks.
void progress_point();
/// Takes back `t`, spawned by the calling task, if it is still the newest item of the calling
/// worker's queue (no other worker took it, nothing was queued after it): true, and it counts
/// as executed; false: the queue is left as it was and `t` runs from there.
bool retract(task* t) noexcept;
void set_current_scheduler(scheduler* s) noexcept;
worker* current_worker() noexcept;

} // namespace courier::detail
