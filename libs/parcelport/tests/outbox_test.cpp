// SPDX-License-Identifier: BSL-1.0
// The shm outbox (libs/parcelport/src/libfabric/outbox.hpp): its ring of blocks released in
// any order, and the bounds a receiver checks before it copies out of a peer's outbox.
#include "../src/libfabric/outbox.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

namespace fab = courier::parcelport::fabric;

namespace {

std::string fresh_name() {
    static std::atomic<int> n{0};
    return "courier-outbox-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

constexpr std::size_t page = 4096;

} // namespace

TEST(outbox, blocks_released_in_any_order_make_room_again_and_never_overlap) {
    // 16 pages of blocks after the header page.
    fab::outbox box(fresh_name(), 17 * page, 12 * page);
    EXPECT_EQ(box.allocate(0), nullptr);
    EXPECT_EQ(box.allocate(12 * page + 1), nullptr) << "over the largest chunk";
    std::byte* a = box.allocate(6 * page);
    std::byte* b = box.allocate(6 * page);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(box.allocate(6 * page), nullptr) << "4 pages left at the end";
    std::byte* c = box.allocate(4 * page);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(box.allocate(1), nullptr) << "full";
    // Released out of order: b first frees nothing (a is still the ring's head).
    box.release(b);
    EXPECT_EQ(box.allocate(1), nullptr);
    box.release(a);
    EXPECT_EQ(box.blocks_in_use(), 1u);
    // Now the 12 pages before c are free: a block wraps to the start.
    std::byte* d = box.allocate(12 * page - 64);
    ASSERT_NE(d, nullptr);
    EXPECT_LE(d + 12 * page - 64, c);
    box.release(c);
    box.release(d);
    EXPECT_EQ(box.blocks_in_use(), 0u);
}

TEST(outbox, a_random_workload_keeps_live_blocks_disjoint_and_their_bytes_intact) {
    fab::outbox box(fresh_name(), 65 * page, 16 * page);
    std::mt19937 rng(7);
    struct live {
        std::byte* p;
        std::size_t n;
        unsigned char fill;
    };
    std::vector<live> blocks;
    std::size_t allocated = 0, refused = 0;
    for (int step = 0; step < 20000; ++step) {
        if (!blocks.empty() && (rng() % 3 == 0 || blocks.size() > 40)) {
            std::size_t i = rng() % blocks.size();
            std::vector<std::byte> expected(blocks[i].n, std::byte{blocks[i].fill});
            ASSERT_EQ(std::memcmp(blocks[i].p, expected.data(), blocks[i].n), 0)
                << "block overwritten at step " << step;
            box.release(blocks[i].p);
            blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
        }
        std::size_t n = 1 + rng() % (16 * page);
        std::byte* p = box.allocate(n);
        if (p == nullptr) {
            ++refused;
            continue;
        }
        ASSERT_GE(p, box.region() + page);
        ASSERT_LE(p + n, box.region() + box.size());
        auto fill = static_cast<unsigned char>(step);
        std::memset(p, fill, n);
        blocks.push_back({p, n, fill});
        ++allocated;
    }
    for (auto& b : blocks) {
        box.release(b.p);
    }
    EXPECT_EQ(box.blocks_in_use(), 0u);
    EXPECT_GT(allocated, 5000u);
    EXPECT_GT(refused, 0u) << "the workload should fill the ring at times";
}

TEST(outbox, a_peer_finds_only_ranges_wholly_inside_an_outbox_under_its_key) {
    fab::outbox mine(fresh_name(), 9 * page, 4 * page);
    fab::outbox theirs(fresh_name(), 9 * page, 4 * page);
    std::uint64_t const base = 0x7f0000000000, key = 1234;
    theirs.set_registration(key, base);
    mine.set_registration(99, 0);
    EXPECT_EQ(mine.connect({mine.name(), theirs.name(), "", "courier-outbox-test-missing"}), 1u)
        << "only the missing name fails";
    std::byte* blk = theirs.allocate(100);
    ASSERT_NE(blk, nullptr);
    std::memcpy(blk, "outbox bytes", 12);
    std::uint64_t at = theirs.remote_address(blk);
    std::byte const* found = mine.find(1, at, key, 100);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(std::memcmp(found, "outbox bytes", 12), 0);
    EXPECT_EQ(mine.find(1, at, key + 1, 100), nullptr) << "another registration";
    EXPECT_EQ(mine.find(0, at, key, 100), nullptr) << "its own outbox is not mapped";
    EXPECT_EQ(mine.find(2, at, key, 100), nullptr) << "a peer without one";
    EXPECT_EQ(mine.find(3, at, key, 100), nullptr) << "one that could not be mapped";
    EXPECT_EQ(mine.find(7, at, key, 100), nullptr) << "no such rank";
    EXPECT_EQ(mine.find(1, base, key, 16), nullptr) << "the header page";
    EXPECT_EQ(mine.find(1, base + 9 * page - 16, key, 17), nullptr) << "past the end";
    EXPECT_NE(mine.find(1, base + 9 * page - 16, key, 16), nullptr) << "the last bytes";
    EXPECT_EQ(mine.find(1, base + page, key, UINT64_MAX), nullptr) << "a size that wraps";
    EXPECT_EQ(mine.find(1, UINT64_MAX - 8, key, 16), nullptr) << "an address that wraps";
    EXPECT_EQ(mine.find(1, base - 1, key, 16), nullptr) << "before the region";
    theirs.release(blk);
}

TEST(outbox, while_this_side_receives_large_chunks_it_stages_only_small_ones) {
    // Receiving a chunk over always_staged makes this side busy for the window: its own large
    // chunks then go by CMA (allocate refuses them), small ones are still staged. A window
    // long enough that the first checks cannot outlast it, and one that surely has passed.
    constexpr std::size_t big = fab::outbox::always_staged + 1;
    fab::outbox slow(fresh_name(), 64 * page, 32 * page, std::chrono::seconds(30));
    slow.received(fab::outbox::always_staged); // not large: nothing changes
    std::byte* b = slow.allocate(big);
    ASSERT_NE(b, nullptr);
    slow.release(b);
    slow.received(big);
    EXPECT_EQ(slow.allocate(big), nullptr);
    std::byte* small = slow.allocate(fab::outbox::always_staged);
    EXPECT_NE(small, nullptr);
    slow.release(small);

    fab::outbox quick(fresh_name(), 64 * page, 32 * page, std::chrono::microseconds(1000));
    quick.received(big);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    b = quick.allocate(big);
    EXPECT_NE(b, nullptr) << "the window has passed";
    quick.release(b);
}

TEST(outbox, its_file_goes_with_it) {
    std::string name = fresh_name();
    {
        fab::outbox box(name, 4 * page, page);
        EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name + "-outbox"));
        EXPECT_THROW(fab::outbox(name, 4 * page, page), std::system_error)
            << "a second outbox of the same name";
    }
    EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name + "-outbox"));
}
