// SPDX-License-Identifier: BSL-1.0
// async / post: run a callable on a Courier lightweight thread.
//
//   courier::future<int> f = courier::async([](int x) { return x + 1; }, 41);
//   courier::post([] { ... });        // fire and forget
//
// The callable and its arguments are decay-copied into the task. A new task runs on the worker
// that created it unless another worker steals it. async's exceptions travel in its future; an
// exception escaping a posted task is reported (with its message) and makes init() return
// non-zero. Both throw std::logic_error when the runtime is not running.
#pragma once

#include <courier/runtime/future.hpp>

#include <functional>
#include <optional>
#include <tuple>

namespace courier {

namespace detail {
/// Records and logs an exception that escaped a posted task.
void report_unhandled_exception(std::exception_ptr e) noexcept;

/// The task and the shared state of one async call in a single allocation: the future and the
/// pending task each hold a reference.
template <class R, class Fn>
class async_state final : public shared_state<R>, public task {
public:
    explicit async_state(Fn&& fn) : task{&run_impl, &drop_impl}, fn_(std::move(fn)) {
        this->add_ref();
    }

private:
    static void run_impl(task* t) noexcept {
        auto* self = static_cast<async_state*>(t);
        fulfil(static_cast<shared_state<R>*>(self), [self]() -> R { return (*self->fn_)(); });
        self->fn_.reset(); // release captured arguments now, not when the future dies
        self->release();
    }
    static void drop_impl(task* t) noexcept {
        auto* self = static_cast<async_state*>(t);
        self->fn_.reset();
        try {
            auto error = // made first: see future.hpp's abandon()
                std::make_exception_ptr(std::future_error(std::future_errc::broken_promise));
            self->set_exception(std::move(error));
        } catch (...) {
        }
        self->release();
    }
    std::optional<Fn> fn_;
};
} // namespace detail

namespace detail {
template <class F>
concept remote_action = requires {
    typename std::decay_t<F>::courier_action_tag;
};
} // namespace detail

template <class F, class... Args>
requires(!detail::remote_action<F>) auto async(F&& f, Args&&... args) {
    using R = std::invoke_result_t<std::decay_t<F>, std::decay_t<Args>...>;
    auto call =
        [fn = std::decay_t<F>(std::forward<F>(f)),
         tup = std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...)]() mutable -> R {
        return std::apply(std::move(fn), std::move(tup));
    };
    auto* st = new detail::async_state<R, decltype(call)>(std::move(call));
    detail::state_ptr<R> future_ref(st);
    detail::spawn(st); // on failure spawn() drops the task, releasing its reference
    return detail::future_access::make<R>(std::move(future_ref));
}

template <class F, class... Args>
requires(!detail::remote_action<F>) void post(F&& f, Args&&... args) {
    detail::spawn(detail::make_task(
        [fn = std::decay_t<F>(std::forward<F>(f)),
         tup = std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...)]() mutable {
            try {
                std::apply(std::move(fn), std::move(tup));
            } catch (...) {
                detail::report_unhandled_exception(std::current_exception());
            }
        }));
}

} // namespace courier
