// SPDX-License-Identifier: BSL-1.0
// rma_allocator<T>: a standard allocator over the process's registered memory pool
// (rma/pool.hpp). Containers using it hold memory the network can read without registering it
// during a send: std::vector<double, courier::rma_allocator<double>> travels as a chunk whose
// registration the parcelport finds in the pool. All instances are equal (one pool).
// Errors: allocate() throws rma::pool_exhausted (a std::bad_alloc) over the pool's limit.
#pragma once

#include <courier/rma/pool.hpp>

#include <cstddef>
#include <limits>
#include <new>

namespace courier {

template <class T>
class rma_allocator {
public:
    using value_type = T;
    using is_always_equal = std::true_type;

    rma_allocator() noexcept = default;
    template <class U>
    rma_allocator(rma_allocator<U> const&) noexcept {}

    T* allocate(std::size_t n) {
        if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
            throw std::bad_array_new_length();
        }
        return static_cast<T*>(rma::allocate(n * sizeof(T), alignof(T) < 16 ? 16 : alignof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        rma::deallocate(p, n * sizeof(T), alignof(T) < 16 ? 16 : alignof(T));
    }

    template <class U>
    friend bool operator==(rma_allocator const&, rma_allocator<U> const&) noexcept {
        return true;
    }
};

} // namespace courier
