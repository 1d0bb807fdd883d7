// SPDX-License-Identifier: BSL-1.0
// The receiving side of a rendezvous: the read budget that admits parcels (read_budget.cpp),
// landing buffers, the RMA reads of a parcel's chunks (and of its descriptor table), and the
// parcel's delivery and DONE once they complete (rendezvous.cpp).
#pragma once

#include "context.hpp"
#include "memory.hpp"

#include <courier/common/ring_fifo.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace courier::parcelport::fabric {

class outbox;
class direct_reader;
class sender;
struct incoming;

struct read_op : op {
    incoming* in;
    std::size_t bytes = 0; // of its piece
    std::size_t piece = 0; // its index in in->pieces
    unsigned attempts = 0; // fi_reads of the piece that failed (retried up to max_read_retries)
    explicit read_op(incoming* i) : op(kind::read), in(i) {}
};

/// One RMA read of the current phase.
struct read_piece {
    std::byte* local;
    std::size_t size;
    std::uint64_t remote;
    std::uint64_t key;
    void* desc;
};

/// A parcel whose chunks are being read.
struct incoming {
    std::uint32_t source = 0;
    std::uint64_t send_id = 0;
    serialization::message msg; // its index buffer is filled in place (copied or read)
    std::vector<serialization::serialization_chunk> chunks;
    std::vector<std::shared_ptr<std::byte[]>> owners; // parallel to chunks (null for index)
    std::vector<fid_mr*> mrs;
    std::deque<read_op> reads;      // reads[i] is the context of pieces[i]
    std::vector<read_piece> pieces; // posted in order by post_reads()
    std::size_t next_piece = 0;     // the first not posted yet (-FI_EAGAIN, or the window)
    std::size_t outstanding = 0;    // pieces not completed (posted or not)
    std::size_t posted_bytes = 0;   // of reads posted and not completed: at most the window
    bool post_deferred = false;     // post_reads waits in the backlog (-FI_EAGAIN)
    std::size_t rma_bytes = 0;      // counted against the read budget until finished (or stalled)
    // Read by direct_reader instead of fi_read (rendezvous::start_direct): every piece, a step
    // per progress pass, from pieces[direct_piece] at direct_offset on.
    std::size_t direct_piece = 0;
    std::size_t direct_offset = 0;
    std::chrono::steady_clock::time_point started; // when the current phase's reads began
    std::chrono::steady_clock::time_point moved;   // when a read last completed (or started)
    bool failed = false;
    bool index_read = false; // the index is one of the pieces (not inline in the announcement)
    // Not empty: the parcel's chunks are refused (over the size limit, or no memory to land
    // them; received_chunks_or_refused): only its index is read, and it is delivered with them
    // marked not received.
    std::string refused;
    // Phase one of a parcel whose descriptors are remote: reading the table.
    bool table_phase = false;
    wire::header h{};
    std::vector<std::byte> table;        // read from the sender
    std::vector<std::byte> inline_index; // kept from the eager message for phase two
    std::vector<wire::descriptor> ds;    // the descriptors of the reads set up from it
    /// Ready for the next parcel, keeping what its containers hold (no allocation for the
    /// next one of at most as many chunks and pieces).
    void reset() noexcept;
};

/// Bytes a parcel's rendezvous will read (pointer/rma chunks and a non-inline index), from its
/// descriptors; 0 if none or if the message is malformed (the rendezvous then rejects it).
std::size_t rendezvous_bytes(wire::header const& h, std::byte const* p, std::size_t len);
/// Bytes a read descriptor table announces to read (phase two of descriptors_remote).
std::size_t descriptor_payload(std::vector<std::byte> const& table, std::uint32_t chunk_count);

/// Thread safety: admit, admit_deferred, advance_direct and on_completion from the poller (the
/// thread in progress()); busy() and debug_state() from any thread.
class rendezvous {
public:
    rendezvous(transport_parts const& parts, memory& mem, sender& s,
               transport::receive_handler& on_receive, transport_options const& o,
               std::size_t max_read, std::size_t recv_size, outbox* box = nullptr,
               direct_reader* direct = nullptr);
    ~rendezvous();
    rendezvous(rendezvous const&) = delete;
    rendezvous& operator=(rendezvous const&) = delete;

