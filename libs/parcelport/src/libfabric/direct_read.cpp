// SPDX-License-Identifier: BSL-1.0
// Direct reads of a peer's memory on this host (direct_read.hpp).
#include "direct_read.hpp"

#include <courier/rma/pool.hpp>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <thread>
#include <unistd.h>

#include <courier/common/log.hpp>

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

/// Parses `n` hexadecimal numbers separated by ':' that make up all of [p, end).
bool parse_fields(char const* p, char const* end, unsigned long long* v, int n) {
    for (int i = 0; i < n; ++i) {
        auto [next, ec] = std::from_chars(p, end, v[i], 16);
        if (ec != std::errc{} || next == p) {
            return false;
        }
        p = next;
        if (i < n - 1) {
            if (p == end || *p != ':') {
                return false;
            }
            ++p;
        }
    }
    return p == end;
}

/// Parses "PID:ADDRESS:VALUE" (hexadecimal), followed by a pool segment's "@..." that is
/// returned in `segment`; false if malformed.
bool parse(std::string const& s, int& pid, std::uint64_t& address, std::uint64_t& value,
           std::string& segment) {
    std::size_t at = s.find('@');
    segment = at == std::string::npos ? std::string() : s.substr(at + 1);
    char const* end = s.data() + (at == std::string::npos ? s.size() : at);
    unsigned long long v[3] = {};
    if (!parse_fields(s.data(), end, v, 3) || v[0] == 0 || v[0] > 0x7fffffffULL) {
        return false;
    }
    pid = static_cast<int>(v[0]);
    address = v[1];
    value = v[2];
    return true;
}

} // namespace

std::string direct_reader::pool_identity(std::optional<rma::shared_segment> const& seg) {
    if (!seg) {
        return {};
    }
    return fmt::format("@{:x}:{:x}:{:x}:{:x}", seg->fd, reinterpret_cast<std::uintptr_t>(seg->base),
                       seg->size, seg->word);
}

direct_reader::~direct_reader() {
    unmap_all();
}

void direct_reader::unmap_all() noexcept {
    for (auto const& m : maps_) {
        if (m.owned) {
            ::munmap(const_cast<std::byte*>(m.at), m.size);
        }
    }
}

void direct_reader::map_segment(std::uint32_t rank, int pid, std::string const& offer) {
    unsigned long long v[4] = {};
    if (!parse_fields(offer.data(), offer.data() + offer.size(), v, 4) || v[0] > 0x7fffffffULL ||
        v[2] < rma::shared_segment::header_bytes || v[2] > (1ULL << 47)) {
        logging::debug("locality {} offers a malformed rma pool segment ('{}'): its rma chunks "
                       "are read with process_vm_readv",
                       rank, offer);
        return;
    }
    if (pid == ::getpid()) {
        // This process's own pool (transports of one process, as in tests): no second mapping.
        auto own = rma::share_with_host();
        if (own && static_cast<unsigned long long>(own->fd) == v[0] &&
            reinterpret_cast<std::uintptr_t>(own->base) == v[1] && own->size == v[2] &&
            own->word == v[3]) {
            maps_[rank] = mapping{own->base, v[1], v[2], false};
        }
        return;
    }
    char const* why = nullptr;
    std::string path = fmt::format("/proc/{}/fd/{}", pid, v[0]);
    void* p = MAP_FAILED;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0) {
        why = "cannot open it";
    } else if (::fstat(fd, &st) != 0 || static_cast<unsigned long long>(st.st_size) < v[2]) {
        why = "it is smaller than offered";
    } else if (int seals = ::fcntl(fd, F_GET_SEALS); seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        why = "it is not sealed against shrinking"; // a shrink would make copies SIGBUS
    } else if (p = ::mmap(nullptr, v[2], PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
               p == MAP_FAILED) {
        why = "mmap refused";
    }
    if (fd >= 0) {
        ::close(fd);
    }
    if (p != MAP_FAILED) {
        // The header, read through this mapping, proves that it is the segment offered.
        std::uint64_t h[4];
        std::memcpy(h, p, sizeof h);
        if (h[0] != rma::shared_segment::magic || h[1] != v[3] || h[2] != v[1] || h[3] != v[2]) {
            ::munmap(p, v[2]);
            p = MAP_FAILED;
            why = "its header does not match the offer";
        }
    }
    if (p == MAP_FAILED) {
        logging::debug("locality {}'s rma pool segment ({}) is not mapped: {}; its rma chunks are "
                       "read with process_vm_readv",
                       rank, path, why);
        return;
    }
    maps_[rank] = mapping{static_cast<std::byte const*>(p), v[1], v[2], true};
}

