// SPDX-License-Identifier: BSL-1.0
// The receiving side of a rendezvous: the read budget, destination buffers, the RMA reads
// (and the descriptor table's), and delivering the parcel when they complete.
#include "libfabric_transport.hpp"

#include <sys/sysinfo.h>
#include <unistd.h>

namespace courier::parcelport::fabric {

std::shared_ptr<std::byte[]> libfabric_transport::receive_buffer(std::size_t n, bool rma_chunk) {
    if (rma_chunk) {
        try {
            auto b = rma::allocate_shared(n);
            ++counters_.pool_receive_buffers;
            return b;
        } catch (rma::pool_exhausted const&) {
            // Over the pool's limit: the bytes still arrive; a loader that needs pool memory
            // then reports the limit itself.
        }
    }
    bool reused = false;
    auto b = pool_->get(n, reused);
    counters_.receive_buffers_reused += reused;
    return b;
}

namespace {

/// Physical memory plus swap: a parcel that announces more cannot be received here, and is
/// rejected before anything is allocated for it (under ASan an allocation beyond its 1 TiB
/// limit aborts instead of throwing).
std::uint64_t machine_memory() {
    static std::uint64_t const bytes = [] {
        long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
        std::uint64_t b = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page)
                                                : wire::max_chunk_bytes;
        struct sysinfo si {};
        if (::sysinfo(&si) == 0) {
            b += std::uint64_t(si.totalswap) * si.mem_unit;
        }
        return std::min<std::uint64_t>(b, wire::max_chunk_bytes);
    }();
    return bytes;
}

/// Bytes the descriptors at `p` (n_desc of them; the one at `chunk_count`, if any, is the
/// non-inline index) have the receiver read: pointer/rma chunks and a non-inline index.
std::size_t bytes_to_read(std::byte const* p, std::size_t n_desc, std::uint32_t chunk_count) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n_desc; ++i) {
        wire::descriptor d;
        std::memcpy(&d, p + i * sizeof d, sizeof d);
        if (i == chunk_count ||
            d.type != static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            total += static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
        }
    }
    return total;
}

/// Bytes a parcel's rendezvous will read (pointer/rma chunks and a non-inline index), from
/// its descriptors; 0 if none or if the message is malformed (handle_parcel then rejects it).
std::size_t rendezvous_bytes(wire::header const& h, std::byte const* p, std::size_t len) {
    if ((h.flags & wire::descriptors_remote) != 0) {
        if (len < sizeof h + sizeof(wire::descriptor)) {
            return 0;
        }
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h, sizeof d);
        return static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
    }
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::size_t n_desc = std::size_t{h.chunk_count} + (index_inline ? 0 : 1);
    if (n_desc > (len - sizeof h) / sizeof(wire::descriptor)) {
        return 0;
    }
    return bytes_to_read(p + sizeof h, n_desc, h.chunk_count);
}

} // namespace

void libfabric_transport::admit_parcel(wire::header const& h, std::byte const* p, std::size_t len) {
    std::size_t rma = rendezvous_bytes(h, p, len);
    if (rma != 0) {
        std::lock_guard g(mutex_);
        if (reading_bytes_ != 0 && reading_bytes_ + rma > opts_.read_budget) {
            deferred_.push_back({h, std::vector<std::byte>(p, p + len), rma});
            ++counters_.deferred_rendezvous;
            return;
        }
        reading_bytes_ += rma;
    }
    try {
        handle_parcel(h, p, len, rma);
    } catch (...) {
        release_read_budget(rma);
        throw;
    }
}

void libfabric_transport::release_read_budget(std::size_t bytes) {
    if (bytes == 0) {
        return;
    }
    std::lock_guard g(mutex_);
    reading_bytes_ -= bytes;
    if (!deferred_.empty()) {
        admit_pending_.store(true, std::memory_order_release);
    }
}

