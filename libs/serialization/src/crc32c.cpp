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
// The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one chain
// of them runs at a third of the instruction's rate. Long inputs are therefore
// cut into blocks of 3 x `lane` bytes whose thirds run as three independent chains; the chains
// are then joined by the CRC's linearity: for register values, crc(c, A||B) equals
// crc(crc(c, A), B), and crc(v, B) = crc(v, zeros(|B|)) ^ crc(0, B), where advancing a value
// over `lane` zero bytes is a linear map on 32 bits, applied here through four 256-entry
// tables built once from the map's 32 basis images.
constexpr std::size_t lane = 4096;

__attribute__((target("sse4.2"))) std::uint64_t chain(std::uint64_t c, unsigned char const* p,
                                                      std::size_t n) noexcept {
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    return c;
}

struct zero_shift {
    std::array<std::array<std::uint32_t, 256>, 4> t{};
    __attribute__((target("sse4.2"))) zero_shift() {
        static unsigned char const zeros[lane] = {};
        std::uint32_t basis[32];
        for (int i = 0; i < 32; ++i) {
            basis[i] = static_cast<std::uint32_t>(chain(std::uint64_t{1} << i, zeros, lane));
        }
        for (int j = 0; j < 4; ++j) {
            for (unsigned b = 0; b < 256; ++b) {
                std::uint32_t v = 0;
                for (int k = 0; k < 8; ++k) {
                    if ((b >> k) & 1u) {
                        v ^= basis[8 * j + k];
                    }
                }
                t[j][b] = v;
            }
        }
    }
    std::uint32_t operator()(std::uint32_t v) const noexcept {
        return t[0][v & 0xff] ^ t[1][(v >> 8) & 0xff] ^ t[2][(v >> 16) & 0xff] ^ t[3][v >> 24];
    }
};

__attribute__((target("sse4.2"))) std::uint32_t
crc32c_sse42(std::uint32_t crc, unsigned char const* p, std::size_t n) noexcept {
    std::uint64_t c = crc;
    if (n >= 3 * lane) {
        static zero_shift const shift;
        for (; n >= 3 * lane; n -= 3 * lane, p += 3 * lane) {
            std::uint64_t a = c, b = 0, d = 0;
            for (std::size_t i = 0; i < lane; i += 8) {
                std::uint64_t va, vb, vd;
                std::memcpy(&va, p + i, 8);
                std::memcpy(&vb, p + lane + i, 8);
                std::memcpy(&vd, p + 2 * lane + i, 8);
                a = _mm_crc32_u64(a, va);
                b = _mm_crc32_u64(b, vb);
                d = _mm_crc32_u64(d, vd);
            }
            auto ab = shift(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b);
            c = shift(ab) ^ static_cast<std::uint32_t>(d);
        }
    }
    c = chain(c, p, n);
    p += n & ~std::size_t{7};
    n &= 7;
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

std::uint32_t crc32c_portable_only(std::uint32_t crc, void const* data, std::size_t n) noexcept {
    return ~crc32c_portable(~crc, static_cast<unsigned char const*>(data), n);
}

} // namespace courier::serialization::detail