std::size_t direct_reader::release(std::uint32_t rank) noexcept {
    if (rank >= guards_.size()) {
        return 0;
    }
    // No process_vm_readv of a reused pid from now on (a read that loaded the pid just before
    // may still make its call: a pid is not reused within microseconds).
    pids_[rank].store(0, std::memory_order_relaxed);
    guard& g = guards_[rank];
    mapping const& m = maps_[rank];
    if (m.at == nullptr || g.released.exchange(true, std::memory_order_seq_cst)) {
        return 0;
    }
    while (g.readers.load(std::memory_order_seq_cst) != 0) { // seq_cst: see guard
        std::this_thread::yield();                           // a copy of at most a read step
    }
    if (!m.owned) {
        return 0; // this process's own segment: not ours to let go
    }
    // Zero pages over the same range in one call: the peer's pages go with the last mapping
    // of its file, and the addresses stay this reader's until it is destroyed (unmap_all).
    void* p = ::mmap(const_cast<std::byte*>(m.at), m.size, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        logging::debug("locality {}'s rma pool segment stays mapped: mmap refused", rank);
        return 0;
    }
    return m.size;
}

std::string direct_reader::identity() {
    std::uint64_t const& w = identity_word();
    return fmt::format("{:x}:{:x}:{:x}", static_cast<unsigned long>(::getpid()),
                       reinterpret_cast<std::uintptr_t>(&w), w);
}

std::size_t direct_reader::connect(std::vector<std::string> const& identities) {
    pids_ = std::vector<std::atomic<int>>(identities.size()); // all 0
    unmap_all();
    maps_.assign(identities.size(), mapping{});
    guards_ = std::vector<guard>(identities.size());
    std::size_t failed = 0;
    for (std::size_t i = 0; i < identities.size(); ++i) {
        if (identities[i].empty()) {
            continue;
        }
        int pid = 0;
        std::uint64_t address = 0, value = 0, seen = 0;
        std::string segment;
        if (!parse(identities[i], pid, address, value, segment)) {
            ++failed;
            continue;
        }
        if (read_all(pid, reinterpret_cast<std::byte*>(&seen), address, sizeof seen) != 0 ||
            seen != value) {
            ++failed;
            // Not read by the system call (another pid namespace, or Yama's ptrace_scope=1,
            // which forbids it between siblings but not opening /proc/PID/fd); the segment it
            // offers is still mapped if it proves itself (its header's random word).
            if (!segment.empty() && pid != ::getpid()) { // (this process: a forged identity)
                map_segment(static_cast<std::uint32_t>(i), pid, segment);
            }
            continue;
        }
        pids_[i].store(pid, std::memory_order_relaxed);
        if (!segment.empty()) {
            map_segment(static_cast<std::uint32_t>(i), pid, segment);
        }
    }
    return failed;
}

bool direct_reader::read(std::uint32_t rank, std::byte* local, std::uint64_t remote,
                         std::size_t size) noexcept {
    if (covers(rank, remote, size)) {
        guard& g = guards_[rank];
        g.readers.fetch_add(1, std::memory_order_seq_cst);
        bool const live = !g.released.load(std::memory_order_seq_cst);
        if (live) {
            mapping const& m = maps_[rank];
            std::memcpy(local, m.at + (remote - m.base), size);
            mapped_bytes_.fetch_add(size, std::memory_order_relaxed);
        }
        g.readers.fetch_sub(1, std::memory_order_release);
        return live;
    }
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
