// SPDX-License-Identifier: BSL-1.0
// The send path: a parcel's eager message (header, chunk descriptors, inline index data), the
// registrations that let the receiver read its pointer and rma chunks, the table of sends in
// flight, split messages (two parts within shm's inject size), completion and DONE.
#pragma once

#include "../eager_writer.hpp"
#include "context.hpp"
#include "memory.hpp"
#include "pushed.hpp"
#include "split_parts.hpp"

#include <courier/parcelport/detail/slot_table.hpp>

#include <array>
#include <atomic>
#include <string>
#include <sys/uio.h>
#include <vector>

namespace courier::parcelport::fabric {

class coalescer;
class outbox;
struct send_state;

struct send_op : op {
    send_state* s;
    explicit send_op(send_state* st) : op(kind::send), s(st) {}
};

struct send_state {
    std::uint64_t id = 0; // its slot's id in the send table
    std::uint32_t dest = 0;
    serialization::message msg; // a rendezvous or index-apart send's, until it completes
    std::vector<fid_mr*> mrs;   // FI_MR_LOCAL registrations
    std::vector<rma::registration_cache::lease> leases; // released when the send completes
    std::vector<std::byte*> boxed;                      // outbox blocks, released with them
    transport::sent_handler on_sent;
    byte_buffer eager;
    byte_buffer table; // the descriptor list, when it does not fit the eager message
    send_op op{this};
    split_parts<send_op> split{this}; // a message sent as two parts (sender::post_split)
    bool needs_done = false;          // the receiver reads chunks and answers with DONE
    bool quiet = false;               // a control message (wire::quiet): wakes no one
    // The inline index is sent from msg as the eager message's second part (fi_sendv), not
    // copied into `eager` (sender::index_apart).
    bool index_apart = false;
    // Sent whole as one tagged message (pushed.hpp): `eager`, then push_iovs chunks from msg
    // (a pushed parcel has one at least: 0 means not pushed).
    std::uint8_t push_iovs = 0;
    bool pushed() const noexcept { return push_iovs != 0; }
    std::uint64_t push_tag = 0;
    std::array<iovec, 3> push_iov{};
    // Set by the poller only (completions and DONEs are handled under the poll lock).
    bool eager_done = false;
    bool remote_done = false;
};

/// Sends in flight (see slot_table: a DONE for a completed or forged id finds nothing). Slots
/// keep their send_state, and with it the capacity of its vectors (the eager message above
/// all), so a send allocates nothing here once the table is warm. A recycled state gives its
/// buffers back beyond the first `kept_slots` slots, and beyond the first `kept_large_slots`
/// when they hold more than `kept_eager` bytes: at most 256 x the largest eager message stays
/// after a burst. Large eager messages must be kept: allocating and zero-filling 64 KiB per
/// send costs its page faults again each time.
using send_table = detail::slot_table<send_state>;
constexpr std::size_t kept_slots = 4096;
constexpr std::size_t kept_large_slots = 256;
constexpr std::size_t kept_eager = 16 * 1024;

/// Thread safety: send() from any thread; the completion handlers (on_*) from the poller only.
class sender {
public:
    /// `recv_size`: the receivers' buffer size; `split_part`/`split_max`: messages of more than
    /// split_part and at most split_max bytes go as two (0: never).
    sender(transport_parts const& parts, memory& mem, std::size_t recv_size, std::size_t split_part,
           std::size_t split_max);
    ~sender();
    /// `dones_ride`: a DONE to a destination with an open batch rides in it (send_done).
    void set_coalescer(coalescer* c, bool dones_ride = false) noexcept {
        coalescer_ = c;
        dones_ride_ = dones_ride && c != nullptr;
    }
    /// shm: chunks of up to the outbox's largest are staged in `b` (null: none); those of a
    /// parcel to an idle destination (the coalescer would not hold a parcel for it) only if
    /// `stage_idle`, else they are read from the parcel's own memory.
    void set_outbox(outbox* b, bool stage_idle) noexcept {
        outbox_ = b;
        stage_idle_ = stage_idle;
    }
    /// shm: [base, base + size) is this process's rma pool segment, which peers map and copy
    /// chunks out of (direct_read.hpp): a chunk in it is not staged (a copy for nothing) for a
    /// destination whose segment `readers` maps (a peer of the same user maps this one's too).
    /// Parcels of `c`'s classes with at most `max` bytes of chunks are pushed (pushed.hpp) to
    /// destinations that post receives for their class. Set-up call.
    void set_push(push_classes c, std::size_t max) noexcept {
        push_ = c;
        push_max_ = max;
    }
    void set_shared_pool(std::byte const* base, std::size_t size,
                         direct_reader const* readers) noexcept {
        shared_base_ = base;
        shared_size_ = size;
        readers_ = readers;
    }

