// SPDX-License-Identifier: BSL-1.0
// The small-object pool (detail/small_alloc.hpp): blocks allocated on one thread and freed on
// another are reused, so a steady flow between two threads costs bounded memory.
#include <courier/common/small_alloc.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace cd = courier::detail;

TEST(small_alloc, blocks_freed_on_another_thread_are_reused) {
    if (cd::small_alloc_slab_bytes() == 0 && [] {
            void* p = cd::small_alloc(64);
            cd::small_free(p, 64);
            return cd::small_alloc_slab_bytes() == 0;
        }()) {
        GTEST_SKIP() << "sanitizer build: the pool is operator new/delete";
    }
    // A producer allocates rounds of blocks; a consumer frees each round: as a thread that
    // receives parcels makes tasks that workers run and free.
    constexpr int rounds = 2000, per_round = 500;
    constexpr std::size_t size = 96;
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
    // 1,000,000 blocks of 96 B went from one thread to the other (96 MB in all); at most a few
    // rounds' worth may be in slabs (each thread's cache, the central list's batches).
    EXPECT_LE(grown, std::size_t{4} * per_round * size + 4 * 65536) << grown << " bytes carved";
}
