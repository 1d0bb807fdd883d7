// SPDX-License-Identifier: BSL-1.0
// Collectives over all localities, each in O(log P) rounds of point-to-point messages.
//
//   double total = courier::collectives::all_reduce(local, std::plus<>{});
//   std::vector<double> sums = courier::collectives::all_reduce(
//       values, courier::collectives::elementwise(std::plus<>{}));
//   courier::future<std::vector<int>> all = courier::collectives::all_gather_async(mine);
//
// Every locality calls the same collectives in the same order (as with MPI): each call takes
// the next generation number, which matches the calls across localities. Several may be in
// flight at once (the _async forms). A blocking form runs the algorithm on the calling thread
// (suspending a Courier thread while it waits for a message); an _async form runs it as a new
// Courier task and returns its future at once, so it never blocks the caller.
//
// Values travel as arguments of a posted action, so any serializable T works and large ones
// (vectors of bitwise types at or above the zero-copy threshold) move as pointer chunks the
// receiver pulls by RMA. Operations need to be associative, not commutative: every algorithm
// combines contributions in rank order.
//
// Algorithms (P localities, any P): barrier by dissemination, all_reduce by recursive doubling
// with the localities beyond the largest power of two folded into a partner first (log2 P + 2
// rounds; with an elementwise operation on large vectors, Rabenseifner's reduce-scatter and
// all-gather), broadcast, reduce, gather and scatter over binomial trees, all_gather and all_to_all
// by Bruck's algorithms (ceil(log2 P) rounds), the scans by recursive doubling.
//
// Localities of one host send each other the small messages of collectives (up to ~1 KiB
// serialized) through shared memory, not as parcels: the receiver drains its inbox while it
// waits, spinning up to --courier:collective_spin_us (1 ms) before it suspends. Larger ones,
// those to other hosts, and all of them with --courier:shm_collectives=0, are parcels
// (collective_rings.hpp in the runtime's sources).
//
// Failure: once a locality has failed, every collective in progress fails with network_error
// on every locality, and so does every later one (the group of all localities is broken).
#pragma once

#include <courier/runtime/detail/collective_algorithms.hpp>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace courier::collectives {

/// The combination of every locality's `value` with `op`, in rank order, on every locality.
template <class T, class Op>
T all_reduce(T value, Op op) {
    return detail::all_reduce(detail::round_trip(detail::next_generation()), std::move(value), op);
}
template <class T, class Op>
future<T> all_reduce_async(T value, Op op) {
    return detail::start<T>([v = std::move(value), op = std::move(op)](auto c) mutable {
        return detail::all_reduce(c, std::move(v), op);
    });
}

/// An operation to apply to the elements of vectors, not to whole vectors: see all_reduce.
template <class Op>
struct elementwise_op {
    Op op;
};
/// all_reduce(v, elementwise(std::plus<>{})) sums vectors element by element, as MPI_Allreduce
/// does with MPI_SUM.
template <class Op>
elementwise_op<Op> elementwise(Op op) {
    return {std::move(op)};
}

/// result[i] = v_0[i] op v_1[i] op ... op v_(P-1)[i] on every locality, where v_k is locality
/// k's vector: `op` combines elements. Every locality's vector must have the same length:
/// otherwise every locality throws std::invalid_argument. The localities agree on the length
/// first (log2 P + 2 rounds of 16-byte messages); then a vector of at least 4 KiB goes by a
/// reduce-scatter and an all-gather (2 log2 P rounds; each locality combines (P-1)/P of the
/// elements and receives 2 (P-1)/P of them, as MPI's algorithm for large counts), a smaller one
/// by recursive doubling over whole vectors.
template <class U, class Op>
std::vector<U> all_reduce(std::vector<U> value, elementwise_op<Op> op) {
    return detail::all_reduce_elementwise(detail::round_trip(detail::next_generation()),
                                          std::move(value), op.op);
}
template <class U, class Op>
future<std::vector<U>> all_reduce_async(std::vector<U> value, elementwise_op<Op> op) {
    return detail::start<std::vector<U>>(
        [v = std::move(value), op = std::move(op.op)](auto c) mutable {
            return detail::all_reduce_elementwise(c, std::move(v), op);
        });
}

