// SPDX-License-Identifier: BSL-1.0
// Tells ThreadSanitizer and AddressSanitizer about our context switches (their fiber APIs);
// no-ops otherwise. Without this, TSan attributes a migrated Courier thread's stack to the
// wrong OS thread and ASan reports false stack errors when exceptions unwind on fiber stacks.
#pragma once

#include <courier/common/sanitizers.hpp>

#include <cstddef>

#ifdef COURIER_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, void const* bottom, std::size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, void const** bottom_old,
                                     std::size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, std::size_t size);
}
#endif

#ifdef COURIER_TSAN
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
#endif

namespace courier::detail::sanitizer {

#ifdef COURIER_TSAN
inline void* current_fiber() noexcept {
    return __tsan_get_current_fiber();
}
inline void* create_fiber() noexcept {
    return __tsan_create_fiber(0);
}
inline void destroy_fiber(void* f) noexcept {
    __tsan_destroy_fiber(f);
}
inline void switch_to(void* f) noexcept {
    __tsan_switch_to_fiber(f, 0);
}
#else
inline void* current_fiber() noexcept {
    return nullptr;
}
inline void* create_fiber() noexcept {
    return nullptr;
}
inline void destroy_fiber(void*) noexcept {}
inline void switch_to(void*) noexcept {}
#endif

// AddressSanitizer: announce the stack we are about to run on, and confirm arrival.
#ifdef COURIER_ASAN
inline void start_switch(void** save, void const* bottom, std::size_t size) noexcept {
    __sanitizer_start_switch_fiber(save, bottom, size);
}
inline void finish_switch(void* save) noexcept {
    __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
}
/// Clears stale redzones of frames that never returned (a Courier thread's last frames, a
/// signal handler that did not return) before the memory is unmapped or handed out again. The
/// shadow outlives munmap: without this, whatever is mapped at that address next (a libfabric
/// or PMIx region) reads as a "stack-buffer-overflow".
inline void forget_stack(void const* base, std::size_t size) noexcept {
    __asan_unpoison_memory_region(base, size);
}
#else
inline void start_switch(void**, void const*, std::size_t) noexcept {}
inline void finish_switch(void*) noexcept {}
inline void forget_stack(void const*, std::size_t) noexcept {}
#endif

} // namespace courier::detail::sanitizer
