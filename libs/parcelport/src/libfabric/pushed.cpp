// SPDX-License-Identifier: BSL-1.0
// The receiving side of pushed parcels (pushed.hpp): receives posted per size class, and a
// parcel taken apart where it landed.
#include "receiver.hpp"

#include "memory.hpp"

#include "../received_parts.hpp"

#include <courier/common/log.hpp>
#include <courier/serialization/error.hpp>

#include <rdma/fi_tagged.h>

#include <cstring>
#include <string>

namespace courier::parcelport::fabric {

void receiver::post_push_buffers(push_classes c) {
    opening_step("posting receives of pushed parcels");
    for (unsigned cls = 0; cls < c.count; ++cls) {
        for (std::size_t i = 0; i < push_classes::per_class; ++i) {
            auto r = std::make_unique<push_op>();
            r->cls = cls;
            // Not touched here (6 MiB of pool buffers on net's defaults): the first parcels of a
            // class pay the first touch of their pages, later ones land in reused buffers.
            r->buf = memory_.receive_buffer(push_classes::capacity(cls), false);
            pushes_.push_back(std::move(r));
            repost_push(pushes_.back().get());
        }
    }
}

void receiver::repost_push(push_op* r) {
    post_receive(
        r,
        [this, r] {
            return static_cast<long>(
                fi_trecv(parts_.ep.ep(), r->buf.get(), push_classes::capacity(r->cls), nullptr,
                         FI_ADDR_UNSPEC, push_classes::tag(r->cls), 0, &r->ctx));
        },
        "fi_trecv");
}

void receiver::on_pushed(push_op* r, std::size_t len) {
    parts_.peers.push_landed(); // against its sender's push notice (the network doorbell)
    std::shared_ptr<std::byte[]> landed = std::move(r->buf);
    std::string refused;
    try {
        r->buf = memory_.receive_buffer(push_classes::capacity(r->cls), false);
    } catch (std::bad_alloc const&) {
        // No fresh buffer: the parcel is delivered without its chunks (its call fails with the
        // reason) and this buffer is posted again.
        refused = no_memory_to_receive(push_classes::capacity(r->cls), "receive buffer");
        r->buf = landed;
    }
    try {
        deliver_pushed(landed, len, std::move(refused));
    } catch (serialization::serialization_error const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed pushed parcel ({} bytes): {}", len,
                               e.what());
    } catch (std::exception const& e) { // out of memory, the runtime stopping
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a pushed parcel ({} bytes): {}", len, e.what());
    }
    landed.reset();
    // After the parcel, as the other receives: a failure here is the transport's (progress()
    // throws it); a post refused for good is posted again by housekeeping.
    repost_push(r);
}

void receiver::deliver_pushed(std::shared_ptr<std::byte[]> const& buf, std::size_t len,
                              std::string refused) {
    using serialization::serialization_error;
    std::byte const* p = buf.get();
    wire::header h;
    if (len < sizeof h) {
        throw serialization_error("shorter than a header");
    }
    std::memcpy(&h, p, sizeof h);
    if (!parts_.peers.header_ok(h) || h.kind != wire::parcel ||
        (h.flags & (wire::pushed | wire::index_inline | wire::descriptors_remote)) !=
            (wire::pushed | wire::index_inline)) {
        throw serialization_error("not a pushed parcel of this job");
    }
    std::size_t const room = (len - sizeof h) / sizeof(wire::descriptor);
    if (h.chunk_count > room) {
        throw serialization_error(std::to_string(h.chunk_count) + " chunks in " +
                                  std::to_string(len) + " bytes");
    }
    std::size_t const fixed = sizeof h + std::size_t{h.chunk_count} * sizeof(wire::descriptor);
    if (h.index_size > len - fixed) {
        throw serialization_error("an index of " + std::to_string(h.index_size) + " bytes in " +
                                  std::to_string(len - fixed));
    }
    push_ds_.resize(h.chunk_count);
    if (h.chunk_count != 0) {
        std::memcpy(push_ds_.data(), p + sizeof h, h.chunk_count * sizeof(wire::descriptor));
    }
    check_descriptors(h, push_ds_, true);
    // Each chunk's bytes where its descriptor says: after the index, aligned, in order, within
    // the message; pointer chunks only (an rma chunk lands in the rma pool: it is read).
    std::uint64_t end = fixed + h.index_size, chunk_bytes = 0;
    for (auto const& d : push_ds_) {
        if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index) || d.size == 0) {
            continue;
        }
        if (d.type != static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
            d.address % wire::pushed_align != 0 || d.address < end || d.address > len ||
            d.size > len - d.address) {
            throw serialization_error("a chunk of " + std::to_string(d.size) + " bytes at " +
                                      std::to_string(d.address) + " in " + std::to_string(len) +
                                      " bytes (type " + std::to_string(d.type) + ")");
        }
        end = d.address + d.size;
        chunk_bytes += d.size;
    }
    auto m = serialization::message::with_index_buffer(static_cast<std::size_t>(h.index_size));
    if (h.index_size != 0) {
        std::memcpy(m.index_buffer(), p + fixed, static_cast<std::size_t>(h.index_size));
    }
    auto chunks = serialization::message::chunk_list();
    auto& owners = push_owners_; // kept with its capacity: no allocation per parcel
    struct clear_owners {
        std::vector<std::shared_ptr<std::byte[]>>& o;
        ~clear_owners() { o.clear(); } // holds no slice of the buffer past this parcel
    } clear{owners};
    auto slice = [&](std::size_t, bool, std::uint64_t at) {
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): the parcel owns it now
        return std::shared_ptr<std::byte[]>(buf, const_cast<std::byte*>(p) + at);
    };
    if (refused.empty()) {
        received_chunks_or_refused(h, push_ds_, slice, max_parcel_bytes_, chunks, owners, refused);
    } else {
        auto none = [](std::size_t, bool, std::uint64_t) { return std::shared_ptr<std::byte[]>(); };
        received_chunks(h, push_ds_, none, chunks, owners);
    }
    parts_.stats.refused_parcels += !refused.empty();
    auto received = assemble_received(std::move(m), std::move(chunks), owners, h.source, refused);
    if (!received) {
        return;
    }
    ++parts_.stats.pushed_receives;
    ++parts_.stats.messages_received;
    if (refused.empty()) {
        parts_.stats.pushed_bytes_received += chunk_bytes;
    }
    if (on_receive_) {
        on_receive_(h.source, std::move(*received));
    }
}

} // namespace courier::parcelport::fabric
