// SPDX-License-Identifier: BSL-1.0
// The serializer customization point for arithmetic types and for user types, and
// base_object<Base> for inheritance.
//
// A user type T is handled, in this order, by:
//   1. COURIER_IS_BITWISE_SERIALIZABLE / member alias, or an aggregate of bitwise members
//      without padding: memcpy of the object;
//   2. split members  template <class A> void save(A&, unsigned) const; void load(A&, unsigned);
//   3. a member       template <class A> void serialize(A&, unsigned version)  (or (A&));
//   4. a free         template <class A> void serialize(A&, T&, unsigned version) (or (A&, T&))
//      found by argument-dependent lookup;
//   5. an aggregate (traits.hpp): member by member, in declaration order.
// Types whose class_version is not 0 write it before their fields and receive the written
// version on load (loading data newer than the code is an error). Checkpoint files record the
// version of every such type once, in a type table (detail/type_table.hpp), unversioned types
// included, so that a type can gain a version and still read files written before.
#pragma once

#include <courier/serialization/input_archive.hpp>
#include <courier/serialization/output_archive.hpp>
#include <courier/serialization/traits.hpp>

#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>

namespace courier::serialization {

namespace detail {

std::string version_error(unsigned found, unsigned known, char const* type);

template <class Ar, class T>
void call_serialize(Ar& ar, T& t, unsigned version) {
    if constexpr (access::has_versioned_serialize<Ar, T> || access::has_plain_serialize<Ar, T>) {
        access::serialize(ar, t, version);
    } else if constexpr (has_free_versioned_serialize<Ar, T>) {
        serialize(ar, t, version);
    } else {
        serialize(ar, t);
    }
}

} // namespace detail

/// Arithmetic types, enums and std::byte: native width, native byte order (recorded in the
/// message header and checked on load).
template <class T>
requires(std::is_arithmetic_v<T> || std::is_enum_v<T> ||
         std::is_same_v<T, std::byte>) struct serializer<T> {
    // Any archive: flat streams (flat_stream.hpp) write and read numbers too.
    static constexpr bool flat_stream = true;
    template <class Archive>
    static void save(Archive& ar, T const& v) {
        ar.save_value(v);
    }
    template <class Archive>
    static void load(Archive& ar, T& v) {
        if constexpr (std::is_same_v<T, bool>) {
            auto b = ar.template load_value<std::uint8_t>();
            if (b > 1) {
                ar.fail("expected a bool (0 or 1), found " + std::to_string(b));
            }
            v = b != 0;
        } else {
            v = ar.template load_value<T>();
        }
    }
};

/// User types.
template <class T>
struct serializer {
    static constexpr bool courier_user_type = true; // detail::uses_primary_serializer
    static constexpr unsigned version = class_version_v<T>;

    static constexpr bool check() {
        static_assert(!std::is_pointer_v<T>,
                      "raw pointers are not serialized implicitly: use std::unique_ptr, "
                      "std::shared_ptr, or the deep-copy wrappers array(p, n) / shared(p)");
        static_assert(is_bitwise_serializable_v<T> || detail::is_user_serializable<T> ||
                          detail::is_plain_aggregate<T>,
                      "type is not serializable: give it a serialize(Archive&, unsigned) member, "
                      "a free serialize(Archive&, T&, unsigned), split save/load members, declare "
                      "it COURIER_IS_BITWISE_SERIALIZABLE, or make it an aggregate");
        if constexpr (detail::is_plain_aggregate<T> && !is_bitwise_serializable_v<T>) {
            return detail::aggregate_members_serializable<T>();
        }
        return true;
    }

    static void save(output_archive& ar, T const& v) {
        static_assert(check());
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.save_value(v);
        } else {
            if (ar.records_types()) [[unlikely]] { // a checkpoint file: its type table
                ar.record_type(detail::type_slot<T>(), typeid(T).name(), version);
            } else if constexpr (version != 0) {
                ar.save_size(version);
            }
            if constexpr (detail::is_plain_aggregate<T>) {
                std::apply([&](auto const&... m) { (ar.save(m), ...); }, detail::tie_fields(v));
            } else if constexpr (access::has_split<output_archive, input_archive, T>) {
                access::save(ar, v, version);
            } else {
                detail::call_serialize(ar, const_cast<T&>(v), version);
            }
        }
    }
    static void load(input_archive& ar, T& v) {
        static_assert(check());
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.load_bytes(&v, sizeof(T));
        } else {
            unsigned written = 0;
            if (ar.has_type_table()) [[unlikely]] { // a checkpoint file: its type table
                written = ar.written_version(detail::type_slot<T>(), typeid(T).name());
                if (written > version) {
                    ar.fail(detail::version_error(written, version, typeid(T).name()));
                }
            } else if constexpr (version != 0) {
                auto w = ar.load_size();
                if (w > version) {
                    ar.fail(
                        detail::version_error(static_cast<unsigned>(w), version, typeid(T).name()));
                }
                written = static_cast<unsigned>(w);
            }
            if constexpr (detail::is_plain_aggregate<T>) {
                (void)written;
                std::apply([&](auto&... m) { (ar.load(m), ...); }, detail::tie_fields(v));
            } else if constexpr (access::has_split<output_archive, input_archive, T>) {
                access::load(ar, v, written);
            } else {
                detail::call_serialize(ar, v, written);
            }
        }
    }
};

namespace detail {
void register_upcast(std::type_info const& derived, std::type_info const& base,
                     void* (*cast)(void*));

template <class Base, class Derived>
struct upcast_registrar {
    static void* cast(void* p) { return static_cast<Base*>(static_cast<Derived*>(p)); }
    static bool do_register() {
        if constexpr (std::is_polymorphic_v<Base>) {
            register_upcast(typeid(Derived), typeid(Base), &cast);
        }
        return true;
    }
    inline static bool const registered = do_register();
};
} // namespace detail

/// A reference to the Base part of an object: `ar & base_object<Base>(*this);` serializes the
/// Base fields (with Base's version) and teaches the polymorphic loader that Derived is a Base.
template <class Base>
struct base_object_ref {
    Base& base;
};

template <class Base, class Derived>
base_object_ref<Base> base_object(Derived& d) {
    static_assert(std::is_base_of_v<Base, Derived>, "base_object<Base>: Base is not a base");
    (void)detail::upcast_registrar<Base, std::remove_cv_t<Derived>>::registered;
    return {static_cast<Base&>(d)};
}
template <class Base, class Derived>
base_object_ref<Base const> base_object(Derived const& d) {
    static_assert(std::is_base_of_v<Base, Derived>, "base_object<Base>: Base is not a base");
    (void)detail::upcast_registrar<Base, Derived>::registered;
    return {static_cast<Base const&>(d)};
}

template <class Base>
struct serializer<base_object_ref<Base>> {
    using B = std::remove_cv_t<Base>;
    static void save(output_archive& ar, base_object_ref<Base> const& r) {
        serializer<B>::save(ar, r.base);
    }
    static void load(input_archive& ar, base_object_ref<Base> const& r) {
        serializer<B>::load(ar, const_cast<B&>(r.base));
    }
};

} // namespace courier::serialization
