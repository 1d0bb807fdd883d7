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
#include <tuple>

namespace courier {

namespace detail {
/// Records and logs an exception that escaped a posted task.
void report_unhandled_exception(std::exception_ptr e) noexcept;
} // namespace detail

template <class F, class... Args>
auto async(F&& f, Args&&... args) {
    using R = std::invoke_result_t<std::decay_t<F>, std::decay_t<Args>...>;
    auto st = detail::make_state<R>();
    detail::spawn(detail::make_task(
        [st, fn = std::decay_t<F>(std::forward<F>(f)),
         tup = std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...)]() mutable {
            detail::fulfil(st, [&]() -> R { return std::apply(std::move(fn), std::move(tup)); });
        }));
    return detail::future_access::make<R>(std::move(st));
}

template <class F, class... Args>
void post(F&& f, Args&&... args) {
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
