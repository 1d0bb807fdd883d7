// SPDX-License-Identifier: BSL-1.0
#include "outbox.hpp"

#include "../shm_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <system_error>

namespace courier::parcelport::fabric {

namespace {
constexpr std::uint32_t outbox_magic = 0x584f4243; // "CBOX"
constexpr std::uint32_t outbox_version = 1;
constexpr std::size_t data_offset = 4096; // the header's page; blocks start page-aligned
constexpr std::size_t block_align = 64;   // a cache line
constexpr std::size_t max_blocks = 4096;  // the ring's records (more blocks wait for DONEs)
} // namespace

bool amd_processor() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    static bool const amd = [] {
        __builtin_cpu_init(); // static initialization may run before libgcc's own
        return __builtin_cpu_is("amd") != 0;
    }();
    return amd;
#else
    return false;
#endif
}

struct outbox::header {
    std::uint32_t magic;
    std::uint32_t version;
    std::uint64_t bytes;
    std::uint64_t remote_base;
    std::uint64_t key;
    std::atomic<std::uint32_t> ready; // 1 once the fields above are final
};

outbox::outbox(std::string const& name, std::size_t bytes, std::size_t max_chunk,
               std::chrono::microseconds busy_window)
    : name_(name), path_("/" + name + "-outbox"),
      bytes_((std::max(bytes, 2 * data_offset) + data_offset - 1) / data_offset * data_offset),
      max_chunk_(max_chunk), busy_window_us_(busy_window.count()), blocks_(max_blocks) {
    auto fail = [&](char const* what, int e) {
        throw std::system_error(e, std::generic_category(),
                                std::string("courier outbox ") + path_ + ": " + what);
    };
    int fd = ::shm_open(path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        fail("shm_open", errno);
    }
    int e = ::ftruncate(fd, static_cast<off_t>(bytes_)) != 0
                ? errno
                : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
    void* p = MAP_FAILED;
    if (e == 0) {
        p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        e = p == MAP_FAILED ? errno : 0;
    }
    ::close(fd);
    if (e != 0) {
        ::shm_unlink(path_.c_str());
        fail("allocating", e);
    }
    base_ = static_cast<std::byte*>(p);
    auto* h = new (base_) header{};
    h->magic = outbox_magic;
    h->version = outbox_version;
    h->bytes = bytes_;
    own_shared_memory_file(name_ + "-outbox");
}

outbox::~outbox() {
    for (auto& pr : peers_) {
        if (pr.map != nullptr) {
            ::munmap(const_cast<std::byte*>(pr.map), pr.bytes);
        }
    }
    ::munmap(base_, bytes_);
    forget_shared_memory_file(name_ + "-outbox");
    ::shm_unlink(path_.c_str());
}

void outbox::set_registration(std::uint64_t key, std::uint64_t remote_base) noexcept {
    key_ = key;
    remote_base_ = remote_base;
    auto* h = reinterpret_cast<header*>(base_);
    h->key = key;
    h->remote_base = remote_base;
    h->ready.store(1, std::memory_order_release);
}

std::byte* outbox::allocate(std::size_t n) {
    if (n == 0 || n > max_chunk_ ||
        (n > always_staged &&
         now_us() - last_large_receive_.load(std::memory_order_relaxed) < busy_window_us_)) {
        return nullptr;
    }
    n = (n + block_align - 1) & ~(block_align - 1);
    std::lock_guard g(mutex_);
    if (count_ == blocks_.size()) {
        return nullptr;
    }
    std::size_t at = SIZE_MAX;
    if (count_ == 0) {
        at = n <= bytes_ - data_offset ? data_offset : SIZE_MAX;
    } else {
        block const& head = blocks_[first_];
        block const& last = blocks_[(first_ + count_ - 1) % blocks_.size()];
        std::size_t tail = last.offset + last.size;
        if (tail > head.offset) { // not wrapped: room after the tail, else at the start
            if (bytes_ - tail >= n) {
                at = tail;
            } else if (head.offset - data_offset >= n) {
                at = data_offset;
            }
        } else if (head.offset - tail >= n) { // wrapped: room between tail and head
            at = tail;
        }
    }
    if (at == SIZE_MAX) {
        return nullptr;
    }
    blocks_[(first_ + count_) % blocks_.size()] = {at, n, false};
    ++count_;
    return base_ + at;
}

void outbox::release(std::byte* p) noexcept {
    auto offset = static_cast<std::size_t>(p - base_);
    std::lock_guard g(mutex_);
    // Mostly the oldest block (DONEs come in about the order of the sends).
    for (std::size_t i = 0; i < count_; ++i) {
        block& b = blocks_[(first_ + i) % blocks_.size()];
        if (b.offset == offset && !b.released) {
            b.released = true;
            break;
        }
    }
    while (count_ != 0 && blocks_[first_].released) {
        first_ = (first_ + 1) % blocks_.size();
        --count_;
    }
}

std::size_t outbox::blocks_in_use() const {
    std::lock_guard g(mutex_);
    return count_;
}

std::size_t outbox::connect(std::vector<std::string> const& names) {
    std::size_t missing = 0;
    peers_.assign(names.size(), peer{});
    for (std::size_t r = 0; r < names.size(); ++r) {
        if (names[r].empty() || names[r] == name_) {
            continue;
        }
        int fd = ::shm_open(("/" + names[r] + "-outbox").c_str(), O_RDONLY | O_CLOEXEC, 0);
        struct stat st {};
        if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(2 * data_offset)) {
            missing += 1;
            if (fd >= 0) {
                ::close(fd);
            }
            continue;
        }
        auto len = static_cast<std::size_t>(st.st_size);
        void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p == MAP_FAILED) {
            ++missing;
            continue;
        }
        auto const* h = static_cast<header const*>(p);
        if (h->magic != outbox_magic || h->version != outbox_version || h->bytes != len ||
            h->ready.load(std::memory_order_acquire) != 1) {
            ::munmap(p, len);
            ++missing;
            continue;
        }
        peers_[r] = {static_cast<std::byte const*>(p), len, h->remote_base, h->key};
    }
    return missing;
}

std::byte const* outbox::find(std::uint32_t rank, std::uint64_t remote, std::uint64_t key,
                              std::uint64_t size) const noexcept {
    if (rank >= peers_.size()) {
        return nullptr;
    }
    peer const& pr = peers_[rank];
    if (pr.map == nullptr || key != pr.key || remote < pr.remote_base + data_offset) {
        return nullptr;
    }
    std::uint64_t offset = remote - pr.remote_base;
    if (offset > pr.bytes || size > pr.bytes - offset) {
        return nullptr;
    }
    return pr.map + offset;
}

} // namespace courier::parcelport::fabric
