// SPDX-License-Identifier: BSL-1.0
// The rma pool's shared segment (segment.hpp).
#include "segment.hpp"

#include "numa.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <random>

namespace courier::rma::detail {

namespace {
constexpr std::size_t page = shared_segment::header_bytes;
}

segment::~segment() {
    if (base_ != nullptr) {
        ::munmap(base_, size_);
        ::close(fd_);
    }
}

bool segment::create(std::size_t bytes) noexcept {
    if (base_ != nullptr) {
        return true;
    }
    if (bytes == 0 || bytes > (std::size_t{1} << 46)) {
        return false;
    }
    std::size_t const size = (bytes + page - 1) / page * page + page;
    int fd = ::memfd_create("courier-rma", MFD_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
        ::close(fd);
        return false;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        ::close(fd);
        return false;
    }
    (void)::madvise(p, size, MADV_DONTFORK);
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

std::byte* segment::take(std::size_t bytes, int node) noexcept {
    if (base_ == nullptr || bytes == 0 || bytes % page != 0) {
        return nullptr;
    }
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second < bytes) {
            continue;
        }
        std::size_t const off = it->first;
        std::size_t const rest = it->second - bytes;
        free_.erase(it);
        if (rest != 0) {
            try {
                free_.emplace(off + bytes, rest);
            } catch (...) {
                // The rest is lost to the segment (not to the system): a node allocation failed.
            }
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
        // Lost to the segment, as in take().
    }
}

} // namespace courier::rma::detail
