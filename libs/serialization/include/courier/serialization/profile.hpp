// SPDX-License-Identifier: BSL-1.0
// Per-direction partial marshaling (MPI Serializer paper, seed 002): a type may be sent under a
// named profile that selects a subset of its fields, without changing the type.
//
//   struct particle { std::array<double,3> pos, vel, force; double mass; };
//   struct to_worker {};  struct to_master {};
//   COURIER_SERIALIZATION_PROFILE(to_worker, particle, &particle::pos, &particle::mass);
//   COURIER_SERIALIZATION_PROFILE(to_master, particle, &particle::force);
//   auto m = save(with_profile<to_worker>(particles));      // master -> worker
//   load(m, with_profile<to_worker>(worker_copy));
//
// with_profile works on one object, a std::vector, a std::array or a C array of them.
// profiled<Tag, T> (below) is the owning form, for actions' arguments and results. Loading
// writes only the profile's fields and leaves the others untouched; a vector is resized to the
// sent count (new elements are default-constructed) so results land in existing objects.
#pragma once

#include <courier/serialization/serializer.hpp>

#include <array>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace courier::serialization {

/// Specialize (or use COURIER_SERIALIZATION_PROFILE) with `static constexpr auto fields =
/// std::make_tuple(&T::a, &T::b, ...);`.
template <class Tag, class T>
struct profile_fields;

template <class Tag, class T>
struct profile_ref {
    T& value;
};

template <class Tag, class T>
profile_ref<Tag, T> with_profile(T& v) {
    return {v};
}
template <class Tag, class T>
profile_ref<Tag, T const> with_profile(T const& v) {
    return {v};
}

namespace detail {
template <class Tag, class T>
concept has_profile = requires {
    profile_fields<Tag, std::remove_cv_t<T>>::fields;
};

template <class Tag, class T>
void save_profiled(output_archive& ar, T const& v) {
    std::apply([&](auto... member) { (ar.save(v.*member), ...); }, profile_fields<Tag, T>::fields);
}
template <class Tag, class T>
void load_profiled(input_archive& ar, T& v) {
    std::apply([&](auto... member) { (ar.load(v.*member), ...); }, profile_fields<Tag, T>::fields);
}
template <class Tag, class T>
constexpr std::size_t profile_min_size() {
    return std::apply(
        [](auto... member) {
            return (
                std::size_t{0} + ... +
                min_wire_size<std::remove_cvref_t<decltype(std::declval<T&>().*member)>>::value);
        },
        profile_fields<Tag, T>::fields);
}
} // namespace detail

template <class Tag, class T>
struct serializer<profile_ref<Tag, T>> {
    using U = std::remove_cv_t<T>;
    static void save(output_archive& ar, profile_ref<Tag, T> const& r) {
        if constexpr (detail::has_profile<Tag, U>) {
            detail::save_profiled<Tag>(ar, r.value);
        } else {
            static_assert(
                std::is_array_v<U> || requires { r.value.size(); },
                "no profile_fields<Tag, T> for this type or its elements");
            if constexpr (!std::is_array_v<U>) {
                ar.save_size(r.value.size());
            }
            for (auto const& e : r.value) {
                detail::save_profiled<Tag>(ar, e);
            }
        }
    }
    static void load(input_archive& ar, profile_ref<Tag, T> const& r) {
        static_assert(!std::is_const_v<T>, "cannot load into a const object");
        if constexpr (detail::has_profile<Tag, U>) {
            detail::load_profiled<Tag>(ar, r.value);
        } else if constexpr (std::is_array_v<U>) {
            for (auto& e : r.value) {
                detail::load_profiled<Tag>(ar, e);
            }
        } else {
            using E = std::remove_cvref_t<decltype(*std::begin(r.value))>;
            std::size_t n = ar.load_count(detail::profile_min_size<Tag, E>());
            if constexpr (requires { r.value.resize(n); }) {
                r.value.resize(n);
            } else if (n != r.value.size()) {
                ar.fail("profile: expected " + std::to_string(r.value.size()) +
                        " elements, found " + std::to_string(n));
            }
            for (auto& e : r.value) {
                detail::load_profiled<Tag>(ar, e);
            }
        }
    }
};

/// The owning form of with_profile: a T that travels under profile Tag, so that it can be an
/// action's argument or result (a profile_ref holds a reference and cannot). Sending writes only
/// the profile's fields of value(); receiving fills them into a default-constructed T (the
/// others keep their defaults). assign_to() then copies the profile's fields into the caller's
/// existing objects:
///   profiled<to_master, std::vector<particle>> compute(profiled<to_worker, ...> in);
///   auto forces = courier::async<compute_action>(worker, profiled<to_worker, ...>(mine)).get();
///   forces.assign_to(mine);   // mine[i].force set; pos, vel, mass untouched
template <class Tag, class T>
class profiled {
public:
    profiled() = default;
    explicit profiled(T value) : value_(std::move(value)) {}

    T& value() noexcept { return value_; }
    T const& value() const noexcept { return value_; }

    /// Copies the profile's fields of value() into `dest` (element by element for a container
    /// or array, which must then have as many elements; throws std::length_error otherwise).
    void assign_to(T& dest) const {
        if constexpr (detail::has_profile<Tag, T>) {
            copy_fields(value_, dest);
        } else {
            if (std::size(dest) != std::size(value_)) {
                throw std::length_error(
                    "profiled::assign_to: " + std::to_string(std::size(value_)) +
                    " elements into " + std::to_string(std::size(dest)));
            }
            auto out = std::begin(dest);
            for (auto const& e : value_) {
                copy_fields(e, *out);
                ++out;
            }
        }
    }

private:
    T value_{};

    template <class E>
    static void copy_fields(E const& from, E& to) {
        std::apply([&](auto... member) { ((to.*member = from.*member), ...); },
                   profile_fields<Tag, E>::fields);
    }
};

template <class Tag, class T>
struct serializer<profiled<Tag, T>> {
    static void save(output_archive& ar, profiled<Tag, T> const& p) {
        serializer<profile_ref<Tag, T const>>::save(ar, {p.value()});
    }
    static void load(input_archive& ar, profiled<Tag, T>& p) {
        serializer<profile_ref<Tag, T>>::load(ar, {p.value()});
    }
};

} // namespace courier::serialization

/// Declares the fields sent under profile Tag for type T. Use at global scope.
#define COURIER_SERIALIZATION_PROFILE(Tag, T, ...)                                                 \
    template <>                                                                                    \
    struct courier::serialization::profile_fields<Tag, T> {                                        \
        static constexpr auto fields = std::make_tuple(__VA_ARGS__);                               \
    }
