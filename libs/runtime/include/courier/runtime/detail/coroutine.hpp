// SPDX-License-Identifier: BSL-1.0
// C++20 coroutine support for futures (included by future.hpp): future<T> and
// shared_future<T> are awaitable, and a function returning future<T> may be a coroutine.
//
//   courier::future<int> twice(courier::id_type where) {
//       int a = co_await courier::async<answer_action>(where);   // suspends; no worker blocks
//       co_return 2 * a;
//   }
//
// Awaiting: a ready future does not suspend. Otherwise the coroutine is suspended and, once the
// future is ready, resumed as a new Courier task (never inline in the thread that made the
// future ready, e.g. a transport's progress thread; inline only when the runtime is not
// running, or when queueing the task fails for want of memory). `co_await` on a future<T> (rvalue,
// or lvalue: moved out) yields T and rethrows a stored exception, as get(); on a shared_future<T>
// lvalue it yields T const& to the shared value (the awaited object keeps it alive), on an rvalue a
// copy of the value. Awaiting an invalid future throws std::future_error (no_state) at the
// co_await.
//
// A coroutine returning future<T>: its body runs at once, on the caller's thread, until its
// first suspension; the rest runs on Courier tasks. co_return sets the future's value and an
// exception escaping the body makes it exceptional (even one thrown before the first
// suspension: the call itself throws only std::bad_alloc, for the frame or its state). The frame
// is freed when the body ends; if the runtime stops with a resumption still queued, the frame
// is destroyed unresumed and the future holds std::future_error (broken_promise).
// Lifetime: as with any coroutine that suspends, reference parameters and a lambda's captures
// must outlive the body's end; take arguments by value.
// Thread safety: as future's. A coroutine may resume on another worker than it suspended on:
// it must not keep a thread_local's address across a co_await.
#pragma once

#include <courier/common/small_alloc.hpp>
#include <courier/runtime/detail/shared_state.hpp>
#include <courier/runtime/detail/task.hpp>
#include <courier/runtime/detail/waiter.hpp>
#include <courier/runtime/future.hpp>

#include <coroutine>
#include <cstddef>
#include <exception>
#include <future>
#include <type_traits>
#include <utility>

namespace courier::detail {

template <class T>
class coroutine_promise;

template <class P>
inline constexpr bool is_future_coroutine = false;
template <class T>
inline constexpr bool is_future_coroutine<coroutine_promise<T>> = true;

/// Resumes a suspended coroutine as a new task once the state it waits on is ready. It lives in
/// the awaiter, in the suspended coroutine's frame: queued as a waiter, then as a task, never
/// both at once, and nothing of it is touched once the coroutine runs again.
class coroutine_resumer final : public waiter, private task {
public:
    coroutine_resumer() noexcept : task{&run_task, &drop_task} {}
    coroutine_resumer(coroutine_resumer const&) = delete;
    coroutine_resumer& operator=(coroutine_resumer const&) = delete;

    /// `owned`: the frame is a future<T> coroutine's, which nobody else may destroy, so a
    /// resumption dropped at shutdown destroys it (a foreign coroutine's owner keeps that duty).
    void arm(std::coroutine_handle<> h, bool owned) noexcept {
        handle_ = h;
        owned_ = owned;
    }

    void notify() noexcept override {
        std::coroutine_handle<> h = handle_;
        try {
            spawn_or_run(static_cast<task*>(this));
        } catch (...) {
            h.resume(); // the scheduler could not queue it: late is better than never
        }
    }

private:
    static void run_task(task* t) noexcept { static_cast<coroutine_resumer*>(t)->handle_.resume(); }
    static void drop_task(task* t) noexcept {
        auto* self = static_cast<coroutine_resumer*>(t);
        if (self->owned_) {
            self->handle_.destroy();
        }
    }

    std::coroutine_handle<> handle_;
    bool owned_ = false;
};

/// The awaiter of a future<T> or shared_future<T> (held by value). `Result` is what co_await
/// yields.
template <class Future, class Result>
class future_awaiter {
public:
    explicit future_awaiter(Future f) noexcept : f_(std::move(f)) {}
    future_awaiter(future_awaiter const&) = delete;
    future_awaiter& operator=(future_awaiter const&) = delete;

