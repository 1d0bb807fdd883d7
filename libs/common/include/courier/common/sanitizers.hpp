// SPDX-License-Identifier: BSL-1.0
// COURIER_ASAN / COURIER_TSAN: defined when the translation unit is built with AddressSanitizer
// or ThreadSanitizer (GCC's and Clang's spellings), for code that must behave differently
// under them.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define COURIER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COURIER_TSAN 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define COURIER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COURIER_ASAN 1
#endif
#endif
