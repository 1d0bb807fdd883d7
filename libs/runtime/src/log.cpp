// SPDX-License-Identifier: BSL-1.0
#include "log.hpp"

#include <courier/runtime/this_thread.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace courier::detail {

namespace {
std::atomic<log_level> g_level{log_level::warn};
std::mutex g_write;
} // namespace

log_level current_log_level() noexcept {
    return g_level.load(std::memory_order_relaxed);
}
void set_log_level(log_level l) noexcept {
    g_level.store(l, std::memory_order_relaxed);
}

bool parse_log_level(std::string_view s, log_level& out) noexcept {
    constexpr std::pair<std::string_view, log_level> names[] = {{"error", log_level::error},
                                                                {"warn", log_level::warn},
                                                                {"info", log_level::info},
                                                                {"debug", log_level::debug}};
    for (auto const& [n, l] : names) {
        if (n == s) {
            out = l;
            return true;
        }
    }
    return false;
}

void write_log(log_level l, std::string_view message) noexcept {
    static constexpr char const* tags[] = {"error", "warn", "info", "debug"};
    try {
        auto line = fmt::format("courier [{} w{}]: {}\n", tags[static_cast<int>(l)],
                                this_thread::get_worker_id(), message);
        std::lock_guard g(g_write);
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fflush(stderr);
    } catch (...) {
    }
}

} // namespace courier::detail
