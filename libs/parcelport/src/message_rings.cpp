// SPDX-License-Identifier: BSL-1.0
// Rings of small messages in shared memory between the localities of one host
// (message_rings.hpp).
#include "message_rings.hpp"

#include "shm_files.hpp"

#include <courier/common/log.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace courier::parcelport::detail {

namespace {
constexpr std::uint32_t file_magic = 0x474e5243; // "CRNG"
constexpr std::uint32_t file_version = 1;
constexpr std::size_t page = 4096;
/// A ring: its control block's page, then its records.
constexpr std::size_t ring_stride = page + message_rings::ring_bytes;

struct file_header {
    std::uint32_t magic;
    std::uint32_t version;
    std::uint64_t ring_bytes;
    std::uint32_t rings;
    std::atomic<std::uint32_t> ready; // 1 once the rings are laid out
};
static_assert(sizeof(message_rings::control) <= page);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
/// Faults in the pages of the ring at `c` (its control page and records), where the kernel can
/// (MADV_POPULATE_WRITE, Linux 5.14); elsewhere they fault in as they are first used.
void populate(message_rings::control* c) noexcept {
#if defined(MADV_POPULATE_WRITE)
    ::madvise(c, ring_stride, MADV_POPULATE_WRITE);
#else
    (void)c;
#endif
}
} // namespace

message_rings::message_rings(std::string name)
    : name_(std::move(name)), path_("/" + name_ + "-rings") {
    fd_ = ::shm_open(path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
        throw std::system_error(errno, std::generic_category(),
                                "courier message rings " + path_ + ": shm_open");
    }
    own_shared_memory_file(name_ + "-rings");
}

message_rings::~message_rings() {
    for (auto const& m : mapped_) {
        ::munmap(m.p, m.bytes);
    }
    if (file_ != nullptr) {
        ::munmap(file_, file_bytes_);
    }
    if (fd_ >= 0) {
        ::close(fd_);
    }
    ::shm_unlink(path_.c_str());
    forget_shared_memory_file(name_ + "-rings");
}

message_rings::control* message_rings::find_ring(std::byte* file, std::size_t bytes,
                                                 std::uint32_t reader) noexcept {
    if (bytes < page) {
        return nullptr;
    }
    auto* h = reinterpret_cast<file_header*>(file);
    if (h->ready.load(std::memory_order_acquire) != 1 || h->magic != file_magic ||
        h->version != file_version || h->ring_bytes != ring_bytes ||
        bytes < page + std::size_t{h->rings} * ring_stride) {
        return nullptr;
    }
    for (std::uint32_t i = 0; i < h->rings; ++i) {
        auto* c = reinterpret_cast<control*>(file + page + i * ring_stride);
        if (c->reader == reader) {
            return c;
        }
    }
    return nullptr;
}

std::byte* message_rings::data_of(control* c) noexcept {
    return reinterpret_cast<std::byte*>(c) + page;
}

void message_rings::connect(std::vector<std::string> const& names, std::uint32_t rank) {
    rank_ = rank;
    std::vector<std::uint32_t> readers;
    for (std::uint32_t r = 0; r < names.size(); ++r) {
        if (r != rank && !names[r].empty()) {
            readers.push_back(r);
        }
    }
    // The peers' rings to this side first: they are read even if this side's cannot be made.
    in_.assign(names.size(), incoming{});
    peer_names_.assign(names.size(), std::string());
    unattached_ = 0;
    for (std::uint32_t r : readers) {
        peer_names_[r] = names[r];
        ++unattached_;
    }
    attach_pending();
    // This side's rings: allocated now (a full /dev/shm fails here, not as a SIGBUS later).
    file_bytes_ = page + readers.size() * ring_stride;
    int e = ::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0
                ? errno
                : ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes_));
    void* p = MAP_FAILED;
    if (e == 0) {
        p = ::mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
        e = p == MAP_FAILED ? errno : 0;
    }
    ::close(fd_);
    fd_ = -1;
    if (e != 0) {
        file_bytes_ = 0;
        throw std::system_error(e, std::generic_category(),
                                "courier message rings " + path_ + ": allocating");
    }
    file_ = static_cast<std::byte*>(p);
    out_ = std::make_unique<outgoing[]>(names.size()); // before its size: stats() reads both
    out_size_ = names.size();
    for (std::size_t i = 0; i < readers.size(); ++i) {
        auto* c = new (file_ + page + i * ring_stride) control{};
        c->reader = readers[i];
        out_[readers[i]].ring = c;
    }
    auto* h = new (file_) file_header{};
    h->magic = file_magic;
    h->version = file_version;
    h->ring_bytes = ring_bytes;
    h->rings = static_cast<std::uint32_t>(readers.size());
    h->ready.store(1, std::memory_order_release);
}

