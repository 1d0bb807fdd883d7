// SPDX-License-Identifier: BSL-1.0
// The MPI transport's receive side (mpi_transport.hpp): completions, probing headers, checking
// them, posting chunk receives, deferral under the receive budget, delivery.
#include "mpi_transport.hpp"

namespace courier::parcelport::mpi_pp {

bool mpi_transport::test_requests() {
    if (reqs_.empty()) {
        return false;
    }
    int n = static_cast<int>(reqs_.size());
    indices_.resize(reqs_.size());
    statuses_.resize(reqs_.size());
    int done = 0;
    int rc = MPI_Testsome(n, reqs_.data(), &done, indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "MPI: MPI_Testsome failed: {}", mpi_error_string(rc));
        return false;
    }
    if (done == MPI_UNDEFINED || done == 0) {
        return false;
    }
    for (int k = 0; k < done; ++k) {
        int i = indices_[static_cast<std::size_t>(k)];
        int err = rc == MPI_ERR_IN_STATUS ? statuses_[static_cast<std::size_t>(k)].MPI_ERROR
                                          : MPI_SUCCESS;
        completed(owners_[static_cast<std::size_t>(i)], err,
                  statuses_[static_cast<std::size_t>(k)]);
    }
    // Completed requests are MPI_REQUEST_NULL now: keep the others, in order.
    std::size_t w = 0;
    for (std::size_t r = 0; r < reqs_.size(); ++r) {
        if (reqs_[r] != MPI_REQUEST_NULL) {
            reqs_[w] = reqs_[r];
            owners_[w] = owners_[r];
            ++w;
        }
    }
    reqs_.resize(w);
    owners_.resize(w);
    return true;
}

void mpi_transport::completed(req_owner o, int err, MPI_Status const& st) {
    switch (o.kind) {
    case req_kind::send: {
        auto* out = static_cast<outgoing*>(o.p);
        if (err != MPI_SUCCESS && out->error == MPI_SUCCESS) {
            out->error = err;
        }
        --out->pending;
        out->posted_bytes -= static_cast<std::size_t>(o.expected);
        if (err == MPI_SUCCESS && o.expected >= heard_send_min) {
            // A message this large goes by rendezvous in every MPI (eager limits are at most
            // tens of KiB): its send completed once the receiver matched and took it, which
            // says that peer is alive as well as a heartbeat does. A receiver busy copying a
            // 2 GiB parcel's pieces may have its heartbeats wait behind that work.
            heard_.push_back(out->dest);
        }
        if (out->error == MPI_SUCCESS && closed_ && !out->unposted().empty()) {
            out->error = MPI_ERR_OTHER; // closing: the rest is not posted
        }
        if (out->error != MPI_SUCCESS) {
            out->stop_posting();
        } else if (o.expected != 0) {
            // The next data messages (test_requests keeps requests appended while it
            // dispatches).
            thread_local std::vector<posted_send> more;
            more.clear();
            int rc = post_data(*out, more);
            add_sends(*out, more);
            if (rc != MPI_SUCCESS) {
                out->error = rc;
            }
        }
        if (out->unposted().empty()) {
            drop_posting_tag(*out); // every data message posted: the tag may go to another
        }
        if (out->pending == 0 && out->unposted().empty()) {
            --sends_in_flight_;
            --in_flight_to_[out->dest];
            sent_.emplace_back(out);
        }
        break;
    }
    case req_kind::header: {
        std::unique_ptr<header_buffer> h(static_cast<header_buffer*>(o.p));
        if (cancelled(st)) {
            break;
        }
        if (err != MPI_SUCCESS) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "MPI: receiving a header failed: {}",
                                   mpi_error_string(err));
            break;
        }
        take_header(*h);
        break;
    }
    case req_kind::data: {
        auto* in = static_cast<incoming*>(o.p);
        if (err == MPI_SUCCESS && cancelled(st)) {
            err = MPI_ERR_OTHER;
        }
        int got = 0;
        if (err == MPI_SUCCESS && MPI_Get_count(&st, MPI_BYTE, &got) == MPI_SUCCESS &&
            got != o.expected) {
            // A longer message is MPI's truncation error; a shorter one completes normally.
            err = MPI_ERR_COUNT;
            if (in->error == MPI_SUCCESS) {
                in->reported = true;
                static logging::rate_limit limit;
                logging::error_limited(limit,
                                       "dropped a malformed parcel from locality {}: a data "
                                       "message of {} bytes where {} were due",
                                       in->source, got, o.expected);
            }
        }
        if (err != MPI_SUCCESS && in->error == MPI_SUCCESS) {
            in->error = err;
        }
        heard_.push_back(in->source);
        --in->pending;
        in->posted_bytes -= static_cast<std::size_t>(o.expected);
        if (in->error == MPI_SUCCESS && closed_ && in->next < in->pieces.size()) {
            in->error = MPI_ERR_OTHER; // closing: the rest is not posted, the parcel is dropped
        }
        if (in->error == MPI_SUCCESS && in->next < in->pieces.size()) {
            // The next pieces (test_requests keeps requests appended while it dispatches).
            int rc = MPI_ERR_NO_MEM;
            try {
                rc = post_pieces(*in);
            } catch (std::exception const&) {
                in->next = in->pieces.size();
            }
            if (rc != MPI_SUCCESS) {
                in->error = rc;
            }
        } else if (in->error != MPI_SUCCESS) {
            in->next = in->pieces.size(); // a failed parcel posts nothing more
        }
        if (in->next == in->pieces.size()) {
            drop_tag(*in); // every receive posted: the next parcel with its tag may go
        }
        if (in->pending == 0) {
            finish(std::unique_ptr<incoming>(in));
        }
        break;
    }
    }
}

