// SPDX-License-Identifier: BSL-1.0
// std::unique_ptr (owning, one tag byte), std::shared_ptr (tracked: every distinct object
// travels once per message; aliasing and cycles among shared_ptrs survive the round trip) and
// std::weak_ptr (tracked with them).
// Polymorphic pointees go through the class registry (polymorphic.hpp).
//
// shared_ptr wire format: varint tag 0 = null, 1 = new object (then, if polymorphic, its u64 id,
// then its contents), k >= 2 = the object numbered k-2 in this message.
#pragma once

#include <courier/serialization/detail/tracking.hpp>
#include <courier/serialization/polymorphic.hpp>

#include <memory>

namespace courier::serialization {

template <class T, class D>
struct serializer<std::unique_ptr<T, D>> {
    static_assert(!std::is_polymorphic_v<T> || std::has_virtual_destructor_v<T>,
                  "unique_ptr<Base> of a polymorphic Base needs a virtual destructor");
    static void save(output_archive& ar, std::unique_ptr<T, D> const& p) {
        ar.save_value(static_cast<std::uint8_t>(p != nullptr));
        if (p) {
            detail::save_pointee(ar, *p);
        }
    }
    static void load(input_archive& ar, std::unique_ptr<T, D>& p) {
        auto tag = ar.load_value<std::uint8_t>();
        if (tag == 0) {
            p.reset();
            return;
        }
        if (tag != 1) {
            ar.fail("expected a unique_ptr tag (0 or 1), found " + std::to_string(tag));
        }
        if constexpr (std::is_polymorphic_v<T>) {
            T* typed = nullptr;
            auto [raw, e] = detail::create_polymorphic<T>(ar, &typed);
            std::unique_ptr<T, D> owner(typed);
            e->load(ar, raw);
            p = std::move(owner);
        } else {
            std::unique_ptr<T, D> owner(access::create<T>());
            ar.load(*owner);
            p = std::move(owner);
        }
    }
};

template <class T>
struct serializer<std::shared_ptr<T>> {
    using U = std::remove_cv_t<T>;
    static void save(output_archive& ar, std::shared_ptr<T> const& p) {
        if (!p) {
            ar.save_size(0);
            return;
        }
        void const* key;
        if constexpr (std::is_polymorphic_v<U>) {
            key = dynamic_cast<void const*>(p.get());
        } else {
            key = p.get();
        }
        auto [number, first] = ar.tracking().insert(key);
        if (!first) {
            ar.save_size(number + 2);
            return;
        }
        ar.save_size(1);
        detail::save_pointee<U>(ar, *p);
    }

    static void load(input_archive& ar, std::shared_ptr<T>& p) {
        auto tag = ar.load_size();
        if (tag == 0) {
            p.reset();
            return;
        }
        auto& objects = ar.tracking();
        if (tag == 1) {
            if constexpr (std::is_polymorphic_v<U>) {
                U* typed = nullptr;
                auto [raw, e] = detail::create_polymorphic<U>(ar, &typed);
                std::shared_ptr<void> owner(raw, e->destroy);
                objects.add({raw, e->type, e, owner, e->clear});
                e->load(ar, raw); // registered first: cycles back to it resolve
                p = std::shared_ptr<T>(owner, typed);
            } else {
                std::shared_ptr<U> owner(access::create<U>());
                objects.add({owner.get(), &typeid(U), nullptr, owner, detail::clear_function<U>()});
                ar.load(*owner);
                p = std::move(owner);
            }
            return;
        }
        std::uint64_t number = tag - 2;
        if (number >= objects.size()) {
            ar.fail("shared_ptr refers to object #" + std::to_string(number) + ", but only " +
                    std::to_string(objects.size()) + " objects were read so far");
        }
        auto const& o = objects[number];
        if (!o.owner) {
            ar.fail("shared_ptr refers to object #" + std::to_string(number) +
                    ", which is not owned by a shared_ptr");
        }
        U* typed = nullptr;
        if constexpr (std::is_polymorphic_v<U>) {
            if (o.entry != nullptr) {
                typed = detail::upcast<U>(o.address, *o.entry);
            }
        } else if (*o.type == typeid(U)) {
            typed = static_cast<U*>(o.address);
        }
        if (typed == nullptr) {
            ar.fail("shared_ptr<" + detail::demangle(typeid(U).name()) + "> refers to object #" +
                    std::to_string(number) + " of unrelated type " +
                    detail::demangle(o.type->name()));
        }
        p = std::shared_ptr<T>(o.owner, typed);
    }
};

/// weak_ptr: written as the shared_ptr it locks to (null once expired), tracked with the
/// shared_ptrs of the message, so a weak back edge (a parent pointer, a cycle) loads as a weak
/// pointer to the same object. An object that only weak_ptrs in the message reach is kept alive
/// until the load ends and then expires, as it would have on the writer's side without the
/// owners outside the message. Limit: objects that own each other in a cycle of shared_ptrs and
/// that only weak pointers reach stay alive after the load (as on the writer's side, where such
/// an island is already leaked); a message can describe one, so a receiver of untrusted data
/// should not give types with such cycles weak_ptr members.
template <class T>
struct serializer<std::weak_ptr<T>> {
    static void save(output_archive& ar, std::weak_ptr<T> const& w) {
        serializer<std::shared_ptr<T>>::save(ar, w.lock());
    }
    static void load(input_archive& ar, std::weak_ptr<T>& w) {
        std::shared_ptr<T> p;
        serializer<std::shared_ptr<T>>::load(ar, p);
        w = p;
    }
};

template <class T, class D>
struct min_wire_size<std::unique_ptr<T, D>> : std::integral_constant<std::size_t, 1> {};
template <class T>
struct min_wire_size<std::shared_ptr<T>> : std::integral_constant<std::size_t, 1> {};
template <class T>
struct min_wire_size<std::weak_ptr<T>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization
