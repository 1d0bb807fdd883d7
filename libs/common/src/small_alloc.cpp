// SPDX-License-Identifier: BSL-1.0
#include <courier/common/sanitizers.hpp>
#include <courier/common/small_alloc.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace courier::detail {

#if defined(COURIER_ASAN) || defined(COURIER_TSAN)

namespace {
thread_local std::uint64_t tl_handed_out = 0;
// Courier threads migrate between OS threads: never let the compiler reuse a TLS address.
[[gnu::noinline]] std::uint64_t* handed_out() noexcept {
    asm volatile("" ::: "memory");
    return &tl_handed_out;
}
} // namespace

std::uint64_t small_alloc_thread_count() noexcept {
    return *handed_out();
}

void* small_alloc(std::size_t n) {
    ++*handed_out();
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

// Classes: every 16 bytes up to 512 (objects), then powers of two from 1 to 64 KiB (buffers: a
// parcel's payload of up to an eager message's size).
constexpr std::size_t granule = 16;
constexpr std::size_t fine_max = 512;
constexpr std::size_t fine_classes = fine_max / granule;
constexpr std::size_t max_small = small_alloc_max;
constexpr std::size_t classes = fine_classes + 7;
static_assert(max_small == fine_max << 7);
constexpr std::size_t slab_size = 64 * 1024;
// A thread keeps at most 2 batches of blocks per class; beyond that a batch goes to the
// central list, from which any thread refills before carving a new slab. Without this bound a
// thread that only frees (a worker running tasks another thread allocated) would hoard blocks
// while the allocating thread carved slab after slab: unbounded growth under a steady flow.
// A batch is 64 blocks, or 32 KiB of the large classes and one block of 64 KiB (at most 64 KiB
// kept per class, 128 KiB of the largest).
constexpr std::size_t batch_blocks = 64;

constexpr std::size_t class_of(std::size_t n) noexcept {
    if (n <= fine_max) {
        return (n - 1) / granule;
    }
    return fine_classes + static_cast<std::size_t>(std::bit_width((n - 1) >> 10));
}
constexpr std::size_t block_size(std::size_t cls) noexcept {
    return cls < fine_classes ? (cls + 1) * granule : fine_max << (cls - fine_classes + 1);
}
constexpr std::size_t batch_of(std::size_t cls) noexcept {
    return cls < fine_classes ? batch_blocks
                              : std::max<std::size_t>(1, 32 * 1024 / block_size(cls));
}
static_assert(block_size(class_of(4096)) == 4096 && block_size(class_of(513)) == 1024 &&
              block_size(class_of(4097)) == 8192 && block_size(class_of(65536)) == 65536 &&
              class_of(65536) == classes - 1);

struct free_block {
    free_block* next;
};

struct thread_cache {
    free_block* head[classes] = {};
    std::size_t count[classes] = {};
    std::uint64_t handed_out = 0;
};

struct central_list {
    std::mutex mutex;
    std::vector<free_block*> batches; // each a chain of batch_of(class) blocks
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
            n = batch_of(cls);
            return head;
        }
    }
    std::size_t block = block_size(cls);
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
    std::size_t const batch = batch_of(cls);
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

std::uint64_t small_alloc_thread_count() noexcept {
    return cache()->handed_out;
}

std::size_t small_alloc_slab_bytes() noexcept {
    std::lock_guard g(g_slabs_mutex);
    return g_slabs->size() * slab_size;
}

void* small_alloc(std::size_t n) {
    if (n == 0 || n > max_small) {
        return ::operator new(n);
    }
    std::size_t cls = class_of(n);
    thread_cache* c = cache();
    ++c->handed_out;
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
    std::size_t cls = class_of(n);
    thread_cache* c = cache();
    auto* b = static_cast<free_block*>(p);
    b->next = c->head[cls];
    c->head[cls] = b;
    if (++c->count[cls] > 2 * batch_of(cls)) {
        try {
            spill(c, cls);
        } catch (...) {
            // no memory for the central list's vector: the blocks stay here
        }
    }
}

#endif

} // namespace courier::detail
