// SPDX-License-Identifier: BSL-1.0
// Coalescing (transport::send_coalesced): small eager-only parcels to one destination that is
// busy wait in a batch (wire::batch), which the next progress pass posts as one message.
#pragma once

#include "context.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace courier::parcelport::fabric {

/// A coalesced message being filled or in flight: the eager messages of several eager-only
/// parcels to one destination and their handlers, run when the batch's send completes. A
/// coalesced parcel takes no slot in the send table: nothing of it is needed after its bytes
/// were copied into the batch (no registration, no DONE to wait for).
struct batch_op : op {
    std::uint32_t dest = 0;
    std::vector<std::byte> buf;                    // the header's room, then the records
    std::vector<transport::sent_handler> handlers; // one per record (empty handlers too)
    batch_op() : op(kind::batch) {}
};

/// A parcel is held back only while this many messages to its destination are in flight
/// (posted, completion not yet seen), or a batch is open: one message in flight is the common
/// case of a request/reply exchange, whose latency coalescing must not touch.
constexpr std::uint32_t coalesce_in_flight = 2;

/// Thread safety: try_coalesce/posted/completed from any thread; flush and on_completion from
/// the poller.
class coalescer {
public:
    /// `batch_limit`: the largest coalesced message.
    coalescer(transport_parts const& parts, std::size_t batch_limit);
    ~coalescer();
    void set_peers(std::size_t n);
    /// A message to `dest` was posted / completed (in flight counts decide whether to hold).
    void posted(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_add(1, std::memory_order_acq_rel);
    }
    void completed(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
    }
    /// True if a message of `eager_bytes` (an eager-only parcel, all in its eager message) is
    /// small enough to coalesce: less than a quarter of a batch.
    bool small_enough(std::size_t eager_bytes) const noexcept {
        return 4 * wire::record_size(eager_bytes) <= batch_limit_ - sizeof(wire::header);
    }
    /// A first look, without the lock: would a parcel to `dest` be held now (a message to it
    /// in flight or a batch open)? try_coalesce decides under the lock.
    bool would_hold(std::uint32_t dest) const noexcept {
        peer_out const& po = out_[dest];
        return po.open.load(std::memory_order_acquire) != nullptr ||
               po.in_flight.load(std::memory_order_acquire) >= coalesce_in_flight;
    }
    /// Appends the eager message `eager` of an eager-only parcel (small_enough) to its
    /// destination's batch, with its handler, if a message to that destination is in flight or
    /// a batch is open; false: the caller posts it itself (`on_sent` is then untouched).
    bool try_coalesce(std::uint32_t dest, std::span<std::byte const> eager,
                      transport::sent_handler& on_sent);
    /// Parcels in batches not completed yet (open or posted).
    std::size_t in_flight() const noexcept {
        return parcels_in_flight_.load(std::memory_order_acquire);
    }
    /// Posts the open batches (the poller, at the end of each pass); true if any.
    bool flush();
    bool has_open() const noexcept { return open_batches_.load(std::memory_order_acquire) != 0; }
    /// The batch's send completed (or failed: `ec`): its parcels complete.
    void on_completion(batch_op* b, std::error_code ec);

private:
    /// Per destination: messages posted and not completed, and the batch being filled (changed
    /// under m; read without it for a first look).
    struct peer_out {
        std::mutex m;
        std::atomic<std::uint32_t> in_flight{0};
        std::atomic<batch_op*> open{nullptr};
    };
    batch_op* take_batch(std::uint32_t dest);
    void post_batch(batch_op* b);

    transport_parts parts_;
    std::size_t batch_limit_;
    std::unique_ptr<peer_out[]> out_;
    std::atomic<std::uint32_t> open_batches_{0};
    std::atomic<std::size_t> parcels_in_flight_{0};
    std::mutex batch_mutex_; // open_list_, all_, free_
    std::vector<std::uint32_t> open_list_;
    std::vector<std::uint32_t> flushing_; // flush's copy of open_list_ (the poller's)
    std::vector<std::unique_ptr<batch_op>> all_;
    std::vector<batch_op*> free_;
};

} // namespace courier::parcelport::fabric
