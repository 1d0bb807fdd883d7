// SPDX-License-Identifier: BSL-1.0
// Compile-time FNV-1a 64: stable wire ids from names (polymorphic classes, actions).
#pragma once

#include <cstdint>
#include <string_view>

namespace courier::serialization::detail {

constexpr std::uint64_t fnv1a64(std::string_view s) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) {
        h ^= static_cast<std::uint8_t>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

} // namespace courier::serialization::detail