    bool await_ready() const {
        if (!f_.valid()) {
            throw std::future_error(std::future_errc::no_state);
        }
        return f_.is_ready();
    }
    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) noexcept {
        resumer_.arm(h, is_future_coroutine<P>);
        // Once queued, the coroutine may resume (and this awaiter die) on another thread at
        // once: nothing after this call may touch *this. Ready meanwhile: resume right here.
        return future_access::state(f_)->try_add_waiter(&resumer_);
    }
    Result await_resume() { return f_.get(); }

private:
    Future f_;
    coroutine_resumer resumer_;
};

/// What future<T> coroutines share: the frame's allocation, the start and end, and the result
/// state the returned future refers to.
template <class T>
class coroutine_promise_base {
public:
    coroutine_promise_base() : st_(make_state<T>()) {}
    coroutine_promise_base(coroutine_promise_base const&) = delete;
    coroutine_promise_base& operator=(coroutine_promise_base const&) = delete;
    /// Only a frame destroyed while suspended (a resumption dropped at shutdown) leaves the
    /// state unset.
    ~coroutine_promise_base() {
        if (!st_->is_ready()) {
            try {
                auto error = // made first: see future.hpp's abandon()
                    std::make_exception_ptr(std::future_error(std::future_errc::broken_promise));
                st_->set_exception(std::move(error));
            } catch (...) {
            }
        }
    }

    static void* operator new(std::size_t n) { return small_alloc(n); }
    static void operator delete(void* p, std::size_t n) noexcept { small_free(p, n); }

    future<T> get_return_object() { return future_access::make<T>(st_); }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    /// Publishes an exception the body let escape, then ends without suspending. Not in
    /// unhandled_exception(): that runs inside the body's implicit catch, whose end drops the
    /// handler's reference to the exception after the waiter was woken; if that is the last
    /// one, this thread frees the exception (and its message) after the waiter read it, a free
    /// ordered only by libstdc++'s uninstrumented count (a TSan report). Here the catch has
    /// ended and the frame's reference moves into the state.
    struct publish_then_end {
        coroutine_promise_base* promise;
        bool await_ready() const noexcept {
            if (promise->error_ && !promise->st_->is_ready()) {
                promise->st_->set_exception(std::move(promise->error_));
            }
            return true;
        }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        void await_resume() const noexcept {}
    };
    publish_then_end final_suspend() noexcept { return {this}; }
    void unhandled_exception() noexcept { error_ = std::current_exception(); }

protected:
    state_ptr<T> st_;
    std::exception_ptr error_; ///< escaped the body; published at the final suspend
};

template <class T>
class coroutine_promise final : public coroutine_promise_base<T> {
public:
    template <class U = T>
    void return_value(U&& value) {
        this->st_->set_value(std::forward<U>(value));
    }
};

template <>
class coroutine_promise<void> final : public coroutine_promise_base<void> {
public:
    void return_void() { st_->set_value(); }
};

} // namespace courier::detail

namespace courier {

/// `co_await f`: waits for `f` without blocking the worker; yields its value or rethrows.
/// An lvalue is moved from (it is invalid afterwards), as get() leaves it.
template <class T>
auto operator co_await(future<T>&& f) noexcept {
    return detail::future_awaiter<future<T>, T>(std::move(f));
}
template <class T>
auto operator co_await(future<T>& f) noexcept {
    return detail::future_awaiter<future<T>, T>(std::move(f));
}

/// `co_await s`: waits for `s` (which stays valid); yields a reference to the shared value, or
/// for an rvalue a copy of it; rethrows a stored exception.
template <class T>
auto operator co_await(shared_future<T> const& s) noexcept {
    using result = decltype(s.get()); // T const& (void for shared_future<void>)
    return detail::future_awaiter<shared_future<T>, result>(s);
}
template <class T>
auto operator co_await(shared_future<T>&& s) noexcept {
    return detail::future_awaiter<shared_future<T>, T>(std::move(s));
}

} // namespace courier

/// A function returning courier::future<T> may be a coroutine.
template <class T, class... Args>
struct std::coroutine_traits<courier::future<T>, Args...> {
    using promise_type = courier::detail::coroutine_promise<T>;
};
