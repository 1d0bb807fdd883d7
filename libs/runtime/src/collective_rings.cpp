// SPDX-License-Identifier: BSL-1.0
#include "collective_rings.hpp"

#include "log.hpp"

#include <courier/parcelport/transport.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <system_error>

namespace courier::detail {

namespace {

constexpr std::uint64_t inbox_magic = 0x63636f6c6c726e67ull; // "ccollrng"
constexpr std::uint32_t inbox_version = 3;

struct inbox_header {
    std::atomic<std::uint64_t> magic; // written last by the owner
    std::uint32_t version;
    std::uint32_t size;
    std::uint32_t cells;
    std::uint32_t cell_size;
    std::uint32_t owner;
    std::int32_t pid;    // the owner's process
    std::uint64_t probe; // the address of probe_word in the owner's process
    std::uint64_t nonce; // what probe_word holds there
};

// Peers read it with process_vm_readv to learn whether they can read this process's memory.
// Its value is random per process: a read that lands in another process (another pid
// namespace, the same binary without ASLR) does not find it.
std::uint64_t const probe_word = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd() ^ 1;
}();
constexpr std::size_t header_bytes = 64;
static_assert(sizeof(inbox_header) <= header_bytes);

struct cell_fields {
    std::uint64_t wire_id;
    std::uint64_t generation;
    std::uint32_t step;
    std::uint32_t size;
    std::int32_t pid; // the sender, when the payload names its memory; else 0
    // The message's number in its ring plus 1, modulo 2^32 (a zero-filled cell holds none):
    // written last, it publishes the cell. The consumer waits at its head's cell for the number
    // it expects, so a message crosses between the cores as the cache line it lies in and
    // nothing else (a shared tail cost the consumer a second line per message, and the producer
    // a read of the consumer's head).
    std::uint32_t seq;
};
constexpr std::size_t seq_at = offsetof(cell_fields, seq);

std::uint32_t seq_of(std::uint64_t number) noexcept {
    return static_cast<std::uint32_t>(number + 1);
}

/// The cell's sequence word, shared with another process.
std::atomic_ref<std::uint32_t> seq_word(std::byte const* cell) noexcept {
    return std::atomic_ref<std::uint32_t>(
        *reinterpret_cast<std::uint32_t*>(const_cast<std::byte*>(cell) + seq_at));
}

} // namespace

struct collective_rings::ring {
    alignas(64) std::atomic<std::uint64_t> head;    // messages consumed (the consumer)
    alignas(64) std::atomic<std::uint32_t> waiting; // the consumer's suspended receivers
    std::atomic<std::uint32_t> reads_producer;      // the consumer can read the producer's memory
    std::atomic<std::uint32_t> mapped;              // the producer has mapped this inbox
    alignas(64) std::byte cell[cells][cell_size];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free &&
                  std::atomic_ref<std::uint32_t>::is_always_lock_free,
              "the rings' words are shared between processes: they must be lock-free");
static_assert(sizeof(cell_fields) <= collective_rings::cell_header &&
              seq_at % alignof(std::uint32_t) == 0 && collective_rings::cell_size % 64 == 0);

namespace {
/// The fields of the message numbered `number` if its cell holds it (published), else false.
bool published(std::byte const* cell, std::uint64_t number, cell_fields& f) noexcept {
    // Sequentially consistent: a waiter counts itself, then drains (collective_rings.hpp).
    if (seq_word(cell).load(std::memory_order_seq_cst) != seq_of(number)) {
        return false;
    }
    std::memcpy(&f, cell, sizeof f);
    return true;
}
} // namespace

std::size_t collective_rings::ring_offset(std::uint32_t from) noexcept {
    return header_bytes + std::size_t{from} * sizeof(ring);
}
std::size_t collective_rings::seq_offset() noexcept {
    return seq_at;
}
std::size_t collective_rings::cell_offset(std::uint32_t i) noexcept {
    return offsetof(ring, cell) + std::size_t{i % cells} * cell_size;
}

std::size_t collective_rings::inbox_bytes(std::uint32_t size) noexcept {
    return header_bytes + std::size_t{size} * sizeof(ring);
}

collective_rings::ring& collective_rings::inbox_ring(std::uint32_t from) const noexcept {
    return *reinterpret_cast<ring*>(inbox_ + ring_offset(from));
}

collective_rings::ring& collective_rings::peer_ring(std::uint32_t to) const noexcept {
    return *reinterpret_cast<ring*>(peers_[to].base + ring_offset(rank_));
}

