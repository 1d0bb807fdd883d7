// SPDX-License-Identifier: BSL-1.0
// The RMA reads of a rendezvous (rendezvous.hpp): checking the descriptors, landing buffers,
// posting the reads (fi_read), and delivering the parcel and answering DONE once they complete.
#include "rendezvous.hpp"

#include "direct_read.hpp"
#include "outbox.hpp"
#include "sender.hpp"

#include <courier/common/log.hpp>
#include <courier/serialization/error.hpp>

#include <algorithm>
#include <cstring>

namespace courier::parcelport::fabric {

rendezvous::rendezvous(transport_parts const& parts, memory& mem, sender& s,
                       transport::receive_handler& on_receive, transport_options const& o,
                       std::size_t max_read, std::size_t recv_size, outbox* box,
                       direct_reader* direct)
    : parts_(parts), memory_(mem), sender_(s), on_receive_(on_receive), opts_(o),
      max_read_(max_read), recv_size_(recv_size), outbox_(box), direct_(direct) {
    spare_.reserve(max_spare);
}

void incoming::reset() noexcept {
    source = 0;
    send_id = 0;
    msg = serialization::message{};
    chunks.clear();
    owners.clear();
    mrs.clear();
    reads.clear(); // keeps its first block
    pieces.clear();
    next_piece = 0;
    outstanding = 0;
    posted_bytes = 0;
    post_deferred = false;
    rma_bytes = 0;
    direct_piece = 0;
    direct_offset = 0;
    failed = false;
    index_read = false;
    refused.clear();
    table_phase = false;
    h = {};
    table.clear();
    inline_index.clear();
    ds.clear();
}

rendezvous::held rendezvous::fresh_incoming() {
    {
        std::lock_guard g(mutex_);
        if (!spare_.empty()) {
            held e{*this, std::move(spare_.back())};
            spare_.pop_back();
            return e;
        }
    }
    incoming_map made; // a node of incoming_'s type, to keep after this parcel
    auto in = std::make_unique<incoming>();
    incoming* raw = in.get();
    made.emplace(raw, std::move(in));
    return held{*this, made.extract(raw)};
}

void rendezvous::recycle(incoming_node nh) noexcept {
    if (nh.empty()) {
        return;
    }
    // An entry grown by an unusual parcel (many chunks, a remote descriptor table) is freed,
    // not kept: what the spares hold stays small (at most max_spare parcels of up to
    // spare_chunks chunks), whatever a peer sends.
    incoming const& in = *nh.mapped();
    constexpr std::size_t spare_chunks = 64;
    if (in.ds.capacity() > spare_chunks || in.pieces.capacity() > spare_chunks ||
        in.owners.capacity() > spare_chunks || in.mrs.capacity() > spare_chunks ||
        in.reads.size() > spare_chunks ||
        in.table.capacity() > spare_chunks * sizeof(wire::descriptor) ||
        in.inline_index.capacity() > serialization::message::pooled_capacity) {
        return; // freed with nh
    }
    nh.mapped()->reset();
    std::lock_guard g(mutex_);
    if (spare_.size() < max_spare) {
        spare_.push_back(std::move(nh)); // within the reserved capacity
    }
}

rendezvous::~rendezvous() {
    for (auto& [p, in] : incoming_) {
        for (auto* mr : in->mrs) {
            fi_close(&mr->fid);
        }
    }
}

void rendezvous::start(wire::header const& h, std::byte const* p, std::size_t len,
                       std::size_t rma_bytes) {
    bool index_inline = (h.flags & wire::index_inline) != 0;
    if ((h.flags & wire::descriptors_remote) != 0) {
        // Phase one: read the descriptor table, then continue in finish().
        std::size_t fixed = sizeof h + sizeof(wire::descriptor);
        if (fixed > len) {
            throw serialization::serialization_error("eager message sizes are inconsistent");
        }
        wire::descriptor t;
        std::memcpy(&t, p + sizeof h, sizeof t);
        std::uint64_t want =
            (std::uint64_t{h.chunk_count} + (index_inline ? 0 : 1)) * sizeof(wire::descriptor);
        if (t.type != wire::descriptor_table_type || h.chunk_count > wire::max_chunks ||
            t.size != want || (index_inline && h.index_size != len - fixed)) {
            throw serialization::serialization_error("bad descriptor table for " +
                                                     std::to_string(h.chunk_count) + " chunks");
        }
        held e = fresh_incoming();
        incoming* in = e.get();
        in->source = h.source;
        in->send_id = h.send_id;
        in->rma_bytes = rma_bytes;
        in->table_phase = true;
        in->h = h;
        in->table.resize(static_cast<std::size_t>(t.size));
        if (index_inline) {
            in->inline_index.assign(p + fixed, p + fixed + h.index_size);
        }
        in->ds.assign(1, t);
        // The table is read where a non-inline index would be (start_reads knows the phase).
        start_reads(e, /*index_inline=*/false);
        return;
    }
    std::size_t n_desc = h.chunk_count + (index_inline ? 0 : 1);
    std::size_t fixed = sizeof h + n_desc * sizeof(wire::descriptor);
    if (h.chunk_count > recv_size_ || fixed > len || (index_inline && h.index_size > len - fixed)) {
        throw serialization::serialization_error("eager message sizes are inconsistent");
    }
    held e = fresh_incoming();
    incoming* in = e.get();
    in->ds.resize(n_desc);
    std::memcpy(in->ds.data(), p + sizeof h, n_desc * sizeof(wire::descriptor));
    begin_reads(e, h, index_inline, p + fixed, rma_bytes);
}

void rendezvous::begin_reads(held& e, wire::header const& h, bool index_inline,
                             std::byte const* inline_index, std::size_t rma_bytes) {
    incoming* in = e.get();
    check_descriptors(h, in->ds, index_inline);
    in->source = h.source;
    in->send_id = h.send_id;
    in->rma_bytes = rma_bytes;
    in->chunks = serialization::message::chunk_list(); // one a message freed, if any
    // Without its index a parcel cannot be delivered even as refused: one whose index cannot be
    // allocated is dropped; its sender is answered (DONE), its caller is not.
    auto drop_answered = [&](std::string const& why) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a parcel from locality {}: {}", h.source, why);
        sender_.send_done(h.source, h.send_id);
        release_budget(rma_bytes);
    };
    try {
        in->msg = serialization::message::with_index_buffer(static_cast<std::size_t>(h.index_size));
    } catch (std::bad_alloc const&) {
        return drop_answered("no memory for its index of " + std::to_string(h.index_size) +
                             " bytes");
    }
    if (index_inline && h.index_size != 0) {
        std::memcpy(in->msg.index_buffer(), inline_index, static_cast<std::size_t>(h.index_size));
    }
    received_chunks_or_refused(
        h, in->ds,
        [&](std::size_t n, bool rma, std::uint64_t at) {
            return memory_.receive_buffer(n, rma, at);
        },
        opts_.max_parcel_bytes, in->chunks, in->owners, in->refused);
    start_reads(e, index_inline);
}