bool mpi_transport::admit_deferred() {
    bool any = false;
    while (!deferred_.empty() && (receiving_ == 0 || receiving_bytes_ < opts_.read_budget)) {
        if (!held_tags_.empty()) {
            wire::header hd;
            std::memcpy(&hd, deferred_.front().bytes.get(), sizeof hd); // checked when deferred
            if (tag_held(deferred_.front().mpi_source, static_cast<int>(hd.send_id))) {
                break; // after the earlier parcel with its tag has posted every receive
            }
        }
        header_buffer h = std::move(deferred_.front());
        deferred_.pop_front();
        take_header(h, true);
        any = true;
    }
    return any;
}

bool mpi_transport::probe_headers() {
    bool any = false;
    for (int k = 0; k < max_probes_per_pass; ++k) {
        int flag = 0;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        int rc = MPI_Improbe(MPI_ANY_SOURCE, header_tag, comm_, &flag, &msg, &st);
        if (rc != MPI_SUCCESS) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "MPI: MPI_Improbe failed: {}", mpi_error_string(rc));
            break;
        }
        if (flag == 0) {
            break;
        }
        any = true;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        auto h = std::make_unique<header_buffer>();
        h->mpi_source = st.MPI_SOURCE;
        // A header larger than any header can be (max_header_) is taken out of MPI with no
        // room (MPI reports truncation) and dropped.
        bool absurd = count < 0 || static_cast<std::size_t>(count) > max_header_;
        h->size = absurd ? 0 : static_cast<std::size_t>(count);
        h->bytes = pooled_bytes(h->size);
        MPI_Request r = MPI_REQUEST_NULL;
        rc = MPI_Imrecv(h->bytes.get(), static_cast<int>(h->size), MPI_BYTE, &msg, &r);
        if (rc != MPI_SUCCESS) {
            static logging::rate_limit lim;
            logging::error_limited(lim, "MPI: MPI_Imrecv failed: {}", mpi_error_string(rc));
            continue;
        }
        if (absurd) {
            MPI_Wait(&r, MPI_STATUS_IGNORE); // truncated: consumes the message
            static logging::rate_limit lim;
            logging::error_limited(lim,
                                   "dropped a malformed parcel from MPI rank {}: a header "
                                   "of {} bytes",
                                   st.MPI_SOURCE, count);
            continue;
        }
        int done = 0;
        MPI_Status rst;
        MPI_Test(&r, &done, &rst); // a small header is there already: no second pass
        if (done != 0) {
            take_header(*h);
        } else {
            reqs_.push_back(r);
            owners_.push_back({req_kind::header, 0, h.release()});
        }
    }
    return any;
}

void mpi_transport::take_header(header_buffer const& hb, bool admitted) {
    take_header(hb.bytes.get(), hb.size, hb.mpi_source, false, admitted);
}

