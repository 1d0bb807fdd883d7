// SPDX-License-Identifier: BSL-1.0
// Received eager messages taken apart by kind (eager_reader.hpp).
#include "eager_reader.hpp"

#include "rendezvous.hpp"

#include "../batch_reader.hpp"

#include <courier/common/log.hpp>
#include <courier/serialization/error.hpp>

#include <cstring>
#include <string>

namespace courier::parcelport::fabric {

bool eager_reader::received(recv_op* r, std::size_t len) {
    std::byte const* p = r->buf.get();
    if (len >= sizeof(wire::header) &&
        std::to_integer<std::uint8_t>(p[offsetof(wire::header, kind)]) == wire::fragment) {
        wire::header h;
        std::memcpy(&h, p, sizeof h);
        if (sink_.header_ok(h)) {
            return joiner_.add(r, h, len); // true: a part 0, held until its message is whole
        }
    }
    handle_message(p, len); // checks the header (and logs a fragment with a bad one)
    return false;
}

void eager_reader::handle_message(std::byte const* p, std::size_t len) {
    wire::header h;
    bool ok = len >= sizeof h;
    if (ok) {
        std::memcpy(&h, p, sizeof h);
        ok = sink_.header_ok(h);
    }
    if (!ok) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a message with a bad header or job token ({} bytes)",
                               len);
    } else if (h.kind == wire::done) {
        handle_done(h, p, len);
    } else if (h.kind == wire::parcel) {
        handle_parcel(h, p, len, true);
    } else if (h.kind == wire::batch) {
        handle_batch(h, p, len);
    } else {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a message of unknown kind {} from locality {}",
                               static_cast<unsigned>(h.kind), h.source);
    }
}

void eager_reader::handle_done(wire::header const& h, std::byte const* p, std::size_t len,
                               bool in_batch) {
    std::size_t const more = h.chunk_count;
    if (more >= wire::max_done_ids || len != sizeof h + more * sizeof(std::uint64_t)) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a DONE{} from locality {}: {} more ids in {} bytes",
                               in_batch ? " in a coalesced message" : "", h.source, more, len);
        return;
    }
    sink_.done(h.send_id);
    for (std::size_t i = 0; i < more; ++i) {
        std::uint64_t id;
        std::memcpy(&id, p + sizeof h + i * sizeof id, sizeof id);
        sink_.done(id);
    }
}

void eager_reader::handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                                 bool whole_message) {
    try {
        if ((h.flags & wire::pushed) != 0) {
            // Its chunks' descriptors are offsets into a tagged message (pushed.hpp): never
            // read, never in an untagged one.
            throw serialization::serialization_error("a pushed parcel outside a pushed receive");
        }
        std::size_t rma = rendezvous_bytes(h, p, len);
        bool eager_only = (h.flags & wire::index_inline) != 0 &&
                          (h.flags & wire::descriptors_remote) == 0 && rma == 0;
        if (eager_only) {
            // Quiet only as a message of its own: one that starts reads, or a record of a
            // batch (whose other records are work), is work whatever its flags say.
            if (whole_message && (h.flags & wire::quiet) != 0) {
                sink_.quiet_parcel();
            }
            deliver_eager(h, p, len);
        } else {
            sink_.rendezvous_parcel(h, p, len, rma);
        }
    } catch (std::exception const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", h.source,
                               e.what());
    }
}

