// SPDX-License-Identifier: BSL-1.0
// CRC-32C: the SSE4.2 crc32 instruction where the CPU has it, else slicing-by-8 tables.
#include "crc32c.hpp"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace courier::serialization::detail {

namespace {

constexpr std::uint32_t poly = 0x82f63b78u; // reflected Castagnoli polynomial

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) {
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        }
        t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i) {
        for (int s = 1; s < 8; ++s) {
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
        }
    }
    return t;
}

constexpr auto tables = make_tables();

std::uint32_t crc32c_portable(std::uint32_t crc, unsigned char const* p, std::size_t n) noexcept {
    while (n >= 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        v ^= crc; // little-endian hosts; big-endian hosts take the byte loop below
        if constexpr (std::endian::native == std::endian::little) {
            crc = tables[7][v & 0xff] ^ tables[6][(v >> 8) & 0xff] ^ tables[5][(v >> 16) & 0xff] ^
                  tables[4][(v >> 24) & 0xff] ^ tables[3][(v >> 32) & 0xff] ^
                  tables[2][(v >> 40) & 0xff] ^ tables[1][(v >> 48) & 0xff] ^
                  tables[0][(v >> 56) & 0xff];
            p += 8;
            n -= 8;
        } else {
            break;
        }
    }
    while (n-- > 0) {
        crc = tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t
crc32c_sse42(std::uint32_t crc, unsigned char const* p, std::size_t n) noexcept {
    std::uint64_t c = crc;
    while (n >= 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    auto c32 = static_cast<std::uint32_t>(c);
    while (n-- > 0) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}
#endif

} // namespace

std::uint32_t crc32c(std::uint32_t crc, void const* data, std::size_t n) noexcept {
    auto const* p = static_cast<unsigned char const*>(data);
    crc = ~crc;
#if defined(__x86_64__)
    static bool const has_sse42 = __builtin_cpu_supports("sse4.2");
    crc = has_sse42 ? crc32c_sse42(crc, p, n) : crc32c_portable(crc, p, n);
#else
    crc = crc32c_portable(crc, p, n);
#endif
    return ~crc;
}

} // namespace courier::serialization::detail
