// SPDX-License-Identifier: BSL-1.0
#include "scheduler.hpp"
#include <courier/common/single_writer.hpp>

#include "log.hpp"
#include "sanitizer_fibers.hpp"
#include "topology.hpp"
#include "trace.hpp"

#include <courier/runtime/this_thread.hpp>

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace courier::detail {

namespace {

// A Courier thread can resume on another OS thread, and the compiler may cache the address of
// a thread_local across the context switch. Every access therefore goes through these opaque,
// non-inlined accessors (the empty asm also keeps them from being treated as pure).
struct thread_slots {
    worker* w = nullptr;
    fiber_ctx* f = nullptr;
};
thread_local thread_slots tl_slots_var;
std::atomic<scheduler*> g_scheduler{nullptr};

/// The calling OS thread's slots. Hot paths call it once per side of a switch and read both
/// fields from the result; it must be called again after any switch.
[[gnu::noinline]] thread_slots* tl_slots() noexcept {
    asm volatile("" ::: "memory");
    return &tl_slots_var;
}
worker* get_tl_worker() noexcept {
    return tl_slots()->w;
}
void set_tl_worker(worker* w) noexcept {
    tl_slots()->w = w;
}
fiber_ctx* get_tl_fiber() noexcept {
    return tl_slots()->f;
}
void set_tl_fiber(fiber_ctx* f) noexcept {
    tl_slots()->f = f;
}

constexpr std::uintptr_t fiber_tag = 1;
std::uintptr_t item_of(task* t) noexcept {
    return reinterpret_cast<std::uintptr_t>(t);
}
std::uintptr_t item_of(fiber_ctx* f) noexcept {
    return reinterpret_cast<std::uintptr_t>(f) | fiber_tag;
}
bool is_fiber(std::uintptr_t i) noexcept {
    return (i & fiber_tag) != 0;
}
fiber_ctx* as_fiber(std::uintptr_t i) noexcept {
    return reinterpret_cast<fiber_ctx*>(i & ~fiber_tag);
}
task* as_task(std::uintptr_t i) noexcept {
    return reinterpret_cast<task*>(i);
}

void enter(fiber_ctx* f) noexcept {
    set_tl_fiber(f);
}
void leave() noexcept {
    set_tl_fiber(nullptr);
}

/// Boost.Context StackAllocator over the scheduler's pool.
struct pooled_stack {
    stack_pool* pool;
    boost::context::stack_context allocate() {
        worker* w = get_tl_worker();
        void* base = pool->take(w != nullptr ? &w->stack_cache : nullptr);
        if (w != nullptr) {
            w->handoff_stack = base;
        }
        boost::context::stack_context sc;
        sc.size = pool->usable_size();
        sc.sp = static_cast<char*>(base) + pool->total_size();
        return sc;
    }
    void deallocate(boost::context::stack_context& sc) noexcept {
        void* base = static_cast<char*>(sc.sp) - pool->total_size();
        worker* w = get_tl_worker();
        pool->give(base, w != nullptr ? &w->stack_cache : nullptr);
    }
};

constexpr std::uint32_t progress_interval = 16;

/// The body of a runner: executes new tasks from the local deque back to back; parks itself as
/// idle when there is none; returns (freeing its stack) when told to exit.
/// Runner -> worker switch bookkeeping for the sanitizers, done on the worker's side.
void arrive_on_worker() noexcept {
    worker* w = get_tl_worker();
    sanitizer::finish_switch(w->asan_save);
    w->asan_arrived = true;
}

/// Runs `t`, then the new tasks of the calling worker's deque back to back, until it has none
/// (an item found that is not a new task is left in the stash); returns the worker it ended
/// on. Traced: every task's slice is recorded, each beginning where the previous one ended.
/// Two instances, chosen once per batch, so that untraced tasks pay no tracing branch.
template <bool traced>
worker* run_tasks(fiber_ctx& self, task* t, [[maybe_unused]] trace::recorder* tracer) {
    if constexpr (traced) {
        self.trace_begin = trace::stamp();
    }
    for (;;) {
        t->run(t);
        worker* w = get_tl_worker(); // the task may have been suspended and resumed elsewhere
        add_single_writer(w->completed);
        if constexpr (traced) {
            std::uint64_t now = trace::stamp();
            tracer->task(*w, self.trace_begin, now, true);
            self.trace_begin = now;
        }
        if (w->sched.has_hooks() && ++w->since_progress >= progress_interval) {
            w->since_progress = 0;
            w->sched.run_hooks();
            if constexpr (traced) {
                self.trace_begin = trace::stamp();
            }
        }
        std::uintptr_t next = w->stash != 0 ? std::exchange(w->stash, 0) : w->deque.pop();
        if (next != 0 && !is_fiber(next)) {
            t = as_task(next);
            continue;
        }
        w->stash = next;
        return w;
    }
}

boost::context::fiber runner_main(boost::context::fiber&& from) {
    sanitizer::finish_switch(nullptr);
    fiber_ctx self;
    worker* w = get_tl_worker();
    w->sched_cont = std::move(from);
    auto lo = reinterpret_cast<std::uintptr_t>(w->handoff_stack);
    self.guard_lo = lo;
    self.guard_hi = lo + w->sched.stacks().guard_size();
    self.tsan_fiber = w->handoff_tsan;
    self.stack_bottom = reinterpret_cast<void const*>(self.guard_hi);
    self.stack_size = w->sched.stacks().usable_size();
    task* t = w->handoff;
    trace::recorder* const tracer = trace::active(); // set before the workers start
    for (;;) {
        enter(&self);
        w = tracer == nullptr ? run_tasks<false>(self, t, nullptr)
                              : run_tasks<true>(self, t, tracer);
        sanitizer::switch_to(w->tsan_self);
        sanitizer::start_switch(&self.asan_save, w->os_stack_bottom, w->os_stack_size);
        boost::context::fiber back =
            std::move(w->sched_cont).resume_with([&self](boost::context::fiber&& me) {
                arrive_on_worker();
                self.cont = std::move(me);
                self.st.store(fiber_ctx::state::idle, std::memory_order_release);
                leave();
                get_tl_worker()->idle_runners.push_back(&self);
                return boost::context::fiber{};
            });
        sanitizer::finish_switch(self.asan_save);
        w = get_tl_worker();
        w->sched_cont = std::move(back);
        if (self.exit) {
            break;
        }
        t = w->handoff;
    }
    leave();
    sanitizer::switch_to(w->tsan_self);
    sanitizer::start_switch(nullptr, w->os_stack_bottom, w->os_stack_size); // this stack dies
    return std::move(w->sched_cont);
}

} // namespace

bool in_guard_page_of_current_thread(std::uintptr_t addr) noexcept {
    fiber_ctx const* f = tl_slots_var.f; // async-signal-safe: a plain TLS read
    return f != nullptr && f->guard_lo <= addr && addr < f->guard_hi;
}

scheduler* current_scheduler() noexcept {
    // The process's runtime first (one load, as on every spawn); else the calling worker's
    // scheduler (in_process_job's localities, which run while no runtime does).
    if (scheduler* s = g_scheduler.load(std::memory_order_acquire)) {
        return s;
    }
    worker* w = get_tl_worker();
    return w != nullptr ? &w->sched : nullptr;
}
void set_current_scheduler(scheduler* s) noexcept {
    g_scheduler.store(s, std::memory_order_release);
}
worker* current_worker() noexcept {
    return get_tl_worker();
}

// ---- worker -------------------------------------------------------------------------------

worker::worker(scheduler& s, std::size_t i)
    : sched(s), index(i), rng(static_cast<std::uint32_t>(i * 2654435761u + 1)) {
    event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd < 0) {
        throw std::runtime_error("courier: eventfd failed");
    }
}

