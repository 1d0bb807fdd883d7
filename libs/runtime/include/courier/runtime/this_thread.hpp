// SPDX-License-Identifier: BSL-1.0
// courier::this_thread: yield and sleep that suspend the lightweight thread, never the worker.
// Outside Courier threads they fall back to std::this_thread.
#pragma once

#include <chrono>
#include <cstddef>

namespace courier::this_thread {

/// Lets every other ready task on this worker run first, then continues.
void yield();

/// Suspends the calling lightweight thread for at least `d`; the worker runs other tasks.
void sleep_for(std::chrono::nanoseconds d);
template <class Rep, class Period>
void sleep_for(std::chrono::duration<Rep, Period> d) {
    sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
}

/// Index of the worker running the caller (0 .. get_os_thread_count()-1), or -1 outside one.
int get_worker_id() noexcept;

} // namespace courier::this_thread
