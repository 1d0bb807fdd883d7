// SPDX-License-Identifier: BSL-1.0
// A per-thread size-class allocator for the runtime's small, short-lived objects (shared states,
// tasks): blocks of up to 512 bytes are carved from 64 KiB slabs and recycled through per-thread
// free lists, with no lock and no malloc in steady state. A thread keeps at most two batches of
// 64 blocks per size class; more go to a central list that every thread refills from first, so
// objects allocated on one thread and freed on another (a task made by the thread that
// received its parcel, run by a worker) are reused, not hoarded. Memory is retained at its peak
// until exit. Sanitizer builds use operator new/delete instead, so use-after-free stays
// detectable.
#pragma once

#include <cstddef>

namespace courier::detail {

void* small_alloc(std::size_t n);
void small_free(void* p, std::size_t n) noexcept;
/// Bytes of slabs carved so far (0 in sanitizer builds): the pool's peak, for tests.
std::size_t small_alloc_slab_bytes() noexcept;

/// Derive from this to allocate a class from the small-object pool.
struct pooled {
    static void* operator new(std::size_t n) { return small_alloc(n); }
    static void operator delete(void* p, std::size_t n) noexcept { small_free(p, n); }
};

} // namespace courier::detail
