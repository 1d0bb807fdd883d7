// SPDX-License-Identifier: BSL-1.0
// The rma pool (pool.hpp): size classes, registered blocks, large regions, per-thread caches.
#include "numa.hpp"
#include "segment.hpp"
#include "size_classes.hpp"

#include <courier/rma/pool.hpp>

#include <courier/common/log.hpp>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <vector>

namespace courier::rma {

namespace {

using detail::class_count;
using detail::class_of;
using detail::class_size;
using detail::is_small;

constexpr std::size_t page = 4096;

/// How many freed slots of a class a thread keeps for itself.
constexpr std::size_t thread_cache_slots(unsigned c) noexcept {
    std::size_t s = class_size(c);
    return s <= 1024 ? 32 : s <= 16384 ? 16 : s <= 65536 ? 8 : 4;
}

/// A span of a small class: at least 64 KiB or 8 slots, whichever is larger.
std::size_t span_bytes(unsigned c) noexcept {
    return std::max<std::size_t>(std::size_t{64} << 10, 8 * class_size(c));
}

struct region_record {
    std::size_t size = 0;
    registration reg;
    bool registered = false;
    bool large = false;
    bool free = false; // large regions: cached for reuse
    unsigned node = 0;
};

struct class_state {
    std::mutex mutex;
    std::vector<void*> free;
    std::byte* cursor = nullptr; // bump allocation in the current span
    std::byte* end = nullptr;
};

struct node_state {
    std::array<class_state, class_count> classes;
    std::mutex block_mutex; // the block being carved into spans
    std::byte* block_cursor = nullptr;
    std::byte* block_end = nullptr;
};

class pool_impl;
pool_impl& the_pool();

class pool_impl {
public:
    pool_impl() {
        long pages = ::sysconf(_SC_PHYS_PAGES);
        std::size_t ram = pages > 0 ? static_cast<std::size_t>(pages) * page : std::size_t{8} << 30;
        ram_ = ram;
        default_limit_ = ram / 2;
        options_.limit = default_limit_;
        nodes_.resize(numa_node_count());
        for (auto& n : nodes_) {
            n = std::make_unique<node_state>();
        }
    }

    pool_options options() {
        std::lock_guard g(options_mutex_);
        return options_;
    }
    void configure(pool_options o) {
        if (o.block_size < (std::size_t{64} << 10) || o.block_size > (std::size_t{1} << 30) ||
            !std::has_single_bit(o.block_size)) {
            throw std::invalid_argument("courier::rma: rma_pool_block must be a power of two "
                                        "between 64 KiB and 1 GiB, not " +
                                        std::to_string(o.block_size));
        }
        if (o.limit == 0) {
            o.limit = default_limit_;
        }
        std::lock_guard g(options_mutex_);
        options_ = o;
    }

    unsigned node_count() const noexcept { return static_cast<unsigned>(nodes_.size()); }

    unsigned current_node() {
        if (nodes_.size() == 1) {
            return 0;
        }
        bool local;
        {
            std::lock_guard g(options_mutex_);
            local = options_.numa_local;
        }
        return local ? std::min<unsigned>(numa_node_of_current_thread(), node_count() - 1) : 0;
    }

    void* allocate(std::size_t bytes, std::size_t alignment);
    void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept;
    std::optional<region_info> find(void const* p, std::size_t n);
    bool attach(memory_registrar& r);
    void detach(memory_registrar& r) noexcept;
    memory_registrar* registrar() noexcept {
        std::shared_lock g(map_mutex_);
        return registrar_;
    }
    void trim() noexcept;
    pool_statistics stats();
    std::optional<shared_segment> share();
    /// In a fork child (one thread; no lock is taken: one another thread held is never freed).
    void after_fork_in_child() noexcept {
        segment_.detach_after_fork();
        sharing_ = false;
    }
    /// share() refuses from now on (no fork handler could be installed).
    void refuse_sharing() noexcept { sharing_refused_ = true; }

