// SPDX-License-Identifier: BSL-1.0
// The runtime's spelling of Courier's one logging facility (courier/common/log.hpp): inside
// courier::detail, `log(log_level::error, "...", args...)`.
#pragma once

#include <courier/common/log.hpp>

#include <string>
#include <utility>

namespace courier::detail {

using log_level = courier::logging::level;

/// "L<locality> w<worker>": the prefix of every log line (init and in_process_job set it).
std::string log_prefix();

template <class... Args>
void log(log_level l, fmt::format_string<Args...> f, Args&&... args) noexcept {
    courier::logging::at(l, f, std::forward<Args>(args)...);
}

} // namespace courier::detail