void mpi_transport::take_header(std::byte const* bytes, std::size_t size, int mpi_source,
                                bool in_batch, bool admitted) {
    auto drop = [&](std::string const& why) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from MPI rank {}: {}", mpi_source,
                               why);
    };
    if (size < sizeof(wire::header)) {
        return drop("a header of " + std::to_string(size) + " bytes");
    }
    wire::header h;
    std::memcpy(&h, bytes, sizeof h);
    std::uint32_t from = static_cast<std::size_t>(mpi_source) < rank_of_.size()
                             ? rank_of_[static_cast<std::size_t>(mpi_source)]
                             : UINT32_MAX;
    if (h.magic != wire::magic || h.version != wire::version ||
        (h.kind != wire::parcel && (in_batch || h.kind != wire::batch))) {
        return drop("bad magic, version or kind");
    }
    if (h.token != job_token_) {
        return drop("the job token of another job");
    }
    if (from == UINT32_MAX || h.source != from) {
        return drop("it claims to come from locality " + std::to_string(h.source));
    }
    if (h.kind == wire::batch) {
        return take_batch(bytes, size, h, mpi_source);
    }
    bool index_inline = (h.flags & wire::index_inline) != 0;
    if ((h.flags & ~wire::index_inline) != 0) { // the sender never lays out a remote table
        return drop("flags " + std::to_string(h.flags));
    }
    if (h.chunk_count > wire::max_chunks) {
        return drop("a header announcing " + std::to_string(h.chunk_count) + " chunks");
    }
    std::size_t const n_desc = std::size_t{h.chunk_count} + (index_inline ? 0 : 1);
    std::size_t const fixed = sizeof h + n_desc * sizeof(wire::descriptor);
    if (size < fixed || size - fixed != (index_inline ? h.index_size : 0)) {
        return drop("its length does not match its header");
    }
    // The descriptors, copied out of the received bytes (aligned, whatever the batch record's
    // place), into a list that keeps its capacity up to 4096 descriptors (a header at the chunk
    // limit would otherwise keep 512 MiB for the thread's life).
    thread_local std::vector<wire::descriptor> ds;
    struct shrink_after {
        ~shrink_after() {
            if (ds.capacity() > 4096) {
                std::vector<wire::descriptor>().swap(ds);
            }
        }
    } shrink;
    ds.resize(n_desc);
    std::memcpy(ds.data(), bytes + sizeof h, n_desc * sizeof(wire::descriptor));
    std::byte const* inline_index = bytes + fixed;
    try {
        std::uint64_t const to_receive = check_descriptors(h, ds, index_inline);
        if (to_receive == 0 && h.chunk_count == 1 &&
            ds[0].type == static_cast<std::uint8_t>(serialization::chunk_type::index) &&
            ds[0].size == h.index_size) { // a small parcel: no chunk list
            ++stats_.messages_received;
            ready_.emplace_back(from,
                                serialization::message::from_bytes({inline_index, h.index_size}));
            return;
        }
        if (to_receive == 0) { // the inline index is the whole parcel
            auto chunks = serialization::message::chunk_list();
            std::vector<std::shared_ptr<std::byte[]>> none; // nothing lands: stays empty
            received_chunks(
                h, ds,
                [](std::size_t, bool, std::uint64_t) { return std::shared_ptr<std::byte[]>(); },
                chunks, none);
            auto m =
                serialization::message::from_parts({inline_index, h.index_size}, std::move(chunks));
            ++stats_.messages_received;
            ready_.emplace_back(from, std::move(m));
            return;
        }
        if (in_batch || h.send_id < first_data_tag || h.send_id >= first_data_tag + data_tags) {
            return drop("a data tag out of range");
        }
        // Over the receive budget (or behind parcels that are, or behind an earlier parcel
        // with its sender and tag whose receives are not all posted): the header waits as a
        // copy and the chunks stay with the sender's MPI. Eager parcels (heartbeats) still
        // arrive meanwhile. In order: a deferred parcel's receives are posted before those
        // of any later parcel, as tag matching needs.
        int const tag = static_cast<int>(h.send_id);
        if (!admitted && (!deferred_.empty() || tag_held(mpi_source, tag) ||
                          (receiving_ != 0 && receiving_bytes_ + to_receive > opts_.read_budget))) {
            header_buffer d;
            d.bytes = pooled_bytes(size);
            std::memcpy(d.bytes.get(), bytes, size);
            d.size = size;
            d.mpi_source = mpi_source;
            deferred_.push_back(std::move(d));
            ++stats_.deferred_rendezvous;
            return;
        }
        auto in = new_incoming();
        in->source = from;
        in->mpi_source = mpi_source;
        in->tag = tag;
        in->index_inline = index_inline;
        in->bytes = to_receive;
        // A large parcel's landing buffers are left to land(), without the lock: its chunks'
        // and an index received as data (an inline one is no larger than the eager threshold);
        // so is a refused parcel's scratch buffer.
        bool const later = to_receive >= land_without_lock;
        if (later && !index_inline) {
            in->unlanded_index = true;
            in->index_size = h.index_size;
        } else {
            in->msg = serialization::message::with_index_buffer(h.index_size);
            if (index_inline && h.index_size != 0) {
                std::memcpy(in->msg.index_buffer(), inline_index, h.index_size);
            }
        }
        received_chunks_or_refused(
            h, ds,
            [&](std::size_t n, bool rma, std::uint64_t at) {
                return later ? std::shared_ptr<std::byte[]>() : receive_buffer(n, rma, at);
            },
            opts_.max_parcel_bytes, in->chunks, in->owners, in->refused);
        if (later || !in->refused.empty()) {
            if (in->refused.empty()) {
                for (std::uint32_t i = 0; i < in->chunks.size(); ++i) {
                    auto const& c = in->chunks[i];
                    if (c.type != chunk_type::index && c.size != 0) {
                        in->unlanded.push_back({i, c.type == chunk_type::rma, ds[i].address});
                    }
                }
            }
            room_for_one(unlanded_);
            hold_tag(*in); // until land() posts its receives
            ++receiving_;
            receiving_bytes_ += in->bytes;
            unlanded_.push_back(std::move(in)); // reserved: does not throw
            return;
        }
        ++receiving_;
        receiving_bytes_ += in->bytes;
        post_receives(std::move(in));
    } catch (std::exception const& e) {
        drop(e.what());
    }
}