bool libfabric_transport::admit_deferred() {
    bool any = false;
    for (;;) {
        deferred_parcel next;
        {
            std::lock_guard g(mutex_);
            if (deferred_.empty() ||
                (reading_bytes_ != 0 &&
                 reading_bytes_ + deferred_.front().rma_bytes > opts_.read_budget)) {
                return any;
            }
            next = std::move(deferred_.front());
            deferred_.pop_front();
            reading_bytes_ += next.rma_bytes;
        }
        any = true;
        try {
            handle_parcel(next.h, next.eager.data(), next.eager.size(), next.rma_bytes);
        } catch (std::exception const& e) {
            std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n",
                         next.h.source, e.what());
            std::lock_guard g(mutex_);
            reading_bytes_ -= next.rma_bytes; // give it back and try the next one
        }
    }
}

void libfabric_transport::handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                                        std::size_t rma_bytes) {
    bool index_inline = (h.flags & wire::index_inline) != 0;
    if ((h.flags & wire::descriptors_remote) != 0) {
        // Phase one: read the descriptor table, then continue in finish_incoming.
        std::size_t fixed = sizeof h + sizeof(wire::descriptor);
        wire::descriptor t;
        if (fixed > len) {
            throw serialization::serialization_error("eager message sizes are inconsistent");
        }
        std::memcpy(&t, p + sizeof h, sizeof t);
        std::uint64_t want =
            (std::uint64_t{h.chunk_count} + (index_inline ? 0 : 1)) * sizeof(wire::descriptor);
        if (t.type != wire::descriptor_table_type || h.chunk_count > wire::max_chunks ||
            t.size != want || (index_inline && h.index_size != len - fixed)) {
            throw serialization::serialization_error("bad descriptor table for " +
                                                     std::to_string(h.chunk_count) + " chunks");
        }
        auto in = std::make_unique<incoming>();
        in->source = h.source;
        in->send_id = h.send_id;
        in->rma_bytes = rma_bytes;
        in->table_phase = true;
        in->h = h;
        in->table.resize(static_cast<std::size_t>(t.size));
        if (index_inline) {
            in->inline_index.assign(p + fixed, p + fixed + h.index_size);
        }
        // The table is read where a non-inline index would be (start_reads knows the phase).
        start_reads(std::move(in), {t}, /*index_inline=*/false);
        return;
    }
    std::size_t n_desc = h.chunk_count + (index_inline ? 0 : 1);
    std::size_t fixed = sizeof h + n_desc * sizeof(wire::descriptor);
    if (h.chunk_count > recv_size_ || fixed > len || (index_inline && h.index_size > len - fixed)) {
        throw serialization::serialization_error("eager message sizes are inconsistent");
    }
    auto descriptor = [&](std::size_t i) {
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h + i * sizeof d, sizeof d);
        return d;
    };
    if (index_inline && rma_bytes == 0) {
        // Eager only (the common small parcel): the message is built straight from the receive
        // buffer — one copy of the index data, no bookkeeping object.
        auto chunks = serialization::message::chunk_list();
        chunks.reserve(h.chunk_count);
        std::size_t offset = 0;
        for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
            auto d = descriptor(i);
            if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index)) {
                chunks.push_back({serialization::chunk_type::index, d.size, offset, nullptr, 0});
                offset += d.size;
            } else if (d.size == 0 &&
                       (d.type == static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
                        d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma))) {
                chunks.push_back(
                    {static_cast<serialization::chunk_type>(d.type), 0, 0, nullptr, 0});
            } else {
                throw serialization::serialization_error(
                    "bad chunk descriptor (type " + std::to_string(d.type) + ", " +
                    std::to_string(d.size) + " bytes) in an eager-only parcel");
            }
        }
        if (offset != h.index_size) {
            throw serialization::serialization_error(
                "index chunks do not add up to the index size");
        }
        auto m = serialization::message::from_parts({p + fixed, h.index_size}, std::move(chunks));
        ++counters_.messages_received;
        if (on_receive_) {
            on_receive_(h.source, std::move(m));
        }
        return;
    }
    std::vector<wire::descriptor> ds(n_desc);
    for (std::size_t i = 0; i < n_desc; ++i) {
        ds[i] = descriptor(i);
    }
    begin_reads(h, ds, index_inline, p + fixed, rma_bytes);
}

