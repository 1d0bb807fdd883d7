// SPDX-License-Identifier: BSL-1.0
// The rma pool's shared segment (segment.hpp).
#include "segment.hpp"

#include "numa.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <random>

namespace courier::rma::detail {

namespace {
constexpr std::size_t page = shared_segment::header_bytes;

/// Whether the kernel refuses memory beyond its commit limit (vm.overcommit_memory = 2): there
/// a page of the segment is charged when first written, and a refused charge is a SIGBUS, not
/// an allocation that fails.
bool strict_overcommit() noexcept {
    std::FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r");
    if (f == nullptr) {
        return false;
    }
    int mode = 0;
    bool const read = std::fscanf(f, "%d", &mode) == 1;
    std::fclose(f);
    return read && mode == 2;
}
} // namespace

segment::~segment() {
    if (base_ != nullptr) {
        ::munmap(base_, size_);
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
}

bool segment::create(std::size_t bytes) noexcept {
    if (base_ != nullptr) {
        return !detached_;
    }
    if (bytes == 0 || bytes > (std::size_t{1} << 46) || strict_overcommit()) {
        return false;
    }
    std::size_t const size = (bytes + page - 1) / page * page + page;
    int fd = ::memfd_create("courier-rma", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        return false;
    }
    // Sealed at its size: no process (of the same user) can shrink the file under a peer's
    // mapping, which would turn that peer's copies into SIGBUS. Punching holes stays allowed.
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        ::close(fd);
        return false;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        ::close(fd);
        return false;
    }
    std::uint64_t word = 0;
    try {
        std::random_device rd;
        word = (std::uint64_t{rd()} << 32 | rd()) | 1;
    } catch (...) {
        word = static_cast<std::uint64_t>(::getpid()) << 20 | 1;
    }
    auto* h = static_cast<segment_header*>(p);
    h->magic = shared_segment::magic;
    h->word = word;
    h->base = reinterpret_cast<std::uintptr_t>(p);
    h->size = size;
    try {
        free_.emplace(page, size - page);
    } catch (...) {
        ::munmap(p, size);
        ::close(fd);
        return false;
    }
    fd_ = fd;
    base_ = static_cast<std::byte*>(p);
    size_ = size;
    word_ = word;
    return true;
}

void segment::detach_after_fork() noexcept {
    if (base_ == nullptr || detached_) {
        return;
    }
    // The child inherited the shared mapping (not MADV_DONTFORK: in the child the range would
    // then be free, and a mapping made before this handler runs, such as a sanitizer's thread
    // stack, could land in it). Fresh private memory replaces it at once, before any code of
    // the child's own runs: no write crosses between parent and child, the range stays the
    // pool's, and the child holds no reference to the parent's file (a private view of it would
    // show the parent's later writes, and allocate the child's touches of holes in the file).
    // The child's pool memory of before the fork reads zeros.
    (void)::mmap(base_, size_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    ::close(fd_);
    fd_ = -1;
    detached_ = true;
}

std::byte* segment::take(std::size_t bytes, int node) noexcept {
    if (base_ == nullptr || detached_ || bytes == 0 || bytes % page != 0) {
        return nullptr;
    }
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second < bytes) {
            continue;
        }
        std::size_t const off = it->first;
        if (it->second == bytes) {
            free_.erase(it);
        } else {
            // The rest keeps its node (no allocation): its key moves past what is taken.
            auto node_handle = free_.extract(it);
            node_handle.key() = off + bytes;
            node_handle.mapped() -= bytes;
            free_.insert(std::move(node_handle));
        }
        std::byte* p = base_ + off;
        if (node >= 0) {
            numa_bind(p, bytes, node);
        }
        return p;
    }
    return nullptr;
}

void segment::give(std::byte* p, std::size_t bytes) noexcept {
    if (!owns(p) || bytes == 0) {
        return;
    }
    std::size_t off = static_cast<std::size_t>(p - base_);
    if (detached_) {
        (void)::madvise(p, bytes, MADV_DONTNEED); // a fork child's private pages go
        return;                                   // (its pool no longer takes from here)
    }
    // The pages go back to the system; the file keeps its size, so a peer's mapping of these
    // addresses stays valid (it reads zeros).
    (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                      static_cast<off_t>(bytes));
    std::size_t len = bytes;
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + len == next->first) {
        len += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += len;
            return;
        }
    }
    try {
        free_.emplace(off, len);
    } catch (...) {
        // Lost to the segment (not to the system: its pages were released above).
    }
}

} // namespace courier::rma::detail
