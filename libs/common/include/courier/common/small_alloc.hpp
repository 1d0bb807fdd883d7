// SPDX-License-Identifier: BSL-1.0
// A per-thread size-class allocator for small, short-lived objects (shared states, tasks, the
// owners of small received buffers and of a call's arguments) and buffers of up to 64 KiB (an
// eager parcel's payload): blocks of up to 512 bytes in 16-byte steps, and of 1, 2, ..., 64 KiB,
// are carved from 64 KiB slabs and recycled through per-thread free lists, with no lock and no
// malloc in steady state. A thread keeps at most two batches per size class (64 blocks, 32 KiB of
// the larger ones, one block of 64 KiB: at most 128 KiB per class); more go to a
// central list that every thread refills from first, so objects allocated on one thread and freed
// on another (a task made by the thread that received its parcel, run by a worker) are reused, not
// hoarded. Memory is retained at its peak until exit. Sanitizer builds use operator new/delete
// instead, so use-after-free stays detectable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace courier::detail {

/// The largest size served from the pool; larger requests go to operator new.
inline constexpr std::size_t small_alloc_max = 65536;

void* small_alloc(std::size_t n);
void small_free(void* p, std::size_t n) noexcept;
/// Bytes of slabs carved so far (0 in sanitizer builds): the pool's peak, for tests.
std::size_t small_alloc_slab_bytes() noexcept;
/// Blocks small_alloc has handed out on the calling OS thread (sanitizer builds too), for
/// tests that a path takes none.
std::uint64_t small_alloc_thread_count() noexcept;

/// Derive from this to allocate a class from the small-object pool.
struct pooled {
    static void* operator new(std::size_t n) { return small_alloc(n); }
    static void operator delete(void* p, std::size_t n) noexcept { small_free(p, n); }
};

/// A standard allocator over the pool, for std::allocate_shared: the object and its control
/// block in one pooled block (blocks are 16-byte aligned; a more aligned T uses operator new).
template <class T>
struct pool_allocator {
    using value_type = T;
    pool_allocator() noexcept = default;
    template <class U>
    pool_allocator(pool_allocator<U> const&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) {
            throw std::bad_array_new_length();
        }
        if constexpr (alignof(T) > 16) {
            return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
        } else {
            return static_cast<T*>(small_alloc(n * sizeof(T)));
        }
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if constexpr (alignof(T) > 16) {
            ::operator delete (p, std::align_val_t{alignof(T)});
        } else {
            small_free(p, n * sizeof(T));
        }
    }
    template <class U>
    friend bool operator==(pool_allocator const&, pool_allocator<U> const&) noexcept {
        return true;
    }
};

} // namespace courier::detail
