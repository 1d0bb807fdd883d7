// SPDX-License-Identifier: BSL-1.0
// A first-in first-out queue in one ring of slots that keeps its capacity: once it has held its
// high-water mark of elements, pushing and popping allocate nothing. std::deque, used as a FIFO,
// frees a block of its elements each time the front leaves one and allocates a new one each time
// the back enters one (every 64 pointers in libstdc++), so a steady flow through it allocates for
// ever; the parcel paths' queues must not (benchmarks/RESULTS.md, "Per-parcel cost").
// The capacity is a power of two, doubled when full; memory is bounded by the most elements the
// queue ever held, which the callers' flow control bounds.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace courier::detail {

template <class T>
class ring_fifo {
    static_assert(std::is_nothrow_move_constructible_v<T>, "make_room moves the elements");

public:
    ring_fifo() = default;
    ring_fifo(ring_fifo const&) = delete;
    ring_fifo& operator=(ring_fifo const&) = delete;
    ring_fifo(ring_fifo&& o) noexcept
        : slots_(std::exchange(o.slots_, nullptr)), mask_(std::exchange(o.mask_, 0)),
          head_(std::exchange(o.head_, 0)), size_(std::exchange(o.size_, 0)) {}
    ring_fifo& operator=(ring_fifo&& o) noexcept {
        if (this != &o) {
            release();
            slots_ = std::exchange(o.slots_, nullptr);
            mask_ = std::exchange(o.mask_, 0);
            head_ = std::exchange(o.head_, 0);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    ~ring_fifo() { release(); }

    bool empty() const noexcept { return size_ == 0; }
    std::size_t size() const noexcept { return size_; }
    /// Slots held: the high-water mark rounded up to a power of two (0 before the first push).
    std::size_t capacity() const noexcept { return slots_ == nullptr ? 0 : mask_ + 1; }

    T& front() noexcept { return slots_[head_]; }
    T const& front() const noexcept { return slots_[head_]; }
    T& back() noexcept { return slots_[(head_ + size_ - 1) & mask_]; }
    /// The i-th element from the front (i < size()).
    T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & mask_]; }
    T const& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) & mask_]; }

    /// `a` must not refer to an element of this queue (a growth moves them first).
    template <class... A>
    T& emplace_back(A&&... a) {
        make_room();
        T* slot = slots_ + ((head_ + size_) & mask_);
        std::construct_at(slot, std::forward<A>(a)...);
        ++size_;
        return *slot;
    }
    void push_back(T v) { emplace_back(std::move(v)); }
    void push_front(T v) {
        make_room();
        std::size_t const at = (head_ + mask_) & mask_; // head_ - 1, modulo the capacity
        std::construct_at(slots_ + at, std::move(v));
        head_ = at;
        ++size_;
    }
    void pop_front() noexcept {
        std::destroy_at(slots_ + head_);
        head_ = (head_ + 1) & mask_;
        --size_;
    }
    /// Destroys the elements; the capacity stays.
    void clear() noexcept {
        while (size_ != 0) {
            pop_front();
        }
        head_ = 0;
    }

    /// Front to back, for inspection and draining (the queue is not modified while iterating).
    template <class Q, class E>
    class basic_iterator {
    public:
        basic_iterator(Q* q, std::size_t i) : q_(q), i_(i) {}
        E& operator*() const noexcept { return (*q_)[i_]; }
        E* operator->() const noexcept { return &(*q_)[i_]; }
        basic_iterator& operator++() noexcept {
            ++i_;
            return *this;
        }
        bool operator==(basic_iterator const& o) const noexcept { return i_ == o.i_; }

    private:
        Q* q_;
        std::size_t i_;
    };
    using iterator = basic_iterator<ring_fifo, T>;
    using const_iterator = basic_iterator<ring_fifo const, T const>;
    iterator begin() noexcept { return {this, 0}; }
    iterator end() noexcept { return {this, size_}; }
    const_iterator begin() const noexcept { return {this, 0}; }
    const_iterator end() const noexcept { return {this, size_}; }

private:
    static constexpr std::size_t first_capacity = 16;

    void make_room() {
        if (slots_ != nullptr && size_ <= mask_) {
            return;
        }
        std::size_t const cap = slots_ == nullptr ? first_capacity : 2 * (mask_ + 1);
        T* fresh = std::allocator<T>{}.allocate(cap);
        for (std::size_t i = 0; i < size_; ++i) { // moves cannot throw for the queues' types
            T* from = slots_ + ((head_ + i) & mask_);
            std::construct_at(fresh + i, std::move(*from));
            std::destroy_at(from);
        }
        if (slots_ != nullptr) {
            std::allocator<T>{}.deallocate(slots_, mask_ + 1);
        }
        slots_ = fresh;
        mask_ = cap - 1;
        head_ = 0;
    }
    void release() noexcept {
        clear();
        if (slots_ != nullptr) {
            std::allocator<T>{}.deallocate(slots_, mask_ + 1);
            slots_ = nullptr;
            mask_ = 0;
        }
    }

    T* slots_ = nullptr;
    std::size_t mask_ = 0;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

} // namespace courier::detail
