// SPDX-License-Identifier: BSL-1.0
// Collectives over all localities: all_reduce, broadcast, barrier.
//
//   double total = courier::collectives::all_reduce(local, std::plus<>{});
//
// Every locality must call the same collectives in the same order (as with MPI): each call
// takes the next generation number, which matches the calls across localities. The value
// travels serialized (any serializable T); all_reduce gathers the contributions on locality 0,
// reduces them there in rank order with the caller's `op` (so op need not be commutative), and
// sends the result to every locality. Blocking forms suspend the calling Courier thread.
#pragma once

#include <courier/runtime/actions.hpp>

#include <cstdint>
#include <vector>

namespace courier::collectives {

namespace detail {
using bytes = std::vector<std::byte>;
std::uint64_t next_generation();
/// Locality 0: the contributions of every locality for `gen`, in rank order, once all arrived.
future<std::vector<bytes>> gather_at_root(std::uint64_t gen, bytes mine);
/// Non-roots: sends `mine` to the root and returns the future of the result for `gen`.
future<bytes> contribute(std::uint64_t gen, bytes mine);
/// Sends `result` for `gen` to every locality but this one, waits until all have it.
void publish(std::uint64_t gen, bytes const& result);
/// The result for `gen` published by another locality.
future<bytes> await_result(std::uint64_t gen);

template <class T>
bytes to_bytes(T const& v) {
    auto m = serialization::save(serialization::options{4096, false}, v);
    return {m.data().begin(), m.data().end()};
}
template <class T>
T from_bytes(bytes const& b) {
    T v{};
    serialization::load(serialization::message::from_bytes(b), v);
    return v;
}
} // namespace detail

template <class T, class Op>
future<T> all_reduce_async(T value, Op op) {
    std::uint64_t gen = detail::next_generation();
    if (get_num_localities() == 1) {
        return make_ready_future(std::move(value));
    }
    if (get_locality_id() != 0) {
        return detail::contribute(gen, detail::to_bytes(value)).then([](future<detail::bytes> r) {
            return detail::from_bytes<T>(r.get());
        });
    }
    return detail::gather_at_root(gen, detail::to_bytes(value))
        .then([gen, op = std::move(op)](future<std::vector<detail::bytes>> all) mutable {
            auto parts = all.get();
            T acc = detail::from_bytes<T>(parts[0]);
            for (std::size_t r = 1; r < parts.size(); ++r) {
                acc = op(std::move(acc), detail::from_bytes<T>(parts[r]));
            }
            detail::publish(gen, detail::to_bytes(acc));
            return acc;
        });
}

template <class T, class Op>
T all_reduce(T value, Op op) {
    return all_reduce_async(std::move(value), std::move(op)).get();
}

/// Every locality returns `root`'s value.
template <class T>
T broadcast(T value, std::uint32_t root = 0) {
    std::uint64_t gen = detail::next_generation();
    if (get_num_localities() == 1) {
        return value;
    }
    if (get_locality_id() == root) {
        detail::publish(gen, detail::to_bytes(value));
        return value;
    }
    return detail::from_bytes<T>(detail::await_result(gen).get());
}

/// Returns once every locality has entered the barrier.
inline void barrier() {
    (void)all_reduce(std::uint8_t{0}, [](std::uint8_t a, std::uint8_t) { return a; });
}

} // namespace courier::collectives
