// SPDX-License-Identifier: BSL-1.0
// The receive path (receiver.hpp): posted buffers, messages by kind, eager-only parcels.
#include "receiver.hpp"

#include "rendezvous.hpp"
#include "sender.hpp"

#include <courier/common/log.hpp>

#include <cstddef>
#include <cstring>

namespace courier::parcelport::fabric {

receiver::receiver(transport_parts const& parts, memory& mem, sender& s, rendezvous& rv,
                   transport::receive_handler& on_receive, transport::batch_handler& on_batch,
                   transport_options const& o, std::size_t recv_size)
    : parts_(parts), memory_(mem), sender_(s), rendezvous_(rv), on_receive_(on_receive),
      on_batch_(on_batch), recv_size_(recv_size), max_parcel_bytes_(o.max_parcel_bytes),
      reader_(*this, recv_size, o.read_stall_timeout) {}

receiver::~receiver() {
    for (auto& r : recvs_) {
        if (r->mr != nullptr) {
            fi_close(&r->mr->fid);
        }
    }
}

void receiver::post_buffers(std::size_t n) {
    opening_step("posting receives");
    for (std::size_t i = 0; i < n; ++i) {
        auto r = std::make_unique<recv_op>();
        // Zeroed, so that its pages are touched now: the provider fills posted buffers in the
        // order they were posted, and each of the first n messages would otherwise pay the first
        // touch of its buffer's pages (tcp's are 97 KiB; a first write cost 14-18 us a page on
        // a guest with shadow paging, far less with hardware paging). OSU's first pass on tcp
        // at 16 / 64 KiB took twice its steady-state latency (benchmarks/RESULTS.md, "First
        // touch of memory").
        r->buf.reset(new std::byte[recv_size_]());
        if (parts_.ep.mr_local()) {
            r->mr = memory_.register_local(r->buf.get(), recv_size_, FI_RECV);
        }
        recvs_.push_back(std::move(r));
        repost(recvs_.back().get());
        if (i == 0) {
            opening_step("posting the other receives"); // a failure with one posted already
        }
    }
}

void receiver::repost(recv_op* r) {
    post_receive(
        r,
        [this, r] {
            return static_cast<long>(fi_recv(parts_.ep.ep(), r->buf.get(), recv_size_,
                                             r->mr != nullptr ? fi_mr_desc(r->mr) : nullptr,
                                             FI_ADDR_UNSPEC, &r->ctx));
        },
        "fi_recv");
}

void receiver::on_completion(recv_op* r, std::size_t len) {
    if (!reader_.received(r, len)) {
        repost(r);
    } // else a part 0, held until its message is whole
}

void receiver::on_ring_message(std::uint32_t source, std::byte const* p, std::size_t len) {
    // A ring carries whole messages of its writer only (never a fragment): one naming another
    // source, or a fragment, is not what this code writes.
    std::uint32_t claimed = 0;
    std::uint8_t kind = 0;
    if (len >= sizeof(wire::header)) {
        std::memcpy(&claimed, p + offsetof(wire::header, source), sizeof claimed);
        kind = std::to_integer<std::uint8_t>(p[offsetof(wire::header, kind)]);
    }
    if (len < sizeof(wire::header) || claimed != source || kind == wire::fragment) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "dropped a message from the ring of locality {}: {} bytes, "
                               "source {}, kind {}",
                               source, len, claimed, static_cast<unsigned>(kind));
        return;
    }
    reader_.handle_message(p, len);
}

bool receiver::header_ok(wire::header const& h) const {
    return parts_.peers.header_ok(h);
}

void receiver::done(std::uint64_t id) {
    sender_.on_done(id);
}

void receiver::eager_parcel(std::uint32_t source, serialization::message&& m) {
    ++parts_.stats.messages_received;
    if (on_receive_) {
        on_receive_(source, std::move(m));
    }
}

bool receiver::eager_batch(std::uint32_t source,
                           std::span<std::span<std::byte const> const> parcels) {
    if (!on_batch_) {
        return false;
    }
    parts_.stats.messages_received += parcels.size();
    on_batch_(source, parcels);
    return true;
}

void receiver::rendezvous_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                                 std::size_t rma_bytes) {
    rendezvous_.admit(h, p, len, rma_bytes);
}

void receiver::release(recv_op* r) {
    repost(r);
}

} // namespace courier::parcelport::fabric
