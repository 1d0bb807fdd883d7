// SPDX-License-Identifier: BSL-1.0
#include "doorbell.hpp"
#include "shm_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace courier::parcelport::detail {

namespace {
constexpr std::size_t page_bytes = 64; // one cache line: only the word lives here

/// A full (StoreLoad) fence between our accesses and another process's. TSan rejects
/// atomic_thread_fence; there a locked RMW on a local word does the same on x86 (TSan cannot see
/// the other process anyway).
inline void full_fence() noexcept {
#if defined(__SANITIZE_THREAD__)
    static std::atomic<int> word{0};
    word.fetch_add(0, std::memory_order_seq_cst);
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

[[noreturn]] void fail(char const* what) {
    throw std::system_error(errno, std::generic_category(),
                            std::string("courier doorbell: ") + what);
}
} // namespace

void doorbell::socket_address(std::string const& name, sockaddr_un& a, socklen_t& len) {
    a = {};
    a.sun_family = AF_UNIX;
    std::string path = "courier-bell-" + name; // abstract: sun_path[0] == '\0'
    std::size_t n = std::min(path.size(), sizeof a.sun_path - 1);
    std::memcpy(a.sun_path + 1, path.data(), n);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

doorbell::doorbell(std::string const& name) : name_(name), shm_path_("/" + name + "-bell") {
    int shm = ::shm_open(shm_path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (shm < 0) {
        fail("shm_open");
    }
    if (::ftruncate(shm, page_bytes) != 0) {
        int e = errno;
        ::close(shm);
        ::shm_unlink(shm_path_.c_str());
        errno = e;
        fail("ftruncate");
    }
    void* p = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
    int e = errno;
    ::close(shm);
    if (p == MAP_FAILED) {
        ::shm_unlink(shm_path_.c_str());
        errno = e;
        fail("mmap");
    }
    own_ = new (p) page{}; // zero: nobody sleeps
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un a;
    socklen_t len;
    socket_address(name_, a, len);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr const*>(&a), len) != 0) {
        e = errno;
        if (fd_ >= 0) {
            ::close(fd_);
        }
        ::munmap(own_, page_bytes);
        ::shm_unlink(shm_path_.c_str());
        errno = e;
        fail("socket");
    }
    own_shared_memory_file(name_ + "-bell");
}

doorbell::~doorbell() {
    for (auto& pr : peers_) {
        if (pr.p != nullptr) {
            ::munmap(pr.p, page_bytes);
        }
    }
    ::close(fd_);
    ::munmap(own_, page_bytes);
    forget_shared_memory_file(name_ + "-bell");
    ::shm_unlink(shm_path_.c_str());
}

std::size_t doorbell::connect(std::vector<std::string> const& names) {
    std::size_t missing = 0;
    peers_.assign(names.size(), peer{});
    for (std::size_t r = 0; r < names.size(); ++r) {
        if (names[r].empty() || names[r] == name_) {
            missing += names[r].empty();
            continue;
        }
        int shm = ::shm_open(("/" + names[r] + "-bell").c_str(), O_RDWR | O_CLOEXEC, 0);
        if (shm < 0) {
            ++missing;
            continue;
        }
        void* p = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
        ::close(shm);
        if (p == MAP_FAILED) {
            ++missing;
            continue;
        }
        peer& q = peers_[r];
        socket_address(names[r], q.addr, q.len);
        // The word alone does not make a bell: hosts that share /dev/shm but not a network
        // namespace (containers, the project's namespace cluster) see the word but cannot
        // reach the socket, and every ring would be lost. A datagram socket connects to an
        // abstract name only if it is bound in this namespace.
        int probe = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        bool reachable =
            probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr const*>(&q.addr), q.len) == 0;
        if (probe >= 0) {
            ::close(probe);
        }
        if (!reachable) {
            ::munmap(p, page_bytes);
            ++missing;
            continue;
        }
        q.p = static_cast<page*>(p);
    }
    return missing;
}

void doorbell::arm() noexcept {
    char drop[16];
    while (::recv(fd_, drop, sizeof drop, MSG_DONTWAIT) > 0) {
    }
    own_->sleeping.store(1, std::memory_order_seq_cst);
    full_fence(); // the word before the look for work
}

void doorbell::disarm() noexcept {
    if (own_->sleeping.load(std::memory_order_relaxed) != 0) {
        own_->sleeping.store(0, std::memory_order_relaxed);
    }
}

bool doorbell::ring(std::uint32_t rank) noexcept {
    if (rank >= peers_.size() || peers_[rank].p == nullptr) {
        return false;
    }
    full_fence(); // the post before the look at the word
    auto& word = peers_[rank].p->sleeping;
    if (word.load(std::memory_order_relaxed) == 0 ||
        word.exchange(0, std::memory_order_acq_rel) == 0) {
        return false;
    }
    char one = 1;
    ::sendto(fd_, &one, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr const*>(&peers_[rank].addr),
             peers_[rank].len);
    return true;
}

} // namespace courier::parcelport::detail
