// SPDX-License-Identifier: BSL-1.0
// The scheduler's unit of new work, and the calls that templates in public headers need:
// spawning a task, suspending the current lightweight thread, and making one runnable again.
#pragma once

#include <courier/common/small_alloc.hpp>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace courier::detail {

/// A unit of new work. run() executes it and destroys it; drop() destroys it unexecuted
/// (shutdown). The callable must not throw: the public wrappers (async, post) catch everything.
struct task {
    void (*run)(task*) noexcept;
    void (*drop)(task*) noexcept;
};

template <class F>
struct task_impl final : task, pooled {
    F fn;
    explicit task_impl(F&& f) : task{&run_impl, &drop_impl}, fn(std::move(f)) {}
    static void run_impl(task* t) noexcept {
        auto* self = static_cast<task_impl*>(t);
        self->fn();
        delete self;
    }
    static void drop_impl(task* t) noexcept { delete static_cast<task_impl*>(t); }
};

template <class F>
task* make_task(F&& f) {
    return new task_impl<std::decay_t<F>>(std::forward<F>(f));
}

/// True between init() starting the workers and their shutdown.
bool runtime_running() noexcept;
/// Queues `t` on the calling worker (it runs there unless stolen) or, from any other thread,
/// on a worker's inbox. Throws std::logic_error if the runtime is not running.
void spawn(task* t);

/// A Courier lightweight thread (opaque).
struct fiber_ctx;
/// The lightweight thread running on this OS thread, or nullptr outside Courier threads.
fiber_ctx* current_fiber() noexcept;
/// Suspends the current lightweight thread. `after(arg)` runs once the thread is fully switched
/// out (typically: release the lock under which it registered itself as a waiter).
void suspend(void (*after)(void*), void* arg);
template <class F>
void suspend_with(F& after) {
    suspend([](void* p) { (*static_cast<F*>(p))(); }, &after);
}
/// Makes a suspended lightweight thread runnable again. Callable from any thread.
void resume(fiber_ctx* f) noexcept;

} // namespace courier::detail
