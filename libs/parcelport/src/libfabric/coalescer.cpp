// SPDX-License-Identifier: BSL-1.0
// Coalescing small parcels per destination into batches (coalescer.hpp).
#include "coalescer.hpp"

#include "../eager_writer.hpp"

#include <courier/common/log.hpp>

#include <cstring>
#include <stdexcept>

namespace courier::parcelport::fabric {

coalescer::coalescer(transport_parts const& parts, std::size_t batch_limit, leave_rule leave,
                     std::size_t split_part, std::uint32_t hold_in_flight)
    : parts_(parts), batch_limit_(batch_limit), leave_(leave), split_part_(split_part),
      hold_in_flight_(hold_in_flight) {
    if (leave_.records == 0) {
        throw std::invalid_argument("courier: a coalesced message holds at least one parcel");
    }
    if (hold_in_flight_ == 0) {
        throw std::invalid_argument(
            "courier: parcels are held only while a message to their destination is in flight");
    }
    if (split_part_ != 0 && (split_part_ <= sizeof(wire::header) ||
                             batch_limit_ > 2 * (split_part_ - sizeof(wire::header)))) {
        throw std::invalid_argument("courier: a batch larger than two parts");
    }
}

coalescer::~coalescer() = default;

void coalescer::set_peers(std::size_t n) {
    out_ = std::make_unique<peer_out[]>(n);
    out_size_ = n;
    for (std::size_t i = 0; i < n; ++i) {
        out_[i].lone.dest = static_cast<std::uint32_t>(i);
    }
    // A destination is listed once at most (peer_out::listed), and flush swaps the two lists.
    open_list_.reserve(n);
    flushing_.reserve(n);
}

batch_op* coalescer::batch_with_room(peer_out& po, std::uint32_t dest, std::size_t rec,
                                     batch_op*& full) {
    batch_op* b = po.open.load(std::memory_order_relaxed);
    // A batch that fits one inject (shm) stays one when it holds split_records already: past
    // the inject size it would cost two sends for at most twice the records (512-byte
    // parcels: 0.92-0.94x the rate of closing at the inject size).
    bool const stays_whole = split_part_ != 0 && b != nullptr && b->buf.size() <= split_part_ &&
                             b->buf.size() + rec > split_part_ && b->records >= split_records;
    if (b != nullptr && (stays_whole || b->buf.size() + rec > batch_limit_)) {
        full = close_open(po); // no room: a new batch takes its place below
        b = nullptr;
    }
    if (b == nullptr) {
        b = take_batch(dest);
        if (!po.listed) {
            // No allocation (set_peers reserved a place for every destination): a batch open
            // but not listed would never be flushed, and every later parcel would join it.
            po.listed = true;
            std::lock_guard lg(batch_mutex_);
            open_list_.push_back(dest);
        }
        po.open.store(b, std::memory_order_release);
        open_batches_.fetch_add(1, std::memory_order_acq_rel);
    }
    return b;
}

batch_op* coalescer::take_batch(std::uint32_t dest) {
    batch_op* b = nullptr;
    {
        std::lock_guard g(batch_mutex_);
        if (!free_.empty()) {
            b = free_.back();
            free_.pop_back();
        } else {
            all_.push_back(std::make_unique<batch_op>());
            b = all_.back().get();
        }
    }
    b->dest = dest;
    b->buf.reset(batch_limit_, sizeof(wire::header));
    b->handlers.clear();
    b->counted_tags.clear();
    b->records = 0;
    b->controls = 0;
    b->announcements = 0;
    b->counts = {};
    return b;
}

void coalescer::open_for(std::uint32_t dest) {
    peer_out& po = out_[dest];
    std::lock_guard g(po.m);
    if (po.open.load(std::memory_order_relaxed) == nullptr) {
        batch_op* full = nullptr; // none open, so none closed full: it stays null
        batch_with_room(po, dest, 0, full);
    }
}

bool coalescer::post_open(std::uint32_t dest) {
    peer_out& po = out_[dest];
    if (po.open.load(std::memory_order_acquire) == nullptr) {
        return false;
    }
    batch_op* b = nullptr;
    {
        std::lock_guard g(po.m);
        b = close_open(po); // still listed: flush then finds none open, or a later one
    }
    if (b == nullptr) {
        return false;
    }
    post_batch(b);
    return true;
}

bool coalescer::add_control(std::uint32_t dest, void const* p, std::size_t n) {
    peer_out& po = out_[dest];
    if (po.open.load(std::memory_order_acquire) == nullptr) {
        return false;
    }
    std::size_t const rec = wire::record_size(n);
    std::lock_guard g(po.m);
    batch_op* b = po.open.load(std::memory_order_relaxed);
    if (b == nullptr) {
        return false;
    }
    std::size_t const size = b->buf.size();
    bool const room = size + rec <= batch_limit_ &&
                      (split_part_ == 0 || size > split_part_ || size + rec <= split_part_);
    if (!room) {
        return false;
    }
    std::byte* r = b->buf.extend(rec);
    std::memset(r + rec - 8, 0, 8); // the padding, as try_coalesce
    write_record_prefix(r, n);
    std::memcpy(r + wire::record_prefix, p, n);
    ++b->controls;
    return true;
}

bool coalescer::flush() {
    if (!has_open()) {
        return false;
    }
    // Only the poller flushes: flushing_ is its own, and the swap keeps both lists' capacity,
    // so a flush allocates nothing once warm.
    {
        std::lock_guard g(batch_mutex_);
        flushing_.swap(open_list_);
    }
    for (std::uint32_t d : flushing_) {
        peer_out& po = out_[d];
        batch_op* b = nullptr;
        {
            std::lock_guard g(po.m);
            po.listed = false;
            b = close_open(po);
        }
        if (b != nullptr) {
            post_batch(b);
        }
    }
    flushing_.clear();
    return true;
}

void coalescer::post_batch(batch_op* b, bool rethrow) {
    if (b->records == 0 && b->controls == 0) {
        // Opened by open_for and nothing joined it, or for a record that could not be added
        // (out of memory): nothing to send.
        finish(b, {});
        return;
    }
    wire::header h = parts_.peers.header_of(wire::batch);
    h.chunk_count = static_cast<std::uint32_t>(b->records + b->controls);
    h.index_size = b->buf.size() - sizeof h;
    std::memcpy(b->buf.data(), &h, sizeof h);
    ++parts_.stats.batches_sent;
    parts_.stats.parcels_in_batches += b->records;
    if (b->counts.messages != 0) {
        parts_.stats.messages_sent += b->counts.messages;
        parts_.stats.eager_bytes_sent += b->counts.eager_bytes;
        parts_.stats.bytes_copied_on_send += b->counts.copied_bytes;
    }
    b->split.failed.store(false, std::memory_order_relaxed);
    b->split.left.store(1, std::memory_order_release);
    std::uint32_t dest = b->dest;
    if (parts_.send_by_ring(dest, b->buf.data(), b->buf.size(), b)) {
        return; // whole, through the peer's message ring
    }
    if (split_part_ != 0 && b->buf.size() > split_part_) {
        post_split_batch(b);
        return;
    }
    fi_addr_t to = parts_.peers[dest];
    try {
        parts_.posts.post_or_defer(
            [this, b, to, dest] {
                return parts_.peers.wake(
                    dest, static_cast<long>(fi_send(parts_.ep.ep(), b->buf.data(), b->buf.size(),
                                                    nullptr, to, &b->ctx)));
            },
            "fi_send", refused_later(b));
    } catch (std::exception const& e) {
        if (rethrow) {
            throw;
        }
        // Refused outright: its senders have returned, so they learn it from their handlers.
        static logging::rate_limit limit;
        logging::error_limited(limit, "a coalesced message to locality {} failed: {}", dest,
                               e.what());
        refused(b);
    }
}

void coalescer::post_lone(batch_op* b, transport::sent_handler* on_sent) {
    try {
        post_batch(b, true);
    } catch (...) {
        // As if never posted: post_batch's counts taken back, the record's handler returned
        // to the caller (its only one), the batch no longer in flight.
        --parts_.stats.batches_sent;
        --parts_.stats.lone_batches;
        parts_.stats.parcels_in_batches -= b->records;
        if (b->counts.messages != 0) {
            parts_.stats.messages_sent -= b->counts.messages;
            parts_.stats.eager_bytes_sent -= b->counts.eager_bytes;
            parts_.stats.bytes_copied_on_send -= b->counts.copied_bytes;
        }
        if (on_sent != nullptr && !b->handlers.empty()) {
            *on_sent = std::move(b->handlers.back());
        }
        b->handlers.clear();
        parcels_in_flight_.fetch_sub(b->records, std::memory_order_acq_rel);
        completed(b->dest);
        {
            std::lock_guard g(batch_mutex_);
            free_.push_back(b);
        }
        throw;
    }
}

void coalescer::refused(batch_op* b) {
    // With part 0 of a split batch in flight, part 1's share of the count goes now and
    // whichever comes last (this or part 0's completion) completes the batch, as failed.
    if (b->split.posted == 0) {
        b->split.left.store(1, std::memory_order_release);
    }
    on_completion(b, std::make_error_code(std::errc::io_error));
}

backlog::refused_handler coalescer::refused_later(batch_op* b) {
    // A batch waiting in the backlog is in flight until it completes: `b` lives until then.
    return {[](void* self, std::uint64_t batch, long) {
                static_cast<coalescer*>(self)->refused(
                    reinterpret_cast<batch_op*>(static_cast<std::uintptr_t>(batch)));
            },
            this, reinterpret_cast<std::uintptr_t>(b)};
}

void coalescer::post_split_batch(batch_op* b) {
    // The id only has to differ from those of the other split messages in flight to this
    // destination: a parcel's is its send slot's id, whose low 32 bits (the slot's index) are
    // never all ones.
    std::size_t const n = b->buf.size();
    b->split.prepare(parts_.peers.header_of(wire::fragment),
                     std::uint64_t{split_batches_.fetch_add(1, std::memory_order_relaxed)} << 32 |
                         0xffffffffu,
                     n);
    ++parts_.stats.split_sends;
    std::uint32_t dest = b->dest;
    fi_addr_t to = parts_.peers[dest];
    try {
        parts_.posts.post_or_defer(
            [this, b, to, dest, n] {
                // Once part 1 is posted, `b` may complete and be reused at any moment.
                return parts_.peers.wake(dest, b->split.post(parts_.ep.ep(), to, b->buf.data(), n,
                                                             split_part_ - sizeof(wire::header),
                                                             &b->ctx));
            },
            "fi_sendv", refused_later(b));
    } catch (std::exception const& e) {
        logging::error("a coalesced message to locality {} failed: {}", dest, e.what());
        refused(b);
    }
}

void coalescer::on_completion(batch_op* b, std::error_code ec) {
    if (ec) {
        b->split.failed.store(true, std::memory_order_relaxed);
    }
    if (!b->split.last_part()) {
        return; // the other part completes the batch
    }
    finish(b, b->split.failed.load(std::memory_order_relaxed)
                  ? (ec ? ec : std::make_error_code(std::errc::io_error))
                  : std::error_code{});
}

void coalescer::finish(batch_op* b, std::error_code ec) {
    for (auto& h : b->handlers) { // eager-only parcels, and announcements (sender::on_announced)
        if (h) {
            h(ec);
        }
    }
    // The records without a handler: counted sends (transport::send_counted refuses them
    // while no counted handler is set).
    if (std::size_t const counted = b->records - b->handlers.size(); counted != 0) {
        if (ec && counted_failed_ != nullptr && *counted_failed_) {
            for (std::uint64_t tag : b->counted_tags) {
                (*counted_failed_)(tag);
            }
        }
        (*counted_)(counted, ec);
    }
    parcels_in_flight_.fetch_sub(b->records, std::memory_order_acq_rel);
    completed(b->dest);
    b->handlers.clear(); // what the handlers captured goes now; the capacity stays
    std::lock_guard g(batch_mutex_);
    free_.push_back(b);
}

void coalescer::on_ring_lone(ring_lone_op* o) {
    peer_out& po = out_[o->dest];
    // Taken to 0 first: a record written from now on lists `lone` again (send_lone_by_ring).
    std::uint32_t const n = po.lone_pending.exchange(0, std::memory_order_acq_rel);
    if (n == 0) {
        return;
    }
    // No longer in flight first, so that a handler that throws leaves no count behind.
    parcels_in_flight_.fetch_sub(n, std::memory_order_acq_rel);
    po.in_flight.fetch_sub(n, std::memory_order_acq_rel);
    (*counted_)(n, {}); // a record in a ring has arrived as far as the sender can tell
}

void coalescer::add_ring_lone_stats(statistics& s) const noexcept {
    for (std::size_t i = 0; i < out_size_; ++i) {
        peer_out const& po = out_[i];
        std::uint64_t const n = po.lone_sent.load(std::memory_order_relaxed);
        s.batches_sent += n;
        s.lone_batches += n;
        s.ring_lone_writes += n;
        s.parcels_in_batches += n;
        s.messages_sent += po.lone_counts.messages.load(std::memory_order_relaxed);
        s.eager_bytes_sent += po.lone_counts.eager_bytes.load(std::memory_order_relaxed);
        s.bytes_copied_on_send += po.lone_counts.copied_bytes.load(std::memory_order_relaxed);
    }
}

} // namespace courier::parcelport::fabric
