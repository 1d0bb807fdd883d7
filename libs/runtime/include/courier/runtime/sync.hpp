// SPDX-License-Identifier: BSL-1.0
// mutex, condition_variable, latch for Courier threads: waiting suspends the lightweight thread
// (the worker keeps running other tasks), never the worker OS thread. They also work from
// ordinary threads, which block. Waiters are served in FIFO order; mutex ownership is handed
// directly to the next waiter on unlock (no barging once someone waits).
#pragma once

#include <courier/runtime/detail/spinlock.hpp>
#include <courier/runtime/detail/waiter.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace courier {

class mutex {
public:
    mutex() noexcept = default;
    mutex(mutex const&) = delete;
    mutex& operator=(mutex const&) = delete;

    void lock();
    bool try_lock() noexcept;
    void unlock();

private:
    detail::spinlock guard_;
    bool locked_ = false;
    detail::waiter_list waiters_;
};

class condition_variable {
public:
    condition_variable() noexcept = default;
    condition_variable(condition_variable const&) = delete;
    condition_variable& operator=(condition_variable const&) = delete;

    /// Atomically releases `lock` and waits; reacquires before returning. May wake spuriously.
    void wait(std::unique_lock<mutex>& lock);
    template <class Pred>
    void wait(std::unique_lock<mutex>& lock, Pred pred) {
        while (!pred()) {
            wait(lock);
        }
    }
    void notify_one() noexcept;
    void notify_all() noexcept;

private:
    detail::spinlock guard_;
    detail::waiter_list waiters_;
};

class latch {
public:
    explicit latch(std::ptrdiff_t count) noexcept : count_(count) {}
    latch(latch const&) = delete;
    latch& operator=(latch const&) = delete;

    void count_down(std::ptrdiff_t n = 1);
    bool try_wait() const noexcept { return count_.load(std::memory_order_acquire) == 0; }
    void wait();
    void arrive_and_wait(std::ptrdiff_t n = 1) {
        count_down(n);
        wait();
    }

private:
    std::atomic<std::ptrdiff_t> count_;
    detail::spinlock guard_;
    detail::waiter_list waiters_;
};

} // namespace courier
