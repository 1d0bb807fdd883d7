// SPDX-License-Identifier: BSL-1.0
// Waiters: nodes in the waiter lists of futures and synchronization primitives. A parked_waiter
// blocks its caller until notified: a Courier thread suspends (its worker runs other tasks), any
// other thread blocks on a condition variable.
#pragma once

#include <courier/runtime/detail/task.hpp>

#include <condition_variable>
#include <mutex>
#include <optional>

namespace courier::detail {

struct waiter {
    waiter* next = nullptr;
    /// Called once, without any lock held. The node may be destroyed as soon as it returns.
    virtual void notify() noexcept = 0;

protected:
    ~waiter() = default;
};

/// Blocks an OS thread (outside Courier threads) until notified.
class os_signal {
public:
    os_signal() noexcept {} // user-provided: usable before an enclosing class is complete
    void notify() noexcept {
        std::lock_guard g(mutex_); // notify under the lock: the waiter cannot leave early
        ready_ = true;
        cv_.notify_one();
    }
    void wait() {
        std::unique_lock g(mutex_);
        cv_.wait(g, [this] { return ready_; });
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool ready_ = false;
};

class parked_waiter final : public waiter {
public:
    parked_waiter() noexcept : fiber_(current_fiber()) {
        if (fiber_ == nullptr) {
            os_.emplace();
        }
    }

    void notify() noexcept override {
        if (fiber_ != nullptr) {
            resume(fiber_);
        } else {
            os_->notify();
        }
    }

    /// Blocks until notify(). `lock` (held by the caller, who has just queued this node) is
    /// released once the caller is parked, so a notification cannot be lost.
    template <class Lock>
    void park(Lock& lock) {
        if (fiber_ != nullptr) {
            auto release = [&lock] { lock.unlock(); };
            suspend_with(release);
        } else {
            lock.unlock();
            os_->wait();
        }
    }

private:
    fiber_ctx* fiber_;
    std::optional<os_signal> os_; // only for waiters outside Courier threads
};

/// A Courier thread waiting (future states: the thread queues itself once switched out).
class fiber_waiter final : public waiter {
public:
    explicit fiber_waiter(fiber_ctx* f) noexcept : fiber_(f) {}
    void notify() noexcept override { resume(fiber_); }

private:
    fiber_ctx* fiber_;
};

/// An OS thread (outside Courier threads) waiting (future states).
class os_waiter final : public waiter {
public:
    void notify() noexcept override { signal_.notify(); }
    void wait() { signal_.wait(); }

private:
    os_signal signal_;
};

/// A FIFO list of waiters (not thread-safe: guarded by its owner's lock).
class waiter_list {
public:
    bool empty() const noexcept { return head_ == nullptr; }
    void push(waiter* w) noexcept {
        w->next = nullptr;
        if (tail_ != nullptr) {
            tail_->next = w;
        } else {
            head_ = w;
        }
        tail_ = w;
    }
    waiter* pop() noexcept {
        waiter* w = head_;
        if (w != nullptr) {
            head_ = w->next;
            if (head_ == nullptr) {
                tail_ = nullptr;
            }
        }
        return w;
    }
    /// Removes everything, returning the old head (a chain through `next`).
    waiter* take_all() noexcept {
        waiter* w = head_;
        head_ = tail_ = nullptr;
        return w;
    }
    static void notify_chain(waiter* w) noexcept {
        while (w != nullptr) {
            waiter* next = w->next; // read before notify: the node may die in notify
            w->notify();
            w = next;
        }
    }

private:
    waiter* head_ = nullptr;
    waiter* tail_ = nullptr;
};

} // namespace courier::detail
