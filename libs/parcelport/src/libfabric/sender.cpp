// SPDX-License-Identifier: BSL-1.0
// The send path (sender.hpp): eager message, descriptors, split messages, completion, DONE.
#include "sender.hpp"

#include "../eager_writer.hpp"
#include "coalescer.hpp"
#include "direct_read.hpp"
#include "outbox.hpp"

#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdexcept>

namespace courier::parcelport::fabric {

sender::sender(transport_parts const& parts, memory& mem, std::size_t recv_size,
               std::size_t split_part, std::size_t split_max)
    : parts_(parts), memory_(mem), recv_size_(recv_size), split_part_(split_part),
      split_max_(split_max),
      index_apart_(!parts.ep.shm() && !parts.ep.mr_local() && parts.ep.iov_limit() >= 2) {}

sender::~sender() {
    // The endpoint is closed: nothing completes any more. Registrations go back.
    sends_.for_each_published([this](send_table::slot& slot, std::uint64_t) {
        release_exposed(&slot.value);
        for (auto* mr : slot.value.mrs) {
            fi_close(&mr->fid);
        }
    });
}

bool sender::boxes_index(std::uint32_t dest, eager_layout const& whole, std::size_t index_bytes,
                         bool coalesce) const {
    // shm, a destination with messages in flight: an eager message over the inject size (sent
    // split in two, or whole by shm's CMA protocol) instead stages its index in the outbox and
    // announces it, and the announcement joins the batch. A stream of 4-8 KiB parcels then
    // costs shm one send per batch, not one or two per parcel (osu_bw at 4 / 6 KiB 1.8-1.9x,
    // benchmarks/RESULTS.md). An idle destination (a request/reply) keeps the eager message:
    // announcing and copying out cost a 4 KiB call 1.2x the latency of the split.
    // A peer whose message ring takes it gets the eager message whole through the ring.
    return coalesce && outbox_ != nullptr && split_part_ != 0 && whole.inline_index &&
           (parts_.rings == nullptr || !parts_.rings->reaches(dest) ||
            whole.eager_size > detail::message_rings::max_message) &&
           whole.eager_size > split_part_ && index_bytes <= outbox_->max_chunk() &&
           coalescer_ != nullptr && coalescer_->leaves_by_count() && coalescer_->would_hold(dest);
}

void sender::build(send_state* s, serialization::message const& m, bool coalesce) {
    wire::header h = parts_.peers.header_of(wire::parcel);
    h.send_id = s->id;
    try {
        std::size_t const index_bytes = m.data().size();
        eager_layout l = layout_eager(m, recv_size_);
        bool const index_boxed = boxes_index(s->dest, l, index_bytes, coalesce);
        if (index_boxed) {
            l = layout_eager(m, split_part_); // the index as a chunk: see boxes_index
        } else if (unsigned const cls = push_class(s->dest, m, l); cls < push_.count) {
            build_pushed(s, m, h, l, cls);
            return;
        }
        // A lone call's chunks are read where they are unless stage_idle_: staging costs the
        // sender a copy and the receiver a copy of lines the sender's core just wrote, a read
        // one system call and a copy of lines no one wrote (see set_outbox).
        bool const stage =
            outbox_ != nullptr && (stage_idle_ || index_boxed ||
                                   (coalescer_ != nullptr && coalescer_->would_hold(s->dest)));
        s->index_apart = index_apart_ && l.inline_index && index_bytes >= index_apart_min &&
                         index_bytes <= index_apart_max;
        s->eager.resize(s->index_apart ? l.fixed : l.eager_size);
        s->table.resize(l.table_size);
        s->needs_done = write_eager_into(
            m, h, l, [&](void const* p, std::size_t n) { return expose(s, p, n, stage); },
            s->eager.data(), s->table.data(), !s->index_apart);
        if (s->needs_done) {
            awaiting_done_.fetch_add(1, std::memory_order_relaxed); // until recycle()
        }
        if (l.inline_index && !s->index_apart) {
            parts_.stats.bytes_copied_on_send += index_bytes;
        }
    } catch (...) {
        release_exposed(s);
        throw;
    }
}

unsigned sender::push_class(std::uint32_t dest, serialization::message const& m,
                            eager_layout const& l) const noexcept {
    if (push_.count == 0 || !l.inline_index || l.remote_table) {
        return push_.count;
    }
    std::size_t bytes = 0, n = 0;
    bool whole_lines = true; // the chunks so far end on a pushed_align boundary
    for (auto const& c : m.chunks()) {
        if (c.type == serialization::chunk_type::index || c.size == 0) {
            continue;
        }
        // An rma chunk lands in the receiver's rma pool (a received rma_vector adopts it): read.
        // A chunk after one that ends within a line would land unaligned.
        if (c.type != serialization::chunk_type::pointer || !whole_lines) {
            return push_.count;
        }
        whole_lines = c.size % wire::pushed_align == 0;
        ++n;
        bytes += c.size;
    }
    if (n == 0 || n + 1 > parts_.ep.iov_limit() ||
        n > std::tuple_size_v<decltype(send_state::push_iov)> || bytes > push_max_) {
        return push_.count;
    }
    unsigned const cls = push_.class_of(push_classes::head(l.eager_size), bytes);
    return cls < parts_.peers.push_classes_of(dest) ? cls : push_.count;
}

void sender::build_pushed(send_state* s, serialization::message const& m, wire::header h,
                          eager_layout const& l, unsigned cls) {
    std::size_t const head = push_classes::head(l.eager_size);
    s->eager.resize(head);
    std::uint64_t at = head;
    std::size_t k = 0;
    // Each chunk's descriptor gives where its bytes start in the message; they are sent from
    // where they are (the message stays with the send until it completes).
    write_eager_into(
        m, h, l,
        [&](void const* p, std::size_t n) {
            // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): only read
            s->push_iov[k++] = {const_cast<void*>(p), n};
            std::uint64_t const where = at;
            at += n;
            return std::pair<std::uint64_t, std::uint64_t>{where, 0};
        },
        s->eager.data(), s->table.data());
    std::memset(s->eager.data() + l.eager_size, 0, head - l.eager_size);
    s->eager.data()[offsetof(wire::header, flags)] |= std::byte{wire::pushed};
    s->push_iovs = static_cast<std::uint8_t>(k);
    s->push_tag = push_classes::tag(cls);
    s->needs_done = false;
    s->index_apart = false;
    parts_.stats.bytes_copied_on_send += m.data().size();
}

namespace {
/// Copies `n` bytes into an outbox block (64-byte aligned) with non-temporal stores: no read
/// for ownership of lines the receiver's core may still hold from the block's last use (with
/// ordinary stores that ran at times at a tenth of the speed on AMD EPYC; on an Intel Xeon,
/// where the receiver then reads the block from memory instead of the shared cache, they
/// were 0.65-0.9x as fast as memcpy: libs/parcelport/README.md).
void stream_copy(std::byte* d, void const* src, std::size_t n) {
#if defined(__SSE2__)
    auto const* s = static_cast<std::byte const*>(src);
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128(reinterpret_cast<__m128i const*>(s + i));
        __m128i b = _mm_loadu_si128(reinterpret_cast<__m128i const*>(s + i + 16));
        __m128i c = _mm_loadu_si128(reinterpret_cast<__m128i const*>(s + i + 32));
        __m128i e = _mm_loadu_si128(reinterpret_cast<__m128i const*>(s + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, n - i);
    _mm_sfence();
#else
    std::memcpy(d, src, n);
#endif
}

/// Whether outbox blocks are written with stream_copy: on AMD processors (measured on EPYC
/// family 25), not elsewhere (measured on an Intel Xeon).
bool const streaming_stores = amd_processor();
} // namespace

namespace {
/// A parcel's whole stream (`n` bytes, small_enough) into `dest`'s batch as a compact record
/// (`write` writes it in place), if the coalescer holds it: a message of one index chunk
/// (sender::try_coalesce) or a stream no message was built for (sender::send_stream).
template <class Write>
bool coalesce_stream(coalescer& c, std::uint32_t dest, std::size_t n, Write&& write,
                     transport::sent_handler* on_sent, std::uint64_t tag) {
    return c.try_coalesce(dest, n, std::forward<Write>(write), on_sent, tag, batch_counts{1, n, n},
                          wire::record_compact);
}

/// The whole stream of a parcel of one index chunk (a compact record carries it as it is);
/// empty for a parcel with other chunks.
std::span<std::byte const> whole_stream(serialization::message const& m) noexcept {
    auto const chunks = m.chunks();
    return chunks.size() == 1 && chunks[0].type == serialization::chunk_type::index
               ? m.data()
               : std::span<std::byte const>{};
}

/// A transport::stream_writer of the span `ctx` points to.
void copy_span(void const* ctx, std::byte* at) {
    auto const& s = *static_cast<std::span<std::byte const> const*>(ctx);
    std::memcpy(at, s.data(), s.size());
}
} // namespace

std::pair<std::uint64_t, std::uint64_t> sender::expose(send_state* s, void const* p, std::size_t n,
                                                       bool stage) {
    // A chunk in this side's shared pool is copied by a destination that maps it: not staged.
    if (stage && !(shared_base_ != nullptr && readers_->mapped(s->dest) &&
                   direct_reader::within(reinterpret_cast<std::uintptr_t>(shared_base_),
                                         shared_size_, reinterpret_cast<std::uintptr_t>(p), n))) {
        s->boxed.reserve(s->boxed.size() + 1); // no allocation between the block and its record
        if (std::byte* b = outbox_->allocate(n); b != nullptr) {
            s->boxed.push_back(b);
            if (streaming_stores) {
                stream_copy(b, p, n);
            } else {
                std::memcpy(b, p, n);
            }
            ++parts_.stats.outbox_chunks_sent;
            parts_.stats.bytes_copied_on_send += n;
            return {outbox_->remote_address(b), outbox_->key()};
        }
    }
    // Pool memory is registered already; other memory through the registration cache.
    return memory_.remote_access(p, n, s->leases);
}

void sender::release_exposed(send_state* s) noexcept {
    memory_.release(s->leases);
    for (std::byte* b : s->boxed) {
        outbox_->release(b);
    }
    s->boxed.clear();
}

void sender::unknown_peer(std::uint32_t dest) {
    throw std::out_of_range("courier: send to unknown locality " + std::to_string(dest));
}

bool sender::batched(std::uint32_t dest, serialization::message const& m,
                     transport::sent_handler* on_sent, bool coalesce, std::uint64_t tag) {
    require_peer(dest);
    return coalesce && !parts_.ep.mr_local() && coalescer_->would_hold(dest) &&
           try_coalesce(dest, m, on_sent, tag);
}

bool sender::alone_in_batch(std::uint32_t dest, serialization::message const& m,
                            transport::sent_handler* on_sent, std::uint64_t tag) {
    std::span<std::byte const> const stream = whole_stream(m);
    // Not one whose index goes from where it lies (index_apart_, tcp): a batch would copy it.
    if (stream.empty() || !batchable(stream.size()) ||
        (index_apart_ && stream.size() >= index_apart_min)) {
        return false;
    }
    send_stream_alone(dest, stream.size(), copy_span, &stream, on_sent, tag);
    return true;
}

bool sender::send(std::uint32_t dest, serialization::message&& m, transport::sent_handler on_sent,
                  bool coalesce) {
    if (batched(dest, m, &on_sent, coalesce, 0)) {
        return true;
    }
    if (coalesce && alone_in_batch(dest, m, &on_sent, 0)) {
        return false; // posted now
    }
    return post(dest, std::move(m), std::move(on_sent), coalesce);
}

bool sender::send_counted(std::uint32_t dest, serialization::message&& m, std::uint64_t tag,
                          bool coalesce) {
    if (batched(dest, m, nullptr, coalesce, tag)) {
        return true; // its end is counted with its batch's
    }
    if (coalesce && alone_in_batch(dest, m, nullptr, tag)) {
        return false; // posted now; its end is counted with its batch's
    }
    // Two words: std::function keeps them inline (no allocation per send).
    return post(
        dest, std::move(m),
        [this, tag](std::error_code ec) {
            if (ec && counted_failed_ != nullptr && *counted_failed_) {
                (*counted_failed_)(tag);
            }
            (*counted_)(1, ec);
        },
        coalesce);
}

bool sender::batchable(std::size_t n) const noexcept {
    return !parts_.ep.mr_local() && coalescer_->small_enough(n);
}

std::size_t sender::stream_limit(std::uint32_t dest) const noexcept {
    return dest < parts_.peers.size() && !parts_.ep.mr_local() ? coalescer_->largest_small() : 0;
}

bool sender::batches_now(std::uint32_t dest, std::size_t n) const noexcept {
    return dest < parts_.peers.size() && batchable(n) && coalescer_->would_hold(dest);
}

transport::stream_sent sender::send_stream(std::uint32_t dest, std::size_t n,
                                           transport::stream_writer write, void const* ctx,
                                           transport::sent_handler* on_sent, std::uint64_t tag) {
    require_peer(dest);
    if (!batchable(n)) {
        return transport::stream_sent::refused;
    }
    // Held if the coalescer holds a batch for `dest` (its first look, then under the lock),
    // else posted now in a batch of its own (with whatever opened meanwhile).
    if (coalesce_stream(
            *coalescer_, dest, n, [&](std::byte* at) { write(ctx, at); }, on_sent, tag)) {
        return transport::stream_sent::held;
    }
    send_stream_alone(dest, n, write, ctx, on_sent, tag);
    return transport::stream_sent::posted;
}

void sender::send_stream_alone(std::uint32_t dest, std::size_t n, transport::stream_writer write,
                               void const* ctx, transport::sent_handler* on_sent,
                               std::uint64_t tag) {
    coalescer_->send_now(
        dest, n, [&](std::byte* at) { write(ctx, at); }, on_sent, tag, batch_counts{1, n, n},
        wire::record_compact);
}

void sender::send_quiet(std::uint32_t dest, serialization::message&& m,
                        transport::sent_handler on_sent) {
    require_peer(dest);
    post(dest, std::move(m), std::move(on_sent), false, true);
}

bool sender::post(std::uint32_t dest, serialization::message&& m, transport::sent_handler on_sent,
                  bool coalesce, bool quiet) {
    send_table::slot* slot = sends_.acquire();
    // Until the message is posted, a failure gives the slot back.
    struct slot_guard {
        sender* self;
        send_table::slot* slot;
        ~slot_guard() {
            if (slot != nullptr) {
                self->recycle(slot);
            }
        }
    } guard{this, slot};
    send_state* s = &slot->value;
    s->id = slot->id();
    s->dest = dest;
    s->on_sent = std::move(on_sent);
    build(s, m, coalesce);
    if (s->needs_done || s->index_apart || s->pushed()) {
        // Its chunks are read by the receiver or pushed, or its index sent from where it is: the
        // message (what it keeps alive) stays until the send completes. Otherwise everything
        // travels in the eager copy and the message stays with the caller, who frees it: moving it
        // into the slot and out again cost two of the message's moves (~190 instructions each) per
        // eager send.
        s->msg = std::move(m);
    }
    fid_mr* eager_mr = nullptr;
    if (parts_.ep.mr_local()) {
        try {
            eager_mr = memory_.register_local(s->eager.data(), s->eager.size(), FI_SEND);
        } catch (...) {
            release_exposed(s); // the slot guard gives the slot back
            throw;
        }
        s->mrs.push_back(eager_mr);
    }
    // Larger than an inject and not registered: two parts (post_split), unless a ring takes it.
    bool const split = eager_mr == nullptr && !s->index_apart && !s->pushed() &&
                       s->eager.size() > split_part_ && s->eager.size() <= split_max_;
    // Quiet only as one eager message: a send whose chunks are read, or split in two parts,
    // goes as any other (the receiver's reads and the parts need the peer's progress).
    s->quiet = quiet && !s->needs_done && !s->index_apart && !s->pushed() && !split;
    if (s->quiet) {
        s->eager.data()[offsetof(wire::header, flags)] |= std::byte{wire::quiet};
    }
    // A rendezvous parcel's announcement may join a batch like an eager-only parcel where
    // batches leave by count or at a count of announcements (coalescer::takes_announcements,
    // try_coalesce; on tcp at 4 of them: osu_bw 1.04-1.25x at 128 KiB - 1 MiB on an AMD EPYC
    // guest, each announcement having been a message with rxm's system calls on both sides,
    // benchmarks/RESULTS.md, "Rendezvous on tcp"): the receiver takes its record from the
    // batch as it would the message (eager_reader), and a stream of such parcels costs the
    // provider one send and one completion per batch (shm, Intel Xeon: posts of 8-32 KiB
    // 1.07-1.09x, osu_bw 8-16 KiB 1.14-1.15x, bibw 64-256 KiB 1.09-1.11x).
    bool const announce_in_batch = coalesce && s->needs_done && !s->index_apart &&
                                   eager_mr == nullptr && coalescer_->takes_announcements() &&
                                   coalescer_->small_enough(s->eager.size()) &&
                                   coalescer_->would_hold(dest);
    sends_.publish(std::exchange(guard.slot, nullptr));
    send_state* raw = s;
    ++parts_.stats.messages_sent;
    parts_.stats.eager_bytes_sent +=
        raw->eager.size() + (raw->index_apart ? raw->msg.data().size() : 0);
    parts_.stats.rendezvous_sends += raw->needs_done;
    parts_.stats.pushed_sends += raw->pushed();
    if (announce_in_batch) {
        // Published first: the DONE may come as soon as the batch leaves. Once the record is
        // written, `raw` may complete and be reused at any moment: nothing of it after that.
        std::size_t const n = raw->eager.size();
        std::byte const* bytes = raw->eager.data();
        std::uint64_t const id = raw->id;
        transport::sent_handler announced = [this, id](std::error_code ec) {
            on_announced(id, ec);
        };
        try {
            if (coalescer_->try_coalesce(
                    dest, n, [&](std::byte* at) { std::memcpy(at, bytes, n); }, &announced, 0, {},
                    0, true)) {
                return true;
            }
        } catch (...) {
            // Not in the batch (try_coalesce leaves nothing behind when it throws): the send
            // goes back as if never made, and the caller gets the error.
            if (send_table::slot* failed = sends_.claim(id); failed != nullptr) {
                release_exposed(raw);
                recycle(failed);
            }
            throw;
        }
    }
    coalescer_->posted(dest);
    fi_addr_t to = parts_.peers[dest];
    // A quiet message rings no doorbell when it goes through the peer's message ring, nor
    // through the provider on a transport without rings. Where rings exist, the provider's
    // queue of a peer whose rings all work is read only now and then while quiet (pass()):
    // a message that missed the ring (full) rings there as any other.
    bool const quiet_post = raw->quiet && parts_.rings == nullptr;
    try {
        // An eager message (a parcel, or a rendezvous parcel's announcement) to a peer on
        // this host goes through its message ring when that takes it (whole: no split), else
        // through the provider.
        if (eager_mr == nullptr && !raw->index_apart && !raw->pushed() &&
            parts_.send_by_ring(dest, raw->eager.data(), raw->eager.size(), &raw->op, raw->quiet)) {
            return false;
        }
        if (split) {
            post_split(raw);
            return false;
        }
        void* desc = eager_mr != nullptr ? fi_mr_desc(eager_mr) : nullptr;
        parts_.posts.post_or_defer(
            [this, raw, desc, to, dest, quiet_post] {
                // Once posted, `raw` may complete and be reused at any moment: only copies
                // (`dest`) after the call.
                long rc = 0;
                if (raw->pushed()) { // the eager part, then the chunks from where they are
                    iovec iov[4] = {{raw->eager.data(), raw->eager.size()}};
                    for (std::size_t i = 0; i < raw->push_iovs; ++i) {
                        iov[i + 1] = raw->push_iov[i];
                    }
                    rc = fi_tsendv(parts_.ep.ep(), iov, nullptr, 1 + std::size_t{raw->push_iovs},
                                   to, raw->push_tag, &raw->op.ctx);
                    return parts_.peers.wake_for_push(dest, rc);
                } else if (raw->index_apart) { // header and descriptors, then the message's index
                    auto index = raw->msg.data();
                    iovec iov[2] = {
                        {raw->eager.data(), raw->eager.size()},
                        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): only read
                        {const_cast<std::byte*>(index.data()), index.size()}};
                    rc = fi_sendv(parts_.ep.ep(), iov, nullptr, 2, to, &raw->op.ctx);
                } else {
                    rc = fi_send(parts_.ep.ep(), raw->eager.data(), raw->eager.size(), desc, to,
                                 &raw->op.ctx);
                }
                return quiet_post && rc == 0 ? rc : parts_.peers.wake(dest, rc);
            },
            "fi_send", refused_later(raw->id));
    } catch (...) {
        // Refused outright (not -FI_EAGAIN): the caller gets the error. If that was the
        // second part of a split message, the first part is in flight and its completion
        // ends the send (unless it came already), without a handler to call.
        if (raw->split.posted == 1) {
            raw->on_sent = nullptr;
            raw->split.failed.store(true, std::memory_order_relaxed);
            if (raw->split.left.fetch_sub(1, std::memory_order_acq_rel) != 1) {
                throw;
            }
        }
        coalescer_->completed(dest);
        if (send_table::slot* failed = sends_.claim(raw->id); failed != nullptr) {
            for (auto* mr : raw->mrs) {
                fi_close(&mr->fid);
            }
            release_exposed(raw);
            recycle(failed);
        }
        throw;
    }
    return false;
}

bool sender::try_coalesce(std::uint32_t dest, serialization::message const& m,
                          transport::sent_handler* on_sent, std::uint64_t tag) {
    // Eager-only and a third of a batch at most: its bytes are all the receiver needs, so it
    // takes no slot; its eager message is written straight into the batch.
    if (std::span<std::byte const> const data = whole_stream(m); !data.empty()) {
        // A parcel of one index chunk goes as its stream alone (wire::record_compact): the
        // batch's header says where it comes from, and there is nothing to describe.
        return coalescer_->small_enough(data.size()) &&
               coalesce_stream(
                   *coalescer_, dest, data.size(),
                   [&](std::byte* at) { std::memcpy(at, data.data(), data.size()); }, on_sent, tag);
    }
    eager_layout const l = layout_eager(m, recv_size_);
    if (!l.eager_only || !coalescer_->small_enough(l.eager_size)) {
        return false;
    }
    wire::header h = parts_.peers.header_of(wire::parcel);
    h.send_id = 0; // no DONE, no fragments: the receiver never uses it
    auto write = [&](std::byte* at) {
        write_eager_into(
            m, h, l,
            [](void const*, std::size_t) -> std::pair<std::uint64_t, std::uint64_t> {
                throw std::logic_error("courier: an eager-only parcel exposes no memory");
            },
            at, nullptr);
    };
    // Counted when the batch is posted, with the batch's other parcels.
    return coalescer_->try_coalesce(dest, l.eager_size, write, on_sent, tag,
                                    batch_counts{1, l.eager_size, m.data().size()});
}

void sender::post_split(send_state* s) {
    // Part 0: the message's first (inject size - header) bytes; part 1: the rest. Each within
    // the inject size, so shm copies both through its inject buffers; the receiver copies the
    // smaller part in behind the larger (fragment_joiner).
    std::size_t const n = s->eager.size();
    s->split.prepare(parts_.peers.header_of(wire::fragment), s->id, n);
    ++parts_.stats.split_sends;
    fi_addr_t to = parts_.peers[s->dest];
    std::uint32_t dest = s->dest;
    parts_.posts.post_or_defer(
        [this, s, to, dest, n] {
            // Once part 1 is posted, `s` may complete and be reused at any moment: only
            // copies (`dest`) after the call.
            return parts_.peers.wake(dest,
                                     s->split.post(parts_.ep.ep(), to, s->eager.data(), n,
                                                   split_part_ - sizeof(wire::header), &s->op.ctx));
        },
        "fi_sendv", refused_later(s->id));
}

backlog::refused_handler sender::refused_later(std::uint64_t id) {
    // Waiting in the backlog, the send is still published, and nothing but its completion
    // (which will not come now) ends it; found by id all the same.
    return {[](void* self, std::uint64_t send_id, long) {
                auto* me = static_cast<sender*>(self);
                send_table::slot* slot = me->sends_.find(send_id);
                if (slot == nullptr) {
                    return;
                }
                send_state* s = &slot->value;
                if (s->split.posted == 0) {
                    // Neither part of a split message went: one failed completion ends it.
                    s->split.left.store(1, std::memory_order_release);
                }
                me->on_completion(&s->op, true);
            },
            this, id};
}

void sender::on_completion(send_op* o, bool failed) {
    send_state* s = o->s;
    if (s->quiet) {
        ++parts_.tally.quiet;
    }
    if (failed) {
        s->split.failed.store(true, std::memory_order_relaxed);
    }
    if (!last_part(s)) {
        return; // the other part of a split message completes it
    }
    coalescer_->completed(s->dest);
    if (s->split.failed.load(std::memory_order_relaxed)) {
        complete(s, std::make_error_code(std::errc::connection_reset));
        return;
    }
    s->eager_done = true;
    if (s->pushed()) {
        // Its bytes are in the kernel (within a host: in the receiver's socket). A receiver
        // that went to sleep while they streamed in has nothing else to wake it (it was not
        // reading, as it would be for a rendezvous): its doorbell rings if it sleeps.
        parts_.peers.wake(s->dest, 0);
    }
    if (!s->needs_done || s->remote_done) {
        complete(s, {});
    }
}

void sender::on_announced(std::uint64_t id, std::error_code ec) {
    if (send_table::slot* slot = sends_.find(id); slot != nullptr) {
        if (ec) {
            complete(&slot->value, ec);
            return;
        }
        slot->value.eager_done = true;
        if (slot->value.remote_done) {
            complete(&slot->value, {});
        }
    }
}

void sender::on_done(std::uint64_t id) {
    // Only the poller completes sends, so the slot stays as found until complete().
    if (send_table::slot* slot = sends_.find(id); slot != nullptr) {
        slot->value.remote_done = true;
        if (slot->value.eager_done) {
            complete(&slot->value, {});
        }
    }
}

void sender::complete(send_state* s, std::error_code ec) {
    send_table::slot* slot = sends_.claim(s->id);
    if (slot == nullptr) {
        return; // completed already
    }
    for (auto* mr : s->mrs) {
        fi_close(&mr->fid);
    }
    release_exposed(s);
    if (s->on_sent) {
        s->on_sent(ec);
    }
    recycle(slot);
}

void sender::recycle(send_table::slot* slot) noexcept {
    // What the send held goes now (the message and the handler's captures), as when the
    // state was destroyed; its vectors keep their capacity for the next send.
    send_state* s = &slot->value;
    if (s->needs_done || s->index_apart || s->pushed()) { // post() kept the message only then
        s->msg = serialization::message();
    }
    s->on_sent = nullptr;
    s->quiet = false;
    s->mrs.clear();
    s->leases.clear();
    s->boxed.clear();
    s->eager.clear();
    s->table.clear();
    auto index = static_cast<std::uint32_t>(s->id);
    bool large = s->eager.capacity() > kept_eager || s->table.capacity() > kept_eager;
    if (index >= kept_slots || (large && index >= kept_large_slots)) {
        byte_buffer().swap(s->eager);
        byte_buffer().swap(s->table);
    }
    if (s->needs_done) {
        awaiting_done_.fetch_sub(1, std::memory_order_relaxed); // counted by build()
    }
    s->needs_done = s->eager_done = s->remote_done = s->index_apart = false;
    s->push_iovs = 0;
    s->split.posted = 0;
    s->split.left.store(1, std::memory_order_relaxed);
    s->split.failed.store(false, std::memory_order_relaxed);
    sends_.release(slot);
}

void sender::set_peers(std::size_t n) {
    dones_.resize(n);
    done_dests_.reserve(n);
}

void sender::send_done(std::uint32_t dest, std::uint64_t id) {
    if (dest >= dones_.size()) {
        post_dones(dest, &id, 1); // before set_peers: cannot happen (no peer to read from)
        return;
    }
    auto& q = dones_[dest];
    if (std::find(done_dests_.begin(), done_dests_.end(), dest) == done_dests_.end()) {
        // The first DONE of the pass to `dest` leaves at once, as a lone parcel's must (its
        // sender may be waiting for it to reuse the buffer); the pass's later ones wait. So
        // does the first while a batch to `dest` is open, which leaves at the pass's end too.
        done_dests_.push_back(dest);
        if (!dones_ride_ || !coalescer_->open_to(dest)) {
            post_dones(dest, &id, 1);
            return;
        }
    }
    q.push_back(id);
}

bool sender::flush_dones(bool ride) {
    if (done_dests_.empty()) {
        return false;
    }
    // One message of up to max_done_ids ids, within the provider's inject size.
    std::size_t const per_message = std::clamp<std::size_t>(
        (parts_.ep.inject_size() - sizeof(wire::header)) / sizeof(std::uint64_t) + 1, 1,
        wire::max_done_ids);
    bool any = false;
    for (std::uint32_t dest : done_dests_) {
        // Taken out of the queue before posting, so that a post that throws (the endpoint
        // failing) leaves no id to be sent twice; the two vectors keep their capacity. What
        // such a post left in sending_ goes now: swapped into this queue, those ids would go
        // to this destination, where one may name a live send.
        sending_.clear();
        sending_.swap(dones_[dest]);
        any = any || !sending_.empty();
        for (std::size_t at = 0; at < sending_.size(); at += per_message) {
            std::size_t const n = std::min(per_message, sending_.size() - at);
            done_message m;
            std::size_t const bytes = write_dones(m, sending_.data() + at, n);
            if (!ride || !dones_ride_ || !coalescer_->add_control(dest, &m, bytes)) {
                post_done_message(dest, m, bytes);
            }
        }
        sending_.clear();
    }
    done_dests_.clear();
    return any;
}

std::size_t sender::write_dones(done_message& m, std::uint64_t const* ids, std::size_t n) const {
    m.h = parts_.peers.header_of(wire::done);
    m.h.send_id = ids[0];
    m.h.chunk_count = static_cast<std::uint32_t>(n - 1);
    std::copy(ids + 1, ids + n, m.more.begin());
    return sizeof m.h + (n - 1) * sizeof(std::uint64_t);
}

void sender::post_dones(std::uint32_t dest, std::uint64_t const* ids, std::size_t n) {
    done_message m;
    std::size_t const bytes = write_dones(m, ids, n);
    post_done_message(dest, m, bytes);
}

void sender::post_done_message(std::uint32_t dest, done_message const& m, std::size_t bytes) {
    ++parts_.stats.done_messages;
    if (parts_.send_by_ring(dest, &m, bytes, nullptr)) {
        return;
    }
    fi_addr_t to = parts_.peers[dest];
    // The lambda holds the message (copied into a std::function only if it must wait).
    parts_.posts.post_or_defer(
        [this, m, bytes, to, dest] {
            return parts_.peers.wake(dest,
                                     static_cast<long>(fi_inject(parts_.ep.ep(), &m, bytes, to)));
        },
        "fi_inject");
}

std::size_t sender::in_flight() const {
    std::size_t n = coalescer_ != nullptr ? coalescer_->in_flight() : 0;
    sends_.for_each_published([&](send_table::slot&, std::uint64_t) { ++n; });
    return n;
}

} // namespace courier::parcelport::fabric
