// SPDX-License-Identifier: BSL-1.0
// A per-thread size-class allocator for the runtime's small, short-lived objects (shared states,
// tasks): blocks of up to 512 bytes are carved from 64 KiB slabs and recycled through per-thread
// free lists, with no lock and no malloc in steady state. Memory is retained at its peak until
// exit. Sanitizer builds use operator new/delete instead, so use-after-free stays detectable.
#pragma once

#include <cstddef>

namespace courier::detail {

void* small_alloc(std::size_t n);
void small_free(void* p, std::size_t n) noexcept;

/// Derive from this to allocate a class from the small-object pool.
struct pooled {
    static void* operator new(std::size_t n) { return small_alloc(n); }
    static void operator delete(void* p, std::size_t n) noexcept { small_free(p, n); }
};

} // namespace courier::detail
