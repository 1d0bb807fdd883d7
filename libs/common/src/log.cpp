// SPDX-License-Identifier: BSL-1.0
// The logging facility: a level, a prefix provider and one mutex-guarded write per line.
#include <courier/common/log.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <utility>

namespace courier::logging {

namespace {
std::atomic<level> g_level{level::warn};
std::atomic<std::uint64_t> g_lines{0};
std::atomic<prefix_provider> g_prefix{nullptr};
std::mutex g_write;
std::atomic<bool> g_rate_limits{true};
} // namespace

bool rate_limits_enabled() noexcept {
    return g_rate_limits.load(std::memory_order_relaxed);
}
void enable_rate_limits(bool on) noexcept {
    g_rate_limits.store(on, std::memory_order_relaxed);
}

level current_level() noexcept {
    return g_level.load(std::memory_order_relaxed);
}
void set_level(level l) noexcept {
    g_level.store(l, std::memory_order_relaxed);
}
void set_prefix_provider(prefix_provider p) noexcept {
    g_prefix.store(p, std::memory_order_release);
}

bool parse_level(std::string_view s, level& out) noexcept {
    constexpr std::pair<std::string_view, level> names[] = {{"error", level::error},
                                                            {"warn", level::warn},
                                                            {"info", level::info},
                                                            {"debug", level::debug}};
    for (auto const& [n, l] : names) {
        if (n == s) {
            out = l;
            return true;
        }
    }
    return false;
}

void write(level l, std::string_view message) noexcept {
    static constexpr char const* tags[] = {"error", "warn", "info", "debug"};
    try {
        std::string where;
        if (prefix_provider p = g_prefix.load(std::memory_order_acquire)) {
            where = p();
        }
        auto line =
            where.empty()
                ? fmt::format("courier [{}]: {}\n", tags[static_cast<int>(l)], message)
                : fmt::format("courier [{} {}]: {}\n", tags[static_cast<int>(l)], where, message);
        std::lock_guard g(g_write);
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fflush(stderr);
        g_lines.fetch_add(1, std::memory_order_release);
    } catch (...) {
    }
}

std::uint64_t lines_written() noexcept {
    return g_lines.load(std::memory_order_acquire);
}

rate_limit::verdict rate_limit::admit(std::chrono::steady_clock::time_point now) noexcept {
    if (!rate_limits_enabled()) {
        return {true, false, 0};
    }
    std::lock_guard g(mutex_);
    verdict v;
    if (written_ == 0 || now - start_ >= period_) {
        start_ = now;
        written_ = 0;
    }
    if (written_ < burst_) {
        ++written_;
        v.write = true;
        v.last = written_ == burst_;
        v.suppressed = std::exchange(suppressed_, 0);
    } else {
        ++suppressed_;
    }
    return v;
}

} // namespace courier::logging
