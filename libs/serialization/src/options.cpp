// SPDX-License-Identifier: BSL-1.0
#include <courier/serialization/chunk.hpp>

#include <atomic>
#include <mutex>

namespace courier::serialization {

namespace {
std::atomic<std::size_t> g_threshold{4096};
std::atomic<bool> g_zero_copy{true};
std::atomic<pointer_tracking> g_tracking{pointer_tracking::pointer_map};
std::atomic<std::size_t> g_deep_array_threshold{0};
} // namespace

options default_options() noexcept {
    return {g_threshold.load(std::memory_order_relaxed),
            g_zero_copy.load(std::memory_order_relaxed), g_tracking.load(std::memory_order_relaxed),
            g_deep_array_threshold.load(std::memory_order_relaxed)};
}

void set_default_options(options const& o) noexcept {
    g_threshold.store(o.zero_copy_threshold == 0 ? 1 : o.zero_copy_threshold,
                      std::memory_order_relaxed);
    g_zero_copy.store(o.zero_copy, std::memory_order_relaxed);
    g_tracking.store(o.tracking, std::memory_order_relaxed);
    g_deep_array_threshold.store(o.deep_array_threshold, std::memory_order_relaxed);
}

} // namespace courier::serialization
