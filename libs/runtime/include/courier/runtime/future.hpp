// SPDX-License-Identifier: BSL-1.0
// future<T>, shared_future<T>, promise<T>, make_ready_future, make_exceptional_future.
//
// get()/wait() inside a Courier thread suspend that thread (its worker runs other tasks);
// anywhere else they block the OS thread. Exceptions stored in a future are rethrown by get().
// then(f) runs f(future) as a new Courier task once the future is ready (inline when the
// runtime is not running) and returns a future of its result; a continuation that returns a
// future<U> gives a future<U> (unwrapped). Errors use std::future_error (broken_promise,
// promise_already_satisfied, future_already_retrieved, no_state).
// Coroutines: future<T> and shared_future<T> are awaitable, and a function returning future<T>
// may be a coroutine. `co_await f` does not suspend if f is ready; otherwise it suspends the
// coroutine (no worker blocks) and resumes it as a new Courier task once f is ready; it yields
// the value or rethrows the stored exception (remote_exception included). The body runs at once
// until its first suspension; co_return, or an exception escaping it, sets the returned future.
//
//   courier::future<int> sum_of(courier::future<int> a, courier::future<int> b) {
//       co_return co_await std::move(a) + co_await std::move(b);
//   }
//
// Details (lvalues, shared_future, lifetimes): detail/coroutine.hpp.
// Thread safety: one future/promise object per thread; the shared state is thread-safe.
#pragma once

#include <courier/runtime/detail/shared_state.hpp>

#include <exception>
#include <future>
#include <type_traits>
#include <utility>

namespace courier {

template <class T>
class future;
template <class T>
class shared_future;

namespace detail {

/// Runs `t` as a task when the runtime is up, else inline on the calling thread.
void spawn_or_run(task* t);

struct future_access {
    template <class F>
    static auto const& state(F const& f) noexcept {
        return f.st_;
    }
    template <class T>
    static future<T> make(state_ptr<T> s) noexcept {
        return future<T>(std::move(s));
    }
};

template <class R>
struct unwrap_future {
    using type = R;
    static constexpr bool is_future = false;
};
template <class U>
struct unwrap_future<future<U>> {
    using type = U;
    static constexpr bool is_future = true;
};

template <class R, class F>
void fulfil(state_ptr<R> const& st, F&& f) noexcept {
    fulfil(st.get(), std::forward<F>(f));
}

/// Once `inner` is ready, moves its outcome into `st`.
template <class U>
void forward_future(future<U> inner, state_ptr<U> st);

template <class Fut, class F>
auto then_impl(Fut self, F&& f) {
    using R = std::invoke_result_t<F, Fut>;
    using U = typename unwrap_future<R>::type;
    auto next = make_state<U>();
    auto* st = future_access::state(self).get();
    if (st == nullptr) {
        throw std::future_error(std::future_errc::no_state);
    }
    st->add_callback(make_callback(
        [self = std::move(self), fn = std::decay_t<F>(std::forward<F>(f)), next]() mutable {
            auto run = [self = std::move(self), fn = std::move(fn), next]() mutable {
                if constexpr (unwrap_future<R>::is_future) {
                    std::exception_ptr error;
                    try {
                        forward_future(fn(std::move(self)), next);
                        return;
                    } catch (...) {
                        error = std::current_exception();
                    }
                    fail_with(next.get(), std::move(error));
                } else {
                    fulfil(next, [&]() -> R { return fn(std::move(self)); });
                }
            };
            std::exception_ptr error;
            try {
                spawn_or_run(make_task(std::move(run)));
                return;
            } catch (...) {
                error = std::current_exception();
            }
            fail_with(next.get(), std::move(error));
        }));
    return future_access::make<U>(std::move(next));
}

} // namespace detail

namespace detail {
/// What future and shared_future share: the state and the queries on it.
template <class T>
class future_state_holder {
public:
    bool valid() const noexcept { return static_cast<bool>(st_); }
    bool is_ready() const noexcept { return st_ && st_->is_ready(); }
    bool has_value() const noexcept { return is_ready() && !st_->holds_exception(); }
    bool has_exception() const noexcept { return is_ready() && st_->holds_exception(); }
    void wait() const {
        check();
        st_->wait();
    }

protected:
    future_state_holder() noexcept = default;
    explicit future_state_holder(state_ptr<T> s) noexcept : st_(std::move(s)) {}
    void check() const {
        if (!st_) {
            throw std::future_error(std::future_errc::no_state);
        }
    }
    state_ptr<T> st_;
};
} // namespace detail

template <class T>
class future : public detail::future_state_holder<T> {
    using base = detail::future_state_holder<T>;
    using base::check;
    using base::st_;

public:
    using value_type = T;

    future() noexcept = default;
    future(future&&) noexcept = default;
    future& operator=(future&&) noexcept = default;
    future(future const&) = delete;
    future& operator=(future const&) = delete;
    /// Unwrapping constructor: a future<future<T>> becomes ready when the inner one is.
    future(future<future<T>>&& outer);