void rendezvous::start_reads(held& e, bool index_inline) {
    incoming* in = e.get();
    auto const& ds = in->ds;
    auto& pieces = in->pieces;
    pieces.clear();
    in->next_piece = 0;
    auto add = [&](std::byte* local, wire::descriptor const& d) {
        for (std::uint64_t done = 0; done < d.size; done += max_read_) {
            std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(max_read_, d.size - done));
            pieces.push_back({local + done, n, d.address + done, d.key, nullptr});
        }
    };
    for (std::size_t i = 0; i < in->chunks.size(); ++i) {
        auto& c = in->chunks[i];
        if (c.type != serialization::chunk_type::index && c.size != 0 && c.address != nullptr) {
            add(const_cast<std::byte*>(c.address), ds[i]); // (a refused chunk is not read)
        }
    }
    if (!index_inline) {
        if (in->table_phase) {
            add(in->table.data(), ds.back()); // the descriptor table
        } else if (ds.back().size != 0) {
            add(in->msg.index_buffer(), ds.back()); // straight into the message: no copy
            in->index_read = true;
        }
    }
    in->started = std::chrono::steady_clock::now();
    in->moved = in->started;
    if (outbox_ != nullptr) {
        outbox_->received(in->rma_bytes);
        copy_from_outbox(in);
    }
    std::size_t to_read = 0;
    for (auto const& pc : pieces) {
        to_read += pc.size;
    }
    parts_.stats.rma_bytes_read += to_read;
    parts_.stats.rma_reads += pieces.size();
    // Directly: from a peer that passed the identity check, or whose mapped pool holds every
    // piece (one that may not be read by the system call: direct_read.hpp). A peer declared
    // failed too (its mapping released): its read fails at once and the parcel fails, where an
    // fi_read of a dead peer might never complete.
    if (direct_ != nullptr && to_read != 0 &&
        (direct_->enabled(in->source) || parts_.peers.failed(in->source) ||
         std::all_of(pieces.begin(), pieces.end(), [&](read_piece const& pc) {
             return direct_->covers(in->source, pc.remote, pc.size);
         }))) {
        parts_.stats.direct_reads += pieces.size();
        start_direct(e);
        return;
    }
    if (parts_.ep.mr_local()) {
        for (auto& pc : pieces) {
            pc.desc = memory_.pool_desc(pc.local, pc.size); // pool memory: registered already
            if (pc.desc == nullptr) {
                fid_mr* mr = memory_.register_local(pc.local, pc.size, FI_READ);
                in->mrs.push_back(mr);
                pc.desc = fi_mr_desc(mr);
            }
        }
    }
    if (pieces.empty()) {
        // Copied from the outbox, or empty chunks: finished now, without registering (the
        // sender still waits for its DONE).
        finish_entry(e);
        return;
    }
    incoming* raw = in;
    raw->outstanding = pieces.size();
    raw->posted_bytes = 0;
    raw->post_deferred = false;
    raw->reads.clear(); // a previous phase's reads have all completed
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        raw->reads.emplace_back(raw);
    }
    {
        std::lock_guard g(mutex_);
        e.node.key() = raw;
        incoming_.insert(std::move(e.node)); // e holds nothing from here
    }
    parts_.posts.post_or_defer([this, raw] { return post_reads(raw); }, "fi_read");
}

