// SPDX-License-Identifier: BSL-1.0
// Chaining signal handlers: a handler of Courier's (stack overflow reports, shared-memory file
// removal) does its part and then hands the signal to whatever was installed before it, or,
// when that was the default action (or "ignore", which cannot stand for a fault), ends the
// process as the signal would have. Async-signal-safe.
#pragma once

#include <signal.h>

namespace courier::signals {

/// Runs `previous` (the disposition replaced by ours) for `sig`, or the default action.
void chain(struct sigaction const& previous, int sig, siginfo_t* info, void* context) noexcept;

} // namespace courier::signals
