// SPDX-License-Identifier: BSL-1.0
// collective_rings: the collectives' messages between the localities of one host through
// shared memory, as MPI's shared-memory collectives do, instead of parcels. A small message of
// a collective (an 8 B all_reduce's value, a few all_gather values) then costs a copy into the
// receiver's memory and a load there, instead of a parcel, a handler task, the mailbox and the
// waiting thread's resume (2.4 µs against MPI's 0.3 µs on 2 localities: benchmarks/RESULTS.md,
// "Collectives").
//
// Each locality owns an inbox, /dev/shm/courier-JOB-RANK-coll: one ring per source locality,
// of `cells` cells of `cell_size` bytes, written by that source only (single producer) and read
// by this locality only (single consumer). A message that does not fit a cell, or finds its
// ring full, travels as a parcel instead: the mailbox (collectives.cpp) matches messages by
// key, whatever their path, so the two paths never need to agree on anything.
//
// Waiting: a receiver whose message is not there yet drains its ring for up to
// --courier:collective_spin_us, yielding to its worker's other tasks, then suspends on the
// mailbox's future. Before it suspends it counts itself in the ring's `waiting` word and drains
// once more; a sender reads that word after publishing a message (both sequentially consistent: a
// Dekker pair, as the doorbell's), and if it is non-zero posts a nudge parcel, whose handler drains
// the ring into the mailbox. So a suspended receiver is never left with a message in its ring and
// nobody to read it, and a spinning one costs no parcel.
//
// Memory: 8 KiB per ordered pair of localities (8 cells of 1 KiB); inboxes exist only for jobs
// of at most max_localities localities (64: 512 KiB per inbox).
//
// Thread safety: push() may run on any thread (a lock per destination, in this process);
// take_head(), drain() and the waiting calls on any thread (a try-lock per source ring: a
// thread that finds it taken leaves the ring to its holder).
#pragma once

#include <courier/runtime/actions.hpp>
#include <courier/runtime/detail/spinlock.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace courier::detail {

class collective_rings {
public:
    static constexpr std::uint32_t cells = 8;
    static constexpr std::size_t cell_size = 1024;
    static constexpr std::size_t cell_header = 32;
    static constexpr std::size_t payload_capacity = cell_size - cell_header;
    static constexpr std::uint32_t max_localities = 64;

    /// One message in a ring.
    struct view {
        std::uint64_t wire_id;
        std::uint64_t generation;
        std::uint32_t step;
        std::span<std::byte const> payload;
        std::int32_t pid; ///< the sender's process if the payload names its memory, else 0
    };
    enum class push_result {
        no_ring, ///< not sent: no ring to that locality (or the message does not fit a cell)
        full,    ///< not sent: the ring is full
        sent,
        sent_wake, ///< sent, and the receiver sleeps on it: post it a nudge
    };

    /// Creates this locality's inbox, /dev/shm/`name`, with a ring for each of `size`
    /// localities. Throws std::system_error when it cannot be made, std::invalid_argument when
    /// `size` exceeds max_localities.
    collective_rings(std::string name, std::uint32_t rank, std::uint32_t size);
    ~collective_rings();
    collective_rings(collective_rings const&) = delete;
    collective_rings& operator=(collective_rings const&) = delete;

    /// Maps the inboxes named by `names` (by rank; empty: that locality is not on this host, or
    /// is this one). A peer whose inbox cannot be opened or is not what this code writes
    /// (another size, another layout) keeps using parcels. Returns how many were mapped.
    std::size_t connect(std::vector<std::string> const& names);

    std::uint32_t rank() const noexcept { return rank_; }
    /// Whether messages to `rank` can go through its inbox.
    bool reaches(std::uint32_t rank) const noexcept {
        return rank < peers_.size() && peers_[rank].base != nullptr;
    }
    /// Whether `rank` is on this host (named to connect()), so that it may write into this
    /// locality's inbox: its ring is then read whenever a message from it is awaited, even when
    /// this locality could not map the peer's inbox.
    bool listens_to(std::uint32_t rank) const noexcept {
        return rank < same_host_.size() && same_host_[rank];
    }

    /// Removes this inbox's name once every peer on this host has mapped it (the memory stays
    /// while mapped), so that a job killed later leaves nothing in /dev/shm. True once removed.
    /// Called periodically (the liveness thread); the destructor removes it otherwise.
    bool unlink_when_mapped() noexcept;

    /// Whether `to` has found that it can read this process's memory (process_vm_readv: the
    /// same user and process namespace, no ptrace restriction). Tested by each receiver when it
    /// connects; false until then.
    bool reads_from_me(std::uint32_t to) const noexcept;

    /// Copies a message into `to`'s inbox. Never blocks on the receiver. A head in that inbox
    /// past what this process published (another process wrote there) makes this and every
    /// later push to `to` return no_ring; messages pushed before it was seen may be lost (as
    /// any message such a writer overwrites). `keep` non-null: the
    /// payload names memory of this process that `keep` holds; it is kept until the receiver
    /// has taken the message. `lent` non-null (and `keep` null): the payload names memory of
    /// this process that the caller keeps unchanged until taken(to, *lent); *lent gets the
    /// message's number in the ring (from 0; its cell's sequence word holds the number + 1).
    push_result push(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation,
                     std::uint32_t step, std::span<std::byte const> payload,
                     std::shared_ptr<void const> keep = nullptr,
                     std::uint64_t* lent = nullptr) noexcept;
    /// Whether `to` has taken (and so copied what it names) the message numbered `seq`.
    bool taken(std::uint32_t to, std::uint64_t seq) const noexcept;

