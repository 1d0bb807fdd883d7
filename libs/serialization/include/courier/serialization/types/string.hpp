// SPDX-License-Identifier: BSL-1.0
// std::basic_string and std::basic_string_view (save only) : varint length + characters; a long
// string is a contiguous block and travels as a pointer chunk like any other.
#pragma once

#include <courier/serialization/serializer.hpp>

#include <string>
#include <string_view>

namespace courier::serialization {

template <class C, class Tr, class A>
struct serializer<std::basic_string<C, Tr, A>> {
    static void save(output_archive& ar, std::basic_string<C, Tr, A> const& s) {
        ar.save_size(s.size());
        ar.save_block(s.data(), s.size() * sizeof(C));
    }
    static void load(input_archive& ar, std::basic_string<C, Tr, A>& s) {
        std::size_t n = ar.load_count(sizeof(C));
        s.resize(n);
        ar.load_block(s.data(), n * sizeof(C));
    }
};

template <class C, class Tr, class A>
struct min_wire_size<std::basic_string<C, Tr, A>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization
