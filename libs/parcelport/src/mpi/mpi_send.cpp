// SPDX-License-Identifier: BSL-1.0
// The MPI transport's send side (mpi_transport.hpp): header messages, batches, posting a message's
// MPI_Isends.
#include "mpi_transport.hpp"

namespace courier::parcelport::mpi_pp {

eager_layout mpi_transport::layout(serialization::message const& m) const {
    // Room for every descriptor and an index of up to the eager threshold (at least one
    // descriptor: the constructor), so never a remote descriptor table; a larger index is
    // received as data (its own descriptor).
    return layout_eager(m, sizeof(wire::header) + m.chunks().size() * sizeof(wire::descriptor) +
                               opts_.eager_threshold);
}

void mpi_transport::write_header_message(serialization::message const& m, eager_layout const& l,
                                         std::byte* to) const {
    // Chunks travel as MPI messages of their own, never read remotely: no key, and for an
    // address only the chunk's offset within its cache line, at which the receiver lands it
    // (receive_buffer_pool: the single copy of MPI's shared memory is faster between equal
    // offsets).
    auto not_exposed = [](void const* p, std::size_t) {
        return std::pair<std::uint64_t, std::uint64_t>{
            reinterpret_cast<std::uintptr_t>(p) % receive_buffer_pool::line, 0};
    };
    write_eager_into(m, wire::make_header(wire::parcel, job_token_, my_rank_), l, not_exposed, to,
                     nullptr);
}

void mpi_transport::build_eager(outgoing& out) {
    eager_layout const l = layout(out.msg);
    out.index_inline = l.inline_index;
    out.has_data = !l.eager_only;
    out.eager = pooled_bytes(l.eager_size);
    out.eager_size = l.eager_size;
    write_header_message(out.msg, l, out.eager.get());
}

void mpi_transport::post_batch(std::uint32_t dest, std::unique_lock<std::mutex>& g) {
    auto& b = batches_[dest];
    auto out = std::make_unique<outgoing>();
    out->dest = dest;
    out->mpi_dest = peers_[dest];
    out->handlers = std::move(b.handlers);
    wire::header h = wire::make_header(wire::batch, job_token_, my_rank_);
    h.chunk_count = static_cast<std::uint32_t>(out->handlers.size());
    h.index_size = b.size - sizeof h;
    std::memcpy(b.bytes.get(), &h, sizeof h);
    out->eager = std::move(b.bytes);
    out->eager_size = b.size;
    b = open_batch{};
    --batches_open_;
    ++stats_.batches_sent;
    stats_.parcels_in_batches += out->handlers.size();
    if (sends_in_flight_ >= max_sends_in_flight || !backlog_.empty()) {
        backlog_.push_back(std::move(out));
        return;
    }
    post(std::move(out), g); // a batch has no data: never held back
}

bool mpi_transport::pick_tag(outgoing& out) noexcept {
    for (std::uint32_t i = 0; i < data_tags_; ++i) {
        int const tag = first_data_tag + static_cast<int>(next_tag_[out.dest]++ % data_tags_);
        if (std::find(posting_tags_.begin(), posting_tags_.end(), std::pair{out.dest, tag}) ==
            posting_tags_.end()) {
            try {
                room_for_one(posting_tags_);
            } catch (std::exception const&) {
                return false;
            }
            out.tag = tag;
            out.holds_tag = true;
            posting_tags_.emplace_back(out.dest, tag);
            return true;
        }
    }
    return false;
}

void mpi_transport::drop_posting_tag(outgoing& out) noexcept {
    if (!out.holds_tag) {
        return;
    }
    out.holds_tag = false;
    if (out.cut) {
        // Stopped with data messages unposted: the receiver has a receive posted for the
        // next one, which a later message's data with this tag would fill. The tag stays
        // held: never used to this destination again.
        return;
    }
    auto it = std::find(posting_tags_.begin(), posting_tags_.end(), std::pair{out.dest, out.tag});
    if (it != posting_tags_.end()) {
        *it = posting_tags_.back();
        posting_tags_.pop_back();
    }
}

bool mpi_transport::post(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g) {
    if (out->has_data && !pick_tag(*out)) {
        backlog_.push_front(std::move(out)); // once an earlier message frees a tag
        return false;
    }
    std::uint64_t id = static_cast<std::uint64_t>(out->tag);
    std::memcpy(out->eager.get() + offsetof(wire::header, send_id), &id, sizeof id);
    ++sends_in_flight_;
    ++in_flight_to_[out->dest];
    ++stats_.messages_sent;
    stats_.eager_bytes_sent += out->eager_size;
    stats_.rendezvous_sends += out->has_data;
    if (out->index_inline) {
        stats_.bytes_copied_on_send += out->msg.data().size();
    }
    for (auto const& c : out->msg.chunks()) {
        // rma chunks (pool memory) travel as they are, like every chunk here: MPI
        // registers, if it must, by itself.
        stats_.pool_chunks_sent += c.type == chunk_type::rma && c.size != 0;
    }
    thread_local std::vector<posted_send> reqs;
    reqs.clear();
    outgoing* o = out.release();
    if (multiple_) {
        g.unlock();
    }
    int rc = isend(*o, reqs);
    if (bell_ && rc == MPI_SUCCESS && bell_->ring(o->dest)) {
        ++rings_;
    }
    if (multiple_) {
        g.lock();
    }
    add_sends(*o, reqs);
    if (o->unposted().empty()) {
        drop_posting_tag(*o);
    }
    if (rc != MPI_SUCCESS) {
        o->error = rc;
        if (o->pending == 0) {
            --sends_in_flight_;
            --in_flight_to_[o->dest];
            sent_.emplace_back(o);
        }
    }
    return true;
}

void mpi_transport::add_sends(outgoing& out, std::vector<posted_send> const& reqs) noexcept {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        try {
            room_for_one(reqs_);
            room_for_one(owners_);
        } catch (std::exception const&) {
            // Requests MPI holds but this transport cannot track: the message never
            // completes, so its buffers stay for MPI, and its sender is never told.
            out.pending += reqs.size() - i;
            out.stop_posting();
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "MPI: out of memory recording a send to locality {}: "
                                   "it never completes",
                                   out.dest);
            return;
        }
        reqs_.push_back(reqs[i].req);
        owners_.push_back({req_kind::send, reqs[i].count, &out});
        ++out.pending;
    }
}