collective_rings::collective_rings(std::string name, std::uint32_t rank, std::uint32_t size)
    : name_(std::move(name)), rank_(rank), size_(size), peers_(size),
      reading_(new local_ring[size]), writing_(new local_peer[size]) {
    if (size > max_localities) {
        throw std::invalid_argument("collective rings: more than 64 localities");
    }
    for (std::uint32_t i = 0; i < size; ++i) {
        writing_[i].kept.reserve(cells); // push() then never allocates
    }
    std::string path = "/" + name_;
    int fd = ::shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        // The name is this locality's in this job: what has it is a leftover (a killed job
        // of the same id). Peers must not find it instead of this inbox.
        log(log_level::warn, "collectives: replacing a leftover /dev/shm{}", path);
        ::shm_unlink(path.c_str());
        fd = ::shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        throw std::system_error(errno, std::generic_category(), "shm_open " + path);
    }
    inbox_bytes_ = inbox_bytes(size);
    // Allocated now: a /dev/shm too full for it fails here, not as a peer's SIGBUS later.
    int e = ::ftruncate(fd, static_cast<off_t>(inbox_bytes_)) != 0
                ? errno
                : ::posix_fallocate(fd, 0, static_cast<off_t>(inbox_bytes_));
    if (e != 0) {
        ::close(fd);
        ::shm_unlink(path.c_str());
        throw std::system_error(e, std::generic_category(), "allocating " + path);
    }
    void* p = ::mmap(nullptr, inbox_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
        ::shm_unlink(path.c_str());
        throw std::system_error(e, std::generic_category(), "mmap " + path);
    }
    parcelport::own_shared_memory_file(name_);
    inbox_ = static_cast<std::byte*>(p); // zero-filled: every ring empty, nobody waiting
    auto* h = reinterpret_cast<inbox_header*>(inbox_);
    h->version = inbox_version;
    h->size = size;
    h->cells = cells;
    h->cell_size = static_cast<std::uint32_t>(cell_size);
    h->owner = rank;
    h->pid = static_cast<std::int32_t>(::getpid());
    h->probe = reinterpret_cast<std::uintptr_t>(&probe_word);
    h->nonce = probe_word;
    h->magic.store(inbox_magic, std::memory_order_release);
}

collective_rings::~collective_rings() {
    for (auto& p : peers_) {
        if (p.base != nullptr) {
            ::munmap(p.base, p.bytes);
        }
    }
    ::munmap(inbox_, inbox_bytes_);
    if (!unlinked_.exchange(true)) {
        ::shm_unlink(("/" + name_).c_str());
        parcelport::forget_shared_memory_file(name_);
    }
}

bool collective_rings::unlink_when_mapped() noexcept {
    if (unlinked_.load(std::memory_order_acquire)) {
        return true;
    }
    for (std::uint32_t r = 0; r < same_host_.size(); ++r) {
        if (same_host_[r] && inbox_ring(r).mapped.load(std::memory_order_acquire) == 0) {
            return false;
        }
    }
    if (!unlinked_.exchange(true)) {
        ::shm_unlink(("/" + name_).c_str());
        parcelport::forget_shared_memory_file(name_);
    }
    return true;
}

std::size_t collective_rings::connect(std::vector<std::string> const& names) {
    std::size_t mapped = 0;
    same_host_.assign(size_, false);
    for (std::uint32_t r = 0; r < names.size() && r < size_; ++r) {
        if (names[r].empty() || r == rank_ || peers_[r].base != nullptr) {
            continue;
        }
        same_host_[r] = true;
        int fd = ::shm_open(("/" + names[r]).c_str(), O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            log(log_level::debug, "collectives: no shared-memory inbox of locality {} ({}): {}", r,
                names[r], std::strerror(errno));
            continue;
        }
        struct stat st {};
        void* p = MAP_FAILED;
        if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == inbox_bytes_) {
            p = ::mmap(nullptr, inbox_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        ::close(fd);
        if (p == MAP_FAILED) {
            log(log_level::debug, "collectives: the inbox of locality {} is not {} bytes", r,
                inbox_bytes_);
            continue;
        }
        auto* h = static_cast<inbox_header*>(p);
        if (h->magic.load(std::memory_order_acquire) != inbox_magic ||
            h->version != inbox_version || h->size != size_ || h->cells != cells ||
            h->cell_size != cell_size || h->owner != r) {
            log(log_level::debug, "collectives: the inbox of locality {} has another layout", r);
            ::munmap(p, inbox_bytes_);
            continue;
        }
        peers_[r] = peer{static_cast<std::byte*>(p), inbox_bytes_};
        ++mapped;
        peer_ring(r).mapped.store(1, std::memory_order_release); // its owner may unlink it
        // Can this process read the peer's memory? Then the peer may name large vectors by
        // address in messages to it (the flag is in this inbox's ring from the peer).
        std::uint64_t seen = 0;
        iovec local{&seen, sizeof seen};
        iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(h->probe)), sizeof seen};
        if (h->pid > 0 &&
            ::process_vm_readv(h->pid, &local, 1, &remote, 1, 0) ==
                static_cast<ssize_t>(sizeof seen) &&
            seen == h->nonce) {
            inbox_ring(r).reads_producer.store(1, std::memory_order_release);
        } else {
            log(log_level::debug, "collectives: cannot read the memory of locality {} ({})", r,
                std::strerror(errno));
        }
    }
    return mapped;
}

