// SPDX-License-Identifier: BSL-1.0
#include <courier/rma/registration_cache.hpp>

#include <iterator>

namespace courier::rma {

registration const& registration_cache::lease::reg() const noexcept {
    return e_->reg;
}

std::uintptr_t registration_cache::lease::start() const noexcept {
    return e_->start;
}

registration_cache::registration_cache(memory_registrar& r, std::size_t max_entries,
                                       std::size_t max_bytes)
    : registrar_(r), max_entries_(max_entries), max_bytes_(max_bytes),
      caching_(r.resolves_addresses_at_access() && max_entries != 0) {
    stats_.caching = caching_;
}

registration_cache::~registration_cache() {
    std::lock_guard g(mutex_);
    for (auto& [start, e] : by_start_) {
        registrar_.deregister_memory(e->reg);
        delete e;
    }
}

void registration_cache::retire(entry* e) noexcept {
    registrar_.deregister_memory(e->reg);
    stats_.bytes -= e->length;
    --stats_.entries;
    delete e;
}

registration_cache::lease registration_cache::acquire(void const* p, std::size_t n) {
    auto start = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard g(mutex_);
    if (caching_) {
        auto it = by_start_.upper_bound(start);
        if (it != by_start_.begin()) {
            entry* e = std::prev(it)->second;
            if (e->start + e->length >= start + n) {
                if (e->users++ == 0) {
                    idle_remove(e);
                }
                ++stats_.hits;
                return lease(e, true);
            }
        }
    }
    auto* e = new entry;
    e->start = start;
    e->length = n;
    try {
        e->reg = registrar_.register_memory(const_cast<void*>(p), n);
    } catch (...) {
        delete e;
        throw;
    }
    e->users = 1;
    ++stats_.misses;
    ++stats_.entries;
    stats_.bytes += n;
    if (!caching_) {
        e->indexed = false;
        return lease(e, false);
    }
    auto [it, inserted] = by_start_.try_emplace(start, e);
    if (!inserted) { // a shorter entry for the same start: this one replaces it
        entry* old = it->second;
        old->indexed = false;
        if (old->users == 0) {
            idle_remove(old);
            retire(old);
        }
        it->second = e;
    }
    shrink();
    return lease(e, false);
}

void registration_cache::release(lease& l) noexcept {
    entry* e = l.e_;
    l.e_ = nullptr;
    if (e == nullptr) {
        return;
    }
    std::lock_guard g(mutex_);
    if (--e->users != 0) {
        return;
    }
    if (!e->indexed) {
        retire(e);
        return;
    }
    idle_push(e);
    shrink();
}

void registration_cache::idle_push(entry* e) noexcept {
    e->older = idle_newest_;
    e->newer = nullptr;
    (idle_newest_ != nullptr ? idle_newest_->newer : idle_oldest_) = e;
    idle_newest_ = e;
}

void registration_cache::idle_remove(entry* e) noexcept {
    (e->older != nullptr ? e->older->newer : idle_oldest_) = e->newer;
    (e->newer != nullptr ? e->newer->older : idle_newest_) = e->older;
    e->older = e->newer = nullptr;
}

void registration_cache::shrink() noexcept {
    while ((stats_.entries > max_entries_ || stats_.bytes > max_bytes_) &&
           idle_oldest_ != nullptr) {
        entry* e = idle_oldest_;
        idle_remove(e);
        by_start_.erase(e->start);
        ++stats_.evictions;
        retire(e);
    }
}

void registration_cache::invalidate(void const* p, std::size_t n) noexcept {
    auto lo = reinterpret_cast<std::uintptr_t>(p);
    auto hi = lo + n;
    std::lock_guard g(mutex_);
    auto it = by_start_.begin(); // an earlier, longer entry may overlap too
    while (it != by_start_.end() && it->first < hi) {
        entry* e = it->second;
        if (e->start + e->length <= lo) {
            ++it;
            continue;
        }
        it = by_start_.erase(it);
        e->indexed = false;
        if (e->users == 0) {
            idle_remove(e);
            retire(e);
        }
    }
}

registration_cache_statistics registration_cache::stats() const {
    std::lock_guard g(mutex_);
    return stats_;
}

} // namespace courier::rma
