// SPDX-License-Identifier: BSL-1.0
// wire_id_table: entries by 64-bit wire id (an action's, a collective message type's), added at
// static initialization or later (a loaded plugin) and looked up from any thread without a lock,
// for every incoming message. An insert-only open-addressing table: adds take a mutex among
// themselves and publish an entry by storing its id last; a lookup is acquire loads along its
// probe sequence (a shared lock was two atomic read-modify-writes on one cache line that every
// worker shares).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace courier::detail {

template <class Entry>
class wire_id_table {
public:
    static constexpr std::size_t capacity = 4096;                // a power of two
    static constexpr std::size_t max_entries = capacity * 3 / 4; // keeps probes short

    /// The entry under `id`, or null (id 0 is never an entry).
    Entry const* find(std::uint64_t id) const noexcept {
        if (id == 0) {
            return nullptr;
        }
        for (std::size_t i = home(id);; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_acquire);
            if (at == id) {
                return &slots_[i].entry;
            }
            if (at == 0) {
                return nullptr;
            }
        }
    }

    enum class added { added, present, full };
    /// Adds `e` under `id` (not 0) unless the id is taken; `present` then points `*existing` at
    /// the entry already there, for the caller to judge.
    added add(std::uint64_t id, Entry const& e, Entry const** existing = nullptr) {
        std::lock_guard lk(mutex_);
        std::size_t i = home(id);
        for (;; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_relaxed);
            if (at == id) {
                if (existing != nullptr) {
                    *existing = &slots_[i].entry;
                }
                return added::present;
            }
            if (at == 0) {
                break;
            }
        }
        if (count_ + 1 > max_entries) {
            return added::full;
        }
        slots_[i].entry = e;
        slots_[i].id.store(id, std::memory_order_release);
        ++count_;
        return added::added;
    }

private:
    static constexpr std::size_t mask = capacity - 1;
    struct slot {
        std::atomic<std::uint64_t> id{0};
        Entry entry{};
    };
    static std::size_t home(std::uint64_t id) noexcept {
        return static_cast<std::size_t>((id * 0x9e3779b97f4a7c15ull) >> 52) & mask;
    }
    std::array<slot, capacity> slots_{};
    std::size_t count_ = 0;
    std::mutex mutex_;
};

} // namespace courier::detail