    // Thread caches hand slots back through these.
    void push_free(unsigned node, unsigned c, void* const* p, std::size_t n) {
        auto& cs = nodes_[node]->classes[c];
        std::lock_guard g(cs.mutex);
        cs.free.insert(cs.free.end(), p, p + n);
    }
    /// Refills `out` with up to `want` slots of class `c`; returns how many were reused.
    std::size_t refill(unsigned node, unsigned c, std::vector<void*>& out, std::size_t want);

    std::atomic<std::uint64_t> allocations{0}, hits{0}, misses{0}, thread_hits{0}, refused{0},
        in_use{0}, peak{0}, registrations{0}, deregistrations{0}, held{0}, adopted{0}, copied{0},
        copied_bytes{0};

    void count_in_use(std::size_t n) noexcept {
        auto now = in_use.fetch_add(n, std::memory_order_relaxed) + n;
        auto p = peak.load(std::memory_order_relaxed);
        while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
        }
    }

private:
    std::byte* new_memory(std::size_t bytes, unsigned node, bool large, char const* what);
    void release_region(std::byte* base, region_record& rec) noexcept;
    void free_memory(std::byte* base, std::size_t bytes) noexcept;
    std::size_t trim_locked() noexcept; // map_mutex_ held exclusively
    void* allocate_large(unsigned c, unsigned node);
    void* carve(unsigned node, unsigned c);

    std::mutex options_mutex_;
    pool_options options_;
    std::size_t default_limit_ = 0;
    std::size_t ram_ = 0;
    std::vector<std::unique_ptr<node_state>> nodes_;

