// SPDX-License-Identifier: BSL-1.0
// outbox: a shm endpoint's shared-memory staging area for the chunks of its rendezvous parcels.
// shm's RMA read is a process_vm_readv by the receiver, whose fixed cost (the system call, the
// pinning of the sender's pages) is several times a copy: 2.8 us for 16 KiB against 0.45 us
// for a memcpy (libs/parcelport/README.md, "The shm outbox"). So the sender copies a chunk
// of up to `max_chunk` bytes into its outbox, a region of /dev/shm/NAME-outbox that every peer
// on the host maps read-only, and announces it as usual; the receiver finds the announced
// range in the sender's outbox and copies it out with memcpy instead of reading it. The
// announcement stays a valid RMA descriptor (the outbox is registered with the endpoint): a
// receiver that could not map the outbox reads it with fi_read as any other chunk.
//
// The region starts with a header {magic, version, the owner's address of the region and its
// registration key, size}; blocks are allocated from the rest as a ring, released (at the
// send's DONE) in any order: the ring's tail advances over released blocks at its head. A
// chunk that does not fit (the ring is full of chunks whose DONE has not come) is sent from
// its own memory: the outbox never blocks a send. The sender writes a block with non-temporal
// stores (sender.cpp): ordinary stores into lines the receiver had read ran at times at a
// tenth of their speed (libs/parcelport/README.md).
//
// Thread safety: allocate/release from any thread (a mutex); connect() before any receive;
// find() from the poller, afterwards.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace courier::parcelport::fabric {

/// Whether this process runs on an AMD processor, whose copies between cores and CMA reads
/// measured differently from an Intel Xeon's: the outbox's defaults depend on it
/// (default_shm_outbox_chunk, the streaming stores in sender.cpp).
bool amd_processor() noexcept;

class outbox {
public:
    /// Creates /dev/shm/`name`-outbox of `bytes` bytes (allocated now: a full /dev/shm fails
    /// here, not as a reader's SIGBUS later). Chunks of more than `max_chunk` bytes are never
    /// staged, nor larger than always_staged for `busy_window` after this side received one
    /// (received()). Throws std::system_error.
    outbox(std::string const& name, std::size_t bytes, std::size_t max_chunk,
           std::chrono::microseconds busy_window = std::chrono::microseconds(1000));
    ~outbox();
    outbox(outbox const&) = delete;
    outbox& operator=(outbox const&) = delete;

    /// The name peers open this outbox by (the endpoint's shm name).
    std::string const& name() const noexcept { return name_; }
    /// Publishes the registration under which peers may also read the region with fi_read
    /// (its key, and the address a descriptor names its first byte by: the region's virtual
    /// address, or 0 where the provider addresses by offset).
    void set_registration(std::uint64_t key, std::uint64_t remote_base) noexcept;
    std::byte* region() const noexcept { return base_; }
    /// The largest chunk ever staged.
    std::size_t max_chunk() const noexcept { return max_chunk_; }
    std::size_t size() const noexcept { return bytes_; }

    /// A block of `n` bytes, or nullptr when `n` is over max_chunk or the ring has no room,
    /// or when `n` is over always_staged while this side receives large chunks itself (see
    /// received()).
    std::byte* allocate(std::size_t n);
    /// Chunks of up to this many bytes are always staged. A larger one costs the sender's CPU
    /// more than the CMA read it saves the receiver: where this side's CPU is busy receiving
    /// too (a bidirectional stream), it goes by CMA. Measured in benchmarks/RESULTS.md
    /// (osu_bibw on an Intel Xeon, 5-6 alternating rounds each: 32 / 64 KiB 1.06-1.11 /
    /// 1.17-1.20x faster with this at 16 KiB than at 64 KiB, 8-16 KiB within 4 %).
    static constexpr std::size_t always_staged = 16 * 1024;
    /// The receiver of this transport took a rendezvous parcel of `bytes` (any peer).
    void received(std::size_t bytes) noexcept {
        if (bytes > always_staged) {
            last_large_receive_.store(now_us(), std::memory_order_relaxed);
        }
    }
    /// Gives back a block allocate() returned.
    void release(std::byte* block) noexcept;
    /// Blocks allocated and not released.
    std::size_t blocks_in_use() const;
    /// The address a peer's descriptor names `p` by (see set_registration).
    std::uint64_t remote_address(std::byte const* p) const noexcept {
        return remote_base_ + static_cast<std::uint64_t>(p - base_);
    }
    std::uint64_t key() const noexcept { return key_; }

    /// Maps the peers' outboxes read-only by name (empty, or this outbox's own name: none).
    /// Returns how many named ones could not be mapped (their chunks are read with fi_read).
    std::size_t connect(std::vector<std::string> const& names);
    /// Where [remote, remote + size) of a read with `key` from `rank` lies in that peer's
    /// outbox as mapped here, or nullptr if it is not wholly inside it.
    std::byte const* find(std::uint32_t rank, std::uint64_t remote, std::uint64_t key,
                          std::uint64_t size) const noexcept;

private:
    static std::int64_t now_us() noexcept {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }
    struct header;
    struct peer {
        std::byte const* map = nullptr;
        std::size_t bytes = 0;
        std::uint64_t remote_base = 0, key = 0;
    };
    struct block {
        std::size_t offset, size;
        bool released;
    };

    std::string name_, path_;
    std::byte* base_ = nullptr;
    std::size_t bytes_ = 0, max_chunk_ = 0;
    std::int64_t busy_window_us_ = 0;
    std::uint64_t key_ = 0, remote_base_ = 0;
    std::atomic<std::int64_t> last_large_receive_{INT64_MIN / 2};
    std::vector<peer> peers_;
    mutable std::mutex mutex_; // the ring below
    /// Blocks in allocation order, a ring of records [first_, first_ + count_).
    std::vector<block> blocks_;
    std::size_t first_ = 0, count_ = 0;
};

} // namespace courier::parcelport::fabric
