// SPDX-License-Identifier: BSL-1.0
// Coalescing (transport::send_coalesced): small eager-only parcels to one destination that is
// busy wait in a batch (wire::batch), which the next progress pass posts as one message.
#pragma once

#include "context.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace courier::parcelport::fabric {

struct send_state;
class sender;

/// A coalesced message being filled or in flight: the eager messages of several eager-only
/// parcels to one destination, each still a send_state in the send table (completed when the
/// batch's send completes).
struct batch_op : op {
    std::uint32_t dest = 0;
    std::vector<std::byte> buf; // the header's room, then the records
    std::vector<send_state*> members;
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
    coalescer(transport_parts const& parts, sender& s, std::size_t batch_limit);
    ~coalescer();
    void set_peers(std::size_t n);
    /// A message to `dest` was posted / completed (in flight counts decide whether to hold).
    void posted(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_add(1, std::memory_order_acq_rel);
    }
    void completed(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
    }
    /// Appends the published send `s` (eager message built, no local registration) to its
    /// destination's batch if it is eager-only, small, and a message to that destination is in
    /// flight or a batch is open; false: the caller posts it itself.
    bool try_coalesce(send_state* s);
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
    sender& sender_;
    std::size_t batch_limit_;
    std::unique_ptr<peer_out[]> out_;
    std::atomic<std::uint32_t> open_batches_{0};
    std::mutex batch_mutex_; // open_list_, all_, free_
    std::vector<std::uint32_t> open_list_;
    std::vector<std::uint32_t> flushing_; // flush's copy of open_list_ (the poller's)
    std::vector<std::unique_ptr<batch_op>> all_;
    std::vector<batch_op*> free_;
};

} // namespace courier::parcelport::fabric