worker::~worker() {
    if (event_fd >= 0) {
        ::close(event_fd);
    }
}

void worker::push_inbox(std::uintptr_t item) {
    std::lock_guard lk(inbox_lock); // push_back may throw
    inbox.push_back(item);
    // seq_cst: pairs with the sleeper's seq_cst increment of sleepers_ then load of
    // inbox_size (a lost wake-up needs both loads to miss both stores, which seq_cst forbids).
    inbox_size.store(inbox.size(), std::memory_order_seq_cst);
}

void worker::drain_inbox() {
    // Also used by thieves on other workers' inboxes, hence the lock and the owner's deque only
    // being pushed by its owner: callers pass items on to their own deque.
    worker* me = get_tl_worker();
    std::vector<std::uintptr_t>& items = me->inbox_taken; // empty, with the capacity it had
    inbox_lock.lock();
    items.swap(inbox);
    inbox_size.store(0, std::memory_order_relaxed);
    inbox_lock.unlock();
    struct clear_after {
        std::vector<std::uintptr_t>& v;
        ~clear_after() { v.clear(); } // also if a push throws: as a local vector would be
    } done{items};
    for (auto i : items) {
        me->deque.push(i);
    }
}

void worker::switch_to(fiber_ctx* f) {
    // Whoever dequeued f owns it now: a plain load and store suffice for this check.
    if (f->st.load(std::memory_order_relaxed) == fiber_ctx::state::running) {
        log(log_level::error, "internal error: a running Courier thread was resumed again");
        std::abort();
    }
    f->st.store(fiber_ctx::state::running, std::memory_order_relaxed);
    sanitizer::switch_to(f->tsan_fiber);
    sanitizer::start_switch(&asan_save, f->stack_bottom, f->stack_size);
    boost::context::fiber back = std::move(f->cont).resume();
    (void)back; // runners always come back through resume_with(... fiber{}) or by returning
    if (!std::exchange(asan_arrived, false)) {
        sanitizer::finish_switch(asan_save);
    }
}

