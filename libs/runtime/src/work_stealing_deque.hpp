// SPDX-License-Identifier: BSL-1.0
// Chase-Lev work-stealing deque (Chase & Lev 2005; the C11 formulation of Le et al. 2013, with
// sequentially consistent operations on top/bottom instead of standalone fences, which
// ThreadSanitizer understands). push's store of bottom is sequentially consistent although the
// deque alone needs only a release store: the scheduler's wake-up handshake relies on it (a
// spawner pushes, then reads the sleeper count; a worker going to sleep raises the count, then
// looks at the deque; with a release store both may read the old values and the task waits for
// the sleeper's timeout). The owner pushes and pops at the bottom (LIFO); thieves steal at the
// top (FIFO). Items are non-zero words; 0 means "nothing". Grown arrays are retired,
// not freed, until the deque dies: a thief may still read the old one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace courier::detail {

class work_stealing_deque {
public:
    explicit work_stealing_deque(std::int64_t capacity = 1024) {
        auto a = std::make_unique<array>(capacity);
        array_.store(a.get(), std::memory_order_relaxed);
        arrays_.push_back(std::move(a));
    }

    /// Owner only.
    void push(std::uintptr_t v) {
        std::int64_t b = bottom_.load(std::memory_order_relaxed);
        std::int64_t t = top_.load(std::memory_order_acquire);
        array* a = array_.load(std::memory_order_relaxed);
        if (b - t > a->capacity - 1) {
            a = grow(a, b, t);
        }
        a->put(b, v);
        bottom_.store(b + 1, std::memory_order_seq_cst);
    }

    /// Owner only. Returns 0 when empty.
    std::uintptr_t pop() {
        // Empty at a glance: only the owner moves bottom, and thieves only raise top, so a top
        // read late can only make the deque look fuller than it is. An idle worker pops on
        // every pass; the sequentially consistent store below is a locked instruction.
        if (bottom_.load(std::memory_order_relaxed) <= top_.load(std::memory_order_relaxed)) {
            return 0;
        }
        std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
        array* a = array_.load(std::memory_order_relaxed);
        bottom_.store(b, std::memory_order_seq_cst);
        std::int64_t t = top_.load(std::memory_order_seq_cst);
        if (t > b) {
            bottom_.store(b + 1, std::memory_order_relaxed);
            return 0;
        }
        std::uintptr_t v = a->get(b);
        if (t == b) { // the last item: race with thieves for it
            if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                              std::memory_order_relaxed)) {
                v = 0;
            }
            bottom_.store(b + 1, std::memory_order_relaxed);
        }
        return v;
    }

    /// Any thread. Returns 0 when empty or when it lost a race.
    std::uintptr_t steal() {
        std::int64_t t = top_.load(std::memory_order_seq_cst);
        std::int64_t b = bottom_.load(std::memory_order_seq_cst);
        if (t >= b) {
            return 0;
        }
        array* a = array_.load(std::memory_order_acquire);
        std::uintptr_t v = a->get(t);
        if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                          std::memory_order_relaxed)) {
            return 0;
        }
        return v;
    }

    bool maybe_nonempty() const noexcept {
        return bottom_.load(std::memory_order_seq_cst) > top_.load(std::memory_order_seq_cst);
    }

private:
    struct array {
        explicit array(std::int64_t cap)
            : capacity(cap), data(std::make_unique<std::atomic<std::uintptr_t>[]>(cap)) {}
        std::uintptr_t get(std::int64_t i) const noexcept {
            return data[i & (capacity - 1)].load(std::memory_order_relaxed);
        }
        void put(std::int64_t i, std::uintptr_t v) noexcept {
            data[i & (capacity - 1)].store(v, std::memory_order_relaxed);
        }
        std::int64_t capacity;
        std::unique_ptr<std::atomic<std::uintptr_t>[]> data;
    };

    array* grow(array* old, std::int64_t b, std::int64_t t) {
        auto a = std::make_unique<array>(old->capacity * 2);
        for (std::int64_t i = t; i < b; ++i) {
            a->put(i, old->get(i));
        }
        // Kept first: if that throws (out of memory), nothing was published and the old array
        // stays in use.
        arrays_.push_back(std::move(a));
        array* grown = arrays_.back().get();
        array_.store(grown, std::memory_order_release);
        return grown;
    }

    alignas(64) std::atomic<std::int64_t> top_{0};
    alignas(64) std::atomic<std::int64_t> bottom_{0};
    alignas(64) std::atomic<array*> array_{nullptr};
    std::vector<std::unique_ptr<array>> arrays_; // owner only
};

} // namespace courier::detail
