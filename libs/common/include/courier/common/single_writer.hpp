// SPDX-License-Identifier: BSL-1.0
// Counters with one writer (a worker's own statistics, a trace buffer's counts, a message
// ring's sends and receipts) that any thread may read: a load and a store, no
// read-modify-write.
#pragma once

#include <atomic>
#include <cstdint>

namespace courier::detail {

/// Adds `by` to `c`; only one thread ever writes `c`. Release: a reader that acquires the new
/// value also sees what the writer did before counting it.
inline void add_single_writer(std::atomic<std::uint64_t>& c, std::uint64_t by = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_release);
}

} // namespace courier::detail