void worker::start_task(task* t) {
    handoff = t;
    if (!idle_runners.empty()) {
        fiber_ctx* r = idle_runners.back();
        idle_runners.pop_back();
        switch_to(r);
        return;
    }
    boost::context::fiber f;
    try {
        f = boost::context::fiber(std::allocator_arg, pooled_stack{&sched.stacks()}, runner_main);
    } catch (std::bad_alloc const&) {
        log(log_level::error,
            "cannot map a stack for a new Courier thread ({} stacks of {} KiB mapped; see "
            "vm.max_map_count and --courier:stack_size)",
            sched.stacks().mapped(), sched.stacks().usable_size() / 1024);
        std::abort();
    }
    handoff_tsan = sanitizer::create_fiber();
    sanitizer::switch_to(handoff_tsan);
    sanitizer::start_switch(&asan_save,
                            static_cast<char*>(handoff_stack) + sched.stacks().guard_size(),
                            sched.stacks().usable_size());
    f = std::move(f).resume();
    if (!std::exchange(asan_arrived, false)) {
        sanitizer::finish_switch(asan_save);
    }
}

void worker::run_item(std::uintptr_t item) {
    if (is_fiber(item)) {
        switch_to(as_fiber(item));
    } else {
        start_task(as_task(item));
    }
}

std::uintptr_t worker::find_work() {
    if (stash != 0) {
        return std::exchange(stash, 0);
    }
    if (std::uintptr_t i = deque.pop()) {
        return i;
    }
    if (inbox_size.load(std::memory_order_relaxed) > 0) {
        drain_inbox();
        if (std::uintptr_t i = deque.pop()) {
            return i;
        }
    }
    if (!timers.empty() && timers.top().first <= std::chrono::steady_clock::now()) {
        fiber_ctx* f = timers.top().second;
        timers.pop();
        timer_count.store(timers.size(), std::memory_order_relaxed);
        return item_of(f);
    }
    if (!yielded.empty()) {
        fiber_ctx* f = yielded.front();
        yielded.pop_front();
        return item_of(f);
    }
    auto& ws = sched.workers();
    std::size_t n = ws.size();
    if (n > 1) {
        rng = rng * 1664525u + 1013904223u;
        std::size_t start = rng % n;
        for (std::size_t k = 0; k < n; ++k) {
            worker* v = ws[(start + k) % n].get();
            if (v == this) {
                continue;
            }
            if (std::uintptr_t i = v->deque.steal()) {
                return i;
            }
            if (v->inbox_size.load(std::memory_order_relaxed) > 0) {
                v->drain_inbox();
                if (std::uintptr_t i = deque.pop()) {
                    return i;
                }
            }
        }
    }
    return 0;
}