void libfabric_transport::begin_reads(wire::header const& h,
                                      std::vector<wire::descriptor> const& ds, bool index_inline,
                                      std::byte const* inline_index, std::size_t rma_bytes) {
    if (ds.size() != std::size_t{h.chunk_count} + (index_inline ? 0 : 1) ||
        (!index_inline &&
         (ds.back().type != wire::index_buffer_type || ds.back().size != h.index_size))) {
        throw serialization::serialization_error("descriptors do not match the header");
    }
    // Each size at most 2^47 (the sum below cannot overflow before it is over the memory).
    std::uint64_t total = 0;
    for (auto const& d : ds) {
        if (d.size > wire::max_chunk_bytes) {
            throw serialization::serialization_error("a chunk of " + std::to_string(d.size) +
                                                     " bytes is larger than any address space");
        }
        total += d.size;
        if (total > machine_memory()) {
            throw serialization::serialization_error(
                "a parcel of more than " + std::to_string(total) +
                " bytes is larger than this machine's memory (" + std::to_string(machine_memory()) +
                " bytes)");
        }
    }
    if (h.index_size > wire::max_chunk_bytes) {
        throw serialization::serialization_error("an index of " + std::to_string(h.index_size) +
                                                 " bytes is larger than any address space");
    }
    auto in = std::make_unique<incoming>();
    in->source = h.source;
    in->send_id = h.send_id;
    in->rma_bytes = rma_bytes;
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
        auto const& d = ds[i];
        if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            in->chunks.push_back({serialization::chunk_type::index, d.size, offset, nullptr, 0});
            in->owners.emplace_back();
            offset += d.size;
        } else if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
                   d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma)) {
            auto buf = receive_buffer(
                d.size, d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma));
            in->chunks.push_back(
                {static_cast<serialization::chunk_type>(d.type), d.size, 0, buf.get(), 0});
            in->owners.push_back(std::move(buf));
        } else {
            throw serialization::serialization_error("unknown chunk type " +
                                                     std::to_string(d.type));
        }
    }
    if (offset != h.index_size) {
        throw serialization::serialization_error("index chunks do not add up to the index size");
    }
    in->msg = serialization::message::with_index_buffer(static_cast<std::size_t>(h.index_size));
    if (index_inline && h.index_size != 0) {
        std::memcpy(in->msg.index_buffer(), inline_index, static_cast<std::size_t>(h.index_size));
    }
    start_reads(std::move(in), ds, index_inline);
}

void libfabric_transport::start_reads(std::unique_ptr<incoming> in,
                                      std::vector<wire::descriptor> const& ds, bool index_inline) {
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
        if (c.type != serialization::chunk_type::index && c.size != 0) {
            add(const_cast<std::byte*>(c.address), ds[i]);
        }
    }
    if (!index_inline) {
        if (in->table_phase) {
            add(in->table.data(), ds.back()); // the descriptor table
        } else if (ds.back().size != 0) {
            add(in->msg.index_buffer(), ds.back()); // straight into the message: no copy
        }
    }
    if (mr_local_) {
        for (auto& pc : pieces) {
            if (auto r = rma::find(pc.local, pc.size); r && r->registrar == &registrar_) {
                pc.desc = r->reg.desc; // pool memory: registered already
            } else {
                fid_mr* mr = register_memory(pc.local, pc.size, FI_READ);
                in->mrs.push_back(mr);
                pc.desc = fi_mr_desc(mr);
            }
        }
    }
    incoming* raw = in.get();
    raw->started = std::chrono::steady_clock::now();
    raw->outstanding = pieces.size();
    raw->reads.clear(); // a previous phase's reads have all completed
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        raw->reads.emplace_back(raw);
    }
    {
        std::lock_guard g(mutex_);
        incoming_.emplace(raw, std::move(in));
    }
    for (auto const& pc : pieces) {
        counters_.rma_bytes_read += pc.size;
        ++counters_.rma_reads;
    }
    if (pieces.empty()) { // only empty external chunks: nothing to read, but the sender waits
        finish_incoming(raw);
        return;
    }
    post_or_defer([this, raw] { return post_reads(raw); }, "fi_read");
}

