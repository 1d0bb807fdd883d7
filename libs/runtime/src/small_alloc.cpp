// SPDX-License-Identifier: BSL-1.0
#include "sanitizer_fibers.hpp"

#include <courier/runtime/detail/small_alloc.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace courier::detail {

#if defined(COURIER_ASAN) || defined(COURIER_TSAN)

void* small_alloc(std::size_t n) {
    return ::operator new(n);
}
void small_free(void* p, std::size_t) noexcept {
    ::operator delete(p); // unsized: clang needs -fsized-deallocation for the sized one
}

#else

namespace {

constexpr std::size_t granule = 16;
constexpr std::size_t max_small = 512;
constexpr std::size_t classes = max_small / granule;
constexpr std::size_t slab_size = 64 * 1024;

struct free_block {
    free_block* next;
};

struct thread_cache {
    free_block* head[classes] = {};
};

// Slabs live until exit (and stay reachable for leak checkers).
std::mutex g_slabs_mutex;
std::vector<std::unique_ptr<std::byte[]>>* g_slabs = new std::vector<std::unique_ptr<std::byte[]>>;

thread_local thread_cache tl_cache;

// Courier threads migrate between OS threads: never let the compiler reuse a TLS address.
[[gnu::noinline]] thread_cache* cache() noexcept {
    asm volatile("" ::: "memory");
    return &tl_cache;
}

free_block* refill(std::size_t cls) {
    std::size_t block = (cls + 1) * granule;
    auto slab = std::unique_ptr<std::byte[]>(new std::byte[slab_size]);
    std::byte* base = slab.get();
    {
        std::lock_guard g(g_slabs_mutex);
        g_slabs->push_back(std::move(slab));
    }
    free_block* head = nullptr;
    for (std::size_t off = (slab_size / block - 1) * block;; off -= block) {
        auto* b = reinterpret_cast<free_block*>(base + off);
        b->next = head;
        head = b;
        if (off == 0) {
            break;
        }
    }
    return head;
}

} // namespace

void* small_alloc(std::size_t n) {
    if (n == 0 || n > max_small) {
        return ::operator new(n);
    }
    std::size_t cls = (n - 1) / granule;
    thread_cache* c = cache();
    free_block* b = c->head[cls];
    if (b == nullptr) {
        b = refill(cls);
    }
    c->head[cls] = b->next;
    return b;
}

void small_free(void* p, std::size_t n) noexcept {
    if (p == nullptr) {
        return;
    }
    if (n == 0 || n > max_small) {
        ::operator delete(p); // unsized: clang needs -fsized-deallocation for the sized one
        return;
    }
    std::size_t cls = (n - 1) / granule;
    thread_cache* c = cache();
    auto* b = static_cast<free_block*>(p);
    b->next = c->head[cls];
    c->head[cls] = b;
}

#endif

} // namespace courier::detail
