// SPDX-License-Identifier: BSL-1.0
// rma_object<T>: one object in registered memory, with rma_vector's semantics: a handle to
// shared storage (copies share the object; clone() copies it), T trivially copyable, memory
// from the registered pool. At or above the zero-copy threshold (sizeof(T) >= threshold) it
// travels as an rma chunk carrying its key; a received one adopts the network's buffer.
//
//   auto grid = courier::make_rma_object<grid_block>();   // value-initialized
//   grid->cells[0] = 1.0;
//   courier::async<relax_action>(there, grid);             // no registration, no copy
// Thread safety: like a shared_ptr<T>. Errors: rma::pool_exhausted over the pool's limit.
#pragma once

#include <courier/rma/detail/pool_block.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization/serializer.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace courier {

template <class T>
class rma_object {
    static_assert(std::is_trivially_copyable_v<T>, "rma_object<T> needs a trivially copyable T");
    static constexpr std::size_t alignment = alignof(T) < 16 ? 16 : alignof(T);

public:
    using element_type = T;

    /// A value-initialized T in pool memory.
    rma_object() : rma_object(std::in_place) {}
    /// T constructed from `args` in pool memory.
    template <class... Args>
    explicit rma_object(std::in_place_t, Args&&... args) {
        auto memory = rma::allocate_shared(sizeof(T), alignment);
        T* obj = ::new (static_cast<void*>(memory.get())) T(std::forward<Args>(args)...);
        p_ = std::shared_ptr<T>(std::move(memory), obj);
    }

    T& operator*() const noexcept { return *p_; }
    T* operator->() const noexcept { return p_.get(); }
    T* get() const noexcept { return p_.get(); }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    long use_count() const noexcept { return p_.use_count(); }
    rma_object clone() const { return rma_object(std::in_place, *p_); }
    std::shared_ptr<T> const& shared() const noexcept { return p_; }

    /// An object at `data` kept alive by `owner` (loaders adopting received memory).
    static rma_object adopt(std::shared_ptr<void const> const& owner, T const* data) {
        rma_object o(adopt_tag{});
        o.p_ = std::shared_ptr<T>(std::const_pointer_cast<void>(owner), const_cast<T*>(data));
        return o;
    }

private:
    struct adopt_tag {};
    explicit rma_object(adopt_tag) noexcept {}
    std::shared_ptr<T> p_;
};

template <class T, class... Args>
rma_object<T> make_rma_object(Args&&... args) {
    return rma_object<T>(std::in_place, std::forward<Args>(args)...);
}

namespace serialization {

template <class T>
struct serializer<rma_object<T>> {
    static void save(output_archive& ar, rma_object<T> const& o) {
        if (!o) {
            throw serialization_error("courier: cannot serialize an empty (moved-from) rma_object");
        }
        rma::detail::save_pool_block(ar, o.get(), sizeof(T), o.shared());
    }
    static void load(input_archive& ar, rma_object<T>& o) {
        auto memory = rma::detail::load_pool_block(ar, sizeof(T), alignof(T));
        o = rma_object<T>::adopt(memory, reinterpret_cast<T const*>(memory.get()));
    }
};

template <class T>
struct min_wire_size<rma_object<T>> : std::integral_constant<std::size_t, sizeof(T)> {};

} // namespace serialization

} // namespace courier