long libfabric_transport::post_reads(incoming* in) {
    // Once the last read is posted, `in` may complete and be freed by another thread at any
    // moment: nothing of it is touched after that post.
    std::uint32_t const source = in->source;
    fi_addr_t from = peers_[source];
    std::size_t i = in->next_piece;
    std::size_t const n = in->pieces.size();
    while (i < n) {
        auto const& pc = in->pieces[i];
        read_op* rop = &in->reads[i];
        long rc = static_cast<long>(
            fi_read(ep_, pc.local, pc.size, pc.desc, from, pc.remote, pc.key, &rop->ctx));
        if (rc != 0) {
            in->next_piece = i; // not posted: `in` is still waiting for it
            return wake_peer(source, rc);
        }
        ++i;
    }
    return wake_peer(source, 0); // in case the provider needs the peer's progress for reads
}

void libfabric_transport::continue_after_table(std::unique_ptr<incoming> in) {
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    in->mrs.clear();
    auto fail = [&](char const* why) {
        std::fprintf(stderr, "courier: dropped a parcel from locality %u: %s\n", in->source, why);
        send_done(in->source, in->send_id);
        release_read_budget(in->rma_bytes);
    };
    if (in->failed) {
        fail("reading its descriptor table failed");
        return;
    }
    wire::header h = in->h;
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::vector<wire::descriptor> ds(in->table.size() / sizeof(wire::descriptor));
    std::memcpy(ds.data(), in->table.data(), ds.size() * sizeof(wire::descriptor));
    std::size_t payload = bytes_to_read(in->table.data(), ds.size(), h.chunk_count);
    {
        std::lock_guard g(mutex_); // admitted already: its payload joins the reads in flight
        reading_bytes_ += payload;
    }
    std::size_t budget = in->rma_bytes + payload;
    try {
        begin_reads(h, ds, index_inline, in->inline_index.data(), budget);
    } catch (std::exception const& e) {
        in->rma_bytes = budget;
        fail(e.what());
    }
}

void libfabric_transport::finish_incoming(incoming* raw) {
    std::unique_ptr<incoming> in;
    {
        std::lock_guard g(mutex_);
        auto it = incoming_.find(raw);
        if (it != incoming_.end()) {
            in = std::move(it->second);
            incoming_.erase(it);
        }
    }
    if (!in) {
        return; // already finished (cannot happen: every rendezvous is registered once)
    }
    if (in->table_phase) {
        continue_after_table(std::move(in));
        return;
    }
    ++counters_.messages_received;
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    // Eager-only parcels never come here: every parcel that does is a rendezvous, whose
    // sender keeps its registrations until DONE.
    send_done(in->source, in->send_id);
    release_read_budget(in->rma_bytes);
    if (in->failed) {
        std::fprintf(stderr, "courier: an RMA read from locality %u failed; parcel dropped\n",
                     in->source);
        return;
    }
    serialization::message m;
    try {
        in->msg.complete_parts(std::move(in->chunks));
        m = std::move(in->msg);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n",
                     in->source, e.what());
        return;
    }
    for (std::size_t i = 0; i < in->owners.size(); ++i) {
        if (in->owners[i]) {
            m.set_chunk_owner(i, in->owners[i]);
        }
    }
    if (on_receive_) {
        on_receive_(in->source, std::move(m));
    }
}

} // namespace courier::parcelport::fabric
