// SPDX-License-Identifier: BSL-1.0
// Taking received eager messages apart (wire.hpp): the header and job token checked, split
// messages joined, coalesced messages cut into their parcels, an eager-only parcel's
// descriptors checked and its message built, and what each asks for handed to a sink. Pure:
// no libfabric call, so the libfabric receiver and the wire fuzzer run the same code.
//
// Errors: a malformed message, record or parcel is logged (one line) and dropped; nothing is
// allocated for a size before it is checked against the bytes received.
#pragma once

#include "fragments.hpp"

#include <courier/serialization/message.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace courier::parcelport::fabric {

/// What the messages an eager_reader takes apart ask for. The libfabric receiver does it
/// (receiver.cpp); the wire fuzzer delivers the parcels to an in-process locality.
class message_sink {
public:
    /// Magic, version, job token and a source this endpoint serves.
    virtual bool header_ok(wire::header const& h) const = 0;
    /// A DONE for this side's send `id`.
    virtual void done(std::uint64_t id) = 0;
    /// An eager-only parcel, whole and validated.
    virtual void eager_parcel(std::uint32_t source, serialization::message&& m) = 0;
    /// The small parcels of a coalesced message, or a lone small parcel as a batch of one
    /// (transport::batch_handler), if the sink takes them so; false: it does not, and each
    /// comes to eager_parcel instead.
    virtual bool eager_batch(std::uint32_t /*source*/,
                             std::span<std::span<std::byte const> const> /*parcels*/) {
        return false;
    }
    /// A parcel with `rma_bytes` to read or a remote descriptor table: its eager message of
    /// `len` bytes at `p`, header checked, descriptors not. Throws serialization_error for a
    /// malformed one (the reader logs it).
    virtual void rendezvous_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                                   std::size_t rma_bytes) = 0;
    /// A receive buffer the reader held (part 0 of a split message) is free again.
    virtual void release(recv_op* r) = 0;
    /// The eager-only parcel about to be handed over, a message of its own, is a control
    /// message (wire::quiet).
    virtual void quiet_parcel() {}
    virtual ~message_sink() = default;
};

/// Thread safety: one thread at a time (the libfabric transport's poller).
class eager_reader {
public:
    /// Receive buffers hold `recv_size` bytes; a split message's first part waits at most
    /// `stall_timeout` for its second.
    eager_reader(message_sink& sink, std::size_t recv_size, std::chrono::milliseconds stall_timeout)
        : sink_(sink), recv_size_(recv_size), joiner_(*this, stall_timeout) {}

    /// A receive of `len` bytes (at most buffer_size()) completed in `r`'s buffer. Returns
    /// true if the reader holds `r` (part 0 of a split message) until sink.release(r); false
    /// if `r` is free again.
    bool received(recv_op* r, std::size_t len);
    /// A whole received message that is not a fragment (done, parcel or batch), header
    /// unchecked.
    void handle_message(std::byte const* p, std::size_t len);
    /// Drops split messages whose other part has not come in time.
    void drop_stale() { joiner_.drop_stale(); }
    void release(recv_op* r) { sink_.release(r); }
    std::size_t buffer_size() const noexcept { return recv_size_; }

private:
    /// A DONE, with the ids after its header (wire.hpp), a message or (`in_batch`) a record of
    /// a coalesced message; a malformed one is logged, dropped.
    void handle_done(wire::header const& h, std::byte const* p, std::size_t len,
                     bool in_batch = false);
    /// A parcel: a message of its own (`whole_message`) or a record of a batch.
    void handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                       bool whole_message);
    void handle_batch(wire::header const& h, std::byte const* p, std::size_t len);
    /// Builds an eager-only parcel's message straight from the receive buffer (one copy of
    /// the index data, no bookkeeping object).
    void deliver_eager(wire::header const& h, std::byte const* p, std::size_t len);

    /// Hands the parcels gathered in batch_ to the sink together (or, if it does not take
    /// them so, one message each), and empties batch_.
    void flush_batch(std::uint32_t source);

    message_sink& sink_;
    std::size_t recv_size_;
    std::vector<std::span<std::byte const>> batch_; // a coalesced message's small parcels
    std::vector<std::span<std::byte const>> dones_; // its DONE records, run after its parcels
    fragment_joiner joiner_;
};

} // namespace courier::parcelport::fabric