void rendezvous::copy_from_outbox(incoming* in) {
    auto& pieces = in->pieces;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        read_piece const& pc = pieces[i];
        if (std::byte const* from = outbox_->find(in->source, pc.remote, pc.key, pc.size)) {
            std::memcpy(pc.local, from, pc.size);
            ++parts_.stats.outbox_chunks_received;
            parts_.stats.outbox_bytes_received += pc.size;
        } else {
            pieces[kept++] = pc;
        }
    }
    pieces.resize(kept);
}

void rendezvous::start_direct(held& e) {
    incoming* raw = e.get();
    raw->outstanding = 1; // the direct reads, as one
    raw->reads.clear();
    raw->direct_piece = 0;
    raw->direct_offset = 0;
    {
        std::lock_guard g(mutex_);
        e.node.key() = raw;
        incoming_.insert(std::move(e.node)); // e holds nothing from here
    }
    direct_queue_.push_back(raw); // after the parcels read before it
    if (direct_queue_.size() == 1) {
        advance_direct(); // its first step now, as fi_read would start at once
    }
}

bool rendezvous::read_direct_step(incoming* in) {
    std::size_t left = sender_.awaiting_done() ? direct_step : direct_step_alone;
    while (in->direct_piece < in->pieces.size() && left != 0) {
        read_piece const& pc = in->pieces[in->direct_piece];
        std::size_t n = std::min(left, pc.size - in->direct_offset);
        if (!direct_->read(in->source, pc.local + in->direct_offset, pc.remote + in->direct_offset,
                           n)) {
            in->failed = true; // a bad address, or the peer is gone: as a failed fi_read
            return true;
        }
        in->direct_offset += n;
        left -= n;
        if (in->direct_offset == pc.size) {
            ++in->direct_piece;
            in->direct_offset = 0;
        }
    }
    return in->direct_piece == in->pieces.size();
}

bool rendezvous::advance_direct() {
    if (direct_queue_.empty()) {
        return false;
    }
    incoming* in = direct_queue_.front();
    in->moved = std::chrono::steady_clock::now(); // a direct read advances each pass
    if (read_direct_step(in)) {
        direct_queue_.pop_front(); // before finish(): phase two of `in` may queue it again
        finish(in);
    }
    return true;
}

