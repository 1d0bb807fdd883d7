// SPDX-License-Identifier: BSL-1.0
// Direct reads of a peer's memory on this host (direct_read.hpp).
#include "direct_read.hpp"

#include <cerrno>
#include <charconv>
#include <random>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

namespace courier::parcelport::fabric {

namespace {

/// The word a peer reads back to check that a pid is this process: random, never zero.
std::uint64_t const& identity_word() {
    static std::uint64_t const word = [] {
        std::random_device rd;
        return (std::uint64_t{rd()} << 32 | rd()) | 1;
    }();
    return word;
}

/// Reads all `size` bytes or fails: 0, or -errno (a short read that ends early: -EFAULT).
int read_all(int pid, std::byte* local, std::uint64_t remote, std::size_t size) noexcept {
    std::size_t done = 0;
    while (done < size) {
        iovec l{local + done, size - done};
        iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), size - done};
        ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            return -EFAULT;
        }
        done += static_cast<std::size_t>(n);
    }
    return 0;
}

/// Parses "PID:ADDRESS:VALUE" (hexadecimal); false if malformed.
bool parse(std::string const& s, int& pid, std::uint64_t& address, std::uint64_t& value) {
    char const* p = s.data();
    char const* end = s.data() + s.size();
    unsigned long long v[3] = {};
    for (int i = 0; i < 3; ++i) {
        auto [next, ec] = std::from_chars(p, end, v[i], 16);
        if (ec != std::errc{} || next == p) {
            return false;
        }
        p = next;
        if (i < 2) {
            if (p == end || *p != ':') {
                return false;
            }
            ++p;
        }
    }
    if (p != end || v[0] == 0 || v[0] > 0x7fffffffULL) {
        return false;
    }
    pid = static_cast<int>(v[0]);
    address = v[1];
    value = v[2];
    return true;
}

} // namespace

std::string direct_reader::identity() {
    std::uint64_t const& w = identity_word();
    return fmt::format("{:x}:{:x}:{:x}", static_cast<unsigned long>(::getpid()),
                       reinterpret_cast<std::uintptr_t>(&w), w);
}

std::size_t direct_reader::connect(std::vector<std::string> const& identities) {
    pids_ = std::vector<std::atomic<int>>(identities.size()); // all 0
    std::size_t failed = 0;
    for (std::size_t i = 0; i < identities.size(); ++i) {
        if (identities[i].empty()) {
            continue;
        }
        int pid = 0;
        std::uint64_t address = 0, value = 0, seen = 0;
        if (!parse(identities[i], pid, address, value) ||
            read_all(pid, reinterpret_cast<std::byte*>(&seen), address, sizeof seen) != 0 ||
            seen != value) {
            ++failed;
            continue;
        }
        pids_[i].store(pid, std::memory_order_relaxed);
    }
    return failed;
}

bool direct_reader::read(std::uint32_t rank, std::byte* local, std::uint64_t remote,
                         std::size_t size) noexcept {
    int pid = rank < pids_.size() ? pids_[rank].load(std::memory_order_relaxed) : 0;
    if (pid <= 0) {
        return false;
    }
    int rc = read_all(pid, local, remote, size);
    if (rc == -EPERM || rc == -ESRCH) {
        pids_[rank].store(0, std::memory_order_relaxed); // fi_read from now on
    }
    return rc == 0;
}

} // namespace courier::parcelport::fabric