    /// Starts the reads of a parcel that has `rma_bytes` to read now, or defers it while the
    /// reads in flight use up the read budget: that bounds the receiver's memory under a flood
    /// of large messages and keeps the pooled landing buffers few and cache-warm. Throws
    /// serialization_error for a malformed parcel.
    void admit(wire::header const& h, std::byte const* p, std::size_t len, std::size_t rma_bytes);
    /// Admits the waiting parcels that the budget now allows (progress, first: a new pass);
    /// true if any.
    bool admit_deferred();
    /// Reads the next step of the oldest parcel read directly (progress); true if there was one.
    bool advance_direct();
    /// A read completed (`failed`: with an error). A failed fi_read is posted again, up to
    /// max_read_retries times, while its peer is not declared failed (the sender keeps the
    /// chunk until DONE, and a read changes nothing there); then the parcel fails: it is delivered
    /// as refused when its index came inline (a call then fails with the reason instead of waiting
    /// for good), else dropped.
    void on_completion(read_op* r, bool failed, char const* why = nullptr);
    static constexpr unsigned max_read_retries = 3;
    /// fi_read of r's piece into its landing buffer.
    long post_piece(read_op* r);
    /// A failed read posted again (through the transport's deferred posts); the parcel fails
    /// when the provider refuses it for good or its peer was declared failed meanwhile.
    long post_again(read_op* r);
    /// Returns the read budget of parcels whose reads outlived the stall timeout (every few
    /// passes). Their buffers stay until the reads complete, if ever: nothing is freed under a
    /// read the provider may still do.
    void release_stalled();
    /// Reads under way or parcels waiting for the budget.
    bool busy() const noexcept { return busy_.load(std::memory_order_acquire); }
    std::string debug_state() const;

private:
    /// Sets up the reads of an admitted parcel (of its descriptor table first, if remote).
    void start(wire::header const& h, std::byte const* p, std::size_t len, std::size_t rma_bytes);
    using incoming_map = std::unordered_map<incoming*, std::unique_ptr<incoming>>;
    /// An incoming parcel with its entry of incoming_, both reused from parcel to parcel.
    using incoming_node = incoming_map::node_type;
    /// An entry being set up or finished: back to the spares when this ends (an exception
    /// included), unless start_reads has moved it into incoming_.
    struct held {
        rendezvous& owner;
        incoming_node node;
        held(rendezvous& r, incoming_node n) : owner(r), node(std::move(n)) {}
        held(held&& o) noexcept : owner(o.owner), node(std::move(o.node)) {}
        held& operator=(held&&) = delete;
        ~held() { owner.recycle(std::move(node)); }
        incoming* get() const noexcept { return node.mapped().get(); }
    };
    held fresh_incoming();
    void recycle(incoming_node nh) noexcept;
    /// Sets up the reads of the parcel whose descriptors are in `e`'s ds.
    void begin_reads(held& e, wire::header const& h, bool index_inline,
                     std::byte const* inline_index, std::size_t rma_bytes);
    void start_reads(held& e, bool index_inline);
    /// Copies the pieces of `in` that lie in its sender's outbox and drops them from its
    /// pieces: only the others are read.
    void copy_from_outbox(incoming* in);
    /// Registers `e` (every piece read directly) and reads its first step now, unless parcels
    /// before it are still being read: it waits in direct_queue_ then.
    void start_direct(held& e);
    /// Reads the next step (direct_step or direct_step_alone bytes) of a parcel read directly;
    /// true once it is done (or failed: in->failed).
    bool read_direct_step(incoming* in);
    /// Posts the reads of `in` not posted yet, in order, while they fit the window (the read
    /// budget; one piece at least: the rest follow as reads complete, on_completion). Returns
    /// -FI_EAGAIN when the provider's queue is full (the backlog calls it again), else 0: a
    /// read refused for good fails the parcel (drop_unposted).
    long post_reads(incoming* in);
    /// A failed parcel: its reads not posted yet never will be; finishes it if none is
    /// outstanding. Returns 0.
    long drop_unposted(incoming* in);
    /// Phase two of a parcel whose descriptor table was read (wire::descriptors_remote).
    void continue_after_table(held& e);
    /// A registered parcel's reads are done: takes it out of incoming_, then finish_entry.
    void finish(incoming* in);
    /// Delivers the parcel in `e` (or starts phase two of a descriptor table), sends its DONE
    /// and gives back its budget.
    void finish_entry(held& e);
    /// Gives back read budget; parcels waiting for it are admitted by the next progress pass
    /// (admit_deferred), not here: by then the worker has run the tasks of the parcels just
    /// delivered, their landing buffers went back to the pool, and the next read lands in one
    /// that is still in cache. `landed`: the bytes arrived (the parcel goes to its task), so
    /// they count against the budget until this pass ends (landed_in_pass_).
    void release_budget(std::size_t bytes, bool landed = false);
    /// Whether a parcel of `rma_bytes` must wait for budget (under mutex_): the reads in
    /// flight and this pass's deliveries use it up (one parcel is admitted when none do). If
    /// no read in flight will release budget, the next pass admits it (admit_pending_).
    bool must_wait(std::size_t rma_bytes);

