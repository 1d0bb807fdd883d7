// SPDX-License-Identifier: BSL-1.0
// message_rings: small messages between the localities of one host through rings in shared
// memory, beside the shm provider. libfabric 1.17's shm takes a lock on the receiver's region,
// a command slot and a completion for every message, and its receiver matches the message to
// a posted buffer and copies it there: about 1.2 us one way for 8 bytes, where OpenMPI's vader
// takes 0.4 us (benchmarks/RESULTS.md). A ring costs the sender a copy and a store, and the
// receiver a load and the handling of the bytes in place.
//
// Each endpoint owns a file, /dev/shm/NAME-rings, made when it learns its peers (connect()):
// one ring per peer it sends to, which it alone writes (single producer) and that peer alone
// reads (single consumer). A ring is `ring_bytes` of records, each a prefix {length, mark}
// and the message padded to 8 bytes; a record that does not fit before the ring's end leaves a
// wrap mark and starts at its beginning. The writer publishes a record by advancing the ring's
// head (release), the reader frees it by advancing its tail after handling it.
//
// A ring is used only after its reader has mapped it and said so (its `attached` word): the
// reader attaches when it finds the file (connect(), then every so often in poll() until every
// peer's is found); until then, and whenever a ring is full, is being written by another
// thread of this process, or a message is larger than max_message, send() says no and the
// caller sends through the provider. So a ring never holds a message nobody will read, and
// never makes a sender wait. The caller wakes the reader (its doorbell) as for any message.
//
// Bad input: a reader checks every record's length and mark against the ring's bounds and the
// published head; a ring found inconsistent is dropped (logged once): its pending and later
// records are skipped, the rest of the job goes on through the provider. Messages are checked
// by the caller as any received message (header, job token, source).
//
// Thread safety: send() from any thread (a try-lock per destination); connect() once, before
// any send() or poll(); poll() from one thread at a time.
#pragma once

#include <courier/common/single_writer.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace courier::parcelport::detail {

class message_rings {
public:
    /// Bytes of records per ring: a window of 64 parcels of 4 KiB fits (posts of 4 KiB ran
    /// 1.15x as fast as with 64 KiB rings, which then sent a third of them through the
    /// provider; 8 B – 1 KiB alike). The writer maps its rings with MAP_POPULATE and a reader
    /// faults in the ring it reads at attach: a ring's pages are not faulted in by the first
    /// messages (which cost 8 B round trips 0.25 us each until the head had gone once around).
    static constexpr std::size_t ring_bytes = std::size_t{256} << 10;
    /// The largest message a ring takes: the largest eager message of a shm transport with
    /// its default threshold, with room to spare; larger ones go through the provider.
    static constexpr std::size_t max_message = (std::size_t{16} << 10) - 8;
    /// After a record of at most `small_record` bytes, a drain asks for the ring's lines up
    /// to `read_ahead` bytes ahead of its reads.
    static constexpr std::size_t small_record = std::size_t{2} << 10;
    static constexpr std::size_t read_ahead = std::size_t{4} << 10;

    /// Rings of the endpoint `name` (its file: /dev/shm/NAME-rings). Throws std::system_error
    /// when the file cannot be created (it is created empty here, so that the name is this
    /// endpoint's before it is published).
    explicit message_rings(std::string name);
    ~message_rings();
    message_rings(message_rings const&) = delete;
    message_rings& operator=(message_rings const&) = delete;

    /// The name peers find this endpoint's rings by.
    std::string const& name() const noexcept { return name_; }

    /// `names`: each rank's ring name (empty: none, or not on this host); `rank`: this one.
    /// Makes this side's rings, one per named peer, and maps the peers' rings written for this
    /// rank where they exist already. Throws std::system_error when this side's cannot be made.
    void connect(std::vector<std::string> const& names, std::uint32_t rank);

    /// Appends a message of `len` bytes for `dest`, written in place by `write(std::byte*)`.
    /// False, with nothing written, when there is no ring to `dest` that its reader attached,
    /// the ring is full, another thread is writing to it, or `len` > max_message.
    template <class Write>
    bool send(std::uint32_t dest, std::size_t len, Write&& write);
    bool send(std::uint32_t dest, void const* p, std::size_t len) {
        return send(dest, len, [&](std::byte* at) { std::memcpy(at, p, len); });
    }

