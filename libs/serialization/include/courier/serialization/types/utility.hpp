// SPDX-License-Identifier: BSL-1.0
// Fixed-shape standard types: C arrays, std::array, pair, tuple, optional, variant, monostate,
// complex, bitset, chrono durations and time points.
#pragma once

#include <courier/serialization/serializer.hpp>

#include <array>
#include <bitset>
#include <chrono>
#include <complex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>

namespace courier::serialization {

/// C arrays and std::array: no count (the size is part of the type); bitwise elements form one
/// block, which is zero copy at or above the threshold.
template <class T, std::size_t N>
struct serializer<T[N]> {
    static void save(output_archive& ar, T const (&a)[N]) {
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.save_block(a, sizeof(a));
        } else {
            for (auto const& e : a) {
                ar.save(e);
            }
        }
    }
    static void load(input_archive& ar, T (&a)[N]) {
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.load_block(a, sizeof(a));
        } else {
            for (auto& e : a) {
                ar.load(e);
            }
        }
    }
};

template <class T, std::size_t N>
struct serializer<std::array<T, N>> {
    static void save(output_archive& ar, std::array<T, N> const& a) {
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.save_block(a.data(), sizeof(T) * N);
        } else {
            for (auto const& e : a) {
                ar.save(e);
            }
        }
    }
    static void load(input_archive& ar, std::array<T, N>& a) {
        if constexpr (is_bitwise_serializable_v<T>) {
            ar.load_block(a.data(), sizeof(T) * N);
        } else {
            for (auto& e : a) {
                ar.load(e);
            }
        }
    }
};

template <class A, class B>
struct serializer<std::pair<A, B>> {
    static void save(output_archive& ar, std::pair<A, B> const& p) {
        ar.save(p.first);
        ar.save(p.second);
    }
    static void load(input_archive& ar, std::pair<A, B>& p) {
        ar.load(const_cast<std::remove_const_t<A>&>(p.first));
        ar.load(p.second);
    }
};
template <class A, class B>
struct min_wire_size<std::pair<A, B>>
    : std::integral_constant<std::size_t, min_wire_size<A>::value + min_wire_size<B>::value> {};

template <class... Ts>
struct serializer<std::tuple<Ts...>> {
    static void save(output_archive& ar, std::tuple<Ts...> const& t) {
        std::apply([&](auto const&... e) { (ar.save(e), ...); }, t);
    }
    static void load(input_archive& ar, std::tuple<Ts...>& t) {
        std::apply([&](auto&... e) { (ar.load(e), ...); }, t);
    }
};
template <class... Ts>
struct min_wire_size<std::tuple<Ts...>>
    : std::integral_constant<std::size_t, (std::size_t{0} + ... + min_wire_size<Ts>::value)> {};

/// optional: one byte (0 empty, 1 engaged), then the value.
template <class T>
struct serializer<std::optional<T>> {
    static void save(output_archive& ar, std::optional<T> const& o) {
        ar.save_value(static_cast<std::uint8_t>(o.has_value()));
        if (o) {
            ar.save(*o);
        }
    }
    static void load(input_archive& ar, std::optional<T>& o) {
        auto tag = ar.load_value<std::uint8_t>();
        if (tag == 0) {
            o.reset();
        } else if (tag == 1) {
            if (!o) {
                o.emplace();
            }
            ar.load(*o);
        } else {
            ar.fail("expected an optional tag (0 or 1), found " + std::to_string(tag));
        }
    }
};
template <class T>
struct min_wire_size<std::optional<T>> : std::integral_constant<std::size_t, 1> {};

template <>
struct serializer<std::monostate> {
    static void save(output_archive&, std::monostate const&) {}
    static void load(input_archive&, std::monostate&) {}
};

/// variant: varint alternative index, then the alternative.
template <class... Ts>
struct serializer<std::variant<Ts...>> {
    using V = std::variant<Ts...>;
    static void save(output_archive& ar, V const& v) {
        if (v.valueless_by_exception()) {
            throw serialization_error("cannot serialize a valueless std::variant");
        }
        ar.save_size(v.index());
        std::visit([&](auto const& e) { ar.save(e); }, v);
    }
    template <std::size_t I>
    static void load_alternative(input_archive& ar, V& v) {
        if (v.index() != I) {
            v.template emplace<I>();
        }
        ar.load(std::get<I>(v));
    }
    static void load(input_archive& ar, V& v) {
        auto index = ar.load_size();
        if (index >= sizeof...(Ts)) {
            ar.fail("variant alternative index " + std::to_string(index) + " out of range (" +
                    std::to_string(sizeof...(Ts)) + " alternatives)");
        }
        using loader = void (*)(input_archive&, V&);
        static constexpr auto table = []<std::size_t... I>(std::index_sequence<I...>) {
            return std::array<loader, sizeof...(Ts)>{&load_alternative<I>...};
        }
        (std::index_sequence_for<Ts...>{});
        table[index](ar, v);
    }
};
template <class... Ts>
struct min_wire_size<std::variant<Ts...>> : std::integral_constant<std::size_t, 1> {};

template <class T>
struct serializer<std::complex<T>> {
    static void save(output_archive& ar, std::complex<T> const& c) {
        ar.save(c.real());
        ar.save(c.imag());
    }
    static void load(input_archive& ar, std::complex<T>& c) {
        T re{}, im{};
        ar.load(re);
        ar.load(im);
        c = {re, im};
    }
};

/// bitset<N>: ceil(N/8) bytes, bit i in byte i/8.
template <std::size_t N>
struct serializer<std::bitset<N>> {
    static void save(output_archive& ar, std::bitset<N> const& b) {
        std::array<std::uint8_t, (N + 7) / 8> bytes{};
        for (std::size_t i = 0; i < N; ++i) {
            bytes[i / 8] |= static_cast<std::uint8_t>(b[i]) << (i % 8);
        }
        ar.save_bytes(bytes.data(), bytes.size());
    }
    static void load(input_archive& ar, std::bitset<N>& b) {
        std::array<std::uint8_t, (N + 7) / 8> bytes{};
        ar.load_bytes(bytes.data(), bytes.size());
        if constexpr (N % 8 != 0) {
            if (bytes.back() >> (N % 8)) {
                ar.fail("bitset<" + std::to_string(N) + ">: padding bits are set");
            }
        }
        for (std::size_t i = 0; i < N; ++i) {
            b[i] = (bytes[i / 8] >> (i % 8)) & 1u;
        }
    }
};

template <class Rep, class Period>
struct serializer<std::chrono::duration<Rep, Period>> {
    static void save(output_archive& ar, std::chrono::duration<Rep, Period> const& d) {
        ar.save(d.count());
    }
    static void load(input_archive& ar, std::chrono::duration<Rep, Period>& d) {
        Rep r{};
        ar.load(r);
        d = std::chrono::duration<Rep, Period>(r);
    }
};

template <class Clock, class Dur>
struct serializer<std::chrono::time_point<Clock, Dur>> {
    static void save(output_archive& ar, std::chrono::time_point<Clock, Dur> const& t) {
        ar.save(t.time_since_epoch());
    }
    static void load(input_archive& ar, std::chrono::time_point<Clock, Dur>& t) {
        Dur d{};
        ar.load(d);
        t = std::chrono::time_point<Clock, Dur>(d);
    }
};

} // namespace courier::serialization