    /// Sends `m` to `dest`; true if it waits in a batch (coalesce: the coalescer may hold it).
    bool send(std::uint32_t dest, serialization::message&& m, transport::sent_handler on_sent,
              bool coalesce);
    /// Where counted sends end (transport::set_counted_handler): `ended` for every end,
    /// `failed` (may be empty) for a failed send's tag first. Both must outlive the sender.
    /// Set-up call.
    void set_counted_handlers(transport::counted_handler const* ended,
                              transport::counted_failure_handler const* failed) noexcept {
        counted_ = ended;
        counted_failed_ = failed;
    }
    /// As send(), for transport::send_counted(): its end is counted (set_counted_handlers),
    /// with its batch's others when it waits in one; if it fails, `tag` goes to the failure
    /// handler.
    bool send_counted(std::uint32_t dest, serialization::message&& m, std::uint64_t tag,
                      bool coalesce);
    /// transport::send_stream(): the stream's `n` bytes written by `write` as a compact
    /// record into the batch the coalescer holds for `dest` now, or into a batch of its own
    /// posted at once; its end runs `on_sent` (moved from), or, if null, is counted with the
    /// batch's (set_counted_handler). Refused only if no batch may take it (takes_streams()).
    transport::stream_sent send_stream(std::uint32_t dest, std::size_t n,
                                       transport::stream_writer write, void const* ctx,
                                       transport::sent_handler* on_sent, std::uint64_t tag);
    /// transport::takes_streams(): send_stream's first look.
    bool takes_streams(std::uint32_t dest, std::size_t n) const noexcept {
        return dest < parts_.peers.size() && batchable(n);
    }
    /// transport::stream_limit(dest): the largest n takes_streams(dest, n) takes.
    std::size_t stream_limit(std::uint32_t dest) const noexcept;
    /// transport::batches_now(): without the lock.
    bool batches_now(std::uint32_t dest, std::size_t n) const noexcept;
    /// Whether a stream of `n` bytes may go into a batch at all (the endpoint needs no local
    /// registration, and the coalescer takes its size): batches_now() less its looks at the
    /// peer and its batch.
    bool batchable(std::size_t n) const noexcept;
    /// As send() without a batch, for a control message (transport::send_control): if it goes
    /// as one eager message (no reads, not split), it is marked quiet (wire::quiet), rings no
    /// doorbell once posted through a message ring or on a transport without rings (a post
    /// the provider defers still rings: the peer must progress for it to go), and its end
    /// counts as quiet in the pass that handles it (pass_tally). Otherwise it goes as send().
    void send_quiet(std::uint32_t dest, serialization::message&& m,
                    transport::sent_handler on_sent);
    /// A send's (or one part's) completion came, with an error if `failed`.
    void on_completion(send_op* o, bool failed);
    /// The receiver read every chunk of send `id` (its DONE came).
    void on_done(std::uint64_t id);
    /// The batch that carried the announcement of rendezvous send `id` was sent (or failed:
    /// `ec`, which completes the send with it).
    void on_announced(std::uint64_t id, std::error_code ec);
    /// Runs `s`'s handler with `ec` and recycles it (no-op if completed already).
    void complete(send_state* s, std::error_code ec);
    /// Tells `dest` that its rendezvous send `id` was read (poller only): the pass's first
    /// DONE to `dest` at once, later ones queued until flush_dones(), which the poller calls at
    /// the end of its pass, so that they go as one message (wire.hpp), not one each. Where
    /// DONEs ride (set_coalescer), the first waits too while a batch to `dest` is open: the
    /// pass's end then adds the DONEs to that batch (coalescer::add_control), which leaves
    /// right after, rather than as a message of their own.
    void send_done(std::uint32_t dest, std::uint64_t id);
    /// Sends the queued DONEs (poller, end of pass), where DONEs ride (and `ride`) in `dest`'s
    /// open batch if one is open; true if any. A failed pass passes `ride` false: no flush of
    /// the batches follows it.
    bool flush_dones(bool ride = true);
    /// Sizes the DONE queues for `n` localities (set_peers).
    void set_peers(std::size_t n);
    /// Sends not yet completed (coalesced parcels included; a rendezvous parcel announced in
    /// a batch counts twice until its batch completes: its record and its slot).
    std::size_t in_flight() const;
    /// Whether a rendezvous send of this side waits for its DONE (the other direction of a
    /// stream): one relaxed load, for the reader's step size (rendezvous::read_direct_step).
    bool awaiting_done() const noexcept {
        return awaiting_done_.load(std::memory_order_relaxed) != 0;
    }

private:
    /// What a post of send `id` refused for good in the backlog does: the send completes as
    /// failed (its handler hears it), as a failed completion would end it.
    backlog::refused_handler refused_later(std::uint64_t id);
    void post_split(send_state* s);
    /// A DONE message (wire.hpp): its header and up to max_done_ids - 1 more ids.
    struct done_message {
        wire::header h;
        std::array<std::uint64_t, wire::max_done_ids - 1> more;
    };
    /// Writes the DONE message of ids[0, n) (1 <= n <= wire::max_done_ids) into `m`; returns
    /// its bytes.
    std::size_t write_dones(done_message& m, std::uint64_t const* ids, std::size_t n) const;
    /// Posts one DONE message to `dest` of ids[0, n) (n <= wire::max_done_ids).
    void post_dones(std::uint32_t dest, std::uint64_t const* ids, std::size_t n);
    /// Posts the DONE message `m` of `bytes` to `dest`.
    void post_done_message(std::uint32_t dest, done_message const& m, std::size_t bytes);
    /// Throws std::out_of_range for a destination this sender does not serve.
    void require_peer(std::uint32_t dest) const {
        if (dest >= parts_.peers.size() || parts_.peers[dest] == FI_ADDR_NOTAVAIL) [[unlikely]] {
            unknown_peer(dest);
        }
    }
    [[noreturn, gnu::cold]] static void unknown_peer(std::uint32_t dest);
    /// require_peer(dest); then true if `m` went into a batch (coalesce, see try_coalesce;
    /// on_sent null: a counted send).
    bool batched(std::uint32_t dest, serialization::message const& m,
                 transport::sent_handler* on_sent, bool coalesce, std::uint64_t tag);
    /// send_stream()'s stream that no batch held, posted now in a batch of its own. A function
    /// of its own, not inlined: with both paths in one, a held post's path, the hot one of a
    /// stream of posts, lost its inlining (~45 instructions per 8 B post).
    [[gnu::noinline]] void send_stream_alone(std::uint32_t dest, std::size_t n,
                                             transport::stream_writer write, void const* ctx,
                                             transport::sent_handler* on_sent, std::uint64_t tag);
    /// A message of one index chunk (its stream alone) that did not go into a batch, posted
    /// now as a batch of its own (coalescer::send_now): a batch's post costs its sender about
    /// half of a message's send path (a send slot, the eager copy, its completion). False if
    /// `m` has other chunks or is too large for a batch: nothing done.
    bool alone_in_batch(std::uint32_t dest, serialization::message const& m,
                        transport::sent_handler* on_sent, std::uint64_t tag);
    /// send()'s work once the parcel did not go into a batch.
    bool post(std::uint32_t dest, serialization::message&& m, transport::sent_handler on_sent,
              bool coalesce, bool quiet = false);
    /// Sends `m` in a batch if it is eager-only and small and its destination is busy (see
    /// coalescer): true if it went there; false leaves `on_sent` to the caller (null: a
    /// counted send, coalescer::try_coalesce).
    bool try_coalesce(std::uint32_t dest, serialization::message const& m,
                      transport::sent_handler* on_sent, std::uint64_t tag);
    /// A completion came: true if it was `s`'s last part (only a split message has two).
    static bool last_part(send_state* s) noexcept { return s->split.last_part(); }
    /// Whether a message laid out as `whole` for a receive buffer, with an index of
    /// `index_bytes`, goes to `dest` with its index staged in the outbox instead (laid out for
    /// the inject size; see the definition).
    bool boxes_index(std::uint32_t dest, eager_layout const& whole, std::size_t index_bytes,
                     bool coalesce) const;
    /// Builds `s`'s eager message and descriptors from `m` (the send's message, which post()
    /// moves into `s` afterwards only if the send still needs it: rendezvous, index apart).
    void build(send_state* s, serialization::message const& m, bool coalesce);
    /// The push class of `m` (laid out as `l`) to `dest`, or push_.count: not pushed.
    unsigned push_class(std::uint32_t dest, serialization::message const& m,
                        eager_layout const& l) const noexcept;
    /// build() of a pushed parcel of class `cls`.
    void build_pushed(send_state* s, serialization::message const& m, wire::header h,
                      eager_layout const& l, unsigned cls);
    /// The remote address and key under which `s`'s receiver reads [p, p + n): a copy in the
    /// outbox when `stage` and there is room, else the memory itself (registered).
    std::pair<std::uint64_t, std::uint64_t> expose(send_state* s, void const* p, std::size_t n,
                                                   bool stage);
    /// Gives back what `s` exposed (registration leases, outbox blocks).
    void release_exposed(send_state* s) noexcept;
    /// Clears a send whose slot the caller holds (claimed, or never published) and gives the
    /// slot back.
    void recycle(send_table::slot* slot) noexcept;

