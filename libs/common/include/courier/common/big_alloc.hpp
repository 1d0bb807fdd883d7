// SPDX-License-Identifier: BSL-1.0
// Buffers of big_alloc_min bytes or more (a received chunk of 64 MiB - 2 GiB and over), mapped
// by this process itself and unmapped in steps.
//
// Why steps: unmapping is done under the process's memory-map lock, and unmapping touched
// memory takes time in proportion to its size (0.1-0.2 s a GiB unloaded, 0.9 s a GiB on a
// loaded 2-core guest). Every other thread that changes the map meanwhile waits: one whose
// malloc grows its arena (an mprotect) or maps a slab. That was the liveness thread sending a
// heartbeat: a locality freeing a 2 GiB parcel fell silent for 1.8 s and its peer declared it
// failed (peer_timeout=2). Unmapped big_unmap_step bytes at a time, each waiter gets its turn
// between two steps.
#pragma once

#include <cstddef>

namespace courier::detail {

inline constexpr std::size_t big_alloc_min = std::size_t{64} << 20;
inline constexpr std::size_t big_unmap_step = std::size_t{32} << 20;

/// `n` bytes of fresh mapped memory (page-aligned, reading as zeros, not yet touched).
/// Throws std::bad_alloc.
std::byte* big_alloc(std::size_t n);

/// Gives back what big_alloc(n) returned, big_unmap_step bytes at a time from the end.
void big_free(std::byte* p, std::size_t n) noexcept;

/// big_free with `unmap` in munmap's place (tests: the steps it takes).
void big_free_with(std::byte* p, std::size_t n, int (*unmap)(void*, std::size_t)) noexcept;

namespace testing {
/// Runs `hook(n)` at the start of every big_alloc(n) from now on (tests: an allocation that
/// takes long, as a 2 GiB one's shadow memory does under AddressSanitizer); nullptr: none.
void set_big_alloc_hook(void (*hook)(std::size_t)) noexcept;
} // namespace testing

} // namespace courier::detail