    /// Offers the message at the head of the ring from `from` to `take`; removes it if `take`
    /// returns true (also when `take` throws: the exception propagates). False if the ring is
    /// empty, being read by another thread, or `take` declined.
    bool take_head(std::uint32_t from, function_ref<bool(view const&)> take);
    /// Removes the messages in the ring from `from` (at most `cells`: a writer that keeps
    /// publishing cannot hold a drain), calling `each` on each (exceptions from
    /// `each` are caught and logged). Returns how many. When another thread is reading the
    /// ring, returns 0 at once and that thread drains it again (with `each` if it is a drain,
    /// with the function set_drain() gave if it is take_head()) before it lets go.
    /// `ask` false: only if the lock is free (a poll while spinning, which must not make
    /// others drain for it).
    std::size_t drain(std::uint32_t from, function_ref<void(view const&)> each,
                      bool ask = true) noexcept;
    /// Lets go of what messages named by address once their receivers have taken them (push()
    /// does it too, for its destination): called periodically (the liveness thread).
    void release_taken() noexcept;
    /// What a drain asked for during take_head() does with each message (the locality's
    /// mailbox); none: such a drain waits for the next one.
    using deliver_fn = void (*)(std::uint32_t from, view const& v);
    void set_drain(deliver_fn f) noexcept { deliver_ = f; }

    struct statistics {
        std::uint64_t sent = 0;       ///< messages pushed into peers' inboxes
        std::uint64_t received = 0;   ///< messages taken from this locality's inbox
        std::uint64_t nudges = 0;     ///< pushes that found the receiver suspended
        std::uint64_t bytes_read = 0; ///< copied from senders' memory (vectors by address)
    };
    statistics stats() const noexcept {
        return {sent_.load(std::memory_order_relaxed), received_.load(std::memory_order_relaxed),
                nudges_.load(std::memory_order_relaxed),
                bytes_read_.load(std::memory_order_relaxed)};
    }
    void count_read(std::uint64_t bytes) noexcept {
        bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
    }

    /// A receiver of messages from `from` is about to suspend (then drains once more) / has
    /// resumed.
    void wait_begin(std::uint32_t from) noexcept;
    void wait_end(std::uint32_t from) noexcept;

    /// Where an inbox keeps the ring from `from`, its cell `i` (bytes from the inbox's start)
    /// and a cell's sequence word (from the cell's start): for tests that write into an inbox
    /// what this code never writes.
    static std::size_t ring_offset(std::uint32_t from) noexcept;
    static std::size_t cell_offset(std::uint32_t i) noexcept;
    static std::size_t seq_offset() noexcept;

private:
    struct ring;
    struct peer {
        std::byte* base = nullptr; // the peer's inbox, mapped
        std::size_t bytes = 0;
    };
    struct local_ring {
        std::atomic_flag reading = ATOMIC_FLAG_INIT; // one consumer at a time
        // A drain was asked for while another thread read the ring: that thread drains again
        // before it leaves (so a waiter about to suspend never loses the race for the lock
        // to a thread that looked at the head's cell before the waiter's message was published).
        std::atomic<bool> requested{false};
    };
    struct alignas(64) local_peer {
        spinlock writing;            // one producer at a time: a copy of at most a cell
        std::uint64_t tail = 0;      // messages published to the peer (under `writing`)
        std::uint64_t head_seen = 0; // the peer's head when last read (under `writing`)
        // What messages to the peer name by address, by their cell's sequence number: freed
        // once the peer's head has passed it (under `writing`).
        std::vector<std::pair<std::uint64_t, std::shared_ptr<void const>>> kept;
    };

    ring& inbox_ring(std::uint32_t from) const noexcept;
    /// Reads `to`'s head into its head_seen and lets go of what it has taken (under `writing`).
    void read_head(std::uint32_t to) noexcept;
    ring& peer_ring(std::uint32_t to) const noexcept;
    static std::size_t inbox_bytes(std::uint32_t size) noexcept;

    std::string name_;
    std::uint32_t rank_, size_;
    std::byte* inbox_ = nullptr;
    std::size_t inbox_bytes_ = 0;
    std::vector<peer> peers_;
    std::vector<bool> same_host_;
    std::atomic<std::uint64_t> sent_{0}, received_{0}, nudges_{0}, bytes_read_{0};
    std::atomic<bool> unlinked_{false};
    deliver_fn deliver_ = nullptr;
    std::size_t drain_locked(std::uint32_t from, function_ref<void(view const&)> each) noexcept;
    /// `claimed` if it is `from`'s process and this one can read it, else 0.
    std::int32_t sender_pid(std::uint32_t from, std::int32_t claimed) const noexcept;
    std::unique_ptr<local_ring[]> reading_;
    std::unique_ptr<local_peer[]> writing_;
};

/// Moves a message out of an inbox into this locality's mailbox (collectives.cpp): the
/// function set_drain() gets.
void deliver_from_inbox(std::uint32_t from, collective_rings::view const& v);

} // namespace courier::detail