    std::shared_mutex map_mutex_; // regions_, registrar_, large free lists
    std::map<std::byte*, region_record> regions_;
    memory_registrar* registrar_ = nullptr;
    std::vector<std::vector<std::byte*>> large_free_ =
        std::vector<std::vector<std::byte*>>(class_count);
    detail::segment segment_; // new memory comes from it once share() was called
    bool sharing_ = false;
    bool sharing_refused_ = false;
};

std::atomic<pool_impl*> g_pool{nullptr}; // set once the pool is built

/// A fork child keeps the pool's bookkeeping, but must not share the parent's segment: the
/// segment puts private memory in its place and the child's pool stops sharing. A pool still
/// being built (another thread) has no segment yet.
void pool_after_fork_in_child() noexcept {
    if (pool_impl* p = g_pool.load(std::memory_order_acquire)) {
        p->after_fork_in_child();
    }
}

pool_impl& the_pool() {
    // Never destroyed: thread caches flush into it at exit.
    static pool_impl* p = [] {
        auto* q = new pool_impl;
        g_pool.store(q, std::memory_order_release);
        if (::pthread_atfork(nullptr, nullptr, &pool_after_fork_in_child) != 0) {
            q->refuse_sharing(); // a fork child would keep a pool over unmapped memory
        }
        return q;
    }();
    return *p;
}

struct thread_cache {
    unsigned node = ~0u;
    std::array<std::vector<void*>, class_count> slots;
    thread_cache() = default;
    thread_cache(thread_cache const&) = delete;
    thread_cache& operator=(thread_cache const&) = delete;
    ~thread_cache() {
        for (unsigned c = 0; c < class_count; ++c) {
            if (!slots[c].empty()) {
                the_pool().push_free(node, c, slots[c].data(), slots[c].size());
            }
        }
    }
};

thread_cache& my_cache() {
    thread_local thread_cache tc;
    if (tc.node == ~0u) {
        tc.node = the_pool().current_node();
    }
    return tc;
}

std::byte* pool_impl::new_memory(std::size_t bytes, unsigned node, bool large, char const* what) {
    std::size_t limit;
    bool shared;
    {
        std::lock_guard g(options_mutex_);
        limit = options_.limit;
        shared = options_.shared;
    }
    std::unique_lock g(map_mutex_);
    if (held.load() + bytes > limit) {
        trim_locked();
    }
    if (held.load() + bytes > limit) {
        ++refused;
        throw pool_exhausted("courier::rma: the registered memory pool is at its limit (" +
                             std::to_string(held.load()) + " of " + std::to_string(limit) +
                             " bytes held); a new " + what + " of " + std::to_string(bytes) +
                             " bytes does not fit. Raise --courier:rma_pool_limit or free "
                             "rma memory.");
    }
    int const bind = node_count() > 1 ? static_cast<int>(node) : -1;
    void* p = sharing_ && shared ? segment_.take(bytes, bind) : nullptr;
    if (p == nullptr) {
        p = numa_alloc(bytes, bind); // not shared, or the segment has no room
    }
    if (p == nullptr) {
        ++refused;
        throw pool_exhausted("courier::rma: the system refused " + std::to_string(bytes) +
                             " bytes for a new " + what);
    }
    auto* base = static_cast<std::byte*>(p);
    region_record rec;
    rec.size = bytes;
    rec.large = large;
    rec.node = node;
    if (registrar_ != nullptr) {
        try {
            rec.reg = registrar_->register_memory(base, bytes);
        } catch (...) {
            free_memory(base, bytes);
            throw;
        }
        rec.registered = true;
        ++registrations;
    }
    regions_.emplace(base, rec);
    held += bytes;
    return base;
}

void pool_impl::free_memory(std::byte* base, std::size_t bytes) noexcept {
    if (segment_.owns(base)) {
        segment_.give(base, bytes);
    } else {
        numa_free(base, bytes);
    }
}

std::optional<shared_segment> pool_impl::share() {
    std::size_t limit;
    {
        std::lock_guard g(options_mutex_);
        if (!options_.shared) {
            return std::nullopt;
        }
        limit = options_.limit;
    }
    std::unique_lock g(map_mutex_);
    if (segment_.detached() || sharing_refused_) {
        return std::nullopt; // a fork child of a process that shared its pool: stays private
    }
    // Reserved at the limit (memory is used only as it is touched), but at most 256 GiB and a
    // quarter of the address space the process may have: every peer on the host maps it too.
    // A limit raised later, and memory beyond the reservation, is private.
    std::size_t reserve = std::min({limit, ram_, std::size_t{256} << 30});
    if (rlimit as{}; ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        reserve = std::min<std::size_t>(reserve, as.rlim_cur / 4);
    }
    if (!segment_.create(reserve)) { // (true at once where it exists)
        logging::debug("rma: the pool's memory cannot be shared with this host's processes "
                       "(memfd_create or mmap refused); peers read it with process_vm_readv");
        return std::nullopt;
    }
    sharing_ = true;
    return shared_segment{segment_.fd(), segment_.base(), segment_.size(), segment_.word()};
}

void pool_impl::release_region(std::byte* base, region_record& rec) noexcept {
    if (rec.registered && registrar_ != nullptr) {
        registrar_->deregister_memory(rec.reg);
        ++deregistrations;
    }
    free_memory(base, rec.size);
    held -= rec.size;
}

std::size_t pool_impl::trim_locked() noexcept {
    std::size_t released = 0;
    for (auto& list : large_free_) {
        for (std::byte* base : list) {
            auto it = regions_.find(base);
            if (it != regions_.end()) {
                released += it->second.size;
                release_region(base, it->second);
                regions_.erase(it);
            }
        }
        list.clear();
    }
    return released;
}

void pool_impl::trim() noexcept {
    std::unique_lock g(map_mutex_);
    trim_locked();
}

void* pool_impl::allocate_large(unsigned c, unsigned node) {
    {
        std::unique_lock g(map_mutex_);
        auto& list = large_free_[c];
        // Prefer a cached region on our node.
        for (auto it = list.rbegin(); it != list.rend(); ++it) {
            auto r = regions_.find(*it);
            if (r != regions_.end() && r->second.node == node) {
                std::byte* base = *it;
                r->second.free = false;
                list.erase(std::next(it).base());
                ++hits;
                return base;
            }
        }
    }
    std::size_t bytes = (class_size(c) + page - 1) / page * page;
    ++misses;
    return new_memory(bytes, node, true, "region");
}

void* pool_impl::carve(unsigned node, unsigned c) {
    // Called with the class mutex held.
    auto& ns = *nodes_[node];
    auto& cs = ns.classes[c];
    std::size_t size = class_size(c);
    if (cs.cursor == nullptr || static_cast<std::size_t>(cs.end - cs.cursor) < size) {
        std::size_t span = span_bytes(c);
        std::lock_guard g(ns.block_mutex);
        if (ns.block_cursor == nullptr ||
            static_cast<std::size_t>(ns.block_end - ns.block_cursor) < span) {
            std::size_t block;
            {
                std::lock_guard o(options_mutex_);
                block = options_.block_size;
            }
            block = std::max(block, span);
            ns.block_cursor = new_memory(block, node, false, "block");
            ns.block_end = ns.block_cursor + block;
        }
        cs.cursor = ns.block_cursor;
        cs.end = cs.cursor + span;
        ns.block_cursor += span;
    }
    void* p = cs.cursor;
    cs.cursor += size;
    return p;
}

std::size_t pool_impl::refill(unsigned node, unsigned c, std::vector<void*>& out,
                              std::size_t want) {
    auto& cs = nodes_[node]->classes[c];
    std::lock_guard g(cs.mutex);
    std::size_t reused = std::min(want, cs.free.size());
    out.insert(out.end(), cs.free.end() - static_cast<std::ptrdiff_t>(reused), cs.free.end());
    cs.free.resize(cs.free.size() - reused);
    if (reused == 0) {
        out.push_back(carve(node, c)); // may throw pool_exhausted
    }
    return reused;
}

void* pool_impl::allocate(std::size_t bytes, std::size_t alignment) {
    if (alignment == 0 || !std::has_single_bit(alignment) || alignment > page) {
        throw std::invalid_argument("courier::rma: alignment " + std::to_string(alignment) +
                                    " is not a power of two up to 4096");
    }
    unsigned c = class_of(bytes, alignment);
    if (c >= class_count) {
        ++refused;
        throw pool_exhausted("courier::rma: a request of " + std::to_string(bytes) +
                             " bytes is larger than the pool's largest class (1 TiB)");
    }
    ++allocations;
    void* p;
    if (is_small(c)) {
        auto& tc = my_cache();
        auto& slots = tc.slots[c];
        if (!slots.empty()) {
            ++hits;
            ++thread_hits;
        } else {
            if (slots.capacity() == 0) {
                slots.reserve(thread_cache_slots(c));
            }
            std::size_t reused = refill(tc.node, c, slots, thread_cache_slots(c) / 2);
            if (reused != 0) {
                ++hits;
            } else {
                ++misses;
            }
        }
        p = slots.back();
        slots.pop_back();
    } else {
        p = allocate_large(c, current_node());
    }
    count_in_use(class_size(c));
    return p;
}

void pool_impl::deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    if (p == nullptr) {
        return;
    }
    unsigned c = class_of(bytes, alignment);
    in_use.fetch_sub(class_size(c), std::memory_order_relaxed);
    if (is_small(c)) {
        auto& tc = my_cache();
        unsigned node = tc.node;
        if (node_count() > 1) {
            auto r = find(p, 1);
            node = r ? r->numa_node : node;
        }
        auto& slots = tc.slots[c];
        if (node != tc.node) {
            push_free(node, c, &p, 1);
            return;
        }
        if (slots.size() >= thread_cache_slots(c)) {
            std::size_t half = slots.size() / 2;
            push_free(node, c, slots.data() + half, slots.size() - half);
            slots.resize(half);
        }
        if (slots.capacity() == 0) {
            slots.reserve(thread_cache_slots(c));
        }
        slots.push_back(p);
        return;
    }
    std::unique_lock g(map_mutex_);
    auto it = regions_.find(static_cast<std::byte*>(p));
    if (it == regions_.end() || !it->second.large) {
        logging::error("rma: deallocate({}, {}) of memory the pool did not hand out as a region; "
                       "ignored",
                       p, bytes);
        return;
    }
    it->second.free = true;
    large_free_[c].push_back(static_cast<std::byte*>(p));
}

