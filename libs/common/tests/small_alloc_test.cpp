// SPDX-License-Identifier: BSL-1.0
// The small-object pool (detail/small_alloc.hpp): blocks allocated on one thread and freed on
// another are reused, so a steady flow between two threads costs bounded memory.
#include <courier/common/small_alloc.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace cd = courier::detail;

namespace {
bool pool_is_new_delete() {
    void* p = cd::small_alloc(64);
    cd::small_free(p, 64);
    return cd::small_alloc_slab_bytes() == 0;
}
} // namespace

class small_alloc_sizes : public testing::TestWithParam<std::size_t> {};

TEST_P(small_alloc_sizes, blocks_freed_on_another_thread_are_reused) {
    if (pool_is_new_delete()) {
        GTEST_SKIP() << "sanitizer build: the pool is operator new/delete";
    }
    // A producer allocates rounds of blocks; a consumer frees each round: as a thread that
    // receives parcels makes tasks (and payload buffers) that workers run and free.
    constexpr int rounds = 2000, per_round = 500;
    std::size_t const size = GetParam();
    std::vector<void*> handoff;
    std::atomic<int> ready{-1}, done{-1};
    auto before = cd::small_alloc_slab_bytes();
    std::thread consumer([&] {
        for (int r = 0; r < rounds; ++r) {
            while (ready.load(std::memory_order_acquire) != r) {
                std::this_thread::yield();
            }
            for (void* p : handoff) {
                cd::small_free(p, size);
            }
            done.store(r, std::memory_order_release);
        }
    });
    for (int r = 0; r < rounds; ++r) {
        handoff.clear();
        for (int i = 0; i < per_round; ++i) {
            handoff.push_back(cd::small_alloc(size));
        }
        ready.store(r, std::memory_order_release);
        while (done.load(std::memory_order_acquire) != r) {
            std::this_thread::yield();
        }
    }
    consumer.join();
    auto grown = cd::small_alloc_slab_bytes() - before;
    // 1,000,000 blocks went from one thread to the other (96 MB to 3 GB in all); at most a few
    // rounds' worth may be in slabs (each thread's cache, the central list's batches).
    std::size_t block = size <= 512 ? (size + 15) / 16 * 16 : std::bit_ceil(size);
    EXPECT_LE(grown, std::size_t{4} * per_round * block + 4 * 65536) << grown << " bytes carved";
}

INSTANTIATE_TEST_SUITE_P(small_alloc, small_alloc_sizes,
                         testing::Values(std::size_t{96}, std::size_t{1500}, std::size_t{4096}),
                         [](auto const& p) { return std::to_string(p.param) + "B"; });

TEST(small_alloc, blocks_of_every_size_class_are_distinct_aligned_and_whole) {
    // Blocks of every size up to the largest class, all live at once: each 16-byte aligned,
    // and each one's bytes its own (filled, then checked after all were filled).
    std::vector<std::pair<unsigned char*, std::size_t>> live;
    for (std::size_t n = 1; n <= cd::small_alloc_max; n += n < 600 ? 7 : 97) {
        for (int k = 0; k < 3; ++k) {
            auto* p = static_cast<unsigned char*>(cd::small_alloc(n));
            ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n;
            std::memset(p, static_cast<int>(live.size() & 0xff), n);
            live.emplace_back(p, n);
        }
    }
    for (std::size_t i = 0; i < live.size(); ++i) {
        auto [p, n] = live[i];
        for (std::size_t b = 0; b < n; ++b) {
            ASSERT_EQ(p[b], static_cast<unsigned char>(i & 0xff)) << "block " << i << " of " << n;
        }
    }
    for (auto [p, n] : live) {
        cd::small_free(p, n);
    }
}