    transport_parts parts_;
    memory& memory_;
    coalescer* coalescer_ = nullptr;
    transport::counted_handler const* counted_ = nullptr;                // set_counted_handlers
    transport::counted_failure_handler const* counted_failed_ = nullptr; // set_counted_handlers
    bool dones_ride_ = false;
    outbox* outbox_ = nullptr;
    bool stage_idle_ = true;
    std::byte const* shared_base_ = nullptr;
    std::size_t shared_size_ = 0;
    direct_reader const* readers_ = nullptr;
    mutable send_table sends_; // lock-free
    std::size_t recv_size_;
    std::size_t split_part_, split_max_;
    /// Whether an eager message's inline index of at least index_apart_min bytes is sent from
    /// the message itself as a second iov rather than copied behind its header: where the
    /// provider sends iovs without a copy of its own (rxm over tcp sends them straight to the
    /// socket) and needs no local registration. Not on shm, which copies eager messages through
    /// its inject buffers, split in two, anyway.
    /// Up to index_apart_max bytes only: a message sent so is kept until its send completes,
    /// and the message buffer pool keeps fewer larger buffers (a window of 64 parcels of
    /// 80 KB, 128 KiB buffers each, overflowed it: a malloc per parcel), where a copy lets the
    /// message go at once.
    bool index_apart_ = false;
    push_classes push_{};
    std::size_t push_max_ = 0;
    static constexpr std::size_t index_apart_min = 4096;
    static constexpr std::size_t index_apart_max = 65536;
    /// DONEs waiting for the end of the pass, per destination, and the destinations sent a
    /// DONE in this pass (each listed once; few: a pass reads from few peers). The poller's
    /// alone: rendezvous::finish runs within progress.
    std::vector<std::vector<std::uint64_t>> dones_;
    std::vector<std::uint32_t> done_dests_;
    std::vector<std::uint64_t> sending_; // the ids flush_dones is posting
    /// Rendezvous sends (needs_done) not yet recycled: counted by build() where needs_done is
    /// set, uncounted by recycle(), which every built send reaches (completed, failed, or given
    /// back unpublished). Only rendezvous sends touch it.
    std::atomic<std::size_t> awaiting_done_{0};
};

} // namespace courier::parcelport::fabric