bool collective_rings::reads_from_me(std::uint32_t to) const noexcept {
    return reaches(to) && peer_ring(to).reads_producer.load(std::memory_order_acquire) != 0;
}

collective_rings::push_result collective_rings::push(std::uint32_t to, std::uint64_t wire_id,
                                                     std::uint64_t generation, std::uint32_t step,
                                                     std::span<std::byte const> payload,
                                                     std::shared_ptr<void const> keep,
                                                     std::uint64_t* lent) noexcept {
    if (!reaches(to) || payload.size() > payload_capacity) {
        return push_result::no_ring;
    }
    bool const by_address = keep != nullptr || lent != nullptr; // the cell names our memory
    local_peer& w = writing_[to];
    std::unique_lock lock(w.writing);
    ring& r = peer_ring(to);
    std::uint64_t const t = w.tail;
    auto& kept = w.kept;
    // The consumer's head (its cache line) is read only when the ring may be full or messages
    // wait to be let go, not for every message.
    if (t - w.head_seen >= cells || !kept.empty()) {
        read_head(to);
        if (w.head_seen > t) {
            // A head past what was published here: something else wrote into the peer's
            // inbox. This pair's messages go as parcels from now on.
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "collectives: locality {} has taken {} messages from this "
                                   "one, which sent {}; its inbox is no longer used",
                                   to, w.head_seen, t);
            return push_result::no_ring;
        }
        if (t - w.head_seen >= cells) {
            return push_result::full;
        }
    }
    if (keep) {
        try {
            kept.emplace_back(t, std::move(keep));
        } catch (...) {
            return push_result::no_ring;
        }
    }
    if (lent != nullptr) {
        *lent = t;
    }
    std::byte* c = r.cell[t % cells];
    cell_fields f{wire_id,
                  generation,
                  step,
                  static_cast<std::uint32_t>(payload.size()),
                  by_address ? static_cast<std::int32_t>(::getpid()) : 0,
                  0};
    std::memcpy(c, &f, seq_at); // all but the sequence word
    if (!payload.empty()) {
        std::memcpy(c + cell_header, payload.data(), payload.size());
    }
    // Publish, then look whether the receiver sleeps (its side: count itself, then drain).
    seq_word(c).store(seq_of(t), std::memory_order_seq_cst);
    w.tail = t + 1;
    bool wake = r.waiting.load(std::memory_order_seq_cst) != 0;
    lock.unlock();
    sent_.fetch_add(1, std::memory_order_relaxed);
    if (wake) {
        nudges_.fetch_add(1, std::memory_order_relaxed);
    }
    return wake ? push_result::sent_wake : push_result::sent;
}

bool collective_rings::take_head(std::uint32_t from, function_ref<bool(view const&)> take) {
    if (from >= size_) {
        return false;
    }
    local_ring& lr = reading_[from];
    if (lr.reading.test_and_set(std::memory_order_seq_cst)) {
        return false;
    }
    struct unlock {
        collective_rings& self;
        local_ring& lr;
        std::uint32_t from;
        ~unlock() {
            lr.reading.clear(std::memory_order_seq_cst);
            if (lr.requested.load(std::memory_order_seq_cst) && self.deliver_ != nullptr) {
                deliver_fn d = self.deliver_;
                self.drain(from, [d, f = from](view const& v) { d(f, v); });
            }
        }
    } release{*this, lr, from};
    ring& r = inbox_ring(from);
    std::uint64_t h = r.head.load(std::memory_order_relaxed);
    std::byte const* c = r.cell[h % cells];
    cell_fields f;
    if (!published(c, h, f)) {
        return false; // empty
    }
    if (f.size > payload_capacity) {
        // Not written by this code: drop it (drain() logs it).
        return false;
    }
    view v{f.wire_id, f.generation, f.step, {c + cell_header, f.size}, sender_pid(from, f.pid)};
    bool taken = false;
    try {
        taken = take(v);
    } catch (...) {
        r.head.store(h + 1, std::memory_order_release);
        received_.fetch_add(1, std::memory_order_relaxed);
        throw;
    }
    if (taken) {
        r.head.store(h + 1, std::memory_order_release);
        received_.fetch_add(1, std::memory_order_relaxed);
    }
    return taken;
}

