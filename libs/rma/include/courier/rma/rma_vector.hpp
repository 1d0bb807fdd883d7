// SPDX-License-Identifier: BSL-1.0
// rma_vector<T>: a std::vector-like array in registered memory (HPX paper, section 3.4).
//
// Semantics (precisely):
//  - An rma_vector is a handle to shared storage: {elements, size, capacity}. Copying a handle
//    (copy construction or assignment) shares the storage, as the paper describes: both handles
//    see the same elements, the same size and the same capacity, and a change made through one
//    (a write, push_back, resize, clear, a reallocation) is seen through the other. clone()
//    makes an independent copy. A moved-from handle is empty and shares nothing.
//  - Elements are trivially copyable (they are moved by memcpy and sent as bytes); new elements
//    from resize(n) or rma_vector(n) are value-initialized (zero for arithmetic types).
//  - Memory comes from the registered pool (rma/pool.hpp). Pointers and iterators are
//    invalidated by reallocation as for std::vector — through every handle sharing the storage.
//  - Serialization: at or above the zero-copy threshold the elements travel as an *rma chunk*
//    carrying the pool's registration key, so the sender registers nothing during the send; the
//    message keeps the memory alive until it is sent (even if a handle reallocates meanwhile).
//    The receiver reads them into pool memory and the loaded rma_vector adopts that buffer: no
//    copy outside the network on either side. A load that cannot adopt (the bytes are not in
//    pool memory, e.g. a local save/load) copies once into pool memory. Loading into a handle
//    gives it new storage; other handles of the old storage keep it.
// Thread safety: like std::vector for the elements; the handle count is atomic (shared_ptr).
// Errors: allocation throws rma::pool_exhausted over the pool's limit; at() throws
// std::out_of_range.
#pragma once

#include <courier/rma/detail/pool_block.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization/serializer.hpp>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace courier {

template <class T>
class rma_vector {
    static_assert(std::is_trivially_copyable_v<T>, "rma_vector<T> needs a trivially copyable T");
    static constexpr std::size_t alignment = alignof(T) < 16 ? 16 : alignof(T);

    struct storage {
        std::shared_ptr<std::byte[]> memory; // pool memory, or a received buffer adopted
        T* data = nullptr;
        std::size_t size = 0;
        std::size_t capacity = 0;
    };

public:
    using value_type = T;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using reference = T&;
    using const_reference = T const&;
    using pointer = T*;
    using const_pointer = T const*;
    using iterator = T*;
    using const_iterator = T const*;

    rma_vector() : s_(std::make_shared<storage>()) {}
    explicit rma_vector(size_type n) : rma_vector() { resize(n); }
    rma_vector(size_type n, T const& value) : rma_vector() { assign(n, value); }
    rma_vector(std::initializer_list<T> il) : rma_vector() { assign(il.begin(), il.end()); }
    template <std::input_iterator It>
    rma_vector(It first, It last) : rma_vector() {
        assign(first, last);
    }
    rma_vector(rma_vector const&) = default; // shares the storage
    rma_vector& operator=(rma_vector const&) = default;
    rma_vector(rma_vector&& o) noexcept : s_(std::move(o.s_)) {}
    rma_vector& operator=(rma_vector&& o) noexcept {
        s_ = std::move(o.s_);
        return *this;
    }
    ~rma_vector() = default;

    /// An independent copy (its own storage).
    rma_vector clone() const {
        rma_vector c;
        c.assign(begin(), end());
        return c;
    }

    T* data() noexcept { return s_ ? s_->data : nullptr; }
    T const* data() const noexcept { return s_ ? s_->data : nullptr; }
    size_type size() const noexcept { return s_ ? s_->size : 0; }
    size_type capacity() const noexcept { return s_ ? s_->capacity : 0; }
    bool empty() const noexcept { return size() == 0; }
    iterator begin() noexcept { return data(); }
    iterator end() noexcept { return data() + size(); }
    const_iterator begin() const noexcept { return data(); }
    const_iterator end() const noexcept { return data() + size(); }
    const_iterator cbegin() const noexcept { return begin(); }
    const_iterator cend() const noexcept { return end(); }
    T& operator[](size_type i) noexcept { return s_->data[i]; }
    T const& operator[](size_type i) const noexcept { return s_->data[i]; }
    T& at(size_type i) {
        check_index(i);
        return s_->data[i];
    }
    T const& at(size_type i) const {
        check_index(i);
        return s_->data[i];
    }
    T& front() noexcept { return s_->data[0]; }
    T& back() noexcept { return s_->data[s_->size - 1]; }
    T const& front() const noexcept { return s_->data[0]; }
    T const& back() const noexcept { return s_->data[s_->size - 1]; }

