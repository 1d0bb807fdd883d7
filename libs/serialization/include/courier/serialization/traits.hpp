// SPDX-License-Identifier: BSL-1.0
// Type traits of the serialization layer: which types are copied bitwise, class versions,
// the access class that reaches private serialize functions, and the serializer customization
// point that every supported type specializes.
#pragma once

#include <array>
#include <complex>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <courier/serialization/detail/tie_fields.hpp>

namespace courier::serialization {

/// True for types whose bytes are their value (no pointers, no padding that matters): their
/// arrays are memcpy'd and, at or above the threshold, sent zero copy. Arithmetic types, enums,
/// std::byte, and complex/array of such are bitwise; user types opt in with
/// COURIER_IS_BITWISE_SERIALIZABLE(T) at global scope, or with a member type alias
/// `using courier_bitwise_serializable = void;`. Aggregates of bitwise members without padding
/// are bitwise with no declaration: ask is_bitwise_serializable_v (below), which
/// includes them.
template <class T>
struct is_bitwise_serializable : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                                                    std::is_same_v<T, std::byte>> {};

template <class T>
requires requires {
    typename T::courier_bitwise_serializable;
}
struct is_bitwise_serializable<T> : std::true_type {
    static_assert(std::is_trivially_copyable_v<T>, "bitwise types must be trivially copyable");
};
template <class T>
struct is_bitwise_serializable<std::complex<T>> : is_bitwise_serializable<T> {};
template <class T, std::size_t N>
struct is_bitwise_serializable<std::array<T, N>> : is_bitwise_serializable<T> {};
template <class T, std::size_t N>
struct is_bitwise_serializable<T[N]> : is_bitwise_serializable<T> {};

/// Class version: written before each object of a type whose version is not 0 and passed to
/// its serialize(ar, version) on load, so old data stays readable after the type grows.
/// Declare with COURIER_CLASS_VERSION(T, N) at global scope or a member
/// `static constexpr unsigned courier_serialization_version = N;`.
/// In messages version 0 writes nothing, so a type sent between different builds must be
/// versioned from its first version on; checkpoint files record every type's version in their
/// type table, so there a type can gain a version and still read the files written before.
template <class T>
struct class_version : std::integral_constant<unsigned, 0> {};
template <class T>
requires requires {
    T::courier_serialization_version;
}
struct class_version<T> : std::integral_constant<unsigned, T::courier_serialization_version> {};
template <class T>
inline constexpr unsigned class_version_v = class_version<std::remove_cv_t<T>>::value;

/// The customization point: serializer<T>::save(output_archive&, T const&) and
/// serializer<T>::load(input_archive&, T&). Specialized for standard types; the primary
/// template (serializer.hpp) handles user types.
template <class T>
struct serializer;

/// Befriend this class to let Courier reach private serialize/save/load members:
///   friend class courier::serialization::access;
class access {
public:
    template <class Ar, class T>
    static constexpr bool has_versioned_serialize = requires(Ar& ar, T& t) {
        t.serialize(ar, 0u);
    };
    template <class Ar, class T>
    static constexpr bool has_plain_serialize = requires(Ar& ar, T& t) {
        t.serialize(ar);
    };
    template <class OAr, class IAr, class T>
    static constexpr bool has_split = requires(OAr& oa, IAr& ia, T const& c, T& t) {
        c.save(oa, 0u);
        t.load(ia, 0u);
    };
    template <class T>
    static constexpr bool has_default_ctor = requires {
        new T();
    };

