// SPDX-License-Identifier: BSL-1.0
// Coalescing (transport::send_coalesced): small eager-only parcels to one destination that is
// busy, and on shm and tcp the announcements of rendezvous parcels, wait in a batch
// (wire::batch), which the next progress pass posts as one message (or at once, once it holds
// enough); on tcp the DONEs to that destination ride in it (add_control).
#pragma once

#include "../eager_writer.hpp"
#include "context.hpp"
#include "split_parts.hpp"

#include <courier/common/spinlock.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

/// A coalesced message being filled or in flight: the records of several parcels to one
/// destination (each an eager message, or a small parcel's stream alone: wire::record_compact)
/// and their handlers, run when the batch's send completes (a counted send has none: the batch
/// reports how many it carried, coalescer::set_counted_handler). An eager-only parcel
/// takes no slot in the send table: nothing of it is needed after its bytes were copied into
/// the batch (no registration, no DONE to wait for). A rendezvous parcel's announcement keeps
/// its slot, which its handler marks sent (sender::on_announced) and its DONE completes.
/// A batch's bytes: one block of the batch limit, kept by its batch_op from one use to the next.
/// Unlike a vector's resize, extending it does not first zero the bytes a record then writes.
class batch_bytes {
public:
    /// Empties it to the room of a `header` (written when the batch is posted), with room for
    /// `capacity` bytes in all.
    void reset(std::size_t capacity, std::size_t header) {
        if (capacity_ < capacity) {
            data_ = std::make_unique_for_overwrite<std::byte[]>(capacity);
            capacity_ = capacity;
        }
        size_ = header;
    }
    /// The next `n` bytes (uninitialized), which the caller fills.
    std::byte* extend(std::size_t n) {
        if (n > capacity_ - size_) {
            throw std::logic_error("courier: a coalesced record beyond its batch's room");
        }
        std::byte* at = data_.get() + size_;
        size_ += n;
        return at;
    }
    void truncate(std::size_t size) noexcept { size_ = size; }
    std::byte* data() noexcept { return data_.get(); }
    std::size_t size() const noexcept { return size_; }

private:
    std::unique_ptr<std::byte[]> data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

struct batch_op;
/// The second part's context of a batch sent as two parts.
struct batch_part_op : op {
    batch_op* b;
    explicit batch_part_op(batch_op* bb) : op(kind::batch_part), b(bb) {}
};

/// What a batch's records add to the transport's statistics, counted when it is posted (one
/// atomic addition per batch, not per parcel: each costs ~10 ns where a locked instruction does).
struct batch_counts {
    std::uint64_t messages = 0;     // eager-only parcels (an announcement counted at its send)
    std::uint64_t eager_bytes = 0;  // their eager messages' bytes
    std::uint64_t copied_bytes = 0; // their index bytes, copied into the batch
    batch_counts& operator+=(batch_counts const& o) noexcept {
        messages += o.messages;
        eager_bytes += o.eager_bytes;
        copied_bytes += o.copied_bytes;
        return *this;
    }
};

/// The completion of the records coalescer::send_now wrote straight into `dest`'s message
/// ring since the last one (coalescer::peer_out::lone_pending of them): listed in the local
/// completions while any are pending, handled by coalescer::on_ring_lone.
struct ring_lone_op : op {
    std::uint32_t dest = 0;
    ring_lone_op() : op(kind::ring_lone) {}
};

/// batch_counts summed where one writer at a time adds (a peer's ring-lone writes).
struct batch_counts_atomic {
    std::atomic<std::uint64_t> messages{0};
    std::atomic<std::uint64_t> eager_bytes{0};
    std::atomic<std::uint64_t> copied_bytes{0};
};

struct batch_op : op {
    std::uint32_t dest = 0;
    batch_bytes buf;                               // the header's room, then the records
    std::vector<transport::sent_handler> handlers; // of the records that have one
    std::size_t records = 0; // parcels in it; those beyond handlers' are counted sends
    std::vector<std::uint64_t> counted_tags; // the counted sends' tags (send_counted), in order
    std::size_t controls = 0;      // records that are no parcel: DONE messages (add_control)
    std::size_t announcements = 0; // records that announce a rendezvous parcel
    batch_counts counts;           // of its records (under its peer's lock)
    // A batch over the inject size (shm) goes as two parts, as a split message.
    split_parts<batch_part_op> split{this};
    batch_op() : op(kind::batch) {}
};

/// A parcel is held back only while this many messages to its destination are in flight
/// (posted, completion not yet seen), or a batch is open (coalescer's `hold_in_flight`; the
/// transport's default, transport_options::coalesce_in_flight). With 2, one message in flight
/// never holds the next: on shm through the provider, whose sends complete when the peer has
/// taken them, a request/reply exchange often has one in flight. tcp's sends complete once the
/// kernel has the bytes, and shm's through a message ring in the next pass, so a lone request
/// or reply finds none in flight there and 1 leaves it as alone.
constexpr std::uint32_t coalesce_in_flight = 2;

/// A batch within the inject size that holds this many parcels is posted before a record takes
/// it past the inject size (coalescer::batch_with_room); one with fewer grows into two parts.
constexpr std::size_t split_records = 4;

/// When a batch leaves before it is full or the progress pass ends (coalescer): once it holds
/// at least `records` parcels and `bytes` bytes.
struct leave_rule {
    std::size_t records;
    std::size_t bytes;
    /// A batch also leaves once this many of its records have a completion handler (0: only
    /// `records` counts): a rendezvous announcement's reads start when its batch arrives, and
    /// a send with a handler is waited for, where a counted post is not.
    std::size_t handled = 0;
    /// Where batches do not leave by count (tcp), rendezvous announcements still join them if
    /// this is not 0, and a batch leaves once it holds this many: each parcel's message costs
    /// both sides system calls, and its reads start only when its batch arrives.
    std::size_t announced = 0;
};

/// Thread safety: try_coalesce/send_now/posted/completed/open_for/post_open from any thread;
/// flush and on_completion from the poller.
class coalescer {
public:
    /// `batch_limit`: the largest coalesced message. `leave`: when a batch is posted at once,
    /// without waiting for the progress pass (leave.records at least 1): a batch that amortizes
    /// its send already leaves, so that a stream of parcels hands the receiver work while the
    /// sender goes on, where a batch could hold many more.
    /// `split_part` (shm: the inject size; 0: none): a batch of more bytes goes as two parts of
    /// at most that many, which the receiver joins (fragment_joiner), so that a batch may be
    /// larger than one inject without taking shm's CMA protocol.
    /// `hold_in_flight` (at least 1): a parcel joins a batch while this many messages to its
    /// destination are in flight (coalesce_in_flight).
    coalescer(transport_parts const& parts, std::size_t batch_limit, leave_rule leave,
              std::size_t split_part = 0, std::uint32_t hold_in_flight = coalesce_in_flight);
    ~coalescer();
    void set_peers(std::size_t n);
    /// Where the ends of a batch's records without a handler go (transport::send_counted):
    /// one call per batch, and if the batch failed, each record's tag to `failed` first (null:
    /// none). Set-up call.
    void set_counted_handler(transport::counted_handler const* h,
                             transport::counted_failure_handler const* failed) noexcept {
        counted_ = h;
        counted_failed_ = failed;
    }
    /// A message to `dest` was posted / completed (in flight counts decide whether to hold).
    void posted(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_add(1, std::memory_order_acq_rel);
    }
    void completed(std::uint32_t dest) noexcept {
        out_[dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
    }
    /// True if a message of `eager_bytes` (an eager-only parcel, all in its eager message) is
    /// small enough to coalesce: a third of a batch at most, so that a batch holds three (on shm,
    /// whose batches are its 4 KiB inject size, parcels of 1 KiB coalesce: 1.5x the rate of
    /// 1 KiB posts of a quarter's bound, which sent each alone).
    bool small_enough(std::size_t eager_bytes) const noexcept {
        return 3 * wire::record_size(eager_bytes) <= batch_limit_ - sizeof(wire::header);
    }
    /// The largest size small_enough() takes (record_size grows with the size), 0 if none.
    std::size_t largest_small() const noexcept {
        std::size_t lo = 0, hi = batch_limit_; // small_enough(hi + 1) is false
        if (!small_enough(0)) {
            return 0;
        }
        while (lo < hi) {
            std::size_t const mid = lo + (hi - lo + 1) / 2;
            if (small_enough(mid)) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return lo;
    }
    /// Whether a batch leaves once it holds a count of parcels whatever their bytes (shm: 16, or 8
    /// with handlers), not only at the end of a progress pass or once it holds enough bytes (tcp).
    bool leaves_by_count() const noexcept {
        return leave_.bytes == 0 && leave_.records < batch_limit_;
    }
    /// Whether a rendezvous parcel's announcement may join a batch (try_coalesce with
    /// `announcement`): where batches leave by count, or leave at a count of announcements.
    bool takes_announcements() const noexcept { return leaves_by_count() || leave_.announced != 0; }
    /// A first look, without the lock: would a parcel to `dest` be held now (a message to it
    /// in flight or a batch open)? try_coalesce decides under the lock.
    bool would_hold(std::uint32_t dest) const noexcept {
        peer_out const& po = out_[dest];
        return po.open.load(std::memory_order_acquire) != nullptr ||
               po.in_flight.load(std::memory_order_acquire) >= hold_in_flight_;
    }
    /// Adds an eager-only parcel of `eager_bytes` (small_enough) to its destination's batch if
    /// a message to that destination is in flight or a batch is open: `write(std::byte* at)`
    /// writes its record's bytes in place (its eager message, or with record_compact its
    /// stream), and `on_sent` is kept to run when the batch's send
    /// completes (null: the send is counted, set_counted_handler, with `tag` for its failure).
    /// False: the caller posts it itself (`on_sent` is then untouched). A rendezvous
    /// parcel's announcement comes here too where it may (takes_announcements; sender::send): in a
    /// stream it waits for a few more parcels; the last of a burst waits, as a small parcel
    /// does, for the end of the pass (with one worker per locality: until the sending task
    /// yields or ends), and its receiver's reads with it. Its send completes at its DONE, after
    /// the batch's handler ran. `counts`: what the record adds to the statistics once its batch
    /// is posted. `record_flags`: the record's (wire::record_compact: `write` writes the
    /// parcel's stream alone, `eager_bytes` of it). `announcement`: the record announces a
    /// rendezvous parcel (leave_rule::announced).
    template <class Write>
    bool try_coalesce(std::uint32_t dest, std::size_t eager_bytes, Write&& write,
                      transport::sent_handler* on_sent, std::uint64_t tag,
                      batch_counts const& counts = {}, std::uint32_t record_flags = 0,
                      bool announcement = false) {
        if (!would_hold(dest)) {
            return false; // it leaves at once (the request/reply case: no lock taken)
        }
        std::size_t const rec = wire::record_size(eager_bytes);
        batch_op* full = nullptr; // a batch with no room left: posted once the lock is released
        post_when_done post_full{this, full};
        peer_out& po = out_[dest];
        std::lock_guard g(po.m);
        if (!would_hold(dest)) {
            return false;
        }
        batch_op* b = open_with_room(po, dest, rec, full);
        append(b, rec, eager_bytes, write, on_sent, tag, counts, record_flags);
        b->announcements += announcement ? 1 : 0;
        if (((b->records >= leave_.records && b->buf.size() >= leave_.bytes) ||
             (leave_.handled != 0 && b->handlers.size() >= leave_.handled) ||
             (leave_.announced != 0 && b->announcements >= leave_.announced)) &&
            full == nullptr) {
            // Enough to amortize the message: it leaves now, so that the receiver works on it
            // while this thread goes on adding to the next one (a sender's long loop of posts
            // would otherwise hand over everything at its end). Still listed as open; flush
            // then finds no batch, or the next one.
            full = close_open(po);
        }
        return true;
    }
    /// As try_coalesce, for a parcel that leaves now whatever is in flight: in a batch of its
    /// own, or in the batch open to `dest`, which then leaves with it. A stream no message was
    /// built for (sender::send_stream): a lone request pays a batch's post, not a message's
    /// whole send path; a counted one (no `on_sent`: a post or a reply) to a peer reached by a
    /// message ring, with no batch open to it, not even that (send_lone_by_ring).
    template <class Write>
    void send_now(std::uint32_t dest, std::size_t eager_bytes, Write&& write,
                  transport::sent_handler* on_sent, std::uint64_t tag, batch_counts const& counts,
                  std::uint32_t record_flags) {
        if (on_sent == nullptr && parts_.rings != nullptr && counted_ != nullptr &&
            send_lone_by_ring(dest, eager_bytes, write, counts, record_flags)) {
            return;
        }
        std::size_t const rec = wire::record_size(eager_bytes);
        // A batch closed full by batch_with_room is posted whatever happens after (the next
        // batch's allocation or `write` may throw): its parcels are others'.
        batch_op* full = nullptr;
        post_when_done post_full{this, full};
        batch_op* b = nullptr;
        bool lone = false; // a batch of this record alone, not one open to `dest` before
        {
            peer_out& po = out_[dest];
            std::lock_guard g(po.m);
            b = open_with_room(po, dest, rec, full);
            append(b, rec, eager_bytes, write, on_sent, tag, counts, record_flags);
            lone = b->records == 1 && b->controls == 0;
            if (lone) {
                ++parts_.stats.lone_batches;
            }
            b = close_open(po); // still listed: flush then finds none open, or a later one
        }
        if (full != nullptr) {
            post_batch(std::exchange(full, nullptr)); // before this one: in the order written
        }
        if (b != nullptr) {
            if (lone) {
                post_lone(b, on_sent);
            } else {
                post_batch(b);
            }
        }
    }
    /// The end of the records send_now wrote into `o->dest`'s ring since the last call:
    /// counted (the counted handler), and no longer in flight. Poller, from the local
    /// completions.
    void on_ring_lone(ring_lone_op* o);
    /// Adds the records send_now wrote straight into rings to `s`'s batch counts, as the
    /// batches of one they are on the wire.
    void add_ring_lone_stats(statistics& s) const noexcept;
    /// Parcels in closed batches not completed yet, plus one for each open batch (whose
    /// parcels count once it closes): nonzero while a batch holds parcels. The open count is
    /// read first: close_open() adds to the parcels before it takes the batch off the open
    /// count, so a read that sees it taken off sees the parcels too.
    std::size_t in_flight() const noexcept {
        std::size_t const open = open_batches_.load(std::memory_order_acquire);
        return open + parcels_in_flight_.load(std::memory_order_acquire);
    }
    /// Opens a batch to `dest` if none is open, so that the parcels sent to it next join it
    /// whatever is in flight (would_hold), until post_open() or the end of a progress pass
    /// (flush) posts it: transport::gather. Any thread. Throws std::bad_alloc (nothing opened).
    void open_for(std::uint32_t dest);
    /// Posts `dest`'s open batch now, if one is open (one that holds no record, parcel or
    /// DONE, is dropped without a send); true if one was. Any thread.
    bool post_open(std::uint32_t dest);
    /// Adds the control message [p, p + n) (a DONE: wire::done) as a record to `dest`'s open
    /// batch, if one is open and has room for it without growing past a part (shm); true if
    /// added. It leaves with the batch (at the latest when the pass ends: flush), instead of as
    /// a message of its own: on tcp each message costs both sides system calls, and the replies
    /// to a stream of rendezvous parcels wait in a batch when their DONEs go. Poller only.
    bool add_control(std::uint32_t dest, void const* p, std::size_t n);
    /// Posts the open batches (the poller, at the end of each pass); true if any.
    bool flush();
    bool has_open() const noexcept { return open_batches_.load(std::memory_order_acquire) != 0; }
    /// Whether a batch to `dest` is open now (a first look, without the lock).
    bool open_to(std::uint32_t dest) const noexcept {
        return out_[dest].open.load(std::memory_order_acquire) != nullptr;
    }
    /// A part of the batch's send completed (or failed: `ec`); after the last (one, or two
    /// for a batch sent in two parts) its parcels complete.
    void on_completion(batch_op* b, std::error_code ec);

private:
    /// Per destination: messages posted and not completed, and the batch being filled (changed
    /// under m; read without it for a first look).
    struct peer_out {
        courier::detail::spinlock m; // held for the few instructions of a record (or a flush)
        std::atomic<std::uint32_t> in_flight{0};
        std::atomic<batch_op*> open{nullptr};
        bool listed = false; // in open_list_ (under m): a destination is listed once
        // Records written straight into the ring (send_lone_by_ring) whose end is not counted
        // yet; `lone` is in the local completions while this is not 0.
        std::atomic<std::uint32_t> lone_pending{0};
        ring_lone_op lone;
        // Their statistics, written under the ring's write lock (one writer at a time).
        std::atomic<std::uint64_t> lone_sent{0};
        batch_counts_atomic lone_counts;
    };
    /// send_now's record written straight into `dest`'s message ring as a batch of one (the
    /// same bytes post_batch would send), when no batch is open to `dest` and the ring takes
    /// it: no batch_op, no peer lock, no batch statistics' locked additions (a request or reply
    /// alone, the common case of a round trip). As a batch through a ring, it stays in flight
    /// (would_hold) until the next progress pass, which counts its end (on_ring_lone). False,
    /// with nothing written or counted: the caller takes the usual path. A throw from `write`
    /// leaves nothing written (the ring publishes only after it).
    template <class Write>
    bool send_lone_by_ring(std::uint32_t dest, std::size_t eager_bytes, Write& write,
                           batch_counts const& counts, std::uint32_t record_flags) {
        peer_out& po = out_[dest];
        if (po.open.load(std::memory_order_acquire) != nullptr) {
            return false; // the record joins the open batch, which leaves with it
        }
        std::size_t const rec = wire::record_size(eager_bytes);
        bool const sent = parts_.rings->send(dest, sizeof(wire::header) + rec, [&](std::byte* at) {
            wire::header h = parts_.peers.header_of(wire::batch);
            h.chunk_count = 1;
            h.index_size = rec;
            std::memcpy(at, &h, sizeof h);
            write_record(at + sizeof h, rec, eager_bytes, write, record_flags);
            courier::detail::add_single_writer(po.lone_sent);
            courier::detail::add_single_writer(po.lone_counts.messages, counts.messages);
            courier::detail::add_single_writer(po.lone_counts.eager_bytes, counts.eager_bytes);
            courier::detail::add_single_writer(po.lone_counts.copied_bytes, counts.copied_bytes);
        });
        if (!sent) {
            return false;
        }
        // In flight before its completion is listed: on_ring_lone takes off only what was added.
        parcels_in_flight_.fetch_add(1, std::memory_order_acq_rel);
        po.in_flight.fetch_add(1, std::memory_order_acq_rel);
        if (po.lone_pending.fetch_add(1, std::memory_order_acq_rel) == 0) {
            parts_.local->push(&po.lone);
        }
        parts_.peers.wake(dest, 0);
        return true;
    }
    /// The open batch of `dest` (po.m held) with room for a record of `rec` bytes: a new one
    /// when there is none, or when the open one is full (then returned in `full`, for the
    /// caller to post after the lock).
    batch_op* batch_with_room(peer_out& po, std::uint32_t dest, std::size_t rec, batch_op*& full);
    /// batch_with_room()'s common case inline (a small parcel's path): the open batch, if the
    /// record fits it without reaching past batch_limit_ or a part's end (nothing closes then);
    /// else batch_with_room() decides.
    batch_op* open_with_room(peer_out& po, std::uint32_t dest, std::size_t rec, batch_op*& full) {
        batch_op* b = po.open.load(std::memory_order_relaxed);
        if (b != nullptr) {
            std::size_t const after = b->buf.size() + rec;
            if (after <= batch_limit_ && (split_part_ == 0 || after <= split_part_)) {
                return b;
            }
        }
        return batch_with_room(po, dest, rec, full);
    }
    /// Takes `po`'s open batch (po.m held) to be posted: no longer open, and its message counts
    /// as in flight. nullptr if none is open.
    batch_op* close_open(peer_out& po) noexcept {
        batch_op* b = po.open.exchange(nullptr, std::memory_order_acq_rel);
        if (b != nullptr) {
            // Counted before it stops counting as open: in_flight() never drops to 0 between.
            parcels_in_flight_.fetch_add(b->records, std::memory_order_acq_rel);
            open_batches_.fetch_sub(1, std::memory_order_acq_rel);
            // A batch of DONEs alone counts as any batch, unlike a DONE message: the reply that
            // follows may then wait in a batch that the next pass's DONEs join. Counting only
            // batches with parcels made no clear difference (osu_bw at 128 and 256 KiB on tcp:
            // 6,881 DONE messages against 6,247 for 13,064 parcels, one run each).
            po.in_flight.fetch_add(1, std::memory_order_acq_rel);
        }
        return b;
    }
    batch_op* take_batch(std::uint32_t dest);
    /// Posts `b`. Refused outright, its senders hear it from their handlers (they have
    /// returned), or with `rethrow` the exception goes to the caller (post_lone).
    void post_batch(batch_op* b, bool rethrow = false);
    /// post_batch for a batch that holds the caller's record alone (send_now): refused
    /// outright, it throws to the caller, as a message's send does, with nothing of the record
    /// left (its handler back in `*on_sent`, not counted, not in flight, the batch free): the
    /// runtime undoes what it counted for it, keeps a credit for later, skips an ordered
    /// call's number.
    void post_lone(batch_op* b, transport::sent_handler* on_sent);
    /// A batch the provider refused for good: its senders hear it from their handlers.
    void refused(batch_op* b);
    /// refused(b), for a post of `b` that waits in the backlog.
    backlog::refused_handler refused_later(batch_op* b);
    /// Posts the batch `full` points to (if any) when it goes out of scope: a batch closed
    /// full under a destination's lock leaves once the lock is released, whatever the adding
    /// of the next record does (throw included).
    struct post_when_done {
        coalescer* self;
        batch_op*& full;
        ~post_when_done() {
            if (full != nullptr) {
                self->post_batch(full);
            }
        }
    };
    /// Writes a record of `eager_bytes` (`rec` bytes with its prefix and padding) at `r`. The
    /// padding (0-7 bytes) is zeroed by one store over the record's last 8 bytes, first: the
    /// prefix and the bytes then write over what of it is theirs (a memset call cost ~15
    /// instructions per small parcel).
    template <class Write>
    static void write_record(std::byte* r, std::size_t rec, std::size_t eager_bytes, Write& write,
                             std::uint32_t record_flags) {
        std::memset(r + rec - 8, 0, 8);
        write_record_prefix(r, eager_bytes, record_flags);
        write(r + wire::record_prefix);
    }
    /// Writes a record of `eager_bytes` (`rec` with its prefix and padding) at the end of `b`
    /// (under its destination's lock), with its handler if `on_sent`, else its `tag`; on a
    /// throw (from `write`, or no memory for the tag), `b` and `*on_sent` are as they were.
    template <class Write>
    static void append(batch_op* b, std::size_t rec, std::size_t eager_bytes, Write& write,
                       transport::sent_handler* on_sent, std::uint64_t tag,
                       batch_counts const& counts, std::uint32_t record_flags) {
        std::size_t const at = b->buf.size();
        if (on_sent != nullptr) {
            b->handlers.push_back(std::move(*on_sent)); // a noexcept move: on failure, untouched
        } else {
            b->counted_tags.push_back(tag); // the capacity stays with the batch
        }
        try {
            write_record(b->buf.extend(rec), rec, eager_bytes, write, record_flags);
        } catch (...) {
            b->buf.truncate(at);
            if (on_sent != nullptr) {
                *on_sent = std::move(b->handlers.back());
                b->handlers.pop_back();
            } else {
                b->counted_tags.pop_back();
            }
            throw;
        }
        ++b->records;
        b->counts += counts;
    }
    /// Posts `b` as two parts (b->buf.size() > split_part_).
    void post_split_batch(batch_op* b);
    /// Runs `b`'s handlers and frees it.
    void finish(batch_op* b, std::error_code ec);

    transport_parts parts_;
    std::size_t batch_limit_;
    leave_rule leave_;
    std::size_t split_part_;
    std::uint32_t hold_in_flight_;
    std::atomic<std::uint32_t> split_batches_{0}; // numbers the split batches' ids
    std::unique_ptr<peer_out[]> out_;
    std::size_t out_size_ = 0;
    transport::counted_handler const* counted_ = nullptr;
    transport::counted_failure_handler const* counted_failed_ = nullptr;
    std::atomic<std::uint32_t> open_batches_{0};
    std::atomic<std::size_t> parcels_in_flight_{0};
    courier::detail::spinlock batch_mutex_; // open_list_, all_, free_ (a few instructions)
    std::vector<std::uint32_t> open_list_;
    std::vector<std::uint32_t> flushing_; // flush's copy of open_list_ (the poller's)
    std::vector<std::unique_ptr<batch_op>> all_;
    std::vector<batch_op*> free_;
};

} // namespace courier::parcelport::fabric
