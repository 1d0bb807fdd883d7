// SPDX-License-Identifier: BSL-1.0
// receive_buffer_pool (libs/parcelport/src/received_parts.hpp): buffers of the size classes at
// the offset within a cache line that the caller asks for (rounded down to operator new's
// alignment), whole and writable, reused by class whatever the offset, and small ones outside
// the classes.
#include "../src/received_parts.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>

namespace pp = courier::parcelport;

namespace {
std::uintptr_t line_offset(void const* p) {
    return reinterpret_cast<std::uintptr_t>(p) % pp::receive_buffer_pool::line;
}
} // namespace

TEST(receive_buffer_pool, a_class_buffer_starts_at_the_asked_offset_within_a_cache_line) {
    auto pool = std::make_shared<pp::receive_buffer_pool>(std::size_t{64} << 20);
    for (std::size_t n : {std::size_t{4096}, std::size_t{5000}, std::size_t{1} << 20}) {
        for (std::uint64_t like : {std::uint64_t{0}, std::uint64_t{16},
                                   std::uint64_t{0x7f0000001231}, std::uint64_t{127}}) {
            bool reused = true;
            auto b = pool->get(n, reused, like);
            ASSERT_TRUE(b);
            EXPECT_EQ(line_offset(b.get()),
                      like % 64 / alignof(std::max_align_t) * alignof(std::max_align_t))
                << n << " bytes like " << like;
            EXPECT_EQ(line_offset(b.get()) % alignof(std::max_align_t), 0u);
            std::memset(b.get(), 0xab, n); // all n bytes are the buffer's (ASan checks)
        }
    }
}

TEST(receive_buffer_pool, a_buffer_is_reused_at_another_offset_and_stays_whole) {
    auto pool = std::make_shared<pp::receive_buffer_pool>(std::size_t{64} << 20);
    std::size_t const n = 65536; // exactly its class: the offset takes the class's slack
    bool reused = true;
    std::byte* first = nullptr;
    {
        auto b = pool->get(n, reused, 0);
        EXPECT_FALSE(reused);
        first = b.get();
        std::memset(b.get(), 1, n);
    }
    auto b = pool->get(n, reused, 63); // rounded down: 48
    EXPECT_TRUE(reused) << "the class's buffer came back to the pool";
    EXPECT_EQ(b.get(), first + 48);
    std::memset(b.get(), 2, n);
    b.reset();
    auto c = pool->get(n, reused, 32);
    EXPECT_TRUE(reused);
    EXPECT_EQ(c.get(), first + 32);
}

TEST(receive_buffer_pool, small_buffers_are_outside_the_classes) {
    auto pool = std::make_shared<pp::receive_buffer_pool>(std::size_t{64} << 20);
    bool reused = true;
    auto b = pool->get(100, reused, 17);
    ASSERT_TRUE(b);
    EXPECT_FALSE(reused);
    std::memset(b.get(), 3, 100);
    b.reset();
    b = pool->get(100, reused, 17);
    EXPECT_FALSE(reused) << "buffers under 4 KiB are not kept";
}
