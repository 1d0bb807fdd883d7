// SPDX-License-Identifier: BSL-1.0
// registration_cache: registrations of on-the-fly memory (pointer chunks: the user's vectors
// and buffers) kept for reuse, so that sending the same buffer again costs a lookup instead of
// a registration and a deregistration.
//
// Policy:
//  - An entry covers [address, address + length). A request is a hit when the entry with the
//    nearest start at or below its address covers it; otherwise the range is registered and
//    becomes the entry for its start address (replacing a shorter one).
//  - Bounded: at most `max_entries` entries and `max_bytes` registered bytes. Entries in use
//    (acquired and not yet released) are never evicted; when over a bound, the least recently
//    used idle entries are deregistered first. An entry replaced or evicted while in use is
//    deregistered when its last user releases it.
//  - Freed and reused memory: the cache keys on virtual addresses, which is correct only for
//    networks that read memory through its virtual address when they access it (tcp, shm:
//    memory_registrar::resolves_addresses_at_access()). There a cached entry for memory that
//    was freed and mapped again reads the new contents. Networks that pin physical pages
//    (verbs, cxi, efa) would read stale pages, so for them the cache passes through: every
//    acquire registers and every release deregisters (their libfabric providers keep their
//    own cache, invalidated by memory monitors). invalidate() drops entries for memory the
//    caller knows is going away.
// Thread safety: all members may be called concurrently (one mutex).
#pragma once

#include <courier/rma/registrar.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace courier::rma {

struct registration_cache_statistics {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;    ///< registrations performed
    std::uint64_t evictions = 0; ///< entries deregistered to stay within the bounds
    std::uint64_t entries = 0;   ///< entries now
    std::uint64_t bytes = 0;     ///< bytes registered by the entries now
    bool caching = true;         ///< false: the registrar pins pages, the cache passes through
};

class registration_cache {
    struct entry;

public:
    /// A registration in use; release it with release() when the network is done with it.
    class lease {
    public:
        lease() = default;
        registration const& reg() const noexcept;
        /// Where the registered range starts (at or below the address acquired).
        std::uintptr_t start() const noexcept;
        /// Whether the registration was cached (false: registered for this acquire).
        bool hit() const noexcept { return hit_; }
        explicit operator bool() const noexcept { return e_ != nullptr; }

    private:
        friend class registration_cache;
        lease(entry* e, bool hit) : e_(e), hit_(hit) {}
        entry* e_ = nullptr;
        bool hit_ = false;
    };

    registration_cache(memory_registrar& r, std::size_t max_entries, std::size_t max_bytes);
    ~registration_cache(); ///< deregisters every entry; no lease may be outstanding
    registration_cache(registration_cache const&) = delete;
    registration_cache& operator=(registration_cache const&) = delete;

    /// A registration covering [p, p + n) (n > 0). Throws what the registrar throws.
    lease acquire(void const* p, std::size_t n);
    void release(lease& l) noexcept;
    /// Drops the idle entries that overlap [p, p + n); entries in use go when released.
    void invalidate(void const* p, std::size_t n) noexcept;
    registration_cache_statistics stats() const;

private:
    struct entry {
        std::uintptr_t start = 0;
        std::size_t length = 0;
        registration reg;
        unsigned users = 0;
        bool indexed = true; // still the entry for its start address
        // Its place in the idle list (when idle and indexed): intrusive, so that a lease's
        // release and the next hit allocate nothing.
        entry* older = nullptr;
        entry* newer = nullptr;
    };

    void retire(entry* e) noexcept; // deregister and delete (mutex held)
    void shrink() noexcept;         // evict idle entries over the bounds (mutex held)
    // The idle list, least recently used first (mutex held).
    void idle_push(entry* e) noexcept;
    void idle_remove(entry* e) noexcept;

    memory_registrar& registrar_;
    std::size_t max_entries_, max_bytes_;
    bool caching_;
    mutable std::mutex mutex_;
    std::map<std::uintptr_t, entry*> by_start_;
    entry* idle_oldest_ = nullptr; // the idle list, least recently used first
    entry* idle_newest_ = nullptr;
    registration_cache_statistics stats_;
};

} // namespace courier::rma