    template <class Ar, class T>
    static void serialize(Ar& ar, T& t, unsigned version) {
        if constexpr (has_versioned_serialize<Ar, T>) {
            t.serialize(ar, version);
        } else {
            t.serialize(ar);
        }
    }
    template <class Ar, class T>
    static void save(Ar& ar, T const& t, unsigned version) {
        t.save(ar, version);
    }
    template <class Ar, class T>
    static void load(Ar& ar, T& t, unsigned version) {
        t.load(ar, version);
    }
    template <class T>
    static T* create() {
        return new T();
    }
};

class output_archive;
class input_archive;

// ---- aggregates: serialized member by member with no user code (detail/tie_fields.hpp) ----
namespace detail {

template <class Ar, class T>
concept has_free_versioned_serialize = requires(Ar& ar, T& t) {
    serialize(ar, t, 0u);
};
template <class Ar, class T>
concept has_free_plain_serialize = requires(Ar& ar, T& t) {
    serialize(ar, t);
};

/// The type has serialization code of its own (member, free or split functions).
template <class T>
inline constexpr bool is_user_serializable =
    access::has_versioned_serialize<output_archive, T> ||
    access::has_plain_serialize<output_archive, T> ||
    access::has_split<output_archive, input_archive, T> ||
    has_free_versioned_serialize<output_archive, T> || has_free_plain_serialize<output_archive, T>;

/// An aggregate that Courier serializes member by member: no code of its own, no bitwise
/// declaration.
template <class T>
inline constexpr bool is_plain_aggregate =
    std::is_class_v<T>&& std::is_aggregate_v<T> && !is_user_serializable<T> &&
    !is_bitwise_serializable<T>::value;

template <class T>
constexpr bool aggregate_is_bitwise();

} // namespace detail

/// Whether T is copied bitwise: declared so (is_bitwise_serializable), or an aggregate of
/// bitwise members without padding.
template <class T>
inline constexpr bool
    is_bitwise_serializable_v = is_bitwise_serializable<std::remove_cv_t<T>>::value ||
                                detail::aggregate_is_bitwise<std::remove_cv_t<T>>();

namespace detail {

template <class... M>
constexpr bool members_are_bitwise(std::tuple<M&...> const*, std::size_t size) {
    return (is_bitwise_serializable_v<M> && ...) && (std::size_t{0} + ... + sizeof(M)) == size;
}

template <class T>
constexpr bool aggregate_is_bitwise() {
    if constexpr (is_plain_aggregate<T> && std::is_trivially_copyable_v<T>) {
        return members_are_bitwise(static_cast<field_types<T> const*>(nullptr), sizeof(T));
    } else {
        return false;
    }
}

/// The primary serializer (user types) has this member; specializations do not.
template <class M>
concept uses_primary_serializer = requires {
    serializer<M>::courier_user_type;
};

/// Member number I (from 0) of aggregate T has type M. The error below names all three.
template <class T, std::size_t I, class M>
struct aggregate_member {
    static constexpr bool serializable =
        !std::is_pointer_v<M> && !std::is_member_pointer_v<M> && !std::is_union_v<M> &&
        (!uses_primary_serializer<M> || is_bitwise_serializable_v<M> || is_user_serializable<M> ||
         is_plain_aggregate<M>);
    static_assert(serializable,
                  "member I of aggregate T (this template's arguments <T, I, member type>) cannot "
                  "be serialized: a raw pointer needs std::unique_ptr, std::shared_ptr or a deep "
                  "copy wrapper; a union or a class that is not an aggregate needs serialize()");
};

template <class T, class... M, std::size_t... I>
constexpr bool check_members(std::tuple<M&...> const*, std::index_sequence<I...>) {
    return (aggregate_member<T, I, std::remove_cv_t<M>>::serializable && ...);
}

template <class T>
constexpr bool aggregate_members_serializable() {
    using F = field_types<T>;
    return check_members<T>(static_cast<F const*>(nullptr),
                            std::make_index_sequence<std::tuple_size_v<F>>{});
}

} // namespace detail

/// The smallest number of bytes one T can occupy on the wire; used to reject element counts
/// that cannot fit in the bytes that remain before anything is allocated. 0 = unknown.
template <class T>
struct min_wire_size : std::integral_constant<std::size_t, 0> {};
template <class T>
requires is_bitwise_serializable_v<T>
struct min_wire_size<T> : std::integral_constant<std::size_t, sizeof(T)> {
};

} // namespace courier::serialization

/// Declares T (a trivially copyable type) bitwise serializable. Use at global scope.
#define COURIER_IS_BITWISE_SERIALIZABLE(T)                                                         \
    template <>                                                                                    \
    struct courier::serialization::is_bitwise_serializable<T> : std::true_type {                   \
        static_assert(std::is_trivially_copyable_v<T>, #T " must be trivially copyable");          \
    }

/// Declares the current version of T. Use at global scope.
#define COURIER_CLASS_VERSION(T, N)                                                                \
    template <>                                                                                    \
    struct courier::serialization::class_version<T> : std::integral_constant<unsigned, (N)> {}
