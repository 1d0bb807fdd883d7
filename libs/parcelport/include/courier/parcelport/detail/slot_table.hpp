// SPDX-License-Identifier: BSL-1.0
// slot_table<T>: operations in flight (sends awaiting completion, requests awaiting replies),
// looked up by a 64-bit id, with no lock.
//
// An id is (generation << 32) | index; the generation of a slot grows every time the slot is
// taken, so an id that has completed (or was never issued) finds nothing: a stale or forged
// completion is ignored. Ids are never 0.
//
// Life of a slot: acquire() (any thread) gives a slot owned by the caller, with its id; the
// caller fills `value` and publish()es it. From then on any thread may find() it by id, and
// exactly one claim() of that id succeeds: the winner owns the slot again, takes what it needs
// from `value` and gives the slot back with release(). A slot that was never published is
// released directly.
//
// Thread safety: acquire, publish, claim and release are lock-free (a tagged free list and one
// compare-exchange each) and may run on any thread. Slots live in segments that are allocated
// on demand and never move or go away before the table does, so a slot pointer from find()
// stays valid; `value` of a published slot must only be read by its claimer, or, for fields
// the owner made atomic, by anyone. Capacity: segments * slots_per_segment (more in flight
// than that throws std::length_error).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace courier::parcelport::detail {

template <class T, std::size_t SlotsPerSegment = 256, std::size_t Segments = 4096>
class slot_table {
public:
    /// Slots at most (ids' indexes stay below it).
    static constexpr std::size_t capacity = SlotsPerSegment * Segments;

    struct slot {
        T value{};

        std::uint64_t id() const noexcept { return id_; }

    private:
        friend class slot_table;
        std::atomic<std::uint64_t> live_id_{0};   // id_ while published, else 0
        std::uint64_t id_ = 0;                    // owned by whoever holds the slot
        std::atomic<std::uint32_t> next_free_{0}; // free-list link: index + 1, 0 = end
        std::uint32_t index_ = 0;
    };

    slot_table() = default;
    slot_table(slot_table const&) = delete;
    slot_table& operator=(slot_table const&) = delete;
    ~slot_table() {
        for (auto& s : segments_) {
            delete[] s.load(std::memory_order_relaxed);
        }
    }

    /// A slot for the caller alone, under a new id (not findable until publish()).
    slot* acquire() {
        std::uint64_t head = free_head_.load(std::memory_order_acquire);
        while ((head & index_mask) != 0) {
            slot* s = at(static_cast<std::uint32_t>(head & index_mask) - 1);
            std::uint64_t next = s->next_free_.load(std::memory_order_relaxed);
            std::uint64_t tagged = ((head >> 32) + 1) << 32 | next;
            if (free_head_.compare_exchange_weak(head, tagged, std::memory_order_acquire,
                                                 std::memory_order_acquire)) {
                return renew(s);
            }
        }
        std::uint32_t index = next_fresh_.fetch_add(1, std::memory_order_relaxed);
        if (index >= capacity) {
            next_fresh_.fetch_sub(1, std::memory_order_relaxed);
            throw std::length_error("courier: more than " + std::to_string(capacity) +
                                    " operations in flight");
        }
        return renew(fresh(index));
    }

    /// Makes `s` findable by its id (its value must be complete: claimers read it).
    void publish(slot* s) noexcept { s->live_id_.store(s->id_, std::memory_order_release); }

    /// The published slot with this id, or nullptr. Only a successful claim() makes it yours.
    slot* find(std::uint64_t id) const noexcept {
        auto index = static_cast<std::uint32_t>(id);
        if (id == 0 || index >= next_fresh_.load(std::memory_order_acquire)) {
            return nullptr;
        }
        slot* seg = segments_[index / SlotsPerSegment].load(std::memory_order_acquire);
        if (seg == nullptr) {
            return nullptr; // being allocated: nothing was published in it yet
        }
        slot* s = &seg[index % SlotsPerSegment];
        return s->live_id_.load(std::memory_order_acquire) == id ? s : nullptr;
    }