    void reserve(size_type n) {
        if (n > capacity()) {
            reallocate(n);
        }
    }
    void shrink_to_fit() {
        if (capacity() > size()) {
            reallocate(size());
        }
    }
    void resize(size_type n) { resize(n, T{}); }
    void resize(size_type n, T const& value) {
        reserve(n);
        auto& s = *s_;
        if (n > s.size) {
            std::uninitialized_fill(s.data + s.size, s.data + n, value);
        }
        s.size = n;
    }
    /// Like resize(n), but new elements are left uninitialized (to be overwritten).
    void resize_for_overwrite(size_type n) {
        reserve(n);
        s_->size = n;
    }
    void clear() noexcept {
        if (s_) {
            s_->size = 0;
        }
    }
    void push_back(T const& value) {
        if (size() == capacity()) {
            T copy = value; // `value` may live in this vector
            reallocate(grown(size() + 1));
            s_->data[s_->size++] = copy;
            return;
        }
        s_->data[s_->size++] = value;
    }
    template <class... Args>
    T& emplace_back(Args&&... args) {
        T v(std::forward<Args>(args)...);
        push_back(v);
        return back();
    }
    void pop_back() noexcept { --s_->size; }
    void assign(size_type n, T const& value) {
        clear();
        resize(n, value);
    }
    template <std::input_iterator It>
    void assign(It first, It last) {
        clear();
        if constexpr (std::forward_iterator<It>) {
            reserve(static_cast<size_type>(std::distance(first, last)));
        }
        for (; first != last; ++first) {
            push_back(*first);
        }
    }
    iterator insert(const_iterator pos, T const& value) { return insert(pos, size_type{1}, value); }
    iterator insert(const_iterator pos, size_type n, T const& value) {
        size_type at = static_cast<size_type>(pos - begin());
        T copy = value;
        open_gap(at, n);
        std::fill_n(s_->data + at, n, copy);
        return begin() + at;
    }
    template <std::forward_iterator It>
    iterator insert(const_iterator pos, It first, It last) {
        size_type at = static_cast<size_type>(pos - begin());
        size_type n = static_cast<size_type>(std::distance(first, last));
        rma_vector tmp(first, last); // the source may alias this vector
        open_gap(at, n);
        std::copy_n(tmp.data(), n, s_->data + at);
        return begin() + at;
    }
    iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
    iterator erase(const_iterator first, const_iterator last) {
        size_type at = static_cast<size_type>(first - begin());
        size_type n = static_cast<size_type>(last - first);
        if (n != 0) {
            std::memmove(static_cast<void*>(s_->data + at), s_->data + at + n,
                         (size() - at - n) * sizeof(T));
            s_->size -= n;
        }
        return begin() + at;
    }
    void swap(rma_vector& o) noexcept { s_.swap(o.s_); }

    /// How many handles share this storage.
    long use_count() const noexcept { return s_.use_count(); }
    bool shares_storage_with(rma_vector const& o) const noexcept { return s_ == o.s_; }
    /// The memory holding the elements (what a message keeps alive while it is sent).
    std::shared_ptr<void const> memory() const noexcept {
        return s_ ? std::shared_ptr<void const>(s_->memory) : nullptr;
    }

    /// A vector over `n` elements at `data`, kept alive by `owner` (loaders adopting received
    /// memory). `data` must be aligned for T.
    static rma_vector adopt(std::shared_ptr<void const> const& owner, T const* data, size_type n) {
        rma_vector v;
        v.s_->memory =
            std::shared_ptr<std::byte[]>(std::const_pointer_cast<void>(owner),
                                         reinterpret_cast<std::byte*>(const_cast<T*>(data)));
        v.s_->data = const_cast<T*>(data);
        v.s_->size = n;
        v.s_->capacity = n;
        return v;
    }

    friend bool operator==(rma_vector const& a, rma_vector const& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    std::shared_ptr<storage> s_;

    void check_index(size_type i) const {
        if (i >= size()) {
            throw std::out_of_range("courier::rma_vector: index " + std::to_string(i) +
                                    " out of range (size " + std::to_string(size()) + ")");
        }
    }
    size_type grown(size_type need) const noexcept {
        size_type c = capacity() * 2;
        size_type minimum = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;
        return std::max({c, need, minimum});
    }
    void open_gap(size_type at, size_type n) {
        if (size() + n > capacity()) {
            reallocate(grown(size() + n));
        }
        std::memmove(static_cast<void*>(s_->data + at + n), s_->data + at,
                     (size() - at) * sizeof(T));
        s_->size += n;
    }
    void reallocate(size_type n) {
        if (!s_) {
            s_ = std::make_shared<storage>();
        }
        auto& s = *s_;
        if (n > std::numeric_limits<size_type>::max() / sizeof(T)) {
            throw std::length_error("courier::rma_vector: " + std::to_string(n) +
                                    " elements do not fit in memory");
        }
        std::shared_ptr<std::byte[]> memory;
        T* data = nullptr;
        if (n != 0) {
            memory = rma::allocate_shared(n * sizeof(T), alignment);
            data = reinterpret_cast<T*>(memory.get());
            if (s.size != 0) {
                std::memcpy(static_cast<void*>(data), s.data, s.size * sizeof(T));
            }
        }
        s.memory = std::move(memory);
        s.data = data;
        s.capacity = n;
    }
};

template <class T>
void swap(rma_vector<T>& a, rma_vector<T>& b) noexcept {
    a.swap(b);
}

namespace serialization {

template <class T>
struct serializer<rma_vector<T>> {
    static void save(output_archive& ar, rma_vector<T> const& v) {
        ar.save_size(v.size());
        rma::detail::save_pool_block(ar, v.data(), v.size() * sizeof(T), v.memory());
    }
    static void load(input_archive& ar, rma_vector<T>& v) {
        std::size_t n = ar.load_count(sizeof(T));
        auto memory = rma::detail::load_pool_block(ar, n * sizeof(T), alignof(T));
        v = rma_vector<T>::adopt(memory, reinterpret_cast<T const*>(memory.get()), n);
    }
};

template <class T>
struct min_wire_size<rma_vector<T>> : std::integral_constant<std::size_t, 1> {};

} // namespace serialization

} // namespace courier
