// SPDX-License-Identifier: BSL-1.0
// std::vector: varint count, then the elements. Bitwise elements form one contiguous block
// (a pointer chunk at or above the zero-copy threshold); vector<bool> is packed 8 per byte.
#pragma once

#include <courier/serialization/serializer.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace courier::serialization {

namespace detail {
template <class T>
std::size_t reserve_hint(input_archive const& ar, std::size_t n) {
    // Never reserve more than the remaining bytes could possibly fill.
    constexpr std::size_t m = min_wire_size<T>::value;
    std::size_t cap = m == 0 ? ar.remaining() : ar.remaining() / m;
    return n < cap ? n : cap;
}
} // namespace detail

template <class T, class A>
struct serializer<std::vector<T, A>> {
    /// From this size a growing vector of bitwise elements is assigned from the received bytes
    /// instead of resized (zeroed) and then overwritten; below it, zeroing a few cache lines
    /// costs less than the block's extra checks.
    static constexpr std::size_t assign_min_bytes = 1024;
    static void save(output_archive& ar, std::vector<T, A> const& v) {
        ar.save_size(v.size());
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.save_block(v.data(), v.size() * sizeof(T));
        } else {
            for (auto const& e : v) {
                ar.save(e);
            }
        }
    }
    static void load(input_archive& ar, std::vector<T, A>& v) {
        std::size_t n = ar.load_count(min_wire_size<T>::value);
        if constexpr (is_bitwise_serializable_v<T>) {
            std::size_t const bytes = n * sizeof(T); // load_count: n * sizeof(T) <= remaining
            if constexpr (std::is_copy_assignable_v<T>) {
                if (v.size() < n && bytes >= assign_min_bytes) {
                    // Growing (a fresh vector, the usual case): copy the elements in once,
                    // where resize() would first zero the new ones (a 64 KiB part of an
                    // all_gather was written twice on every rank).
                    auto const blk = ar.take_block(bytes);
                    if (reinterpret_cast<std::uintptr_t>(blk.data) % alignof(T) == 0) {
                        auto const* first = reinterpret_cast<T const*>(blk.data);
                        v.assign(first, first + n);
                    } else {
                        v.resize(n);
                        std::memcpy(v.data(), blk.data, bytes);
                    }
                    return;
                }
            }
            v.resize(n);
            ar.load_block(v.data(), bytes);
        } else {
            static_assert(std::is_default_constructible_v<T>,
                          "vector<T> loading needs a default-constructible T");
            // Load into existing elements (keeps their capacity), then grow element by element
            // so that a lying count fails on the first missing element, not in an allocation.
            if (v.size() > n) {
                v.resize(n);
            }
            for (auto& e : v) {
                ar.load(e);
            }
            v.reserve(detail::reserve_hint<T>(ar, n));
            while (v.size() < n) {
                ar.load(v.emplace_back());
            }
        }
    }
};

template <class A>
struct serializer<std::vector<bool, A>> {
    static void save(output_archive& ar, std::vector<bool, A> const& v) {
        ar.save_size(v.size());
        std::uint8_t byte = 0;
        std::size_t i = 0;
        for (bool b : v) {
            byte |= static_cast<std::uint8_t>(b) << (i % 8);
            if (++i % 8 == 0) {
                ar.save_value(byte);
                byte = 0;
            }
        }
        if (i % 8 != 0) {
            ar.save_value(byte);
        }
    }
    static void load(input_archive& ar, std::vector<bool, A>& v) {
        std::size_t n = ar.load_count(0);
        if ((n + 7) / 8 > ar.remaining()) {
            ar.fail("vector<bool> of " + std::to_string(n) + " bits needs " +
                    std::to_string((n + 7) / 8) + " bytes, " + std::to_string(ar.remaining()) +
                    " remain");
        }
        v.assign(n, false);
        std::uint8_t byte = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (i % 8 == 0) {
                byte = ar.load_value<std::uint8_t>();
            }
            v[i] = (byte >> (i % 8)) & 1u;
        }
    }
};

template <class T, class A>
struct min_wire_size<std::vector<T, A>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization
