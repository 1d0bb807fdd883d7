// SPDX-License-Identifier: BSL-1.0
#include <courier/common/big_alloc.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <new>

namespace courier::detail {

namespace {
std::atomic<void (*)(std::size_t)> g_hook{nullptr};
} // namespace

namespace testing {
void set_big_alloc_hook(void (*hook)(std::size_t)) noexcept {
    g_hook.store(hook, std::memory_order_release);
}
} // namespace testing

std::byte* big_alloc(std::size_t n) {
    if (auto* hook = g_hook.load(std::memory_order_acquire)) [[unlikely]] {
        hook(n);
    }
    void* p = ::mmap(nullptr, std::max<std::size_t>(n, 1), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        throw std::bad_alloc();
    }
    return static_cast<std::byte*>(p);
}

void big_free(std::byte* p, std::size_t n) noexcept {
    big_free_with(p, n, ::munmap);
}

void big_free_with(std::byte* p, std::size_t n, int (*unmap)(void*, std::size_t)) noexcept {
    if (p == nullptr) {
        return;
    }
    // The last step first, then whole steps down to p: the pieces left stay one mapping.
    std::size_t left = std::max<std::size_t>(n, 1);
    while (left > 0) {
        std::size_t const step =
            left % big_unmap_step != 0 ? left % big_unmap_step : big_unmap_step;
        left -= step;
        unmap(p + left, step);
    }
}

} // namespace courier::detail