long rendezvous::post_reads(incoming* in) {
    // The reads in flight stay within the window, also those of one parcel larger than the
    // budget (which is admitted alone). Posted all at once, a peer's 2 GiB over tcp kept the
    // sender's provider inside one progress call for the whole transfer (libfabric 1.17's tcp
    // receive loop answers read requests while its socket holds more, and they were all
    // there): 4-10 s on two busy cores, so long that its liveness thread heard nothing and its
    // watchdog took the call for wedged. A window at a time, a pass on either side ends with
    // the window. Every caller holds the progress lock, as on_completion does: `in` lives
    // while a piece is not completed (`outstanding` counts the unposted ones too).
    std::uint32_t const source = in->source;
    std::size_t const window = opts_.read_budget;
    std::size_t const n = in->pieces.size();
    in->post_deferred = false;
    if (in->failed) {
        return drop_unposted(in); // a read failed while this post waited for the provider
    }
    bool posted = false;
    // After posting, in case the provider needs the peer's progress for reads (shm).
    auto wake = [&] { return posted ? parts_.peers.wake(source, 0) : 0L; };
    for (std::size_t i = in->next_piece; i < n; ++i) {
        auto const& pc = in->pieces[i];
        if (in->posted_bytes != 0 && in->posted_bytes + pc.size > window) {
            return wake(); // the rest as these complete
        }
        read_op* rop = &in->reads[i];
        rop->bytes = pc.size;
        rop->piece = i;
        rop->attempts = 0;
        long rc = post_piece(rop);
        if (rc == -FI_EAGAIN) {
            in->next_piece = i; // `in` is still waiting for it
            in->post_deferred = true;
            return parts_.peers.wake(source, rc);
        }
        if (rc != 0) {
            // Refused for good (the peer's address removed, say): the parcel fails as if the
            // read had, once the reads posted before it complete.
            static logging::rate_limit limit;
            logging::error_limited(limit, "{}", error_of("fi_read", rc).what());
            in->next_piece = i;
            in->failed = true;
            wake();
            return drop_unposted(in);
        }
        posted = true;
        in->posted_bytes += pc.size; // its completion is handled after this returns
        in->next_piece = i + 1;
        if (in->posted_bytes > parts_.stats.rma_read_bytes_in_flight_max.load()) {
            parts_.stats.rma_read_bytes_in_flight_max.store(in->posted_bytes); // progress only
        }
    }
    return wake();
}

long rendezvous::drop_unposted(incoming* in) {
    in->outstanding -= in->pieces.size() - in->next_piece;
    in->next_piece = in->pieces.size();
    if (in->outstanding == 0) {
        finish(in);
    }
    return 0;
}

long rendezvous::post_piece(read_op* r) {
    read_piece const& pc = r->in->pieces[r->piece];
    return static_cast<long>(fi_read(parts_.ep.ep(), pc.local, pc.size, pc.desc,
                                     parts_.peers[r->in->source], pc.remote, pc.key, &r->ctx));
}

long rendezvous::post_again(read_op* r) {
    incoming* in = r->in;
    // Not for a peer declared failed meanwhile: net would try to connect to it pass after pass.
    if (!in->failed && !parts_.peers.failed(in->source)) {
        long rc = post_piece(r);
        if (rc == 0 || rc == -FI_EAGAIN) {
            // Posted (the peer's doorbell rung, as post_reads does), or later (post_or_defer).
            return parts_.peers.wake(in->source, rc);
        }
    }
    r->attempts = max_read_retries; // refused for good, or the parcel failed meanwhile
    on_completion(r, true);
    return 0;
}

void rendezvous::on_completion(read_op* r, bool failed, char const* why) {
    incoming* in = r->in;
    if (failed && !in->failed && r->attempts < max_read_retries &&
        !parts_.peers.failed(in->source)) {
        // A read can fail where the peer lives (libfabric's net provider has been seen to
        // fail one under 1 % packet loss): posted again, it stays outstanding meanwhile.
        ++r->attempts;
        ++parts_.stats.read_retries;
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "an RMA read from locality {} failed ({}); reading it again ({} of "
                               "{})",
                               in->source, why != nullptr ? why : "refused", r->attempts,
                               max_read_retries);
        parts_.posts.post_or_defer([this, r] { return post_again(r); }, "fi_read");
        return;
    }
    in->failed = in->failed || failed;
    in->posted_bytes -= r->bytes;
    if (!failed) {
        parts_.peers.active(in->source); // its messages may queue behind this transfer
        in->moved = std::chrono::steady_clock::now();
    }
    --in->outstanding;
    if (in->post_deferred) {
        return; // post_reads, waiting in the backlog, goes on (or drops the rest if failed)
    }
    if (in->failed) {
        drop_unposted(in); // the parcel is lost: the reads not posted yet never will be
    } else if (in->outstanding == 0) {
        finish(in);
    } else if (in->next_piece < in->pieces.size()) {
        parts_.posts.post_or_defer([this, in] { return post_reads(in); }, "fi_read");
    }
}