    /// Waits, then returns the value (moving it out) or rethrows; the future becomes invalid.
    T get() {
        check();
        st_->wait();
        auto st = std::move(st_);
        if (st->holds_exception()) {
            // The exception leaves the state: it is freed on this thread when the caller's
            // handler ends, not on whichever thread drops the producer's last reference (the
            // count inside exception_ptr is invisible to ThreadSanitizer, so that free looked
            // like a race with the handler's reads of e.what()).
            std::rethrow_exception(st->take_exception());
        }
        if constexpr (std::is_void_v<T>) {
            st->get();
        } else {
            return std::move(st->get());
        }
    }
    shared_future<T> share() noexcept;

    template <class F>
    auto then(F&& f) {
        check();
        return detail::then_impl(std::move(*this), std::forward<F>(f));
    }

private:
    friend struct detail::future_access;
    explicit future(detail::state_ptr<T> s) noexcept : base(std::move(s)) {}
};

template <class T>
class shared_future : public detail::future_state_holder<T> {
    using base = detail::future_state_holder<T>;
    using base::check;
    using base::st_;

public:
    using value_type = T;

    shared_future() noexcept = default;
    shared_future(future<T>&& f) noexcept : base(detail::future_access::state(f)) {
        f = future<T>();
    }

    /// Waits, then returns a reference to the shared value or rethrows; stays valid.
    decltype(auto) get() const {
        check();
        st_->wait();
        if constexpr (std::is_void_v<T>) {
            st_->get();
        } else {
            return static_cast<T const&>(st_->get());
        }
    }
    template <class F>
    auto then(F&& f) const {
        check();
        return detail::then_impl(*this, std::forward<F>(f));
    }

private:
    friend struct detail::future_access;
};

template <class T>
shared_future<T> future<T>::share() noexcept {
    return shared_future<T>(std::move(*this));
}

template <class T>
class promise {
public:
    promise() : st_(detail::make_state<T>()) {}
    promise(promise&& o) noexcept = default;
    promise& operator=(promise&& o) noexcept {
        if (this != &o) {
            abandon();
            st_ = std::move(o.st_);
            retrieved_ = o.retrieved_;
        }
        return *this;
    }
    ~promise() { abandon(); }

    future<T> get_future() {
        check();
        if (retrieved_) {
            throw std::future_error(std::future_errc::future_already_retrieved);
        }
        retrieved_ = true;
        return detail::future_access::make<T>(st_);
    }
    template <class... Args>
    void set_value(Args&&... args) {
        check();
        st_->set_value(std::forward<Args>(args)...);
    }
    void set_exception(std::exception_ptr e) {
        check();
        st_->set_exception(std::move(e));
    }

private:
    void check() const {
        if (!st_) {
            throw std::future_error(std::future_errc::no_state);
        }
    }
    void abandon() noexcept {
        if (st_ && !st_->is_ready()) {
            try {
                // The exception is made in a statement of its own: a temporary living on
                // until after set_exception() would share its message (a reference-counted
                // string in libstdc++) with the waiter and free it here after the waiter read
                // it, a race TSan reports and the count hides.
                auto error =
                    std::make_exception_ptr(std::future_error(std::future_errc::broken_promise));
                st_->set_exception(std::move(error));
            } catch (...) {
            }
        }
    }
    detail::state_ptr<T> st_;
    bool retrieved_ = false;
};

template <class T>
future<std::decay_t<T>> make_ready_future(T&& value) {
    auto s = detail::make_state<std::decay_t<T>>();
    s->set_value(std::forward<T>(value));
    return detail::future_access::make<std::decay_t<T>>(std::move(s));
}
inline future<void> make_ready_future() {
    auto s = detail::make_state<void>();
    s->set_value();
    return detail::future_access::make<void>(std::move(s));
}
template <class T>
future<T> make_exceptional_future(std::exception_ptr e) {
    auto s = detail::make_state<T>();
    s->set_exception(std::move(e));
    return detail::future_access::make<T>(std::move(s));
}
template <class T, class E>
future<T> make_exceptional_future(E e) {
    return make_exceptional_future<T>(std::make_exception_ptr(std::move(e)));
}

namespace detail {
template <class U>
void forward_future(future<U> inner, state_ptr<U> st) {
    auto* s = future_access::state(inner).get();
    if (s == nullptr) {
        auto error = std::make_exception_ptr(std::future_error(std::future_errc::no_state));
        st->set_exception(std::move(error)); // made first: see abandon()
        return;
    }
    s->add_callback(make_callback([inner = std::move(inner), st]() mutable {
        fulfil(st, [&]() -> U { return inner.get(); });
    }));
}
} // namespace detail

template <class T>
future<T>::future(future<future<T>>&& outer) {
    auto st = detail::make_state<T>();
    *this = future(st);
    auto* o = detail::future_access::state(outer).get();
    if (o == nullptr) {
        throw std::future_error(std::future_errc::no_state);
    }
    o->add_callback(detail::make_callback([outer = std::move(outer), st]() mutable {
        std::exception_ptr error;
        try {
            detail::forward_future(outer.get(), st);
            return;
        } catch (...) {
            error = std::current_exception();
        }
        detail::fail_with(st.get(), std::move(error));
    }));
}

} // namespace courier

#include <courier/runtime/detail/coroutine.hpp> // co_await on futures, future<T> coroutines
