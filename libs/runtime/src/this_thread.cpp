// SPDX-License-Identifier: BSL-1.0
// courier::this_thread: yield, sleep_for and the worker's number, on the scheduler's worker of
// the calling thread (a Courier thread suspends; any other thread falls back to std).
#include "scheduler.hpp"

#include <courier/runtime/this_thread.hpp>

#include <thread>

namespace courier::this_thread {

void yield() {
    detail::fiber_ctx* self = detail::current_fiber();
    if (self == nullptr) {
        std::this_thread::yield();
        return;
    }
    auto requeue = [self] { detail::current_worker()->yielded.push_back(self); };
    detail::suspend_with(requeue);
}

void sleep_for(std::chrono::nanoseconds d) {
    detail::fiber_ctx* self = detail::current_fiber();
    if (self == nullptr) {
        std::this_thread::sleep_for(d);
        return;
    }
    auto deadline = std::chrono::steady_clock::now() + d;
    auto arm = [self, deadline] {
        auto* w = detail::current_worker();
        w->timers.emplace(deadline, self);
        w->timer_count.store(w->timers.size(), std::memory_order_relaxed);
    };
    detail::suspend_with(arm);
}

int get_worker_id() noexcept {
    return detail::current_worker() != nullptr ? static_cast<int>(detail::current_worker()->index)
                                               : -1;
}

} // namespace courier::this_thread