void mpi_transport::take_batch(std::byte const* bytes, std::size_t size, wire::header const& h,
                               int mpi_source) {
    for_each_record(h, bytes, size,
                    [&](std::byte const* r, std::size_t n, std::uint32_t i, bool compact) {
                        if (compact) {
                            // This transport's batches hold eager messages only (append_record).
                            static logging::rate_limit limit;
                            logging::error_limited(limit,
                                                   "dropped parcel {} of a coalesced message from "
                                                   "locality {}: a compact record",
                                                   i, h.source);
                            return;
                        }
                        take_header(r, n, mpi_source, true, false);
                    });
}

std::shared_ptr<std::byte[]> mpi_transport::receive_buffer(std::size_t n, bool rma_chunk,
                                                           std::uint64_t align_like) {
    bool in_rma_pool = false, reused = false;
    auto b = chunk_destination(*buffers_, n, rma_chunk, in_rma_pool, reused, align_like);
    stats_.pool_receive_buffers += in_rma_pool;
    stats_.receive_buffers_reused += reused;
    return b;
}

void mpi_transport::post_receives(std::unique_ptr<incoming> in) noexcept {
    int rc = MPI_SUCCESS;
    try {
        in->pieces.clear();
        // A refused chunk (no address) and a lost index are received into the scratch buffer,
        // one receive at a time (post_pieces); pieces are never longer than it.
        auto pieces_of = [&](std::byte* p, std::size_t n) {
            for (std::size_t done = 0; done < n; done += piece_) {
                in->pieces.push_back({p != nullptr ? p + done : in->scratch.get(),
                                      static_cast<int>(std::min(piece_, n - done))});
            }
        };
        for (auto& c : in->chunks) {
            if (c.type != chunk_type::index && c.size != 0) {
                pieces_of(const_cast<std::byte*>(c.address), c.size);
            }
        }
        if (!in->index_inline) {
            pieces_of(in->index_lost ? nullptr : in->msg.index_buffer(),
                      in->index_lost ? in->index_size : in->msg.index_size());
        }
        rc = post_pieces(*in);
        update_tag(*in);
    } catch (std::exception const&) {
        rc = MPI_ERR_NO_MEM;
        in->next = in->pieces.size(); // nothing more is posted
        drop_tag(*in);
    }
    if (rc != MPI_SUCCESS) {
        // The receives posted stay (MPI may write into their buffers): the parcel is
        // dropped once they complete.
        in->error = rc;
    }
    if (in->pending == 0) {
        release(*in);
        static logging::rate_limit limit;
        logging::error_limited(limit, "MPI: posting receives from locality {} failed: {}",
                               in->source, mpi_error_string(rc));
        return;
    }
    in.release(); // owned by its requests (owners_) until the last completes
}

