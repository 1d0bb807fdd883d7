// SPDX-License-Identifier: BSL-1.0
// The send path: the eager message and its descriptors, completion, DONE.
#include "libfabric_transport.hpp"

namespace courier::parcelport::fabric {

bool libfabric_transport::send_impl(std::uint32_t dest, serialization::message&& m,
                                    sent_handler on_sent, bool coalesce) {
    if (dest >= peers_.size()) {
        throw std::out_of_range("courier: send to unknown locality " + std::to_string(dest));
    }
    send_table::slot* slot = sends_.acquire();
    // Until the message is posted, a failure gives the slot back.
    struct slot_guard {
        libfabric_transport* t;
        send_table::slot* slot;
        ~slot_guard() {
            if (slot != nullptr) {
                t->recycle_send(slot);
            }
        }
    } guard{this, slot};
    send_state* s = &slot->value;
    s->id = slot->id();
    s->dest = dest;
    s->msg = std::move(m);
    s->on_sent = std::move(on_sent);
    auto data = s->msg.data();
    auto chunks = s->msg.chunks();
    // Layout of the eager message: header, one descriptor per chunk (+ one for the index data
    // when it does not fit and is read remotely), then the index data when it fits.
    if (chunks.size() > wire::max_chunks) {
        throw std::length_error("courier: a message of " + std::to_string(chunks.size()) +
                                " chunks is more than the protocol carries (" +
                                std::to_string(wire::max_chunks) + ")");
    }
    std::size_t fixed = sizeof(wire::header) + chunks.size() * sizeof(wire::descriptor);
    bool remote_table = fixed + sizeof(wire::descriptor) > recv_size_;
    if (remote_table) {
        // Too many chunks to describe inline: the list goes in a table the receiver reads.
        fixed = sizeof(wire::header) + sizeof(wire::descriptor);
    }
    bool inline_index = fixed + data.size() <= recv_size_;
    if (!inline_index && !remote_table) {
        fixed += sizeof(wire::descriptor);
    }
    s->eager.resize(fixed + (inline_index ? data.size() : 0));
    if (remote_table) {
        s->table.resize((chunks.size() + (inline_index ? 0 : 1)) * sizeof(wire::descriptor));
    }
    std::byte* desc_out = remote_table ? s->table.data() : s->eager.data() + sizeof(wire::header);
    auto put = [&](wire::descriptor const& d) {
        std::memcpy(desc_out, &d, sizeof d);
        desc_out += sizeof d;
    };
    try {
        for (auto const& c : chunks) {
            wire::descriptor d{};
            d.type = static_cast<std::uint8_t>(c.type);
            d.size = c.size;
            if (c.type != serialization::chunk_type::index && c.size != 0) {
                // The receiver reads the chunk in place: nothing is copied. Pool memory is
                // registered already; other memory through the registration cache.
                std::tie(d.address, d.key) = remote_access(c.address, c.size, *s);
                s->needs_done = true;
            }
            put(d);
        }
        if (!inline_index) {
            wire::descriptor d{};
            d.type = wire::index_buffer_type;
            d.size = data.size();
            std::tie(d.address, d.key) = remote_access(data.data(), data.size(), *s);
            put(d);
            s->needs_done = true;
        }
        if (remote_table) {
            wire::descriptor d{};
            d.type = wire::descriptor_table_type;
            d.size = s->table.size();
            std::tie(d.address, d.key) = remote_access(s->table.data(), s->table.size(), *s);
            std::memcpy(s->eager.data() + sizeof(wire::header), &d, sizeof d);
            s->needs_done = true;
        }
    } catch (...) {
        for (auto& l : s->leases) {
            cache_->release(l);
        }
        throw;
    }
    wire::header h = header_of(wire::parcel);
    h.flags = static_cast<std::uint8_t>((inline_index ? wire::index_inline : 0) |
                                        (remote_table ? wire::descriptors_remote : 0));
    h.chunk_count = static_cast<std::uint32_t>(chunks.size());
    h.send_id = s->id;
    h.index_size = data.size();
    std::memcpy(s->eager.data(), &h, sizeof h);
    if (inline_index && !data.empty()) {
        std::memcpy(s->eager.data() + fixed, data.data(), data.size());
    }
    fid_mr* eager_mr =
        mr_local_ ? register_memory(s->eager.data(), s->eager.size(), FI_SEND) : nullptr;
    if (eager_mr != nullptr) {
        s->mrs.push_back(eager_mr);
    }
    sends_.publish(std::exchange(guard.slot, nullptr));
    send_state* raw = s;
    ++counters_.messages_sent;
    counters_.eager_bytes_sent += raw->eager.size();
    counters_.rendezvous_sends += raw->needs_done;
    counters_.bytes_copied_on_send += inline_index ? data.size() : 0;
    if (coalesce && eager_mr == nullptr && try_coalesce(raw)) {
        return true;
    }
    out_[dest].in_flight.fetch_add(1, std::memory_order_acq_rel);
    fi_addr_t to = peers_[dest];
    try {
        if (eager_mr == nullptr && raw->eager.size() > split_part_ &&
            raw->eager.size() <= split_max_) {
            post_split(raw);
            return false;
        }
        post_or_defer(
            [this, raw, eager_mr, to, dest] {
                // Once posted, `raw` may complete and be reused at any moment: only copies
                // (`dest`) after the call.
                return wake_peer(
                    dest, static_cast<long>(fi_send(ep_, raw->eager.data(), raw->eager.size(),
                                                    desc_of(eager_mr), to, &raw->op.ctx)));
            },
            "fi_send");
    } catch (...) {
        // Refused outright (not -FI_EAGAIN): the caller gets the error. If that was the
        // second part of a split message, the first part is in flight and its completion
        // ends the send (unless it came already), without a handler to call.
        if (raw->parts_posted == 1) {
            raw->on_sent = nullptr;
            raw->part_failed.store(true, std::memory_order_relaxed);
            if (raw->parts_left.fetch_sub(1, std::memory_order_acq_rel) != 1) {
                throw;
            }
        }
        out_[dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
        if (send_table::slot* failed = sends_.claim(raw->id); failed != nullptr) {
            for (auto* mr : raw->mrs) {
                fi_close(&mr->fid);
            }
            for (auto& l : raw->leases) {
                cache_->release(l);
            }
            recycle_send(failed);
        }
        throw;
    }
    return false;
}

void libfabric_transport::post_split(send_state* s) {
    // Part 0: the message's first (inject size - header) bytes; part 1: the rest. Each within
    // the inject size, so shm copies both through its inject buffers; the receiver copies the
    // smaller part in behind the larger (handle_fragment).
    std::size_t const n = s->eager.size();
    std::size_t const first = split_part_ - sizeof(wire::header);
    for (std::uint32_t i = 0; i < 2; ++i) {
        wire::header h = header_of(wire::fragment);
        h.send_id = s->id; // unique among this side's sends in flight
        h.chunk_count = i;
        h.index_size = n;
        s->frag[i] = h;
    }
    s->parts_posted = 0;
    s->parts_left.store(2, std::memory_order_release);
    ++counters_.split_sends;
    fi_addr_t to = peers_[s->dest];
    std::uint32_t dest = s->dest;
    post_or_defer(
        [this, s, to, dest, n, first] {
            auto part = [&](std::uint32_t i) {
                iovec iov[2] = {
                    {&s->frag[i], sizeof(wire::header)},
                    {s->eager.data() + (i == 0 ? 0 : first), i == 0 ? first : n - first}};
                return static_cast<long>(
                    fi_sendv(ep_, iov, nullptr, 2, to, i == 0 ? &s->op.ctx : &s->op2.ctx));
            };
            if (s->parts_posted == 0) {
                long rc = part(0);
                if (rc != 0) {
                    return wake_peer(dest, rc);
                }
                s->parts_posted = 1; // before part 1 is posted: s may complete after that
            }
            // Once posted, `s` may complete and be reused at any moment: nothing after it.
            return wake_peer(dest, part(1));
        },
        "fi_sendv");
}

bool libfabric_transport::try_coalesce(send_state* s) {
    if (s->needs_done) {
        // A rendezvous parcel leaves at once: held in a batch, its announcement waits for the
        // end of a progress pass, and so do the receiver's reads of its chunks, which is what
        // its transfer waits for. osu_courier bw on tcp, 6 interleaved pairs, medians: 128 /
        // 256 / 512 KiB 1.26 / 1.07 / 0.98x (an earlier set of 4: 1.49 / 1.16 / 1.43x);
        // >= 1 MiB and shm within noise.
        return false;
    }
    std::size_t rec = wire::record_size(s->eager.size());
    if (4 * rec > batch_limit_ - sizeof(wire::header)) {
        return false; // a quarter of a batch or more: little to gain, a copy to lose
    }
    peer_out& po = out_[s->dest];
    auto nothing_to_wait_for = [&] {
        return po.open.load(std::memory_order_acquire) == nullptr &&
               po.in_flight.load(std::memory_order_acquire) < coalesce_in_flight;
    };
    if (nothing_to_wait_for()) {
        return false; // it leaves at once (the request/reply case: no lock taken)
    }
    batch_op* full = nullptr;
    {
        std::lock_guard g(po.m);
        if (nothing_to_wait_for()) {
            return false;
        }
        batch_op* b = po.open.load(std::memory_order_relaxed);
        if (b != nullptr && b->buf.size() + rec > batch_limit_) {
            full = b; // posted below; a new batch takes its place (still listed as open)
            b = take_batch(s->dest);
            po.open.store(b, std::memory_order_release);
            po.in_flight.fetch_add(1, std::memory_order_acq_rel);
        } else if (b == nullptr) {
            b = take_batch(s->dest);
            po.open.store(b, std::memory_order_release);
            open_batches_.fetch_add(1, std::memory_order_acq_rel);
            std::lock_guard lg(batch_mutex_);
            open_list_.push_back(s->dest);
        }
        std::size_t at = b->buf.size();
        b->buf.resize(at + rec); // zero-filled: the prefix's upper half and the padding
        auto len = static_cast<std::uint32_t>(s->eager.size());
        std::memcpy(b->buf.data() + at, &len, sizeof len);
        std::memcpy(b->buf.data() + at + wire::record_prefix, s->eager.data(), s->eager.size());
        b->members.push_back(s);
    }
    if (full != nullptr) {
        post_batch(full);
    }
    return true;
}

batch_op* libfabric_transport::take_batch(std::uint32_t dest) {
    batch_op* b = nullptr;
    {
        std::lock_guard g(batch_mutex_);
        if (!batch_free_.empty()) {
            b = batch_free_.back();
            batch_free_.pop_back();
        } else {
            batch_all_.push_back(std::make_unique<batch_op>());
            b = batch_all_.back().get();
        }
    }
    b->dest = dest;
    b->buf.assign(sizeof(wire::header), std::byte{0});
    b->members.clear();
    return b;
}

void libfabric_transport::flush_batches() {
    // Only the poller flushes (progress() holds poll_mutex_): flushing_ is its own, and the
    // swap keeps both lists' capacity, so a flush allocates nothing once warm.
    {
        std::lock_guard g(batch_mutex_);
        flushing_.swap(open_list_);
    }
    for (std::uint32_t d : flushing_) {
        peer_out& po = out_[d];
        batch_op* b = nullptr;
        {
            std::lock_guard g(po.m);
            b = po.open.exchange(nullptr, std::memory_order_acq_rel);
            if (b != nullptr) {
                open_batches_.fetch_sub(1, std::memory_order_acq_rel);
                po.in_flight.fetch_add(1, std::memory_order_acq_rel);
            }
        }
        if (b != nullptr) {
            post_batch(b);
        }
    }
    flushing_.clear();
}

void libfabric_transport::post_batch(batch_op* b) {
    wire::header h = header_of(wire::batch);
    h.chunk_count = static_cast<std::uint32_t>(b->members.size());
    h.index_size = b->buf.size() - sizeof h;
    std::memcpy(b->buf.data(), &h, sizeof h);
    ++counters_.batches_sent;
    counters_.parcels_in_batches += b->members.size();
    std::uint32_t dest = b->dest;
    fi_addr_t to = peers_[dest];
    try {
        post_or_defer(
            [this, b, to, dest] {
                return wake_peer(dest, static_cast<long>(fi_send(ep_, b->buf.data(), b->buf.size(),
                                                                 nullptr, to, &b->ctx)));
            },
            "fi_send");
    } catch (std::exception const& e) {
        // Refused outright: its senders have returned, so they learn it from their handlers.
        std::fprintf(stderr, "courier: a coalesced message to locality %u failed: %s\n", dest,
                     e.what());
        complete_batch(b, std::make_error_code(std::errc::io_error));
    }
}

void libfabric_transport::complete_batch(batch_op* b, std::error_code ec) {
    for (send_state* s : b->members) { // eager-only parcels (try_coalesce): no DONE to wait for
        complete_send(s, ec);
    }
    out_[b->dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
    b->members.clear();
    std::lock_guard g(batch_mutex_);
    batch_free_.push_back(b);
}

void libfabric_transport::complete_send(send_state* s, std::error_code ec) {
    send_table::slot* slot = sends_.claim(s->id);
    if (slot == nullptr) {
        return; // completed already
    }
    for (auto* mr : s->mrs) {
        fi_close(&mr->fid);
    }
    for (auto& l : s->leases) {
        cache_->release(l);
    }
    if (s->on_sent) {
        s->on_sent(ec);
    }
    recycle_send(slot);
}

void libfabric_transport::recycle_send(send_table::slot* slot) noexcept {
    // What the send held goes now (the message and the handler's captures), as when the
    // state was destroyed; its vectors keep their capacity for the next send.
    send_state* s = &slot->value;
    s->msg = serialization::message();
    s->on_sent = nullptr;
    s->mrs.clear();
    s->leases.clear();
    s->eager.clear();
    s->table.clear();
    auto index = static_cast<std::uint32_t>(s->id);
    bool large = s->eager.capacity() > kept_eager || s->table.capacity() > kept_eager;
    if (index >= kept_slots || (large && index >= kept_large_slots)) {
        std::vector<std::byte>().swap(s->eager);
        std::vector<std::byte>().swap(s->table);
    }
    s->needs_done = s->eager_done = s->remote_done = false;
    s->parts_posted = 0;
    s->parts_left.store(1, std::memory_order_relaxed);
    s->part_failed.store(false, std::memory_order_relaxed);
    sends_.release(slot);
}

std::pair<std::uint64_t, std::uint64_t>
libfabric_transport::remote_access(void const* p, std::size_t n, send_state& s) {
    auto at = reinterpret_cast<std::uint64_t>(p);
    if (pool_attached_) {
        if (auto r = rma::find(p, n); r && r->registrar == &registrar_) {
            ++counters_.pool_chunks_sent;
            return {mr_virt_ ? at : at - reinterpret_cast<std::uint64_t>(r->base), r->reg.key};
        }
    }
    auto l = cache_->acquire(p, n);
    ++(l.hit() ? counters_.registration_cache_hits : counters_.registration_cache_misses);
    s.leases.push_back(l);
    auto key = l.reg().key;
    std::uint64_t offset = at - l.start();
    return {mr_virt_ ? at : offset, key};
}

bool libfabric_transport::send_raw_for_testing(std::uint32_t dest, void const* p, std::size_t n) {
    if (dest >= peers_.size()) {
        throw std::out_of_range("send_raw_for_testing: no locality " + std::to_string(dest));
    }
    auto raw = std::make_unique<raw_op>();
    auto const* b = static_cast<std::byte const*>(p);
    raw->bytes.assign(b, b + n);
    long rc = wake_peer(dest, static_cast<long>(fi_send(ep_, raw->bytes.data(), n, nullptr,
                                                        peers_[dest], &raw->ctx)));
    if (rc == -FI_EAGAIN) {
        return false;
    }
    if (rc != 0) {
        throw std::runtime_error(fi_message("fi_send", rc));
    }
    raw_ops_.push_back(std::move(raw));
    return true;
}

void libfabric_transport::send_done(std::uint32_t dest, std::uint64_t id) {
    wire::header h = header_of(wire::done);
    h.send_id = id;
    fi_addr_t to = peers_[dest];
    post_or_defer(
        [this, h, to, dest] {
            return wake_peer(dest, static_cast<long>(fi_inject(ep_, &h, sizeof h, to)));
        },
        "fi_inject");
}

} // namespace courier::parcelport::fabric
