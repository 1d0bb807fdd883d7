// SPDX-License-Identifier: BSL-1.0
// serialize_buffer<T>: a reference-counted array of bitwise T, as HPX's (HPX paper, section 3.1).
//
// Modes: `copy` allocates and copies (the data and its reference count in one block, a small
// one from the small-object pool: a small buffer received and loaded costs no malloc);
// `reference` wraps the caller's memory without owning it (the caller keeps it alive until the
// send completes: the future or async_cb says when); `take` adopts the memory and frees it with
// delete[] or a given deleter when the last reference goes.
// Copies of a serialize_buffer share the data. At or above the zero-copy threshold the data
// travels as a pointer chunk straight from the buffer's memory; the message holds a reference
// until it is destroyed. On load from a chunk that has an owner (received network memory or a
// checkpoint file), the buffer adopts the bytes without copying; otherwise it copies them.
// Thread safety: like std::shared_ptr (the count is atomic; the data is not synchronized).
#pragma once

#include <courier/common/small_alloc.hpp>
#include <courier/serialization/serializer.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

namespace courier::serialization {

template <class T>
class serialize_buffer {
    static_assert(is_bitwise_serializable_v<T>, "serialize_buffer<T> needs a bitwise T");

public:
    using value_type = T;
    enum init_mode { copy, reference, take };

    serialize_buffer() noexcept = default;
    /// `size` uninitialized elements, owned.
    explicit serialize_buffer(std::size_t size) : data_(allocate(size)), size_(size) {}
    serialize_buffer(T* data, std::size_t size, init_mode mode = copy) : size_(size) {
        switch (mode) {
        case copy:
            data_ = allocate(size);
            std::copy_n(data, size, data_.get());
            break;
        case reference:
            data_ = std::shared_ptr<T[]>(data, [](T*) {});
            break;
        case take:
            data_ = std::shared_ptr<T[]>(data);
            break;
        }
    }
    /// Read-only source: copied, or referenced.
    serialize_buffer(T const* data, std::size_t size, init_mode mode = copy)
        : serialize_buffer(const_cast<T*>(data), size, mode == take ? copy : mode) {}
    /// Takes ownership of `data`; `d(data)` runs when the last reference goes.
    template <class Deleter>
    requires std::is_invocable_v<Deleter&, T*> serialize_buffer(T* data, std::size_t size,
                                                                Deleter d)
        : data_(data, std::move(d)), size_(size) {}
    /// Shares memory owned by `owner` (used by loaders to adopt received bytes).
    serialize_buffer(std::shared_ptr<void const> const& owner, T const* data, std::size_t size)
        : data_(std::const_pointer_cast<void>(owner), const_cast<T*>(data)), size_(size) {}

    T* data() noexcept { return data_.get(); }
    T const* data() const noexcept { return data_.get(); }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    T& operator[](std::size_t i) noexcept { return data_[i]; }
    T const& operator[](std::size_t i) const noexcept { return data_[i]; }
    T* begin() noexcept { return data(); }
    T* end() noexcept { return data() + size_; }
    T const* begin() const noexcept { return data(); }
    T const* end() const noexcept { return data() + size_; }
    long use_count() const noexcept { return data_.use_count(); }
    /// The shared owner, for whoever must keep the data alive.
    std::shared_ptr<T[]> const& owner() const noexcept { return data_; }

    friend bool operator==(serialize_buffer const& a, serialize_buffer const& b) {
        return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
    }

private:
    static std::shared_ptr<T[]> allocate(std::size_t n) {
        return std::allocate_shared_for_overwrite<T[]>(courier::detail::pool_allocator<T>{}, n);
    }

    std::shared_ptr<T[]> data_;
    std::size_t size_ = 0;
};

template <class T>
struct serializer<serialize_buffer<T>> {
    // Any archive: below the zero-copy threshold a buffer is flat (flat_stream.hpp).
    static constexpr bool flat_stream = true;
    template <class Archive>
    static void save(Archive& ar, serialize_buffer<T> const& b) {
        std::size_t bytes = b.size() * sizeof(T);
        ar.save_size(b.size());
        if (ar.is_zero_copy(bytes)) {
            ar.keep_alive(b.owner());
        }
        ar.save_block(b.data(), bytes);
    }
    template <class Archive>
    static void load(Archive& ar, serialize_buffer<T>& b) {
        std::size_t n = ar.load_count(sizeof(T));
        auto blk = ar.take_block(n * sizeof(T));
        bool aligned = reinterpret_cast<std::uintptr_t>(blk.data) % alignof(T) == 0;
        if (blk.owner != nullptr && *blk.owner && aligned) {
            b = serialize_buffer<T>(*blk.owner, reinterpret_cast<T const*>(blk.data), n);
            return;
        }
        serialize_buffer<T> fresh(n);
        if (n != 0) {
            std::memcpy(fresh.data(), blk.data, n * sizeof(T));
        }
        b = std::move(fresh);
    }
};

template <class T>
struct min_wire_size<serialize_buffer<T>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization

namespace courier {
using serialization::serialize_buffer;
}