void mpi_transport::release(incoming& in) noexcept {
    --receiving_;
    receiving_bytes_ -= in.bytes;
    drop_tag(in);
}

void mpi_transport::hold_tag(incoming& in) {
    if (!in.holds_tag) {
        held_tags_.push_back(tag_key(in.mpi_source, in.tag)); // never held twice: see tag_held
        in.holds_tag = true;
    }
}

void mpi_transport::drop_tag(incoming& in) noexcept {
    if (in.holds_tag) {
        auto const it =
            std::find(held_tags_.begin(), held_tags_.end(), tag_key(in.mpi_source, in.tag));
        if (it != held_tags_.end()) {
            *it = held_tags_.back();
            held_tags_.pop_back();
        }
        in.holds_tag = false;
    }
}

void mpi_transport::update_tag(incoming& in) {
    if (in.next < in.pieces.size()) {
        hold_tag(in);
    } else {
        drop_tag(in);
    }
}

int mpi_transport::post_pieces(incoming& in) {
    while (in.next < in.pieces.size()) {
        auto const pc = in.pieces[in.next];
        if (in.posted_bytes != 0 &&
            (in.posted_bytes + static_cast<std::size_t>(pc.count) > piece_ ||
             !in.refused.empty())) {
            return MPI_SUCCESS; // the rest as these complete (a refused parcel's one by one)
        }
        // Room first: a request MPI holds is always recorded.
        room_for_one(reqs_);
        room_for_one(owners_);
        MPI_Request q = MPI_REQUEST_NULL;
        int rc = MPI_Irecv(pc.p, pc.count, MPI_BYTE, in.mpi_source, in.tag, comm_, &q);
        if (rc != MPI_SUCCESS) {
            in.next = in.pieces.size(); // none after a failed one
            return rc;
        }
        ++in.next;
        ++in.pending;
        in.posted_bytes += static_cast<std::size_t>(pc.count);
        ++stats_.rma_reads; // the receives of chunk pieces stand for the reads
        reqs_.push_back(q);
        owners_.push_back({req_kind::data, pc.count, &in});
    }
    return MPI_SUCCESS;
}

void mpi_transport::land_one(incoming& in, std::uint64_t& in_pool, std::uint64_t& reused) noexcept {
    if (in.unlanded_index && in.msg.index_size() == 0 && !in.index_lost) {
        try {
            in.msg = serialization::message::with_index_buffer(in.index_size);
        } catch (std::exception const&) {
            in.index_lost = true; // received into scratch, and the parcel dropped
        }
    }
    if (in.refused.empty()) {
        bool failed = in.index_lost;
        for (std::size_t k = 0; k < in.unlanded.size() && !failed; ++k) {
            auto const& u = in.unlanded[k];
            auto& c = in.chunks[u.chunk];
            try {
                bool pool = false, again = false;
                auto b = chunk_destination(*buffers_, c.size, u.rma, pool, again, u.align_like);
                in_pool += pool;
                reused += again;
                c.address = b.get();
                in.owners[u.chunk] = std::move(b);
            } catch (std::exception const&) {
                failed = true;
            }
        }
        if (failed) {
            // Refused: what landed goes back, and the data is received into scratch.
            for (auto const& u : in.unlanded) {
                in.chunks[u.chunk].address = nullptr;
                in.owners[u.chunk].reset();
            }
            in.refused =
                no_memory_to_receive(in.index_lost ? in.index_size : chunk_bytes(in.chunks),
                                     in.index_lost ? "index" : "chunks");
        }
    }
    if (!in.refused.empty() && in.scratch == nullptr) {
        std::size_t n = 0; // the longest piece of what is refused
        for (auto const& c : in.chunks) {
            if (c.type != chunk_type::index && c.address == nullptr) {
                n = std::max(n, std::min(c.size, piece_));
            }
        }
        if (in.index_lost) {
            n = std::max(n, std::min(in.index_size, piece_));
        }
        try {
            in.scratch = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(n, 1));
        } catch (std::exception const&) {
            // Not even this: tried again next pass (the tag stays held meanwhile).
        }
    }
}

