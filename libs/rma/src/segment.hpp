// SPDX-License-Identifier: BSL-1.0
// The rma pool's shared segment (pool.hpp, share_with_host()): one memfd, reserved at its full
// size and mapped once, that the pool's blocks and large regions are carved from. A process on
// the same host maps it read-only (/proc/PID/fd/FD) and copies a chunk out of it with memcpy,
// where it would otherwise read the pool's private memory with process_vm_readv, whose system
// call and page pinning cost several copies' time (benchmarks/RESULTS.md, cma_vs_mapped).
//
// The first page is a header {magic, random word, the owner's address of the mapping, size}
// that a reader checks through its own mapping. Memory is handed out page-aligned, first fit,
// from a list of free ranges; a range given back has its pages released (punched out of the
// file) and keeps its addresses, so a peer's mapping stays valid for the process's lifetime.
// The file is sealed at its size (a peer's mapping can never see it shrink: no SIGBUS). A fork()
// child must not share the parent's memory: the pool's fork handler calls detach_after_fork()
// in the child, which replaces the inherited mapping with fresh private memory at the same
// addresses before the child's own code runs: the range stays reserved, the child's pool memory
// of before the fork reads zeros there (as memory registered for RDMA is lost to a child), and
// the child's pool allocates private memory. A child made without fork() (a raw clone) skips
// the handler and shares the segment. Not created where the kernel's overcommit is strict (the
// first write of a page could then be a SIGBUS).
//
// Thread safety: none; the pool calls it under its map lock (detach_after_fork: in a fork
// child, which has one thread).
#pragma once

#include <courier/rma/pool.hpp>

#include <cstddef>
#include <cstdint>
#include <map>

namespace courier::rma::detail {

struct segment_header {
    std::uint64_t magic; // shared_segment::magic
    std::uint64_t word;
    std::uint64_t base;
    std::uint64_t size;
};

class segment {
public:
    segment() = default;
    ~segment(); // unmaps and closes (the pool's own segment is never destroyed)
    segment(segment const&) = delete;
    segment& operator=(segment const&) = delete;

    /// Creates the memfd of `bytes` (rounded up to pages, plus the header page) and maps it;
    /// true at once if it exists (and is not detached). false (and nothing held) when the
    /// system refuses: no memfd_create, no address space, strict overcommit.
    bool create(std::size_t bytes) noexcept;
    /// In a fork child: see above. take() hands out nothing afterwards.
    void detach_after_fork() noexcept;
    bool detached() const noexcept { return detached_; }

    /// `bytes` (a multiple of the page size) of the segment, bound to NUMA node `node` when
    /// node >= 0; nullptr when no free range is large enough.
    std::byte* take(std::size_t bytes, int node) noexcept;
    /// Gives back what take() returned: its pages are released, its addresses kept.
    void give(std::byte* p, std::size_t bytes) noexcept;
    bool owns(void const* p) const noexcept {
        auto const* b = static_cast<std::byte const*>(p);
        return base_ != nullptr && b >= base_ && b < base_ + size_;
    }

    int fd() const noexcept { return fd_; }
    std::byte* base() const noexcept { return base_; }
    std::size_t size() const noexcept { return size_; }
    std::uint64_t word() const noexcept { return word_; }

private:
    int fd_ = -1;
    std::byte* base_ = nullptr;
    std::size_t size_ = 0;
    std::uint64_t word_ = 0;
    bool detached_ = false;
    std::map<std::size_t, std::size_t> free_; // offset -> length, disjoint, not adjacent
};

} // namespace courier::rma::detail
