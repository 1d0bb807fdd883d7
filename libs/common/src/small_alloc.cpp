// SPDX-License-Identifier: BSL-1.0
#include <courier/common/sanitizers.hpp>
#include <courier/common/small_alloc.hpp>

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
std::size_t small_alloc_slab_bytes() noexcept {
    return 0;
}

#else

namespace {

constexpr std::size_t granule = 16;
constexpr std::size_t max_small = small_alloc_max;
constexpr std::size_t classes = max_small / granule;
constexpr std::size_t slab_size = 64 * 1024;
// A thread keeps at most 2 batches of blocks per class; beyond that a batch goes to the
// central list, from which any thread refills before carving a new slab. Without this bound a
// thread that only frees (a worker running tasks another thread allocated) would hoard blocks
// while the allocating thread carved slab after slab: unbounded growth under a steady flow.
constexpr std::size_t batch = 64;

struct free_block {
    free_block* next;
};

struct thread_cache {
    free_block* head[classes] = {};
    std::size_t count[classes] = {};
};

struct central_list {
    std::mutex mutex;
    std::vector<free_block*> batches; // each a chain of `batch` blocks
};

// Slabs live until exit (and stay reachable for leak checkers).
std::mutex g_slabs_mutex;
std::vector<std::unique_ptr<std::byte[]>>* g_slabs = new std::vector<std::unique_ptr<std::byte[]>>;
central_list* g_central = new central_list[classes];

thread_local thread_cache tl_cache;

// Courier threads migrate between OS threads: never let the compiler reuse a TLS address.
[[gnu::noinline]] thread_cache* cache() noexcept {
    asm volatile("" ::: "memory");
    return &tl_cache;
}

/// A chain of free blocks of class `cls` and its length: a batch from the central list, else
/// a new slab carved up.
free_block* refill(std::size_t cls, std::size_t& n) {
    {
        central_list& c = g_central[cls];
        std::lock_guard g(c.mutex);
        if (!c.batches.empty()) {
            free_block* head = c.batches.back();
            c.batches.pop_back();
            n = batch;
            return head;
        }
    }
    std::size_t block = (cls + 1) * granule;
    auto slab = std::unique_ptr<std::byte[]>(new std::byte[slab_size]);
    std::byte* base = slab.get();
    {
        std::lock_guard g(g_slabs_mutex);
        g_slabs->push_back(std::move(slab));
    }
    free_block* head = nullptr;
    n = slab_size / block;
    for (std::size_t off = (n - 1) * block;; off -= block) {
        auto* b = reinterpret_cast<free_block*>(base + off);
        b->next = head;
        head = b;
        if (off == 0) {
            break;
        }
    }
    return head;
}

/// Moves one batch of `c`'s blocks of class `cls` to the central list.
void spill(thread_cache* c, std::size_t cls) {
    free_block* head = c->head[cls];
    free_block* last = head;
    for (std::size_t i = 1; i < batch; ++i) {
        last = last->next;
    }
    c->head[cls] = last->next;
    c->count[cls] -= batch;
    last->next = nullptr;
    central_list& central = g_central[cls];
    std::lock_guard g(central.mutex);
    central.batches.push_back(head);
}

} // namespace

std::size_t small_alloc_slab_bytes() noexcept {
    std::lock_guard g(g_slabs_mutex);
    return g_slabs->size() * slab_size;
}

void* small_alloc(std::size_t n) {
    if (n == 0 || n > max_small) {
        return ::operator new(n);
    }
    std::size_t cls = (n - 1) / granule;
    thread_cache* c = cache();
    free_block* b = c->head[cls];
    if (b == nullptr) {
        std::size_t got = 0;
        b = refill(cls, got);
        c->count[cls] = got;
    }
    c->head[cls] = b->next;
    --c->count[cls];
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
    if (++c->count[cls] > 2 * batch) {
        try {
            spill(c, cls);
        } catch (...) {
            // no memory for the central list's vector: the blocks stay here
        }
    }
}

#endif

} // namespace courier::detail
