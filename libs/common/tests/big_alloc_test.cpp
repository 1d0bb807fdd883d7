// SPDX-License-Identifier: BSL-1.0
// Big buffers (courier/common/big_alloc.hpp): fresh memory that reads as zeros and takes
// writes, given back in steps of at most big_unmap_step bytes from the end, covering the
// buffer exactly once, each step page-aligned; and unmapped for real afterwards.
#include <courier/common/big_alloc.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace cd = courier::detail;

namespace {
std::vector<std::pair<std::byte*, std::size_t>> g_steps;
int record_step(void* p, std::size_t n) {
    g_steps.emplace_back(static_cast<std::byte*>(p), n);
    return ::munmap(p, n);
}
bool mapped(void const* p) {
    auto const page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    unsigned char v = 0;
    auto* at = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) & ~(page - 1));
    return ::mincore(at, 1, &v) == 0; // ENOMEM once unmapped
}
} // namespace

TEST(big_alloc, a_big_buffer_is_given_back_in_steps_from_its_end) {
    for (std::size_t n : {std::size_t{1}, cd::big_unmap_step, cd::big_unmap_step + 4096,
                          5 * cd::big_unmap_step + 12345}) {
        std::byte* p = cd::big_alloc(n);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0u);
        EXPECT_EQ(p[0], std::byte{0});
        EXPECT_EQ(p[n - 1], std::byte{0});
        p[0] = std::byte{1};
        p[n - 1] = std::byte{2};
        g_steps.clear();
        cd::big_free_with(p, n, record_step);
        std::size_t const expected_steps = (n + cd::big_unmap_step - 1) / cd::big_unmap_step;
        ASSERT_EQ(g_steps.size(), expected_steps) << n;
        std::byte* end = p + n;
        for (auto const& [at, len] : g_steps) {
            EXPECT_LE(len, cd::big_unmap_step);
            EXPECT_EQ(at + len, end); // each step ends where the one before began
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(at) % 4096, 0u);
            end = at;
        }
        EXPECT_EQ(end, p);
        EXPECT_FALSE(mapped(p));
        EXPECT_FALSE(mapped(p + n - 1));
    }
}

TEST(big_alloc, freeing_nothing_does_nothing) {
    g_steps.clear();
    cd::big_free_with(nullptr, 1 << 20, record_step);
    EXPECT_TRUE(g_steps.empty());
}