void worker::main() {
    set_tl_worker(this);
    tsan_self = sanitizer::current_fiber();
    pthread_attr_t attr;
    if (::pthread_getattr_np(::pthread_self(), &attr) == 0) {
        void* addr = nullptr;
        std::size_t size = 0;
        ::pthread_attr_getstack(&attr, &addr, &size);
        os_stack_bottom = addr;
        os_stack_size = size;
        ::pthread_attr_destroy(&attr);
    }
    enable_alt_signal_stack();
    if (sched.options().bind) {
        bind_current_thread(sched.topology_, sched.options().first_core + index);
    }
    for (;;) {
        if (std::uintptr_t item = find_work()) {
            run_item(item);
            if (sched.has_hooks() && ++since_progress >= progress_interval) {
                since_progress = 0;
                sched.run_hooks();
            }
            continue;
        }
        if (sched.stopping()) {
            break;
        }
        idle();
    }
    // Shut down the idle runners (their stacks return to the pool), then return the stacks.
    for (fiber_ctx* r : std::exchange(idle_runners, {})) {
        r->exit = true;
        void* tsan = r->tsan_fiber; // r lives on the runner's stack, gone after it exits
        switch_to(r);
        sanitizer::destroy_fiber(tsan);
    }
    for (void* s : std::exchange(stack_cache, {})) {
        sched.stacks().give(s, nullptr);
    }
    disable_alt_signal_stack();
    set_tl_worker(nullptr);
}

// ---- scheduler ----------------------------------------------------------------------------

scheduler::scheduler(scheduler_options const& o) : opts_(o), stacks_(o.stack_size) {
    topology_ = load_topology();
    for (std::size_t i = 0; i < opts_.threads; ++i) {
        workers_.push_back(std::make_unique<worker>(*this, i));
    }
    install_overflow_handler(stacks_.usable_size());
}

scheduler::~scheduler() {
    stop();
    while (external_ops_.load(std::memory_order_acquire) != 0) {
        std::this_thread::yield();
    }
    free_topology(topology_);
}

void scheduler::start() {
    started_ns_.store(ns_of(std::chrono::steady_clock::now()), std::memory_order_release);
    for (auto& w : workers_) {
        w->thread = std::thread([p = w.get()] { p->main(); });
    }
}

void scheduler::stop() {
    if (stopping_.exchange(true)) {
        return;
    }
    for (auto& w : workers_) {
        w->wake();
        std::uint64_t one = 1;
        ssize_t ignored = ::write(w->event_fd, &one, sizeof one);
        (void)ignored;
    }
    for (auto& w : workers_) {
        if (w->thread.joinable()) {
            w->thread.join();
        }
    }
    stopped_ns_.store(ns_of(std::chrono::steady_clock::now()), std::memory_order_release);
    // Whatever is still queued can never run now. Dropping a task may queue another (a
    // coroutine destroyed unresumed readies the one awaiting it): drain until nothing is left.
    for (bool found = true; found;) {
        found = false;
        for (auto& w : workers_) {
            std::vector<std::uintptr_t> rest;
            {
                std::lock_guard lk(w->inbox_lock);
                rest.swap(w->inbox);
                w->inbox_size.store(0, std::memory_order_relaxed);
            }
            while (std::uintptr_t i = w->deque.steal()) {
                rest.push_back(i);
            }
            found = found || !rest.empty();
            for (auto i : rest) {
                if (!is_fiber(i)) {
                    as_task(i)->drop(as_task(i));
                }
            }
        }
    }
}