void eager_reader::deliver_eager(wire::header const& h, std::byte const* p, std::size_t len) {
    std::size_t fixed = sizeof h + std::size_t{h.chunk_count} * sizeof(wire::descriptor);
    if (h.chunk_count > recv_size_ || fixed > len || h.index_size > len - fixed) {
        throw serialization::serialization_error("eager message sizes are inconsistent");
    }
    if (h.chunk_count == 1) { // a small parcel: its index is its whole stream (no chunk list)
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h, sizeof d);
        if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index) &&
            d.size == h.index_size) {
            // As a batch of one where the runtime takes batches: a reply is then read where
            // it lies, with no message built (a request still gets one).
            std::span<std::byte const> const stream{p + fixed, h.index_size};
            if (!sink_.eager_batch(h.source, {&stream, 1})) {
                sink_.eager_parcel(h.source, serialization::message::from_bytes(stream));
            }
            return;
        }
    }
    auto chunks = serialization::message::chunk_list();
    chunks.reserve(h.chunk_count);
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h + i * sizeof d, sizeof d);
        if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            chunks.push_back({serialization::chunk_type::index, d.size, offset, nullptr, 0});
            offset += d.size;
        } else if (d.size == 0 &&
                   (d.type == static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
                    d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma))) {
            chunks.push_back({static_cast<serialization::chunk_type>(d.type), 0, 0, nullptr, 0});
        } else {
            throw serialization::serialization_error(
                "bad chunk descriptor (type " + std::to_string(d.type) + ", " +
                std::to_string(d.size) + " bytes) in an eager-only parcel");
        }
    }
    if (offset != h.index_size) {
        throw serialization::serialization_error("index chunks do not add up to the index size");
    }
    sink_.eager_parcel(
        h.source, serialization::message::from_parts({p + fixed, h.index_size}, std::move(chunks)));
}

namespace {
/// The stream of a record that is an eager-only parcel of one index chunk (what deliver_eager
/// hands over as a batch of one, or builds a message of with from_bytes); empty for any other.
std::span<std::byte const> small_stream(wire::header const& h, std::byte const* p,
                                        std::size_t len) noexcept {
    constexpr std::size_t fixed = sizeof h + sizeof(wire::descriptor);
    if ((h.flags & wire::index_inline) == 0 || (h.flags & wire::descriptors_remote) != 0 ||
        h.chunk_count != 1 || fixed > len || h.index_size > len - fixed || h.index_size == 0) {
        return {};
    }
    wire::descriptor d;
    std::memcpy(&d, p + sizeof h, sizeof d);
    if (d.type != static_cast<std::uint8_t>(serialization::chunk_type::index) ||
        d.size != h.index_size) {
        return {};
    }
    return {p + fixed, h.index_size};
}
} // namespace

void eager_reader::flush_batch(std::uint32_t source) {
    if (batch_.empty()) {
        return;
    }
    if (!sink_.eager_batch(source, batch_)) {
        for (auto s : batch_) {
            try {
                sink_.eager_parcel(source, serialization::message::from_bytes(s));
            } catch (std::exception const& e) {
                static logging::rate_limit limit;
                logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}",
                                       source, e.what());
            }
        }
    }
    batch_.clear();
}

void eager_reader::handle_batch(wire::header const& h, std::byte const* p, std::size_t len) {
    batch_.clear();
    dones_.clear();
    try {
        for_each_record(
            h, p, len, [&](std::byte const* r, std::size_t rl, std::uint32_t n, bool compact) {
                if (compact) {
                    batch_.push_back({r, rl}); // a parcel's stream: checked where it is read
                    return;
                }
                wire::header ih;
                std::memcpy(&ih, r, sizeof ih);
                bool const ours = sink_.header_ok(ih) && ih.source == h.source;
                if (ours && ih.kind == wire::done) {
                    dones_.push_back({r, rl}); // DONEs that rode with the batch (add_control)
                } else if (!ours || ih.kind != wire::parcel) {
                    static logging::rate_limit limit;
                    logging::error_limited(
                        limit,
                        "dropped parcel {} of a coalesced message from locality {}: bad header", n,
                        h.source);
                } else if (auto s = small_stream(ih, r, rl); !s.empty()) {
                    batch_.push_back(s);
                } else {
                    flush_batch(h.source); // in order: the small parcels before it go first
                    handle_parcel(ih, r, rl, false);
                }
            });
        flush_batch(h.source);
    } catch (std::exception const& e) { // from the sink (out of memory, the runtime stopping)
        batch_.clear();
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped parcels of a coalesced message from locality {}: {}",
                               h.source, e.what());
    }
    // After the parcels, outside the catch: a DONE's handlers (the sends it completes) throw
    // as they would for a DONE message, and drop no parcel.
    for (auto d : dones_) {
        wire::header dh;
        std::memcpy(&dh, d.data(), sizeof dh);
        handle_done(dh, d.data(), d.size(), true);
    }
    dones_.clear();
}

} // namespace courier::parcelport::fabric
