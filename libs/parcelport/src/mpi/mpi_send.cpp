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
    post(std::move(out), g);
}

void mpi_transport::post(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g) {
    int tag = 0;
    if (out->has_data) {
        tag = first_data_tag + static_cast<int>(next_tag_[out->dest]++ % data_tags_);
    }
    std::uint64_t id = static_cast<std::uint64_t>(tag);
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
    thread_local std::vector<MPI_Request> reqs;
    reqs.clear();
    outgoing* o = out.release();
    if (multiple_) {
        g.unlock();
    }
    int rc = isend(*o, tag, reqs);
    if (bell_ && rc == MPI_SUCCESS && bell_->ring(o->dest)) {
        ++rings_;
    }
    if (multiple_) {
        g.lock();
    }
    o->pending = reqs.size();
    for (auto r : reqs) {
        reqs_.push_back(r);
        owners_.push_back({req_kind::send, 0, o});
    }
    if (rc != MPI_SUCCESS) {
        o->error = rc;
        if (o->pending == 0) {
            --sends_in_flight_;
            --in_flight_to_[o->dest];
            sent_.emplace_back(o);
        }
    }
}

int mpi_transport::isend(outgoing& out, int tag, std::vector<MPI_Request>& reqs) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Isend(out.eager.get(), static_cast<int>(out.eager_size), MPI_BYTE, out.mpi_dest,
                       header_tag, comm_, &r);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    reqs.push_back(r);
    auto send_bytes = [&](std::byte const* p, std::size_t n) {
        for (std::size_t done = 0; done < n; done += piece_) {
            int count = static_cast<int>(std::min(piece_, n - done));
            MPI_Request q = MPI_REQUEST_NULL;
            int e = MPI_Isend(p + done, count, MPI_BYTE, out.mpi_dest, tag, comm_, &q);
            if (e != MPI_SUCCESS) {
                return e;
            }
            reqs.push_back(q);
        }
        return MPI_SUCCESS;
    };
    for (auto const& c : out.msg.chunks()) {
        if (c.type != chunk_type::index && c.size != 0) {
            if ((rc = send_bytes(c.address, c.size)) != MPI_SUCCESS) {
                return rc;
            }
        }
    }
    if (!out.index_inline) {
        auto data = out.msg.data();
        rc = send_bytes(data.data(), data.size());
    }
    return rc;
}

} // namespace courier::parcelport::mpi_pp