    transport_parts parts_;
    memory& memory_;
    sender& sender_;
    transport::receive_handler& on_receive_;
    transport_options const& opts_;
    std::size_t max_read_, recv_size_;
    outbox* outbox_;        // shm: where peers stage chunks (copied out, not read)
    direct_reader* direct_; // shm: reads without fi_read (process_vm_readv)
public:                     // (public for the tests)
    /// A direct read copies at most direct_step per progress pass while a rendezvous send of
    /// this side waits for its DONE (the other direction of a stream), so that a large chunk
    /// holds up that direction (the DONEs and announcements that the pass sends at its end)
    /// and the worker's tasks for ~0.1 ms at a time, not for the whole copy (~0.3-0.6 ms for
    /// 4 MiB). 1 MiB: against 256 KiB steps (a process_vm_readv each: 8 per 2 MiB parcel where
    /// OpenMPI's vader makes one), osu_bibw 1.03-1.11x at 512 KiB - 4 MiB in two paired runs on
    /// the AMD EPYC family 26 model 2 (ahead in 7 of 7 rounds at 1-2 MiB), one-way bw and
    /// latency level; on the family 25 machine 1 MiB steps had lost 8 % at 4 MiB. Larger steps
    /// lose at 4 MiB: 2 MiB ones 0.92x here, 4 MiB ones 0.74x there (benchmarks/RESULTS.md,
    /// "Landing alignment and read steps").
    /// Otherwise nothing of this side waits on the other, and a step of direct_step_alone
    /// covers a whole chunk of up to 8 MiB in one pass (a read per piece): against 1 MiB steps,
    /// 6 paired rounds on shm, a lone call 0.83 / 0.78x the latency at 2 / 4 MiB and osu_bw
    /// 1.20 / 1.30x at 2 / 4 MiB, bibw and 1 MiB within noise (benchmarks/RESULTS.md,
    /// "Landing alignment and read steps"). The worker's other tasks then wait for up to one
    /// such copy, as they wait for OpenMPI's copy of a whole matched piece under the MPI
    /// parcelport.
    static constexpr std::size_t direct_step = 1024 * 1024;
    static constexpr std::size_t direct_step_alone = 8 * 1024 * 1024;

private:
    /// Parcels read directly, oldest first. The poller's alone (start_reads and
    /// advance_direct run only within progress), so no lock: progress checks it every pass.
    courier::detail::ring_fifo<incoming*> direct_queue_;
    mutable std::mutex mutex_; // incoming_, spare_, deferred_, reading_bytes_
    incoming_map incoming_;
    /// Finished parcels' entries, for the next ones (at most max_spare).
    static constexpr std::size_t max_spare = 64;
    std::vector<incoming_node> spare_;
    /// Rendezvous parcels waiting for the read budget: their eager messages, copied. A vector
    /// used as a queue ([head, count) waiting), whose slots and copies' storage are reused, so
    /// that waiting allocates nothing in the steady state.
    struct deferred_parcel {
        wire::header h{};
        std::vector<std::byte> eager;
        std::size_t rma_bytes = 0;
    };
    class deferred_queue {
    public:
        bool empty() const noexcept { return head_ == count_; }
        std::size_t size() const noexcept { return count_ - head_; }
        deferred_parcel& front() noexcept { return slots_[head_]; }
        /// Throws std::bad_alloc (nothing queued then).
        void push(wire::header const& h, std::byte const* p, std::size_t len, std::size_t rma);
        /// Takes the front parcel into `to`, whose copy's storage (up to max_kept_copy bytes) the
        /// slot keeps for reuse. An emptied queue keeps at most max_slots slots: what it holds
        /// while nothing waits stays under max_slots * max_kept_copy bytes (4 MiB).
        void pop_into(deferred_parcel& to) noexcept;

    private:
        static constexpr std::size_t max_slots = 1024, max_kept_copy = 4096;
        std::vector<deferred_parcel> slots_; // [head_, count_) waiting, the rest spare
        std::size_t head_ = 0, count_ = 0;
    };
    deferred_queue deferred_;
    /// The parcel admit_deferred is starting (it runs in progress(), under the poll lock: one
    /// thread at a time); its copy's storage goes back to the queue with the next one taken.
    deferred_parcel admitting_;
    std::size_t reading_bytes_ = 0;
    /// shm: bytes of parcels delivered in this progress pass, whose tasks have not run yet:
    /// they count against the read budget too. Copies from an outbox and shm's reads (of up to
    /// a direct read's step) complete within the pass that admits them, so without this a pass
    /// would land every parcel that arrived (a window of 64 x 256 KiB: 16 MiB of landing buffers,
    /// out of the cache, before the first task frees one). Changed under mutex_; reset by
    /// admit_deferred (poller).
    std::atomic<std::size_t> landed_in_pass_{0};
    std::atomic<bool> admit_pending_{false}; // budget was released with parcels waiting
    /// reading_bytes_ != 0 || !deferred_.empty(), stored under mutex_ by every change of
    /// either (publish_busy), so that busy(), which every progress pass asks, takes no lock
    /// (it did: ~80 instructions a pass, a twentieth of a small parcel's receiving side).
    std::atomic<bool> busy_{false};
    void publish_busy() noexcept; // under mutex_
};

} // namespace courier::parcelport::fabric
