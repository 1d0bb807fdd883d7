// SPDX-License-Identifier: BSL-1.0
// The pool's shared segment (libs/rma/src/segment.hpp, rma::share_with_host()): ranges handed
// out and given back, the pool's memory in it, what another mapping of it sees, and fork().
#include "../src/segment.hpp"

#include <courier/rma/pool.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace rma = courier::rma;

namespace {

constexpr std::size_t page = rma::shared_segment::header_bytes;

/// A second, read-only mapping of a segment, through /proc/self/fd as a peer opens it.
struct second_mapping {
    std::byte const* at = nullptr;
    std::size_t size = 0;
    second_mapping(int fd, std::size_t n) : size(n) {
        std::string path = "/proc/self/fd/" + std::to_string(fd);
        int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (f >= 0) {
            void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, f, 0);
            ::close(f);
            at = p == MAP_FAILED ? nullptr : static_cast<std::byte const*>(p);
        }
    }
    ~second_mapping() {
        if (at != nullptr) {
            ::munmap(const_cast<std::byte*>(at), size);
        }
    }
};

bool in(rma::shared_segment const& s, void const* p, std::size_t n) {
    auto const* b = static_cast<std::byte const*>(p);
    return b >= s.base + page && b + n <= s.base + s.size;
}

} // namespace

TEST(segment, ranges_are_handed_out_first_fit_and_merge_when_given_back) {
    rma::detail::segment s;
    ASSERT_TRUE(s.create(std::size_t{1} << 20)) << "memfd_create or mmap refused";
    EXPECT_EQ(s.size(), (std::size_t{1} << 20) + page);
    std::size_t const q = std::size_t{256} << 10;
    std::byte* r[4];
    for (auto& p : r) {
        p = s.take(q, -1);
        ASSERT_NE(p, nullptr);
        EXPECT_TRUE(s.owns(p));
        std::memset(p, 0x11, q); // usable
    }
    EXPECT_EQ(r[0], s.base() + page) << "the header page is never handed out";
    EXPECT_EQ(s.take(page, -1), nullptr) << "full";
    EXPECT_EQ(s.take(1000, -1), nullptr) << "not a multiple of the page size";
    // The middle two back: one range of twice the size, at the first of them.
    s.give(r[2], q);
    s.give(r[1], q);
    EXPECT_EQ(s.take(3 * q, -1), nullptr);
    EXPECT_EQ(s.take(2 * q, -1), r[1]);
    s.give(r[1], 2 * q);
    s.give(r[0], q);
    s.give(r[3], q);
    EXPECT_EQ(s.take(4 * q, -1), r[0]) << "all of it, merged";
    EXPECT_FALSE(s.owns(s.base() + s.size()));
}

TEST(segment, memory_given_back_is_released_and_a_peer_mapping_reads_zeros_there) {
    rma::detail::segment s;
    ASSERT_TRUE(s.create(std::size_t{1} << 20));
    second_mapping peer(s.fd(), s.size());
    ASSERT_NE(peer.at, nullptr);
    auto const* h = reinterpret_cast<rma::detail::segment_header const*>(peer.at);
    EXPECT_EQ(h->magic, rma::shared_segment::magic);
    EXPECT_EQ(h->word, s.word());
    EXPECT_EQ(h->base, reinterpret_cast<std::uintptr_t>(s.base()));
    EXPECT_EQ(h->size, s.size());
    if (::sysconf(_SC_PAGESIZE) != static_cast<long>(page)) {
        GTEST_SKIP() << "pages of " << ::sysconf(_SC_PAGESIZE)
                     << " bytes: the segment's 4 KiB ranges are not released page by page";
    }
    auto blocks = [&] {
        struct stat st {};
        EXPECT_EQ(::fstat(s.fd(), &st), 0);
        return st.st_blocks;
    };
    auto const before = blocks();
    std::byte* p = s.take(8 * page, -1);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, 8 * page);
    EXPECT_GE(blocks(), before + 8 * page / 512) << "the writes did not allocate the pages";
    std::size_t const off = static_cast<std::size_t>(p - s.base());
    EXPECT_EQ(peer.at[off + 5 * page + 7], std::byte{0x5a}) << "the peer sees the writes";
    s.give(p, 8 * page);
    EXPECT_EQ(blocks(), before) << "the pages given back were not released";
    EXPECT_EQ(peer.at[off + 5 * page + 7], std::byte{0}) << "still mapped, reads zeros";
}

TEST(segment, is_sealed_against_shrinking_and_growing) {
    // A peer's mapping never sees the file shrink (its copies would be SIGBUS).
    rma::detail::segment s;
    ASSERT_TRUE(s.create(std::size_t{1} << 20));
    int const seals = ::fcntl(s.fd(), F_GET_SEALS);
    EXPECT_NE(seals & F_SEAL_SHRINK, 0);
    EXPECT_NE(seals & F_SEAL_GROW, 0);
    EXPECT_NE(seals & F_SEAL_SEAL, 0);
    EXPECT_NE(::ftruncate(s.fd(), 4096), 0);
}