/// Every locality returns `root`'s value.
template <class T>
T broadcast(T value, std::uint32_t root = 0) {
    return detail::broadcast(detail::round_trip(detail::next_generation()), std::move(value), root);
}
template <class T>
future<T> broadcast_async(T value, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(value), root](auto c) mutable {
        return detail::broadcast(c, std::move(v), root);
    });
}

/// Returns once every locality has entered the barrier.
inline void barrier() {
    detail::barrier(detail::round_trip(detail::next_generation()));
}
inline future<void> barrier_async() {
    return detail::start<void>([](auto c) { detail::barrier(c); });
}

/// result[i] is locality i's value, on every locality. A value passed by reference is not
/// copied to be sent: on one host the others copy it straight from the caller's memory (as
/// from an MPI send buffer), so it must not change during the call; result[this locality] is
/// a copy. A value passed as an rvalue is moved there.
template <class T>
std::vector<T> all_gather(T const& value) {
    return detail::all_gather(detail::round_trip(detail::next_generation()), value,
                              static_cast<T*>(nullptr));
}
template <class T>
requires(!std::is_reference_v<T> && !std::is_const_v<T>) std::vector<T> all_gather(T&& value) {
    return detail::all_gather(detail::round_trip(detail::next_generation()), value, &value);
}
template <class T>
future<std::vector<T>> all_gather_async(T value) {
    return detail::start<std::vector<T>>(
        [v = std::move(value)](auto c) mutable { return detail::all_gather(c, v, &v); });
}

/// values[i] goes to locality i; result[i] came from locality i. values.size() must be P.
template <class T>
std::vector<T> all_to_all(std::vector<T> values) {
    return detail::all_to_all(detail::round_trip(detail::next_generation()), std::move(values));
}
template <class T>
future<std::vector<T>> all_to_all_async(std::vector<T> values) {
    return detail::start<std::vector<T>>(
        [v = std::move(values)](auto c) mutable { return detail::all_to_all(c, std::move(v)); });
}

/// On `root`, result[i] is locality i's value; empty elsewhere.
template <class T>
std::vector<T> gather(T value, std::uint32_t root = 0) {
    return detail::gather(detail::round_trip(detail::next_generation()), std::move(value), root);
}
template <class T>
future<std::vector<T>> gather_async(T value, std::uint32_t root = 0) {
    return detail::start<std::vector<T>>([v = std::move(value), root](auto c) mutable {
        return detail::gather(c, std::move(v), root);
    });
}

/// Locality i gets values[i] of `root` (values are read on root only).
template <class T>
T scatter(std::vector<T> values, std::uint32_t root = 0) {
    return detail::scatter(detail::round_trip(detail::next_generation()), std::move(values), root);
}
template <class T>
future<T> scatter_async(std::vector<T> values, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(values), root](auto c) mutable {
        return detail::scatter(c, std::move(v), root);
    });
}

/// The combination of every locality's value in rank order, on `root` (elsewhere: T{}).
template <class T, class Op>
T reduce(T value, Op op, std::uint32_t root = 0) {
    return detail::reduce(detail::round_trip(detail::next_generation()), std::move(value), op,
                          root);
}
template <class T, class Op>
future<T> reduce_async(T value, Op op, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(value), op = std::move(op), root](auto c) mutable {
        return detail::reduce(c, std::move(v), op, root);
    });
}

/// On locality i: value_0 op value_1 op ... op value_i.
template <class T, class Op>
T inclusive_scan(T value, Op op) {
    return detail::scan(detail::round_trip(detail::next_generation()), std::move(value), op).first;
}
template <class T, class Op>
future<T> inclusive_scan_async(T value, Op op) {
    return detail::start<T>([v = std::move(value), op = std::move(op)](auto c) mutable {
        return detail::scan(c, std::move(v), op).first;
    });
}

/// On locality i: init op value_0 op ... op value_(i-1) (init on locality 0).
template <class T, class Op>
T exclusive_scan(T value, Op op, T init) {
    auto before =
        detail::scan(detail::round_trip(detail::next_generation()), std::move(value), op).second;
    return before ? op(std::move(init), std::move(*before)) : init;
}
template <class T, class Op>
future<T> exclusive_scan_async(T value, Op op, T init) {
    return detail::start<T>(
        [v = std::move(value), op = std::move(op), init = std::move(init)](auto c) mutable {
            auto before = detail::scan(c, std::move(v), op).second;
            return before ? op(std::move(init), std::move(*before)) : std::move(init);
        });
}

} // namespace courier::collectives
