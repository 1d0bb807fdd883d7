// SPDX-License-Identifier: BSL-1.0
// Size classes of the rma pool: 64 bytes, then four per power of two (2^k, 1.25, 1.5, 1.75 x
// 2^k), so rounding up wastes at most a quarter of a request. Classes up to 256 KiB are small
// (carved from registered blocks); larger ones are regions of their own.
#pragma once

#include <bit>
#include <cstddef>

namespace courier::rma::detail {

inline constexpr unsigned min_shift = 6;  // 64 bytes
inline constexpr unsigned max_shift = 40; // 1 TiB: larger requests are refused
inline constexpr unsigned class_count = 4 * (max_shift - min_shift) + 1;
inline constexpr std::size_t max_small_size = std::size_t{256} << 10;

constexpr std::size_t class_size(unsigned c) noexcept {
    unsigned k = min_shift + c / 4;
    return (std::size_t{1} << k) + (c % 4) * (std::size_t{1} << (k - 2));
}

/// The smallest class of at least `n` bytes whose size is a multiple of `alignment` (a power of
/// two up to 4096); class_count if none.
constexpr unsigned class_of(std::size_t n, std::size_t alignment = 16) noexcept {
    if (n <= (std::size_t{1} << min_shift)) {
        return 0;
    }
    if (n > (std::size_t{1} << max_shift)) {
        return class_count;
    }
    unsigned k = static_cast<unsigned>(std::bit_width(n - 1)) - 1; // 2^k < n <= 2^(k+1)
    std::size_t quarter = std::size_t{1} << (k - 2);
    std::size_t j = (n - (std::size_t{1} << k) + quarter - 1) / quarter; // 1..4
    unsigned c = 4 * (k - min_shift) + static_cast<unsigned>(j);
    while (c < class_count && class_size(c) % alignment != 0) {
        ++c;
    }
    return c;
}

constexpr bool is_small(unsigned c) noexcept {
    return class_size(c) <= max_small_size;
}

static_assert(class_size(0) == 64 && class_size(1) == 80 && class_size(4) == 128);
static_assert(class_of(64) == 0 && class_of(65) == 1 && class_of(80) == 1 && class_of(81) == 2);
static_assert(class_of(128) == 4 && class_of(129) == 5 && class_of(1 << 20) == 4 * 14);
static_assert(class_size(class_of(100, 64)) == 128);
static_assert(class_size(class_count - 1) == std::size_t{1} << max_shift);

} // namespace courier::rma::detail