TEST(shared_pool, new_blocks_and_regions_come_from_the_segment_that_another_mapping_sees) {
    auto seg = rma::share_with_host();
    if (!seg) {
        GTEST_SKIP() << "this system refuses a memfd (memfd_create or its mapping): the pool "
                        "stays private";
    }
    auto again = rma::share_with_host();
    ASSERT_TRUE(again);
    EXPECT_EQ(again->base, seg->base) << "one segment per process";
    second_mapping peer(seg->fd, seg->size);
    ASSERT_NE(peer.at, nullptr);
    auto before = rma::get_pool_statistics();
    std::size_t const small = 100, large = std::size_t{3} << 20;
    auto* a = static_cast<std::byte*>(rma::allocate(small));
    auto* b = static_cast<std::byte*>(rma::allocate(large));
    EXPECT_TRUE(in(*seg, a, small));
    EXPECT_TRUE(in(*seg, b, large));
    std::memset(a, 0x21, small);
    std::memset(b, 0x42, large);
    EXPECT_EQ(peer.at[a - seg->base + small - 1], std::byte{0x21});
    EXPECT_EQ(peer.at[b - seg->base + large - 1], std::byte{0x42});
    auto during = rma::get_pool_statistics();
    EXPECT_GE(during.bytes_shared, before.bytes_shared + large);
    EXPECT_LE(during.bytes_shared, during.bytes_registered);
    // A region given back and trimmed leaves the segment (its pages released).
    rma::deallocate(b, large);
    rma::trim();
    auto after = rma::get_pool_statistics();
    EXPECT_LE(after.bytes_shared + large, during.bytes_shared);
    EXPECT_EQ(peer.at[b - seg->base + large - 1], std::byte{0});
    rma::deallocate(a, small);
}

namespace {
/// Restores the pool's options when a test that changes them ends.
struct options_guard {
    rma::pool_options saved = rma::current_options();
    ~options_guard() { rma::configure(saved); }
};
} // namespace

TEST(shared_pool, a_pool_configured_private_after_sharing_allocates_private_memory) {
    options_guard guard;
    auto seg = rma::share_with_host();
    if (!seg) {
        GTEST_SKIP() << "this system refuses a memfd: the pool stays private";
    }
    std::size_t const large = std::size_t{5} << 20; // a region of its own
    void* in_segment = rma::allocate(large);
    EXPECT_TRUE(in(*seg, in_segment, large));
    rma::pool_options o = rma::current_options();
    o.shared = false;
    rma::configure(o);
    EXPECT_FALSE(rma::share_with_host());
    auto const shared_before = rma::get_pool_statistics().bytes_shared;
    void* p = rma::allocate(std::size_t{7} << 20);
    EXPECT_FALSE(in(*seg, p, std::size_t{7} << 20));
    EXPECT_EQ(rma::get_pool_statistics().bytes_shared, shared_before);
    rma::deallocate(p, std::size_t{7} << 20);
    rma::deallocate(in_segment, large);
}

TEST(shared_pool, a_fork_child_neither_shares_nor_sees_the_parents_pool_memory) {
    // Shared memory inherited by a child would carry the child's writes into the parent's
    // buffers, and the parent's into the child's. The child gets fresh private memory at the
    // same addresses instead (its rma memory of before the fork reads zeros, as memory
    // registered for RDMA is lost to a child), its pool works, allocates private memory and
    // does not share; the parent's later writes do not reach it, nor its writes the parent.
    auto seg = rma::share_with_host();
    if (!seg) {
        GTEST_SKIP() << "this system refuses a memfd: the pool stays private";
    }
    auto* p = static_cast<char volatile*>(rma::allocate(4096));
    ASSERT_TRUE(in(*seg, const_cast<char*>(p), 4096));
    p[0] = 'p';
    struct stat st0 {};
    ASSERT_EQ(::fstat(seg->fd, &st0), 0);
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        char c;
        (void)!::read(go[0], &c, 1); // the parent has written p[1]
        int code = 0;
        if (p[0] != 0 || p[1] != 0) {
            code |= 1; // the parent's memory shows through
        }
        p[0] = 'c';
        seg->base[seg->size - 1] = std::byte{1}; // a page no one wrote: not in the parent's file
        if (p[0] != 'c') {
            code |= 2;
        }
        if (rma::share_with_host()) {
            code |= 4; // a child cannot share
        }
        auto* q = static_cast<char*>(rma::allocate(std::size_t{6} << 20));
        std::memset(q, 1, std::size_t{6} << 20);
        if (rma::get_pool_statistics().bytes_shared != 0) {
            code |= 8;
        }
        ::_exit(code);
    }
    p[1] = 'q';
    char one = 1;
    ASSERT_EQ(::write(go[1], &one, 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ::close(go[0]);
    ::close(go[1]);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "bit 1: saw the parent's memory, 2: cannot write, 4: shares, 8: counts shared bytes";
    struct stat st1 {}; // before the parent reads the page in a hole (which allocates it)
    ASSERT_EQ(::fstat(seg->fd, &st1), 0);
    EXPECT_EQ(st1.st_blocks, st0.st_blocks) << "the child allocated pages in the parent's file";
    EXPECT_EQ(p[0], 'p') << "the child's write reached the parent";
    EXPECT_EQ(seg->base[seg->size - 1], std::byte{0}) << "the child's write reached the parent";
    rma::deallocate(const_cast<char*>(p), 4096);
}
