// SPDX-License-Identifier: BSL-1.0
// The machine's cores (hwloc) and pinning of worker threads to them.
#pragma once

#include <cstddef>

namespace courier::detail {

void* load_topology();
void free_topology(void* topology) noexcept;
/// Cores this process may run on (at least 1).
std::size_t available_cores(void* topology) noexcept;
/// Pins the calling thread to core `index % available_cores`; logs (does not fail) on error.
void bind_current_thread(void* topology, std::size_t index) noexcept;

} // namespace courier::detail
