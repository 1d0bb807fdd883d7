// SPDX-License-Identifier: BSL-1.0
// The one logging facility of every Courier library: fmt formatting, four levels, one line per
// call on stderr, each line prefixed with "courier", the level and where it came from.
//
// Thread safety: every function may be called from any thread; a line is written whole (one
// write under a mutex), never interleaved with another. The level and the prefix provider are
// process-wide; the runtime sets them from --courier:log and to "locality N, worker K".
// Errors: logging never throws; a line that cannot be formatted or written is dropped.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace courier::logging {

enum class level { error = 0, warn = 1, info = 2, debug = 3 };

/// Lines of a level above this one are not written (default: warn).
level current_level() noexcept;
void set_level(level l) noexcept;
/// "error", "warn", "info" or "debug"; false for anything else.
bool parse_level(std::string_view s, level& out) noexcept;

/// Where a line comes from, written after the level: the runtime's returns "L1 w0" (locality 1,
/// worker 0). Called on the logging thread for every written line; must not log. nullptr: none.
using prefix_provider = std::string (*)();
void set_prefix_provider(prefix_provider p) noexcept;

/// Writes one line at level `l` (no trailing newline needed).
void write(level l, std::string_view message) noexcept;

/// Lines written so far in this process, all levels: tests wait on it for the line a bad input
/// must leave instead of sleeping for a guessed time.
std::uint64_t lines_written() noexcept;

/// `courier::logging::error("dropped a parcel from locality {}", src)` and so on.
template <class... Args>
void at(level l, fmt::format_string<Args...> f, Args&&... args) noexcept {
    if (l <= current_level()) {
        try {
            write(l, fmt::format(f, std::forward<Args>(args)...));
        } catch (...) {
        }
    }
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) noexcept {
    at(level::error, f, std::forward<Args>(args)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) noexcept {
    at(level::warn, f, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) noexcept {
    at(level::info, f, std::forward<Args>(args)...);
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) noexcept {
    at(level::debug, f, std::forward<Args>(args)...);
}

/// Bounds the lines one call site writes when a peer floods it with bad input: at most `burst`
/// lines per `period`; the last admitted line says that more are suppressed, the first line of
/// a later period says how many were. A static per call site; thread safe.
class rate_limit {
public:
    constexpr rate_limit(unsigned burst = 10, std::chrono::milliseconds period =
                                                  std::chrono::milliseconds(10000)) noexcept
        : burst_(burst), period_(period) {}
    struct verdict {
        bool write = false;
        bool last = false;            // the last line this period
        std::uint64_t suppressed = 0; // lines suppressed since the previous written one
    };
    verdict admit() noexcept { return admit(std::chrono::steady_clock::now()); }
    verdict admit(std::chrono::steady_clock::time_point now) noexcept;
    std::chrono::milliseconds period() const noexcept { return period_; }

private:
    std::mutex mutex_;
    unsigned burst_;
    std::chrono::milliseconds period_;
    std::chrono::steady_clock::time_point start_{};
    unsigned written_ = 0;
    std::uint64_t suppressed_ = 0;
};

/// Whether rate limits apply (default true; tests that count every rejected message turn them
/// off).
bool rate_limits_enabled() noexcept;
void enable_rate_limits(bool on) noexcept;

/// An error line through `limit` (see rate_limit): for what a peer sends, which it can repeat.
template <class... Args>
void error_limited(rate_limit& limit, fmt::format_string<Args...> f, Args&&... args) noexcept {
    if (level::error > current_level()) {
        return;
    }
    rate_limit::verdict v = limit.admit();
    if (!v.write) {
        return;
    }
    try {
        std::string line = fmt::format(f, std::forward<Args>(args)...);
        if (v.suppressed != 0) {
            line += fmt::format(" ({} more like this were suppressed)", v.suppressed);
        }
        if (v.last) {
            line += fmt::format(" (more like this are suppressed for {} s)",
                                limit.period().count() / 1000.0);
        }
        write(level::error, line);
    } catch (...) {
    }
}

} // namespace courier::logging
