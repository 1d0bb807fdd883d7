// SPDX-License-Identifier: BSL-1.0
// The shared state behind future/promise: a value or an exception, a reference count, and a
// lock-free stack of waiters (parked threads and callbacks) in one atomic word. No lock.
#pragma once

#include <courier/common/small_alloc.hpp>
#include <courier/runtime/detail/waiter.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

namespace courier::detail {

class state_base : public pooled {
public:
    state_base() noexcept = default;
    state_base(state_base const&) = delete;
    state_base& operator=(state_base const&) = delete;

    void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release() noexcept {
        // A sole owner needs no read-modify-write: nobody else can take a reference.
        if (refs_.load(std::memory_order_acquire) == 1 ||
            refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            destroy();
        }
    }

    bool is_ready() const noexcept { return ready(word_.load(std::memory_order_acquire)); }
    bool holds_exception() const noexcept {
        return word_.load(std::memory_order_acquire) == exception_ready;
    }
    std::exception_ptr const& exception() const noexcept { return exception_; }
    /// For the one reader of a unique future: the exception leaves the state.
    std::exception_ptr take_exception() noexcept { return std::move(exception_); }

    /// Blocks (suspending a Courier thread, or the OS thread) until ready.
    void wait() {
        if (is_ready()) {
            return;
        }
        if (fiber_ctx* self = current_fiber()) {
            fiber_waiter w(self);
            // Queued only once this thread is switched out, so a notification that comes at
            // once cannot resume a thread that is still running; if the state became ready
            // meanwhile, the thread makes itself runnable again.
            auto enqueue = [this, &w] {
                if (!push(&w)) {
                    w.notify();
                }
            };
            suspend_with(enqueue);
            return;
        }
        os_waiter w;
        if (push(&w)) {
            w.wait();
        }
    }

    /// Notifies `w` when the state becomes ready (at once if it already is).
    void add_callback(waiter* w) {
        if (!push(w)) {
            w->notify();
        }
    }

    /// Queues `w` to be notified when the state becomes ready; false (nothing queued) if it
    /// already is. Once queued, `w` may be notified at once, on another thread.
    bool try_add_waiter(waiter* w) noexcept { return push(w); }

    void set_exception(std::exception_ptr e) {
        check_unset();
        exception_ = std::move(e);
        publish(exception_ready);
    }

protected:
    virtual ~state_base() = default;
    virtual void destroy() noexcept { delete this; }

    // The state word: 0 (pending, nobody waits), a waiter* (pending: the newest waiter, a stack
    // linked through waiter::next), or value_ready / exception_ready. Waiters are at least
    // 8-aligned, so the low bits tell the cases apart. One read-modify-write per side: the
    // setter's exchange, a waiter's compare-exchange.
    static constexpr std::uintptr_t value_ready = 1;
    static constexpr std::uintptr_t exception_ready = 2;
    static bool ready(std::uintptr_t w) noexcept { return (w & 3) != 0; }
    static_assert(alignof(waiter) >= 4, "the state word keeps its tags in a waiter*'s low bits");
    /// Whether a value was stored (read by the state's last owner, after the value's
    /// publication: relaxed suffices).
    bool holds_value() const noexcept {
        return word_.load(std::memory_order_relaxed) == value_ready;
    }

    /// A state has one setter at a time (a promise is used by one thread; every internal setter
    /// owns its state), so this plain check catches a second set before it touches the storage.
    void check_unset() const {
        if (ready(word_.load(std::memory_order_relaxed))) {
            throw std::future_error(std::future_errc::promise_already_satisfied);
        }
    }

    /// The result is stored: marks the state ready and notifies the waiters in the order they
    /// came. Touches nothing of the state after the exchange: a waiter may destroy it at once.
    void publish(std::uintptr_t how) noexcept {
        auto old = word_.exchange(how, std::memory_order_acq_rel);
        waiter* newest = reinterpret_cast<waiter*>(old);
        waiter* oldest = nullptr;
        while (newest != nullptr) { // reverse the stack: first come, first notified
            waiter* next = newest->next;
            newest->next = oldest;
            oldest = newest;
            newest = next;
        }
        waiter_list::notify_chain(oldest);
    }

private:
    /// Pushes `w` unless the state is ready (then returns false).
    bool push(waiter* w) noexcept {
        auto cur = word_.load(std::memory_order_acquire);
        do {
            if (ready(cur)) {
                return false;
            }
            w->next = reinterpret_cast<waiter*>(cur);
        } while (!word_.compare_exchange_weak(cur, reinterpret_cast<std::uintptr_t>(w),
                                              std::memory_order_acq_rel,
                                              std::memory_order_acquire));
        return true;
    }

    std::atomic<int> refs_{1};
    std::atomic<std::uintptr_t> word_{0};
    std::exception_ptr exception_;
};

template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
class shared_state : public state_base {
public:
    using value_type = stored_t<T>;

    ~shared_state() override {
        if (holds_value()) { // value_ready is published only after the value is constructed
            std::destroy_at(ptr());
        }
    }

    template <class... Args>
    void set_value(Args&&... args) {
        check_unset();
        std::construct_at(ptr(), std::forward<Args>(args)...);
        publish(value_ready);
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
    /// Gives up the reference without releasing it (the caller now holds it).
    shared_state<T>* detach() noexcept { return std::exchange(p_, nullptr); }

private:
    shared_state<T>* p_ = nullptr;
};

template <class T>
state_ptr<T> make_state() {
    return state_ptr<T>(new shared_state<T>());
}

/// Stores `error` into `st`. Called after the catch block that took `error` has ended: inside
/// it, the waiter would be woken while the handler still holds a reference to the exception,
/// and the handler's end could then free it on this thread after the waiter read it (ordered
/// only by libstdc++'s uninstrumented count: a TSan report).
template <class R>
void fail_with(shared_state<R>* st, std::exception_ptr error) noexcept {
    try {
        st->set_exception(std::move(error));
    } catch (...) {
    }
}

/// Stores the outcome of `f()` (value or exception) into `st`.
template <class R, class F>
void fulfil(shared_state<R>* st, F&& f) noexcept {
    std::exception_ptr error;
    try {
        if constexpr (std::is_void_v<R>) {
            std::forward<F>(f)();
            st->set_value();
        } else {
            st->set_value(std::forward<F>(f)());
        }
        return;
    } catch (...) {
        error = std::current_exception();
    }
    fail_with(st, std::move(error));
}

/// A heap-allocated callback notified once, then deleted.
template <class F>
class callback_waiter final : public waiter, public pooled {
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