std::optional<region_info> pool_impl::find(void const* p, std::size_t n) {
    auto* b = static_cast<std::byte*>(const_cast<void*>(p));
    std::shared_lock g(map_mutex_);
    auto it = regions_.upper_bound(b);
    if (it == regions_.begin()) {
        return std::nullopt;
    }
    --it;
    if (b + n > it->first + it->second.size || b < it->first) {
        return std::nullopt;
    }
    region_info info;
    info.base = it->first;
    info.size = it->second.size;
    info.numa_node = it->second.node;
    if (it->second.registered) {
        info.reg = it->second.reg;
        info.registrar = registrar_;
    }
    return info;
}

bool pool_impl::attach(memory_registrar& r) {
    std::unique_lock g(map_mutex_);
    if (registrar_ != nullptr) {
        return registrar_ == &r;
    }
    std::vector<std::byte*> done;
    try {
        for (auto& [base, rec] : regions_) {
            rec.reg = r.register_memory(base, rec.size);
            rec.registered = true;
            ++registrations;
            done.push_back(base);
        }
    } catch (...) {
        for (auto* base : done) {
            auto& rec = regions_[base];
            r.deregister_memory(rec.reg);
            rec.registered = false;
            rec.reg = {};
        }
        throw;
    }
    registrar_ = &r;
    return true;
}

