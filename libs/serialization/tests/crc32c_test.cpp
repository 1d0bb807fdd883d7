// SPDX-License-Identifier: BSL-1.0
// CRC-32C: the standard check value, and the fast path (three interleaved hardware chains joined
// by the zero-shift tables) against the portable tables at every length and split point that
// crosses the three-lane blocks.
#include "../src/crc32c.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace cd = courier::serialization::detail;

TEST(crc32c, check_value) {
    char const text[] = "123456789";
    EXPECT_EQ(cd::crc32c(0, text, 9), 0xE3069283u);
    EXPECT_EQ(cd::crc32c_portable_only(0, text, 9), 0xE3069283u);
    EXPECT_EQ(cd::crc32c(0, text, 0), 0u);
}

TEST(crc32c, fast_path_matches_the_tables_at_every_length_and_split) {
    std::mt19937_64 rng(7);
    std::vector<unsigned char> data(3 * 3 * 4096 + 77);
    for (auto& b : data) {
        b = static_cast<unsigned char>(rng());
    }
    // Lengths around the 12 KiB block and its multiples, plus odd tails and offsets.
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{12287},
          std::size_t{12288}, std::size_t{12289}, std::size_t{24576 + 13}, data.size() - 3}) {
        for (std::size_t off : {0, 1, 3}) {
            if (off + n > data.size()) {
                continue;
            }
            EXPECT_EQ(cd::crc32c(0, data.data() + off, n),
                      cd::crc32c_portable_only(0, data.data() + off, n))
                << "n=" << n << " off=" << off;
        }
    }
    // Incremental: any split gives the CRC of the whole.
    auto whole = cd::crc32c_portable_only(0, data.data(), data.size());
    for (std::size_t cut : {std::size_t{1}, std::size_t{4096}, std::size_t{12288},
                            std::size_t{20000}, data.size() - 1}) {
        auto first = cd::crc32c(0, data.data(), cut);
        EXPECT_EQ(cd::crc32c(first, data.data() + cut, data.size() - cut), whole) << cut;
    }
    // A flipped bit anywhere changes it.
    auto flipped = data;
    flipped[5000] ^= 0x10;
    EXPECT_NE(cd::crc32c(0, flipped.data(), flipped.size()), whole);
}
