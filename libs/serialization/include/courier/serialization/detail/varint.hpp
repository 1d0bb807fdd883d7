// SPDX-License-Identifier: BSL-1.0
// Unsigned LEB128, used for sizes, counts, tags and versions (never for payload values, which
// travel at their native width). Values below 128 take one byte.
#pragma once

#include <cstddef>
#include <cstdint>

namespace courier::serialization::detail {

inline constexpr std::size_t max_varint_bytes = 10;

/// Writes `v` at `out` (which must have max_varint_bytes of room); returns the bytes written.
inline std::size_t encode_varint(std::uint64_t v, std::byte* out) noexcept {
    std::size_t n = 0;
    while (v >= 0x80) {
        out[n++] = static_cast<std::byte>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out[n++] = static_cast<std::byte>(v);
    return n;
}

inline constexpr std::size_t varint_size(std::uint64_t v) noexcept {
    std::size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

} // namespace courier::serialization::detail