int mpi_transport::isend(outgoing& out, std::vector<posted_send>& reqs) noexcept {
    if (!reserve_one(out, reqs)) {
        return MPI_ERR_NO_MEM;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Isend(out.eager.get(), static_cast<int>(out.eager_size), MPI_BYTE, out.mpi_dest,
                       header_tag, comm_, &r);
    if (rc != MPI_SUCCESS) {
        out.stop_posting();
        return rc;
    }
    reqs.push_back({r, 0});
    return post_data(out, reqs);
}

std::span<std::byte const> outgoing::unposted() {
    auto const& cs = msg.chunks();
    for (; seg <= cs.size(); ++seg, seg_off = 0) {
        std::span<std::byte const> s;
        if (seg < cs.size()) {
            if (cs[seg].type == chunk_type::index) {
                continue;
            }
            s = {cs[seg].address, cs[seg].size};
        } else if (!index_inline) {
            s = msg.data();
        }
        if (seg_off < s.size()) {
            return s.subspan(seg_off);
        }
    }
    return {};
}

bool mpi_transport::reserve_one(outgoing& out, std::vector<posted_send>& reqs) noexcept {
    try {
        room_for_one(reqs);
        return true;
    } catch (std::exception const&) {
        out.stop_posting();
        return false;
    }
}

int mpi_transport::post_data(outgoing& out, std::vector<posted_send>& reqs) noexcept {
    for (auto rest = out.unposted(); !rest.empty(); rest = out.unposted()) {
        std::size_t const n = std::min(piece_, rest.size());
        if (out.posted_bytes != 0 && out.posted_bytes + n > send_window * piece_) {
            return MPI_SUCCESS; // the rest as these complete
        }
        if (!reserve_one(out, reqs)) { // room before MPI holds a request
            return MPI_ERR_NO_MEM;
        }
        MPI_Request q = MPI_REQUEST_NULL;
        int rc =
            MPI_Isend(rest.data(), static_cast<int>(n), MPI_BYTE, out.mpi_dest, out.tag, comm_, &q);
        if (rc != MPI_SUCCESS) {
            out.stop_posting();
            return rc;
        }
        reqs.push_back({q, static_cast<int>(n)});
        out.seg_off += n;
        out.posted_bytes += n;
    }
    return MPI_SUCCESS;
}

} // namespace courier::parcelport::mpi_pp