void scheduler::spawn(task* t) {
    worker* w = get_tl_worker();
    if (w != nullptr && &w->sched == this) {
        w->deque.push(item_of(t));
        add_single_writer(w->spawned);
        if (has_sleepers()) {
            notify_one();
        }
        return;
    }
    external_op op(external_ops_);
    auto& target = workers_[next_inbox_.fetch_add(1, std::memory_order_relaxed) % workers_.size()];
    target->push_inbox(item_of(t)); // may throw (out of memory): the caller still owns t
    external_spawned_.fetch_add(1, std::memory_order_acq_rel);
    if (has_sleepers()) {
        target->wake();
        notify_one();
    }
}

namespace {
/// Puts `f` in worker `w`'s next slot (no atomics: a same-worker hand-off is cheap). The slot
/// is not stealable, so callers use it only while no worker sleeps; an older occupant moves to
/// the deque, where thieves can reach it.
void put_next(worker* w, fiber_ctx* f) noexcept {
    std::uintptr_t older = std::exchange(w->stash, item_of(f));
    if (older != 0) {
        w->deque.push(older);
    }
}
} // namespace

void scheduler::make_ready(fiber_ctx* f) noexcept {
    worker* w = get_tl_worker();
    if (w != nullptr && &w->sched == this) {
        if (!has_sleepers()) {
            put_next(w, f);
            return;
        }
        w->deque.push(item_of(f));
        notify_one();
        return;
    }
    external_op op(external_ops_); // f is suspended: we are still live
    auto& target = workers_[next_inbox_.fetch_add(1, std::memory_order_relaxed) % workers_.size()];
    try {
        target->push_inbox(item_of(f));
    } catch (...) {
        log(log_level::error, "cannot queue a resumed thread: out of memory");
        std::terminate();
    }
    if (has_sleepers()) {
        target->wake();
        notify_one();
    }
}

void scheduler::notify_one() noexcept {
    if (sleepers_.load(std::memory_order_seq_cst) == 0) {
        return;
    }
    for (auto& w : workers_) {
        if (w->sleeping.load(std::memory_order_relaxed)) {
            w->wake();
            return;
        }
    }
}

std::int64_t scheduler::live_tasks() const noexcept {
    // Completions first: every completion seen implies its spawn is seen below.
    std::uint64_t done = 0, spawned = 0;
    // Acquire: a completion seen makes the spawn that preceded it visible too.
    for (auto const& w : workers_) {
        done += w->completed.load(std::memory_order_acquire);
    }
    spawned = external_spawned_.load(std::memory_order_acquire);
    for (auto const& w : workers_) {
        spawned += w->spawned.load(std::memory_order_acquire);
    }
    return static_cast<std::int64_t>(spawned) - static_cast<std::int64_t>(done);
}

bool scheduler::all_idle() const noexcept {
    for (auto const& w : workers_) {
        if (!w->sleeping.load(std::memory_order_seq_cst) || w->deque.maybe_nonempty() ||
            w->inbox_size.load(std::memory_order_relaxed) > 0 ||
            w->timer_count.load(std::memory_order_relaxed) > 0) {
            return false;
        }
    }
    return true;
}

// ---- the calls public headers use ---------------------------------------------------------

bool runtime_running() noexcept {
    return current_scheduler() != nullptr;
}

void spawn(task* t) {
    scheduler* s = current_scheduler();
    if (s == nullptr) {
        t->drop(t);
        throw std::logic_error("courier: the runtime is not running (call courier::init first)");
    }
    s->spawn(t);
}

void spawn_or_run(task* t) {
    if (scheduler* s = current_scheduler()) {
        s->spawn(t);
    } else {
        t->run(t);
    }
}

void progress_point() {
    worker* w = get_tl_worker();
    if (w != nullptr && w->sched.has_hooks() && ++w->since_progress >= progress_interval) {
        w->since_progress = 0;
        w->sched.run_hooks();
    }
}