std::int32_t collective_rings::sender_pid(std::uint32_t from, std::int32_t claimed) const noexcept {
    if (claimed == 0 || !reaches(from) ||
        inbox_ring(from).reads_producer.load(std::memory_order_acquire) == 0 ||
        reinterpret_cast<inbox_header const*>(peers_[from].base)->pid != claimed) {
        return 0; // nothing may be read: a message naming memory then fails to load
    }
    return claimed;
}

bool collective_rings::taken(std::uint32_t to, std::uint64_t seq) const noexcept {
    return !reaches(to) || peer_ring(to).head.load(std::memory_order_acquire) > seq;
}

void collective_rings::read_head(std::uint32_t to) noexcept {
    local_peer& w = writing_[to];
    w.head_seen = peer_ring(to).head.load(std::memory_order_acquire);
    while (!w.kept.empty() && w.kept.front().first < w.head_seen) { // taken: copied by now
        w.kept.erase(w.kept.begin());
    }
}

void collective_rings::release_taken() noexcept {
    for (std::uint32_t to = 0; to < size_; ++to) {
        if (!reaches(to) || !writing_[to].writing.try_lock()) {
            continue;
        }
        read_head(to);
        writing_[to].writing.unlock();
    }
}

std::size_t collective_rings::drain(std::uint32_t from, function_ref<void(view const&)> each,
                                    bool ask) noexcept {
    if (from >= size_) {
        return 0;
    }
    local_ring& lr = reading_[from];
    if (!ask) {
        if (lr.reading.test_and_set(std::memory_order_seq_cst)) {
            return 0;
        }
        std::size_t n = drain_locked(from, each);
        lr.reading.clear(std::memory_order_seq_cst);
        if (lr.requested.load(std::memory_order_seq_cst)) {
            n += drain(from, each, true); // asked for meanwhile
        }
        return n;
    }
    // Ask first, then try: a thread that holds the lock reads `requested` after letting go
    // (all sequentially consistent), so either this thread drains or that one drains again.
    lr.requested.store(true, std::memory_order_seq_cst);
    std::size_t n = 0;
    while (lr.requested.load(std::memory_order_seq_cst)) {
        if (lr.reading.test_and_set(std::memory_order_seq_cst)) {
            break; // its holder drains again
        }
        lr.requested.store(false, std::memory_order_seq_cst);
        n += drain_locked(from, each);
        lr.reading.clear(std::memory_order_seq_cst);
    }
    return n;
}

std::size_t collective_rings::drain_locked(std::uint32_t from,
                                           function_ref<void(view const&)> each) noexcept {
    ring& r = inbox_ring(from);
    std::uint64_t h = r.head.load(std::memory_order_relaxed);
    std::size_t n = 0;
    // At most a ring's worth per drain: a writer that keeps publishing cannot hold it longer.
    for (; n < cells; ++h, ++n) {
        std::byte const* c = r.cell[h % cells];
        cell_fields f;
        if (!published(c, h, f)) {
            break;
        }
        if (f.size > payload_capacity) {
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "collectives: dropped a message of {} bytes from locality {} "
                                   "(a cell holds {})",
                                   f.size, from, payload_capacity);
        } else {
            try {
                each(view{f.wire_id,
                          f.generation,
                          f.step,
                          {c + cell_header, f.size},
                          sender_pid(from, f.pid)});
            } catch (std::exception const& e) {
                static logging::rate_limit limit;
                logging::error_limited(limit,
                                       "collectives: a message from locality {} (generation "
                                       "{}, round {}) could not be delivered: {}",
                                       from, f.generation, f.step, e.what());
            } catch (...) {
                static logging::rate_limit limit;
                logging::error_limited(limit,
                                       "collectives: a message from locality {} could not be "
                                       "delivered",
                                       from);
            }
        }
        r.head.store(h + 1, std::memory_order_release);
    }
    received_.fetch_add(n, std::memory_order_relaxed);
    return n;
}

void collective_rings::wait_begin(std::uint32_t from) noexcept {
    if (from < size_) {
        // Sequentially consistent, as the drain's read of the head's cell that follows and the
        // sender's store of a cell's sequence word and read of this count: one of the two sees
        // the other.
        inbox_ring(from).waiting.fetch_add(1, std::memory_order_seq_cst);
    }
}

void collective_rings::wait_end(std::uint32_t from) noexcept {
    if (from < size_) {
        inbox_ring(from).waiting.fetch_sub(1, std::memory_order_seq_cst);
    }
}

} // namespace courier::detail
