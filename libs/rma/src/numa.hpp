// SPDX-License-Identifier: BSL-1.0
// NUMA placement for the rma pool, through hwloc.
#pragma once

#include <courier/rma/pool.hpp>

#include <cstddef>

namespace courier::rma {

/// The node of the CPU the calling thread last ran on (0 if unknown).
unsigned numa_node_of_current_thread();
/// `bytes` of page-aligned memory, bound to `node` when node >= 0; nullptr on failure.
void* numa_alloc(std::size_t bytes, int node);
void numa_free(void* p, std::size_t bytes) noexcept;
/// Binds the pages of [p, p + bytes), not touched yet, to `node` where there are several nodes.
void numa_bind(void* p, std::size_t bytes, int node) noexcept;

} // namespace courier::rma