void mpi_transport::land(std::unique_lock<std::mutex>& g) {
    thread_local std::vector<std::unique_ptr<incoming>> landing;
    landing.swap(unlanded_);
    ++landing_now_;
    g.unlock();
    std::uint64_t in_pool = 0, reused = 0;
    for (auto& in : landing) {
        land_one(*in, in_pool, reused);
    }
    g.lock();
    --landing_now_;
    stats_.pool_receive_buffers += in_pool;
    stats_.receive_buffers_reused += reused;
    for (auto& in : landing) {
        if (!in->refused.empty()) {
            // It holds one piece of scratch, not its bytes: the budget keeps only that.
            std::size_t const keep = std::min(in->bytes, piece_);
            receiving_bytes_ -= in->bytes - keep;
            in->bytes = keep;
        }
        if (closed_) {
            release(*in); // closing: dropped
        } else if (!in->refused.empty() && in->scratch == nullptr) {
            try {
                room_for_one(unlanded_);
                unlanded_.push_back(std::move(in)); // its scratch buffer next pass
            } catch (std::bad_alloc const&) {
                release(*in);
                static logging::rate_limit limit;
                logging::error_limited(limit,
                                       "dropped a parcel from locality {}: no memory to receive "
                                       "it into, not even a scratch buffer",
                                       in->source);
            }
        } else {
            post_receives(std::move(in));
        }
    }
    landing.clear();
}

std::unique_ptr<incoming> mpi_transport::new_incoming() {
    std::unique_ptr<incoming> in;
    if (!spare_incoming_.empty()) {
        in = std::move(spare_incoming_.back());
        spare_incoming_.pop_back();
    } else {
        in = std::make_unique<incoming>();
    }
    if (in->chunks.capacity() == 0) { // the last parcel's list left with its message
        in->chunks = serialization::message::chunk_list();
    }
    return in;
}

void mpi_transport::recycle(std::unique_ptr<incoming> in) noexcept {
    // An entry grown by an unusual parcel (many chunks, a long refusal) is freed, not kept:
    // what the spares hold stays small (at most max_spare_incoming parcels of up to
    // spare_chunks chunks), whatever a peer sends.
    constexpr std::size_t spare_chunks = 64;
    if (spare_incoming_.size() >= max_spare_incoming || in->chunks.capacity() > spare_chunks ||
        in->owners.capacity() > spare_chunks || in->pieces.capacity() > spare_chunks ||
        in->unlanded.capacity() > spare_chunks || in->refused.capacity() > 256) {
        return;
    }
    if (spare_incoming_.capacity() == 0) {
        try {
            spare_incoming_.reserve(max_spare_incoming);
        } catch (std::bad_alloc const&) {
            return;
        }
    }
    in->reset();
    spare_incoming_.push_back(std::move(in)); // reserved: does not throw
}

void mpi_transport::finish(std::unique_ptr<incoming> in) {
    deliver(*in);
    recycle(std::move(in)); // (freed instead if deliver throws)
}

void mpi_transport::deliver(incoming& in) {
    release(in);
    stats_.rma_bytes_read += in.refused.empty() ? in.bytes : 0;
    if (in.error != MPI_SUCCESS) {
        if (!in.reported) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "MPI: receiving a parcel from locality {} failed: {}",
                                   in.source, mpi_error_string(in.error));
        }
        return;
    }
    if (in.index_lost) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a parcel from locality {}: {}", in.source,
                               in.refused);
        return; // nothing to deliver the refusal with
    }
    stats_.refused_parcels += !in.refused.empty();
    auto received = assemble_received(std::move(in.msg), std::move(in.chunks), in.owners, in.source,
                                      in.refused);
    if (!received) {
        return;
    }
    ++stats_.messages_received;
    ready_.emplace_back(in.source, std::move(*received));
}

} // namespace courier::parcelport::mpi_pp
