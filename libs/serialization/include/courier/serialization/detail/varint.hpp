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

/// What decode_varint found.
enum class varint_read { ok, truncated, overflow };

/// Reads a varint from [cur, end) into `v`, moving `cur` past it (on failure, past what was
/// read). overflow: the value does not fit in 64 bits (the tenth byte above 1), so a varint
/// is never longer than max_varint_bytes.
inline varint_read decode_varint(std::byte const*& cur, std::byte const* end,
                                 std::uint64_t& v) noexcept {
    v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (cur == end) {
            return varint_read::truncated;
        }
        auto b = static_cast<std::uint8_t>(*cur++);
        if (shift == 63 && b > 1) {
            return varint_read::overflow;
        }
        v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            return varint_read::ok;
        }
    }
    return varint_read::overflow; // not reached: the tenth byte (shift 63) ends the loop
}

} // namespace courier::serialization::detail