void rendezvous::continue_after_table(held& e) {
    incoming* in = e.get();
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    in->mrs.clear();
    auto fail = [&](std::string const& why) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a parcel from locality {}: {}", in->source, why);
        sender_.send_done(in->source, in->send_id);
        release_budget(in->rma_bytes);
    };
    if (in->failed) {
        fail("reading its descriptor table failed");
        return;
    }
    wire::header h = in->h;
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::size_t payload = descriptor_payload(in->table, h.chunk_count);
    {
        std::lock_guard g(mutex_); // admitted already: its payload joins the reads in flight
        reading_bytes_ += payload;
        publish_busy();
    }
    std::size_t budget = in->rma_bytes + payload;
    try {
        // Phase two in the same entry, from the table and the inline index phase one kept.
        in->table_phase = false;
        in->ds.resize(in->table.size() / sizeof(wire::descriptor));
        std::memcpy(in->ds.data(), in->table.data(), in->ds.size() * sizeof(wire::descriptor));
        begin_reads(e, h, index_inline, in->inline_index.data(), budget);
    } catch (std::exception const& ex) {
        in->rma_bytes = budget;
        fail(ex.what());
    }
}

void rendezvous::finish(incoming* raw) {
    held e{*this, {}}; // whichever way this ends, the entry serves the next parcel
    {
        std::lock_guard g(mutex_);
        e.node = incoming_.extract(raw);
    }
    if (e.node.empty()) {
        return; // already finished (cannot happen: every rendezvous is registered once)
    }
    finish_entry(e);
}

void rendezvous::finish_entry(held& e) {
    incoming* in = e.get();
    if (!in->failed && !in->pieces.empty()) {
        std::size_t bytes = 0;
        for (auto const& pc : in->pieces) {
            bytes += pc.size;
        }
        parts_.peers.read_done(in->source, bytes, in->started);
    }
    if (in->table_phase) {
        continue_after_table(e);
        return;
    }
    ++parts_.stats.messages_received;
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    // Every parcel that comes here is a rendezvous, whose sender keeps its registrations until
    // DONE.
    sender_.send_done(in->source, in->send_id);
    // On shm every read is a copy this side makes within the pass that started it; on a
    // network the bytes arrive over time, and the reads in flight bound them already.
    release_budget(in->rma_bytes,
                   /*landed=*/!in->failed && in->refused.empty() && parts_.ep.shm());
    if (in->failed) {
        static logging::rate_limit limit;
        if (in->index_read) {
            logging::error_limited(limit,
                                   "an RMA read from locality {} failed; parcel dropped "
                                   "(its index was among the reads)",
                                   in->source);
            return;
        }
        // Its index came with the announcement: delivered with its chunks not received, so
        // that a call fails with this reason instead of waiting for a reply for good.
        logging::error_limited(limit, "an RMA read from locality {} failed; parcel refused",
                               in->source);
        in->refused =
            "an RMA read of its chunks from locality " + std::to_string(in->source) + " failed";
        for (std::size_t i = 0; i < in->chunks.size(); ++i) {
            if (in->chunks[i].type != serialization::chunk_type::index) {
                in->chunks[i].address = nullptr;
                if (i < in->owners.size()) {
                    in->owners[i].reset();
                }
            }
        }
    }
    parts_.stats.refused_parcels += !in->refused.empty();
    auto received = assemble_received(std::move(in->msg), std::move(in->chunks), in->owners,
                                      in->source, in->refused);
    if (!received) {
        return;
    }
    serialization::message m = std::move(*received);
    if (on_receive_) {
        on_receive_(in->source, std::move(m));
    }
}

} // namespace courier::parcelport::fabric
