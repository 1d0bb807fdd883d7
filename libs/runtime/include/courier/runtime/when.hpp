// SPDX-License-Identifier: BSL-1.0
// Composition of futures: when_all, when_any, wait_all, dataflow (HPX semantics: the results
// are the input futures themselves, ready; their exceptions stay inside them).
//
//   auto all = courier::when_all(std::move(futures)).get();   // vector<future<T>>, all ready
//   auto any = courier::when_any(std::move(futures)).get();   // {index, futures}
//   courier::dataflow([](auto a, auto b) { return a.get() + b.get(); }, fa, fb);
#pragma once

#include <courier/runtime/future.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <tuple>
#include <vector>

namespace courier {

template <class Sequence>
struct when_any_result {
    std::size_t index = static_cast<std::size_t>(-1);
    Sequence futures;
};

namespace detail {
template <class F>
state_base* state_of(F const& f) {
    auto* s = future_access::state(f).get();
    if (s == nullptr) {
        throw std::future_error(std::future_errc::no_state);
    }
    return s;
}
} // namespace detail

/// Ready when every future in `fs` is ready; yields them.
template <class T>
future<std::vector<future<T>>> when_all(std::vector<future<T>> fs) {
    using result = std::vector<future<T>>;
    struct control {
        std::atomic<std::size_t> left;
        result futures;
        detail::state_ptr<result> out = detail::make_state<result>();
    };
    auto c = std::make_shared<control>();
    c->left.store(fs.size() + 1, std::memory_order_relaxed);
    c->futures = std::move(fs);
    auto out = c->out;
    auto arrive = [](std::shared_ptr<control> const& ctl) {
        if (ctl->left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            ctl->out->set_value(std::move(ctl->futures));
        }
    };
    for (auto& f : c->futures) {
        detail::state_of(f)->add_callback(detail::make_callback([c, arrive] { arrive(c); }));
    }
    arrive(c); // the +1: no completion before every callback is registered
    return detail::future_access::make<result>(std::move(out));
}

/// Ready when every argument is ready; yields them as a tuple.
template <class... Fs>
future<std::tuple<std::decay_t<Fs>...>> when_all(Fs&&... fs) {
    using result = std::tuple<std::decay_t<Fs>...>;
    struct control {
        std::atomic<std::size_t> left{sizeof...(Fs) + 1};
        result futures;
        detail::state_ptr<result> out = detail::make_state<result>();
        explicit control(result&& r) : futures(std::move(r)) {}
    };
    auto c = std::make_shared<control>(result(std::forward<Fs>(fs)...));
    auto out = c->out;
    auto arrive = [](std::shared_ptr<control> const& ctl) {
        if (ctl->left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            ctl->out->set_value(std::move(ctl->futures));
        }
    };
    std::apply(
        [&](auto&... f) {
            (detail::state_of(f)->add_callback(detail::make_callback([c, arrive] { arrive(c); })),
             ...);
        },
        c->futures);
    arrive(c);
    return detail::future_access::make<result>(std::move(out));
}

/// Ready when the first future in `fs` is ready; yields its index and all the futures.
/// An empty vector gives a ready result with index -1.
template <class T>
future<when_any_result<std::vector<future<T>>>> when_any(std::vector<future<T>> fs) {
    using result = when_any_result<std::vector<future<T>>>;
    if (fs.empty()) {
        return make_ready_future(result{static_cast<std::size_t>(-1), std::move(fs)});
    }
    struct control {
        std::atomic<bool> done{false};
        std::atomic<std::size_t> registered{0};
        std::size_t winner = 0;
        std::atomic<std::size_t> pending_winner{static_cast<std::size_t>(-1)};
        std::vector<future<T>> futures;
        detail::state_ptr<result> out = detail::make_state<result>();
    };
    auto c = std::make_shared<control>();
    c->futures = std::move(fs);
    auto out = c->out;
    // The winner may fire while later callbacks are still being registered (which reads
    // c->futures): the result is published only after registration finished.
    auto finish = [](std::shared_ptr<control> const& ctl, std::size_t i) {
        ctl->out->set_value(result{i, std::move(ctl->futures)});
    };
    std::size_t n = c->futures.size();
    for (std::size_t i = 0; i < n; ++i) {
        detail::state_of(c->futures[i])->add_callback(detail::make_callback([c, i, n, finish] {
            if (!c->done.exchange(true, std::memory_order_acq_rel)) {
                c->pending_winner.store(i, std::memory_order_release);
                if (c->registered.fetch_add(1, std::memory_order_acq_rel) == n) {
                    finish(c, i);
                }
            }
        }));
    }
    // Registration done: if a winner already fired, publish for it; else the winner will.
    if (c->registered.fetch_add(n, std::memory_order_acq_rel) == 1) {
        finish(c, c->pending_winner.load(std::memory_order_acquire));
    }
    return detail::future_access::make<result>(std::move(out));
}

/// Blocks until every future is ready (exceptions stay in the futures).
template <class T>
void wait_all(std::vector<future<T>> const& fs) {
    for (auto const& f : fs) {
        f.wait();
    }
}
template <class T>
void wait_all(std::vector<shared_future<T>> const& fs) {
    for (auto const& f : fs) {
        f.wait();
    }
}
template <class... Fs>
void wait_all(Fs const&... fs) {
    (fs.wait(), ...);
}

/// Runs f(futures...) as a task once every argument (a future or shared_future) is ready;
/// returns a future of f's result.
template <class F, class... Fs>
auto dataflow(F&& f, Fs&&... fs) {
    return when_all(std::forward<Fs>(fs)...)
        .then([fn = std::decay_t<F>(std::forward<F>(f))](auto all) mutable {
            return std::apply(std::move(fn), all.get());
        });
}

} // namespace courier