    /// The id published in slot `index` now (0: none, or no such slot).
    std::uint64_t live_id_at(std::uint32_t index) const noexcept {
        if (index >= next_fresh_.load(std::memory_order_acquire)) {
            return 0;
        }
        slot* seg = segments_[index / SlotsPerSegment].load(std::memory_order_acquire);
        return seg == nullptr
                   ? 0
                   : seg[index % SlotsPerSegment].live_id_.load(std::memory_order_acquire);
    }

    /// Takes the published slot `id` out of the table; true for exactly one caller per id.
    bool claim(slot* s, std::uint64_t id) noexcept {
        return s->live_id_.compare_exchange_strong(id, 0, std::memory_order_acq_rel,
                                                   std::memory_order_relaxed);
    }
    /// find() and claim() in one: the slot, now the caller's, or nullptr.
    slot* claim(std::uint64_t id) noexcept {
        slot* s = find(id);
        return s != nullptr && claim(s, id) ? s : nullptr;
    }

    /// Gives back a slot the caller holds (claimed, or acquired and never published).
    void release(slot* s) noexcept {
        std::uint64_t head = free_head_.load(std::memory_order_relaxed);
        for (;;) {
            s->next_free_.store(static_cast<std::uint32_t>(head & index_mask),
                                std::memory_order_relaxed);
            std::uint64_t tagged = ((head >> 32) + 1) << 32 | (std::uint64_t{s->index_} + 1);
            if (free_head_.compare_exchange_weak(head, tagged, std::memory_order_release,
                                                 std::memory_order_relaxed)) {
                return;
            }
        }
    }

    /// Calls f(slot&, id) for every slot published at the time it is looked at (a snapshot
    /// per slot, not of the table: slots may come and go meanwhile; claim() before using more
    /// than the atomic fields of `value`).
    template <class F>
    void for_each_published(F&& f) {
        std::uint32_t n = next_fresh_.load(std::memory_order_acquire);
        for (std::uint32_t i = 0; i < n; ++i) {
            slot* seg = segments_[i / SlotsPerSegment].load(std::memory_order_acquire);
            if (seg == nullptr) {
                continue;
            }
            slot& s = seg[i % SlotsPerSegment];
            if (std::uint64_t id = s.live_id_.load(std::memory_order_acquire); id != 0) {
                f(s, id);
            }
        }
    }

    /// Slots ever taken (the high-water mark of operations in flight).
    std::size_t capacity_used() const noexcept {
        return next_fresh_.load(std::memory_order_relaxed);
    }

private:
    static constexpr std::uint64_t index_mask = 0xffffffffu;

    slot* renew(slot* s) noexcept {
        std::uint64_t generation = (s->id_ >> 32) + 1;
        s->id_ = generation << 32 | s->index_;
        return s;
    }
    slot* at(std::uint32_t index) const noexcept {
        return &segments_[index / SlotsPerSegment].load(
            std::memory_order_acquire)[index % SlotsPerSegment];
    }
    slot* fresh(std::uint32_t index) {
        auto& entry = segments_[index / SlotsPerSegment];
        slot* seg = entry.load(std::memory_order_acquire);
        if (seg == nullptr) {
            auto made = std::make_unique<slot[]>(SlotsPerSegment);
            for (std::size_t i = 0; i < SlotsPerSegment; ++i) {
                made[i].index_ =
                    static_cast<std::uint32_t>(index / SlotsPerSegment * SlotsPerSegment + i);
            }
            if (entry.compare_exchange_strong(seg, made.get(), std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
                seg = made.release();
            }
        }
        return &seg[index % SlotsPerSegment];
    }

    std::array<std::atomic<slot*>, Segments> segments_{};
    std::atomic<std::uint32_t> next_fresh_{0};
    std::atomic<std::uint64_t> free_head_{0}; // (tag << 32) | (index + 1), 0 = empty
};

} // namespace courier::parcelport::detail
