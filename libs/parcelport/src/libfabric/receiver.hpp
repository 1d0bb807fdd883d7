// SPDX-License-Identifier: BSL-1.0
// The receive path: the pre-posted receive buffers, and every received message taken apart by
// kind (DONE, parcel, batch, fragment). An eager-only parcel is delivered from its receive
// buffer; one with chunks to read goes to the rendezvous.
#pragma once

#include "context.hpp"
#include "fragments.hpp"

#include <memory>
#include <vector>

namespace courier::parcelport::fabric {

class sender;
class rendezvous;
class memory;

struct recv_op : op {
    std::unique_ptr<std::byte[]> buf;
    fid_mr* mr = nullptr; // FI_MR_LOCAL providers
    recv_op() : op(kind::recv) {}
};

/// Thread safety: on_completion and handle_message from the poller only.
class receiver {
public:
    receiver(transport_parts const& parts, memory& mem, sender& s, rendezvous& rv,
             transport::receive_handler& on_receive, transport_options const& o,
             std::size_t recv_size);
    ~receiver();
    receiver(receiver const&) = delete;
    receiver& operator=(receiver const&) = delete;

    /// Posts `n` receive buffers (opening the transport).
    void post_buffers(std::size_t n);
    /// A receive completed with `len` bytes in `r`'s buffer.
    void on_completion(recv_op* r, std::size_t len);
    /// Drops split messages whose other part has not come in time (every few passes).
    void housekeeping() { joiner_.drop_stale(); }
    /// A received message that is not a fragment (done, parcel or batch), header unchecked:
    /// anything malformed is logged and dropped.
    void handle_message(std::byte const* p, std::size_t len);
    void repost(recv_op* r);
    std::size_t buffer_size() const noexcept { return recv_size_; }

private:
    /// Delivers an eager-only parcel, or hands one with chunks to read to the rendezvous;
    /// logs and drops a malformed one.
    void handle_parcel(wire::header const& h, std::byte const* p, std::size_t len);
    /// Every parcel of a coalesced message (wire::batch); a malformed record ends it.
    void handle_batch(wire::header const& h, std::byte const* p, std::size_t len);
    /// An eager-only parcel: the message is built straight from the receive buffer (one copy of
    /// the index data, no bookkeeping object).
    void deliver_eager(wire::header const& h, std::byte const* p, std::size_t len);

    transport_parts parts_;
    memory& memory_;
    sender& sender_;
    rendezvous& rendezvous_;
    transport::receive_handler& on_receive_;
    std::size_t recv_size_;
    std::vector<std::unique_ptr<recv_op>> recvs_;
    fragment_joiner joiner_;
};

} // namespace courier::parcelport::fabric