    /// Whether `dest`'s reader has attached this side's ring to it (send() may then take
    /// messages for it, room permitting).
    bool reaches(std::uint32_t dest) const noexcept;

    /// Hands every message waiting in the rings this side reads to
    /// `handle(source, std::byte const* p, std::size_t len)`, in order per source; the bytes are
    /// valid during the call. Every so often also tries to map the peers' rings it has not
    /// found yet. True if any message was handled. An exception from `handle` propagates
    /// after its message was freed.
    template <class Handle>
    bool poll(Handle&& handle);

    /// Peers whose rings to this side are not mapped yet.
    std::size_t unattached() const noexcept { return unattached_; }
    /// Tries to map the peers' rings not mapped yet; how many are still missing.
    std::size_t attach_pending();

    struct statistics {
        std::uint64_t sent = 0;     ///< messages written into rings
        std::uint64_t received = 0; ///< messages read from rings
        std::uint64_t refused = 0;  ///< send() said no to an attached ring (full or busy)
    };
    statistics stats() const noexcept {
        std::uint64_t sent = 0;
        for (std::size_t i = 0; i < out_size_; ++i) {
            sent += out_[i].sent.load(std::memory_order_relaxed);
        }
        return {sent, received_.load(std::memory_order_relaxed),
                refused_.load(std::memory_order_relaxed)};
    }

    /// The layout, for tests that write into a ring what this code never writes.
    struct control;
    /// The ring in the file `file` (mapped) that `owner` writes for `reader`, or null.
    static control* find_ring(std::byte* file, std::size_t bytes, std::uint32_t reader) noexcept;
    static std::byte* data_of(control* c) noexcept;

private:
    struct alignas(64) outgoing {
        control* ring = nullptr; // in this side's file
        std::atomic<bool> writing{false};
        bool attached = false;              // seen the reader's word (under `writing`)
        std::uint64_t head = 0, tail = 0;   // head written, tail last seen (under `writing`)
        std::atomic<std::uint64_t> sent{0}; // messages written (one writer: `writing`'s holder)
    };
    struct incoming {
        control* ring = nullptr; // in the peer's file, mapped
        std::uint64_t tail = 0;
        bool broken = false;
        bool small_records = true; // the last record read was small: prefetch (drain)
    };
    /// Reads the records of `in` from `source`; true if any.
    template <class Handle>
    bool drain(incoming& in, std::uint32_t source, Handle& handle);
    /// Logs and stops reading `in` (its records are inconsistent).
    void drop(incoming& in, std::uint32_t source, char const* why) noexcept;
    void publish_tail(incoming& in) noexcept;
    std::uint64_t published_head(incoming const& in) const noexcept;
    bool reserve(outgoing& o, std::size_t rec, std::size_t& at);
    void publish_head(outgoing& o) noexcept;

    std::string name_, path_;
    int fd_ = -1;
    std::byte* file_ = nullptr;
    std::size_t file_bytes_ = 0;
    std::uint32_t rank_ = 0;
    std::unique_ptr<outgoing[]> out_;
    std::size_t out_size_ = 0;
    std::vector<incoming> in_;
    std::vector<std::string> peer_names_; // whose rings are not mapped yet: non-empty
    struct mapping {
        void* p;
        std::size_t bytes;
    };
    std::vector<mapping> mapped_;
    std::size_t unattached_ = 0;
    std::uint32_t polls_ = 0;
    std::vector<std::uint32_t> sources_; // ranks with a mapped incoming ring
    // received_ has one writer (poll(), one thread at a time): add_single_writer, not a locked
    // addition (so has each ring's `sent`, under its `writing` flag).
    std::atomic<std::uint64_t> received_{0}, refused_{0};
};

struct message_rings::control {
    alignas(64) std::atomic<std::uint64_t> head; // bytes published by the writer
    alignas(64) std::atomic<std::uint64_t> tail; // bytes freed by the reader
    std::atomic<std::uint32_t> attached;         // the reader maps the ring
    std::uint32_t reader;                        // its rank
};

inline bool message_rings::reaches(std::uint32_t dest) const noexcept {
    return dest < out_size_ && out_[dest].ring != nullptr &&
           out_[dest].ring->attached.load(std::memory_order_acquire) != 0;
}