bool retract(task* t) noexcept {
    worker* w = get_tl_worker();
    if (w == nullptr) {
        return false;
    }
    std::uintptr_t newest = w->deque.pop();
    if (newest == item_of(t)) {
        add_single_writer(w->completed);
        return true;
    }
    if (newest != 0) {
        w->deque.push(newest); // where it was: the pop left room for it (no allocation)
    }
    return false;
}

fiber_ctx* current_fiber() noexcept {
    return get_tl_fiber();
}

void suspend(void (*after)(void*), void* arg) {
    thread_slots* slots = tl_slots();
    fiber_ctx* self = slots->f;
    worker* w = slots->w;
    if (self == nullptr || w == nullptr) {
        throw std::logic_error("courier: suspend outside a Courier thread");
    }
    if (self->on_suspend != nullptr) [[unlikely]] {
        std::exchange(self->on_suspend, nullptr)(self->on_suspend_arg);
    }
    if (trace::recorder* tracer = trace::active()) [[unlikely]] {
        // This slice ends; a direct hand-off below starts the next one on this worker at the
        // same stamp, else the next resumed thread takes a stamp of its own.
        std::uint64_t now = trace::stamp();
        tracer->task(*w, self->trace_begin, now, false);
        w->trace_handoff = now;
    }
    boost::context::fiber back;
    // Direct hand-off: if the next local item is a suspended thread, switch straight to it
    // instead of going through the worker's own context (one switch instead of two).
    std::uintptr_t next = w->stash != 0 ? std::exchange(w->stash, 0) : w->deque.pop();
    if (next != 0 && is_fiber(next)) {
        fiber_ctx* to = as_fiber(next);
        to->st.store(fiber_ctx::state::running, std::memory_order_relaxed);
        sanitizer::switch_to(to->tsan_fiber);
        sanitizer::start_switch(&self->asan_save, to->stack_bottom, to->stack_size);
        back = std::move(to->cont).resume_with([self, after, arg](boost::context::fiber&& me) {
            self->cont = std::move(me);
            self->st.store(fiber_ctx::state::suspended, std::memory_order_release);
            after(arg);
            return boost::context::fiber{};
        });
    } else {
        w->stash = next; // a new task (or nothing): the worker's loop takes it from here
        w->trace_handoff = 0;
        sanitizer::switch_to(w->tsan_self);
        sanitizer::start_switch(&self->asan_save, w->os_stack_bottom, w->os_stack_size);
        back = std::move(w->sched_cont).resume_with([self, after, arg](boost::context::fiber&& me) {
            arrive_on_worker();
            self->cont = std::move(me);
            self->st.store(fiber_ctx::state::suspended, std::memory_order_release);
            leave();
            after(arg);
            return boost::context::fiber{};
        });
    }
    sanitizer::finish_switch(self->asan_save);
    slots = tl_slots(); // possibly another OS thread now
    if (back) { // resumed by a worker's own context; after a direct hand-off it is still stored
        slots->w->sched_cont = std::move(back);
    }
    slots->f = self;
    if (trace::active() != nullptr) [[unlikely]] {
        // Resumed by a direct hand-off on this worker just now, or else by the worker's loop.
        std::uint64_t handed = std::exchange(slots->w->trace_handoff, 0);
        self->trace_begin = handed != 0 ? handed : trace::stamp();
    }
}

void resume(fiber_ctx* f) noexcept {
    // The same-worker hand-off of make_ready() (the worker-local next slot, used while no
    // worker sleeps), inlined here with one thread-local read: this is half of every
    // promise/future ping-pong hop.
    worker* w = tl_slots()->w;
    if (w != nullptr && &w->sched == g_scheduler.load(std::memory_order_relaxed) &&
        !w->sched.has_sleepers()) {
        put_next(w, f);
        return;
    }
    current_scheduler()->make_ready(f);
}

} // namespace courier::detail