void pool_impl::detach(memory_registrar& r) noexcept {
    std::unique_lock g(map_mutex_);
    if (registrar_ != &r) {
        return;
    }
    for (auto& [base, rec] : regions_) {
        if (rec.registered) {
            r.deregister_memory(rec.reg);
            ++deregistrations;
            rec.registered = false;
            rec.reg = {};
        }
    }
    registrar_ = nullptr;
}

pool_statistics pool_impl::stats() {
    pool_statistics s;
    s.bytes_registered = held.load();
    s.bytes_in_use = in_use.load();
    s.peak_bytes_in_use = peak.load();
    s.registrations = registrations.load();
    s.deregistrations = deregistrations.load();
    s.allocations = allocations.load();
    s.cache_hits = hits.load();
    s.cache_misses = misses.load();
    s.thread_cache_hits = thread_hits.load();
    s.refused = refused.load();
    s.adopted_loads = adopted.load();
    s.copied_loads = copied.load();
    s.bytes_copied_on_load = copied_bytes.load();
    {
        // Derived where asked (statistics are rare): the regions in the segment, none once a
        // fork child's segment is private.
        std::shared_lock g(map_mutex_);
        if (!segment_.detached()) {
            for (auto const& [base, rec] : regions_) {
                s.bytes_shared += segment_.owns(base) ? rec.size : 0;
            }
        }
    }
    auto o = options();
    s.limit = o.limit;
    s.block_size = o.block_size;
    s.numa_nodes = node_count();
    return s;
}

} // namespace

void configure(pool_options const& o) {
    the_pool().configure(o);
}
pool_options current_options() {
    return the_pool().options();
}
void* allocate(std::size_t bytes, std::size_t alignment) {
    return the_pool().allocate(bytes, alignment);
}
void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    the_pool().deallocate(p, bytes, alignment);
}
std::shared_ptr<std::byte[]> allocate_shared(std::size_t bytes, std::size_t alignment) {
    auto* p = static_cast<std::byte*>(the_pool().allocate(bytes, alignment));
    try {
        return std::shared_ptr<std::byte[]>(
            p, [bytes, alignment](std::byte* q) { deallocate(q, bytes, alignment); });
    } catch (...) {
        deallocate(p, bytes, alignment);
        throw;
    }
}
std::optional<region_info> find(void const* p, std::size_t n) {
    return the_pool().find(p, n);
}
bool contains(void const* p, std::size_t n) {
    return the_pool().find(p, n).has_value();
}
bool attach(memory_registrar& r) {
    return the_pool().attach(r);
}
void detach(memory_registrar& r) noexcept {
    the_pool().detach(r);
}
memory_registrar* attached_registrar() noexcept {
    return the_pool().registrar();
}
void trim() noexcept {
    the_pool().trim();
}
pool_statistics get_pool_statistics() {
    return the_pool().stats();
}
std::optional<shared_segment> share_with_host() {
    return the_pool().share();
}

namespace detail {
void count_load(bool adopted, std::size_t bytes_copied) noexcept {
    auto& p = the_pool();
    if (adopted) {
        ++p.adopted;
    } else {
        ++p.copied;
        p.copied_bytes += bytes_copied;
    }
}
} // namespace detail

} // namespace courier::rma
