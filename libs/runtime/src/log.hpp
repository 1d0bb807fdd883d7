// SPDX-License-Identifier: BSL-1.0
// Runtime logging through fmt, to stderr, filtered by --courier:log=LEVEL.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace courier::detail {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

log_level current_log_level() noexcept;
void set_log_level(log_level l) noexcept;
bool parse_log_level(std::string_view s, log_level& out) noexcept;
void write_log(log_level l, std::string_view message) noexcept;

template <class... Args>
void log(log_level l, fmt::format_string<Args...> f, Args&&... args) {
    if (l <= current_log_level()) {
        write_log(l, fmt::format(f, std::forward<Args>(args)...));
    }
}

} // namespace courier::detail