std::size_t message_rings::attach_pending() {
    for (std::uint32_t r = 0; r < peer_names_.size() && unattached_ != 0; ++r) {
        if (peer_names_[r].empty()) {
            continue;
        }
        int fd = ::shm_open(("/" + peer_names_[r] + "-rings").c_str(), O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            continue; // not made yet
        }
        struct stat st {};
        void* p = MAP_FAILED;
        std::size_t bytes = 0;
        if (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(page)) {
            bytes = static_cast<std::size_t>(st.st_size);
            p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        ::close(fd);
        if (p == MAP_FAILED) {
            continue;
        }
        control* c = find_ring(static_cast<std::byte*>(p), bytes, rank_);
        if (c == nullptr) {
            ::munmap(p, bytes); // not laid out yet, or no ring for this rank: looked at again
            continue;
        }
        std::uint64_t const tail = c->tail.load(std::memory_order_acquire);
        if (tail % 8 != 0) {
            // Not what this code writes (records are 8-byte aligned): never read it.
            logging::error("the message ring from locality {} is not usable (tail {}); its "
                           "messages go through the provider",
                           r, tail);
            ::munmap(p, bytes);
            peer_names_[r].clear();
            --unattached_;
            continue;
        }
        // The peer's file holds a ring for each of its peers: only this one is faulted in now
        // (a ring's first messages would otherwise fault its pages in, one by one).
        populate(c);
        mapped_.push_back({p, bytes});
        in_[r].ring = c;
        in_[r].tail = tail;
        sources_.push_back(r);
        peer_names_[r].clear();
        --unattached_;
        c->attached.store(1, std::memory_order_release);
    }
    return unattached_;
}

void message_rings::drop(incoming& in, std::uint32_t source, char const* why) noexcept {
    in.broken = true;
    logging::error("dropped the message ring from locality {}: {}; its messages are lost, the "
                   "rest go through the provider",
                   source, why);
}

void message_rings::publish_tail(incoming& in) noexcept {
    in.ring->tail.store(in.tail, std::memory_order_release);
}

std::uint64_t message_rings::published_head(incoming const& in) const noexcept {
    return in.ring->head.load(std::memory_order_acquire);
}

bool message_rings::reserve(outgoing& o, std::size_t rec, std::size_t& at) {
    std::size_t const pos = o.head % ring_bytes;
    std::size_t const to_end = ring_bytes - pos;
    std::size_t const need = rec <= to_end ? rec : to_end + rec;
    if (o.head + need - o.tail > ring_bytes) {
        o.tail = o.ring->tail.load(std::memory_order_acquire);
        if (o.head + need - o.tail > ring_bytes) {
            return false;
        }
    }
    if (rec > to_end) {
        std::uint32_t const wrap[2] = {0, rings_layout::wrap_mark};
        std::memcpy(data_of(o.ring) + pos, wrap, sizeof wrap);
        o.head += to_end;
        at = 0;
    } else {
        at = pos;
    }
    return true;
}

void message_rings::publish_head(outgoing& o) noexcept {
    o.ring->head.store(o.head, std::memory_order_release);
}

} // namespace courier::parcelport::detail
