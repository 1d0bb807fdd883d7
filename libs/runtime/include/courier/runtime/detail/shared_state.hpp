// SPDX-License-Identifier: BSL-1.0
// The shared state behind future/promise: a value or an exception, a reference count, and a
// list of waiters (parked threads and callbacks) guarded by a per-state spinlock. No global lock.
#pragma once

#include <courier/runtime/detail/small_alloc.hpp>
#include <courier/runtime/detail/spinlock.hpp>
#include <courier/runtime/detail/waiter.hpp>

#include <atomic>
#include <exception>
#include <future>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

namespace courier::detail {

class state_base : public pooled {
public:
    enum status : std::uint8_t { pending = 0, has_value = 1, has_exception = 2 };

    state_base() noexcept = default;
    state_base(state_base const&) = delete;
    state_base& operator=(state_base const&) = delete;

    void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release() noexcept {
        if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            destroy();
        }
    }

    bool is_ready() const noexcept { return status_.load(std::memory_order_acquire) != pending; }
    bool holds_exception() const noexcept {
        return status_.load(std::memory_order_acquire) == has_exception;
    }
    std::exception_ptr const& exception() const noexcept { return exception_; }

    /// Blocks (suspending a Courier thread, or the OS thread) until ready.
    void wait() {
        if (is_ready()) {
            return;
        }
        lock_.lock();
        if (is_ready()) {
            lock_.unlock();
            return;
        }
        parked_waiter w;
        waiters_.push(&w);
        w.park(lock_);
    }

    /// Notifies `w` when the state becomes ready (at once if it already is).
    void add_callback(waiter* w) {
        lock_.lock();
        if (is_ready()) {
            lock_.unlock();
            w->notify();
            return;
        }
        waiters_.push(w);
        lock_.unlock();
    }

    void set_exception(std::exception_ptr e) {
        publishing_ref keep(this);
        lock_.lock();
        if (status_.load(std::memory_order_relaxed) != pending) {
            lock_.unlock();
            throw std::future_error(std::future_errc::promise_already_satisfied);
        }
        exception_ = std::move(e);
        publish(has_exception);
    }

protected:
    /// Held by a setter while it publishes: a waiter that sees the result early (lock-free
    /// is_ready()) may drop the last other reference before publish() has unlocked.
    struct publishing_ref {
        state_base* s;
        explicit publishing_ref(state_base* st) noexcept : s(st) { s->add_ref(); }
        ~publishing_ref() { s->release(); }
    };

public:
protected:
    virtual ~state_base() = default;
    virtual void destroy() noexcept { delete this; }

    /// Called with lock_ held and the result stored: marks ready, unlocks, notifies.
    void publish(status s) noexcept {
        status_.store(s, std::memory_order_release);
        waiter* chain = waiters_.take_all();
        lock_.unlock();
        waiter_list::notify_chain(chain);
    }

    spinlock lock_;

private:
    std::atomic<int> refs_{1};
    std::atomic<std::uint8_t> status_{pending};
    waiter_list waiters_;
    std::exception_ptr exception_;
};

template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
class shared_state : public state_base {
public:
    using value_type = stored_t<T>;

    ~shared_state() override {
        if (has_stored_) {
            std::destroy_at(ptr());
        }
    }

    template <class... Args>
    void set_value(Args&&... args) {
        publishing_ref keep(this);
        lock_.lock();
        if (is_ready()) {
            lock_.unlock();
            throw std::future_error(std::future_errc::promise_already_satisfied);
        }
        try {
            std::construct_at(ptr(), std::forward<Args>(args)...);
        } catch (...) {
            lock_.unlock();
            throw;
        }
        has_stored_ = true;
        publish(has_value);
    }

    /// The value of a ready state; rethrows a stored exception.
    value_type& get() {
        if (holds_exception()) {
            std::rethrow_exception(exception());
        }
        return *ptr();
    }

private:
    value_type* ptr() noexcept { return std::launder(reinterpret_cast<value_type*>(storage_)); }
    alignas(value_type) unsigned char storage_[sizeof(value_type)];
    bool has_stored_ = false;
};

/// An intrusive owning pointer to a shared state.
template <class T>
class state_ptr {
public:
    state_ptr() noexcept = default;
    explicit state_ptr(shared_state<T>* p) noexcept : p_(p) {} // adopts one reference
    state_ptr(state_ptr const& o) noexcept : p_(o.p_) {
        if (p_) {
            p_->add_ref();
        }
    }
    state_ptr(state_ptr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    state_ptr& operator=(state_ptr o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~state_ptr() {
        if (p_) {
            p_->release();
        }
    }
    shared_state<T>* get() const noexcept { return p_; }
    shared_state<T>* operator->() const noexcept { return p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    void reset() noexcept { state_ptr().swap(*this); }
    void swap(state_ptr& o) noexcept { std::swap(p_, o.p_); }

private:
    shared_state<T>* p_ = nullptr;
};

template <class T>
state_ptr<T> make_state() {
    return state_ptr<T>(new shared_state<T>());
}

/// Stores the outcome of `f()` (value or exception) into `st`.
template <class R, class F>
void fulfil(shared_state<R>* st, F&& f) noexcept {
    try {
        if constexpr (std::is_void_v<R>) {
            std::forward<F>(f)();
            st->set_value();
        } else {
            st->set_value(std::forward<F>(f)());
        }
    } catch (...) {
        try {
            st->set_exception(std::current_exception());
        } catch (...) {
        }
    }
}

/// A heap-allocated callback notified once, then deleted.
template <class F>
class callback_waiter final : public waiter {
public:
    explicit callback_waiter(F&& f) : f_(std::move(f)) {}
    void notify() noexcept override {
        f_();
        delete this;
    }

private:
    F f_;
};

template <class F>
waiter* make_callback(F&& f) {
    return new callback_waiter<std::decay_t<F>>(std::forward<F>(f));
}

} // namespace courier::detail