namespace rings_layout {
inline constexpr std::uint32_t record_mark = 0x52454331; // "REC1"
inline constexpr std::uint32_t wrap_mark = 0x57524150;   // "WRAP"
inline constexpr std::size_t prefix = 8;
inline constexpr std::size_t record_size(std::size_t len) noexcept {
    return prefix + (len + 7) / 8 * 8;
}
} // namespace rings_layout

template <class Write>
bool message_rings::send(std::uint32_t dest, std::size_t len, Write&& write) {
    if (dest >= out_size_ || out_[dest].ring == nullptr || len > max_message) {
        return false;
    }
    outgoing& o = out_[dest];
    if (o.writing.exchange(true, std::memory_order_acquire)) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    struct unlock {
        outgoing& o;
        ~unlock() { o.writing.store(false, std::memory_order_release); }
    } u{o};
    if (!o.attached) {
        if (o.ring->attached.load(std::memory_order_acquire) == 0) {
            return false;
        }
        o.attached = true;
    }
    std::size_t at = 0;
    std::size_t const rec = rings_layout::record_size(len);
    if (!reserve(o, rec, at)) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    std::byte* d = data_of(o.ring) + at;
    std::uint32_t const prefix[2] = {static_cast<std::uint32_t>(len), rings_layout::record_mark};
    std::memcpy(d, prefix, sizeof prefix);
    write(d + rings_layout::prefix);
    o.head += rec;
    publish_head(o);
    courier::detail::add_single_writer(o.sent);
    return true;
}

template <class Handle>
bool message_rings::poll(Handle&& handle) {
    if (unattached_ != 0 && (++polls_ & 1023) == 1) {
        attach_pending();
    }
    bool any = false;
    for (std::uint32_t s : sources_) {
        incoming& in = in_[s];
        if (!in.broken && published_head(in) != in.tail) {
            any = drain(in, s, handle) || any;
        }
    }
    return any;
}

template <class Handle>
bool message_rings::drain(incoming& in, std::uint32_t source, Handle& handle) {
    std::uint64_t const head = published_head(in);
    if (head - in.tail > ring_bytes) {
        drop(in, source, "its head is beyond its size");
        return false;
    }
    std::byte const* data = data_of(in.ring);
    bool any = false;
    // The writer's lines come over from its core one miss at a time when each record is read
    // as its turn comes (batches of small parcels: a miss every few parcels); asked for ahead
    // of the reads, they come together. Only while the records are small: large ones are
    // copied out, which the hardware's own prefetch serves (asking for their lines too made
    // 4 KiB posts up to 8 % slower). Each line is asked for once in a drain.
    std::uint64_t asked = in.tail & ~std::uint64_t{63};
    while (in.tail != head) {
        if (in.small_records) {
            // Not behind the reads (past a wrap mark, or after large records).
            asked = std::max(asked, in.tail & ~std::uint64_t{63});
            for (std::uint64_t const upto = std::min(head, in.tail + read_ahead); asked < upto;
                 asked += 64) {
                __builtin_prefetch(data + asked % ring_bytes);
            }
        }
        std::size_t const pos = in.tail % ring_bytes;
        std::uint32_t prefix[2];
        std::memcpy(prefix, data + pos, sizeof prefix);
        if (prefix[1] == rings_layout::wrap_mark) {
            if (ring_bytes - pos > head - in.tail) {
                drop(in, source, "a wrap mark beyond its head");
                return any;
            }
            in.tail += ring_bytes - pos;
            continue;
        }
        std::size_t const len = prefix[0];
        if (prefix[1] != rings_layout::record_mark || len > max_message ||
            rings_layout::record_size(len) > ring_bytes - pos ||
            rings_layout::record_size(len) > head - in.tail) {
            drop(in, source, "a record with a bad mark or length");
            return any;
        }
        in.small_records = rings_layout::record_size(len) <= small_record;
        struct advance {
            message_rings* self;
            incoming& in;
            std::size_t rec;
            ~advance() {
                in.tail += rec;
                self->publish_tail(in);
            }
        } next{this, in, rings_layout::record_size(len)};
        any = true;
        courier::detail::add_single_writer(received_);
        handle(source, data + pos + rings_layout::prefix, len);
    }
    return any;
}

} // namespace courier::parcelport::detail
