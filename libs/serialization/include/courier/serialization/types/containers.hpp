// SPDX-License-Identifier: BSL-1.0
// Sequence and associative containers: varint count, then the elements in iteration order.
// Loading replaces the container's contents. Counts are checked against the remaining bytes
// before anything is allocated.
#pragma once

#include <courier/serialization/serializer.hpp>

#include <deque>
#include <forward_list>
#include <list>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace courier::serialization {

namespace detail {

template <class C>
void save_range(output_archive& ar, C const& c, std::size_t n) {
    ar.save_size(n);
    for (auto const& e : c) {
        ar.save(e);
    }
}

/// deque, list: load into fresh elements appended at the back.
template <class C>
struct sequence_serializer {
    using T = typename C::value_type;
    static void save(output_archive& ar, C const& c) { save_range(ar, c, c.size()); }
    static void load(input_archive& ar, C& c) {
        std::size_t n = ar.load_count(min_wire_size<T>::value);
        c.clear();
        for (std::size_t i = 0; i < n; ++i) {
            ar.load(c.emplace_back());
        }
    }
};

/// set, multiset, unordered_set (and multi): elements are loaded then inserted.
template <class C>
struct set_serializer {
    using T = typename C::value_type;
    static void save(output_archive& ar, C const& c) { save_range(ar, c, c.size()); }
    static void load(input_archive& ar, C& c) {
        std::size_t n = ar.load_count(min_wire_size<T>::value);
        c.clear();
        for (std::size_t i = 0; i < n; ++i) {
            T e{};
            ar.load(e);
            c.insert(c.end(), std::move(e));
        }
    }
};

/// map, multimap, unordered_map (and multi): key then value.
template <class C>
struct map_serializer {
    using K = typename C::key_type;
    using V = typename C::mapped_type;
    static void save(output_archive& ar, C const& c) {
        ar.save_size(c.size());
        for (auto const& [k, v] : c) {
            ar.save(k);
            ar.save(v);
        }
    }
    static void load(input_archive& ar, C& c) {
        std::size_t n = ar.load_count(min_wire_size<K>::value + min_wire_size<V>::value);
        c.clear();
        for (std::size_t i = 0; i < n; ++i) {
            K k{};
            V v{};
            ar.load(k);
            ar.load(v);
            c.emplace_hint(c.end(), std::move(k), std::move(v));
        }
    }
};

} // namespace detail

template <class T, class A>
struct serializer<std::deque<T, A>> : detail::sequence_serializer<std::deque<T, A>> {};
template <class T, class A>
struct serializer<std::list<T, A>> : detail::sequence_serializer<std::list<T, A>> {};

template <class T, class A>
struct serializer<std::forward_list<T, A>> {
    static void save(output_archive& ar, std::forward_list<T, A> const& c) {
        std::size_t n = 0;
        for (auto it = c.begin(); it != c.end(); ++it) {
            ++n;
        }
        detail::save_range(ar, c, n);
    }
    static void load(input_archive& ar, std::forward_list<T, A>& c) {
        std::size_t n = ar.load_count(min_wire_size<T>::value);
        c.clear();
        auto tail = c.before_begin();
        for (std::size_t i = 0; i < n; ++i) {
            tail = c.emplace_after(tail);
            ar.load(*tail);
        }
    }
};

template <class T, class Cmp, class A>
struct serializer<std::set<T, Cmp, A>> : detail::set_serializer<std::set<T, Cmp, A>> {};
template <class T, class Cmp, class A>
struct serializer<std::multiset<T, Cmp, A>> : detail::set_serializer<std::multiset<T, Cmp, A>> {};
template <class T, class H, class E, class A>
struct serializer<std::unordered_set<T, H, E, A>>
    : detail::set_serializer<std::unordered_set<T, H, E, A>> {};
template <class T, class H, class E, class A>
struct serializer<std::unordered_multiset<T, H, E, A>>
    : detail::set_serializer<std::unordered_multiset<T, H, E, A>> {};

template <class K, class V, class Cmp, class A>
struct serializer<std::map<K, V, Cmp, A>> : detail::map_serializer<std::map<K, V, Cmp, A>> {};
template <class K, class V, class Cmp, class A>
struct serializer<std::multimap<K, V, Cmp, A>>
    : detail::map_serializer<std::multimap<K, V, Cmp, A>> {};
template <class K, class V, class H, class E, class A>
struct serializer<std::unordered_map<K, V, H, E, A>>
    : detail::map_serializer<std::unordered_map<K, V, H, E, A>> {};
template <class K, class V, class H, class E, class A>
struct serializer<std::unordered_multimap<K, V, H, E, A>>
    : detail::map_serializer<std::unordered_multimap<K, V, H, E, A>> {};

template <class T, class A>
struct min_wire_size<std::deque<T, A>> : std::integral_constant<std::size_t, 1> {};
template <class T, class A>
struct min_wire_size<std::list<T, A>> : std::integral_constant<std::size_t, 1> {};
template <class T, class A>
struct min_wire_size<std::forward_list<T, A>> : std::integral_constant<std::size_t, 1> {};
template <class T, class C, class A>
struct min_wire_size<std::set<T, C, A>> : std::integral_constant<std::size_t, 1> {};
template <class K, class V, class C, class A>
struct min_wire_size<std::map<K, V, C, A>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization
