// SPDX-License-Identifier: BSL-1.0
// The MPI parcelport (make_mpi_transport): the transport interface over non-blocking MPI
// point-to-point calls on a duplicate of MPI_COMM_WORLD. Protocol and threading:
// libs/parcelport/README.md ("The MPI transport").
//
// Sender: a header message (tag 1) in the eager message format (eager_writer.hpp; send_id = the
// data tag; keys 0, addresses the chunks' offsets within a cache line), the index inline up to the
// eager threshold; then an MPI_Isend of each pointer/rma chunk, and of a larger index, from the
// caller's memory with the data tag, in pieces of read_piece (MPI counts are int), up to
// send_window pieces ahead of those completed; on_sent once every MPI_Isend completed. Receiver:
// MPI_Improbe(any source, tag 1) + MPI_Imrecv, the checks of received_parts.hpp, a landing buffer
// per pointer/rma chunk (rma chunks: rma pool memory), an MPI_Irecv into each from the sender with
// the data tag, a piece at a time past read_piece bytes (below); all received: deliver.
#pragma once
#include "../batch_reader.hpp"
#include "../doorbell.hpp"
#include "../eager_writer.hpp"
#include "../received_parts.hpp"
#include "../wire.hpp"
#include "mpi_error.hpp"

#include <courier/common/log.hpp>
#include <courier/common/ring_fifo.hpp>
#include <courier/common/small_alloc.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization/error.hpp>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <fmt/format.h>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace courier::parcelport::mpi_pp {

using serialization::chunk_type;

constexpr int header_tag = 1;
constexpr int first_data_tag = 2;
/// Data tags cycle per destination through this many values (MPI guarantees tags up to 32767;
/// transport_options::mpi_data_tags may take fewer). A tag can come round again while the
/// parcel that had it before is still being received: a sender's send completes once MPI has
/// its bytes (small pieces go eagerly), and a receiver posts a large parcel's pieces a few at a
/// time. MPI matches the messages of one sender and tag in the order they were sent, so the
/// receiver posts the receives of parcels that share a sender and a tag in header order: a
/// parcel whose tag is held (held_tags_: an earlier parcel with it has receives not yet
/// posted) waits among the deferred headers, and so does every parcel after it.
constexpr std::uint32_t data_tags = 32000;
/// Sends in flight at most (each holds its MPI requests); later ones wait in the backlog.
constexpr std::size_t max_sends_in_flight = 1024;
/// Headers taken from MPI per progress() pass at most.
constexpr int max_probes_per_pass = 64;
/// A sender's pieces of one parcel posted and not completed at most (post_data): few enough
/// that their rendezvous headers do not hold up later messages (heartbeats) at a receiver that
/// progresses rarely, enough that a sender whose workers compute without yielding still moves
/// 64 MiB (8 MiB pieces) per liveness tick.
constexpr std::size_t send_window = 8;
/// The landing buffers of a parcel with at least this many bytes to receive are allocated
/// without the transport's lock (land()), by a thread not marked short_progress_only() (the
/// liveness thread's heartbeats would wait). Allocating can take long: AddressSanitizer writes
/// the shadow of a new 2 GiB block (256 MiB, page by page), about 1 s, and a pass that held the
/// lock so long kept this locality's heartbeats from leaving (send_control queues them behind
/// the lock) until the peer declared it failed.
constexpr std::size_t land_without_lock = std::size_t{1} << 20;
/// A coalesced message's size at most (a block of the small-object pool); a parcel joins one
/// only if its header message is at most a quarter of it.
constexpr std::size_t batch_bytes = 4096;
static_assert(batch_bytes <= courier::detail::small_alloc_max);

/// Bytes from the small-object pool up to its largest class (no malloc per parcel in the
/// steady state), else from operator new (small_alloc decides).
struct small_free_deleter {
    std::size_t n = 0;
    void operator()(std::byte* p) const noexcept { courier::detail::small_free(p, n); }
};
using pooled_buffer = std::unique_ptr<std::byte[], small_free_deleter>;
inline pooled_buffer pooled_bytes(std::size_t n) {
    return pooled_buffer(static_cast<std::byte*>(courier::detail::small_alloc(n)),
                         small_free_deleter{n});
}

struct outgoing : courier::detail::pooled {
    std::uint32_t dest = 0;
    int mpi_dest = 0;
    serialization::message msg;
    transport::sent_handler on_sent;
    pooled_buffer eager;
    std::size_t eager_size = 0;
    bool index_inline = true;
    bool has_data = false;   // data messages follow the header (it carries their tag)
    std::size_t pending = 0; // requests not yet completed
    int error = MPI_SUCCESS;
    int tag = 0;            // the data messages' tag
    bool holds_tag = false; // in posting_tags_: data messages still to post
    bool cut = false;       // stopped with data messages unposted (drop_posting_tag)
    /// The data messages not posted yet start at byte `seg_off` of segment `seg` (the chunks
    /// other than the index, in order, then the index when it travels as data); at most a
    /// window's bytes are posted and not completed (`posted_bytes`; mpi_transport::post_data).
    std::size_t seg = 0;
    std::size_t seg_off = 0;
    std::size_t posted_bytes = 0;
    /// A coalesced message (kind batch): each of its parcels' on_sent.
    std::vector<transport::sent_handler> handlers;

    /// The rest of the segment the data messages not yet posted start in; empty once every
    /// one is posted (or posting stopped).
    std::span<std::byte const> unposted();
    /// Posts no more data messages (an error, or closing).
    void stop_posting() noexcept {
        cut = cut || !unposted().empty();
        seg = msg.chunks().size() + 1;
    }

    /// Runs on_sent, or each batched parcel's.
    void complete(std::error_code ec) {
        if (on_sent) {
            on_sent(ec);
        }
        for (auto& h : handlers) {
            if (h) {
                h(ec);
            }
        }
    }
};

/// A batch being filled for one destination (send_coalesced).
struct open_batch {
    pooled_buffer bytes;
    std::size_t size = 0;
    std::vector<transport::sent_handler> handlers;
};

struct incoming {
    std::uint32_t source = 0;
    serialization::message msg;
    std::vector<serialization::serialization_chunk> chunks;
    std::vector<std::shared_ptr<std::byte[]>> owners;
    std::size_t bytes = 0;   // received into chunk buffers (counted against the budget)
    std::size_t pending = 0; // requests posted and not yet completed
    int error = MPI_SUCCESS;
    bool reported = false; // the error was logged where it was found
    /// The data messages to receive, in the sender's order; those from `next` on are not
    /// posted yet (post_pieces), and `posted_bytes` are posted and not yet completed.
    struct piece {
        std::byte* p;
        int count;
    };
    std::vector<piece> pieces;
    std::size_t next = 0;
    std::size_t posted_bytes = 0;
    int mpi_source = 0;
    int tag = 0;
    bool index_inline = true;
    /// In held_tags_: receives of this parcel are still to be posted.
    bool holds_tag = false;
    /// Landing buffers land() allocates: these chunks' and, if `unlanded_index`, the index's
    /// (received as data; msg is then made there).
    struct unlanded_chunk {
        std::uint32_t chunk;
        bool rma;
        std::uint64_t align_like;
    };
    std::vector<unlanded_chunk> unlanded;
    bool unlanded_index = false;
    std::size_t index_size = 0;
    /// Not empty: the parcel's chunks are refused (over max_parcel_bytes, or no memory to land
    /// them; received_chunks_or_refused). Their data messages must still be received, or the
    /// next parcel with this sender and tag would match them: they go into `scratch` (one
    /// piece's size, taken by land(), which retries each pass while it cannot be had), one
    /// receive at a time, and the parcel is delivered with its chunks marked not received.
    std::string refused;
    bool index_lost = false; ///< no memory for a non-inline index either: dropped at the end
    std::unique_ptr<std::byte[]> scratch;

    /// As new, keeping the vectors' capacity: a finished parcel's entry serves the next one
    /// (mpi_transport::spare_incoming_), so a steady flow of rendezvous parcels allocates none.
    void reset() noexcept {
        source = 0;
        msg = serialization::message();
        chunks.clear();
        owners.clear();
        bytes = pending = 0;
        error = MPI_SUCCESS;
        reported = false;
        pieces.clear();
        next = posted_bytes = 0;
        mpi_source = tag = 0;
        index_inline = true;
        holds_tag = false;
        unlanded.clear();
        unlanded_index = false;
        index_size = 0;
        refused.clear();
        index_lost = false;
        scratch.reset();
    }
};

struct header_buffer : courier::detail::pooled {
    pooled_buffer bytes;
    std::size_t size = 0;
    int mpi_source = 0;
};

enum class req_kind : std::uint8_t { send, header, data };
/// A completed data message of at least this many bytes counts as hearing from its receiver
/// (completed()).
inline constexpr int heard_send_min = 1 << 20;
struct req_owner {
    req_kind kind;
    int expected; // data: the bytes the message must carry (a shorter one completes too);
                  // send: the bytes of a data message, 0 for a header or batch
    void* p;
};
/// A request posted for an outgoing message, before it joins reqs_ (under the lock).
struct posted_send {
    MPI_Request req;
    int count; // a data message's bytes, 0 for the header
};

class mpi_transport final : public transport {
public:
    explicit mpi_transport(transport_options const& o);

    ~mpi_transport() override { close(); }

    /// {u32 MPI rank, the doorbell's name (may be empty)}.
    std::vector<std::byte> address() const override;

    void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                   std::uint32_t my_rank) override;

    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_activity_handler(activity_handler h) override { on_activity_ = std::move(h); }
    void set_job_token(std::uint64_t token) override { job_token_ = token; }

    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override;
    /// Posts at once if the lock is free, else queues (controls_) for the next progress().
    void send_control(std::uint32_t dest, serialization::message&& m,
                      sent_handler on_sent) override;

    bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                        sent_handler on_sent) override;

    bool progress() override;

    std::string debug_state() const override;

    int wait_fd() const override { return bell_ ? bell_->fd() : -1; }
    /// A peer on another host (or without a bell) never rings: partial; with every peer on
    /// this host, the bell misses only on faults.
    wait_coverage wait_fd_coverage() const override {
        return bell_partial_ ? wait_coverage::partial : wait_coverage::rare_misses;
    }

    bool can_sleep() override;

    statistics stats() const override;

    std::string provider_name() const override { return "mpi"; }
    /// One: OpenMPI 4.1.4's large messages in flight together slowed each other down (osu_bibw
    /// of 4 / 8 MiB over vader 0.74 / 0.55x with two at a time, 2-8 MiB 0.55-0.66x with a
    /// 32 MiB window).
    std::uint32_t large_parcels_in_flight() const override { return 1; }
    /// 4 MiB for parcels of 256 KiB or more: OpenMPI's large messages slowed each other down
    /// at 1-2 MiB as well, eight or four at a time in the runtime's 8 MiB window (osu_bibw over
    /// vader, benchmarks/RESULTS.md, "The MPI parcelport's window for large parcels"); parcels
    /// of 64 KiB keep the whole window (a 4 MiB one cost them 0.58x).
    std::uint64_t large_parcel_window() const override { return std::uint64_t{4} << 20; }

    /// Tests: sends `bytes` as they are to locality `dest` with MPI tag `tag` on this
    /// transport's communicator (a forged header message: tag 1). Returns MPI's status.
    int send_raw_for_testing(std::uint32_t dest, int tag, std::span<std::byte const> bytes);

private:
    /// The shape of `m`'s header message (eager_writer.hpp): every descriptor, the index inline
    /// up to the eager threshold. Throws std::length_error for too many chunks.
    eager_layout layout(serialization::message const& m) const;
    /// Writes `m`'s header message, laid out as `l`, to `to` (l.eager_size bytes).
    void write_header_message(serialization::message const& m, eager_layout const& l,
                              std::byte* to) const;
    /// `out`'s header message, in its own buffer.
    void build_eager(outgoing& out);

    /// Posts the open batch to `dest` (lock held).
    void post_batch(std::uint32_t dest, std::unique_lock<std::mutex>& g);

    /// Posts `out`'s header and its first data messages (post_data; the rest are posted as
    /// those complete, under the lock). Called with the lock held; with MPI_THREAD_MULTIPLE
    /// these first MPI calls are made without it. False: no data tag to its destination is free
    /// (only with a few tags: transport_options::mpi_data_tags), and `out` waits at the front
    /// of the backlog, every later message behind it.
    bool post(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g);
    /// Gives `out` the next data tag of its destination's cycle that no earlier message still
    /// posting data messages to it holds, and holds it (posting_tags_). MPI matches one
    /// sender's messages with a tag in the order they were posted: a later message's pieces
    /// posted between an earlier one's would take the receives the receiver posts for the
    /// earlier one.
    bool pick_tag(outgoing& out) noexcept;
    void drop_posting_tag(outgoing& out) noexcept;

    /// Posts `out`'s header and its first data messages (post_data).
    int isend(outgoing& out, std::vector<posted_send>& reqs) noexcept;
    /// Posts `out`'s next data messages, each at most read_piece bytes, while those posted and
    /// not completed stay within send_window pieces (one at least). The receiver posts a piece
    /// at a time; the next ones announced keep it busy. Posting all at once (2 GiB: 257 pieces)
    /// queued that many rendezvous headers at the receiver, ahead of every later message
    /// (heartbeats): a receiver progressing only on its liveness thread's ticks, its workers
    /// busy, drained them over seconds, and the sender declared it failed.
    int post_data(outgoing& out, std::vector<posted_send>& reqs) noexcept;
    /// Room in `reqs` for one more, or `out` posts no more (out of memory).
    static bool reserve_one(outgoing& out, std::vector<posted_send>& reqs) noexcept;
    /// Adds the requests posted for `out` to reqs_ (lock held). Out of memory, the requests
    /// not recorded keep `out` pending for good (MPI may still read its buffers): it is never
    /// completed and stays among the sends in flight, and the rest of it is never posted.
    void add_sends(outgoing& out, std::vector<posted_send> const& reqs) noexcept;

    /// Completed requests: sends finish, headers are taken apart, parcels become ready.
    bool test_requests();

    void completed(req_owner o, int err, MPI_Status const& st);

    /// Deferred parcels, in order, while the receive budget has room (one always).
    bool admit_deferred();

    static bool cancelled(MPI_Status const& st) {
        int flag = 0;
        MPI_Test_cancelled(&st, &flag);
        return flag != 0;
    }

    /// Takes headers waiting in MPI while the receive budget allows (one parcel always).
    bool probe_headers();

    /// A received header: checked, then the parcel is ready (everything inline) or its
    /// chunks' receives are posted.
    void take_header(header_buffer const& hb, bool admitted = false);

    /// `in_batch`: a record of a batch, which must be a whole parcel (no data messages).
    /// `admitted`: a deferred header whose turn has come (the budget is not checked again).
    void take_header(std::byte const* bytes, std::size_t size, int mpi_source, bool in_batch,
                     bool admitted = false);

    /// A coalesced message: each record is a parcel's header message, taken as if it had come
    /// alone (batch_reader.hpp).
    void take_batch(std::byte const* bytes, std::size_t size, wire::header const& h,
                    int mpi_source);

    std::shared_ptr<std::byte[]> receive_buffer(std::size_t n, bool rma_chunk,
                                                std::uint64_t align_like);

    /// A send's outgoing message, its eager part built (no lock).
    std::unique_ptr<outgoing> make_outgoing(std::uint32_t dest, serialization::message&& m,
                                            sent_handler on_sent);
    /// Under mutex_ (`g`): posts `out`, or queues it behind the backlog.
    void enqueue(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g);

    /// Posts the receives of `in`, whose place in the receive budget is taken (receiving_,
    /// receiving_bytes_) and whose landing buffers are all there; gives the place back if none
    /// could be posted. Throws nothing.
    void post_receives(std::unique_ptr<incoming> in) noexcept;
    /// Gives `in`'s place in the receive budget back, and its tag (a parcel dropped before all
    /// of its receives were posted).
    void release(incoming& in) noexcept;
    static std::uint64_t tag_key(int mpi_source, int tag) noexcept {
        return std::uint64_t{static_cast<std::uint32_t>(mpi_source)} << 32 |
               static_cast<std::uint32_t>(tag);
    }
    /// Whether a parcel from `mpi_source` with `tag` must wait: an earlier one with both has
    /// receives not yet posted.
    bool tag_held(int mpi_source, int tag) const {
        return !held_tags_.empty() && std::find(held_tags_.begin(), held_tags_.end(),
                                                tag_key(mpi_source, tag)) != held_tags_.end();
    }
    /// Puts `in`'s tag in held_tags_ (throws only std::bad_alloc) / takes it out.
    void hold_tag(incoming& in);
    void drop_tag(incoming& in) noexcept;
    /// Holds `in`'s tag while it has receives to post, drops it once it has none.
    void update_tag(incoming& in);
    /// Capacity for one more element, grown geometrically (reserve(size() + 1) would allocate
    /// at every call once full): a push_back after it does not throw.
    template <class V>
    static void room_for_one(V& v) {
        if (v.size() == v.capacity()) {
            v.reserve(std::max<std::size_t>(16, 2 * v.size()));
        }
    }
    /// Allocates the large landing buffers of the parcels in unlanded_ with the lock let go
    /// (`g`: held on entry and on return), then posts their receives: meanwhile other threads
    /// progress, and heartbeats leave.
    void land(std::unique_lock<std::mutex>& g);
    /// land()'s work for one parcel, without the lock: its landing buffers, or (refused) its
    /// scratch buffer; `in_pool` and `reused` count where landing buffers came from.
    void land_one(incoming& in, std::uint64_t& in_pool, std::uint64_t& reused) noexcept;
    /// Posts `in`'s next pieces while what is posted stays within read_piece bytes (one piece
    /// at least). MPI copies a matched message within one call (vader's single copy of the
    /// whole message, in opal_progress), and one call matches every posted piece whose sender
    /// is there: posting a parcel of 2 GiB whole made one MPI_Improbe copy all of it, seconds
    /// on a slow host, in which nothing else (heartbeats) got the transport's lock. Returns
    /// the first error (the pieces after it are not posted).
    int post_pieces(incoming& in);

    /// The parcel's receives all completed: deliver() it, then recycle() its entry.
    void finish(std::unique_ptr<incoming> in);
    void deliver(incoming& in);

    /// Ends what is still in flight without waiting for peers that may be gone: receives are
    /// cancelled, sends get a bounded time to complete; a request still active then is freed
    /// and its buffers are left to it (never freed under MPI). on_sent runs for every send.
    void close() noexcept;

    transport_options opts_;
    /// A batch is posted once it holds this many parcels (transport_options::coalesce_records;
    /// set in the constructor).
    std::size_t batch_records_ = 0;
    /// A parcel joins a batch while this many messages to its destination are in flight
    /// (transport_options::coalesce_in_flight; set in the constructor).
    std::uint32_t hold_in_flight_ = 2;
    std::shared_ptr<void> session_; // MPI stays initialized while this transport lives
    bool multiple_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    int mpi_rank_ = 0;
    int mpi_size_ = 1;
    std::size_t piece_ = std::size_t{1} << 30;
    /// The largest header message there can be: every descriptor at the chunk limit (and the
    /// index's) plus an inline index at the eager threshold.
    std::size_t max_header_ = 0;
    std::uint64_t job_token_ = 0;
    std::uint32_t my_rank_ = 0;
    std::vector<int> peers_;             // courier rank -> MPI rank (-1: not served)
    std::vector<std::uint32_t> rank_of_; // MPI rank -> courier rank
    receive_handler on_receive_;
    activity_handler on_activity_;
    std::shared_ptr<receive_buffer_pool> buffers_ =
        std::make_shared<receive_buffer_pool>(std::size_t{256} << 20);

    std::unique_ptr<detail::doorbell> bell_; // null: doorbell off or not available
    bool bell_partial_ = true;               // some peer cannot ring bell_ (set_peers)
    std::atomic<std::uint64_t> rings_{0};

    /// Control messages that found mutex_ taken (send_control), moved to the backlog by the
    /// next progress() or close().
    std::mutex controls_mutex_;
    std::vector<std::unique_ptr<outgoing>> controls_;
    std::atomic<bool> has_controls_{false};
    /// Under mutex_: controls_ joins the backlog.
    void take_controls();

    mutable std::mutex mutex_; // everything below; with serialized MPI, every MPI call
    bool closed_ = false;
    std::vector<std::uint32_t> next_tag_;
    std::vector<std::uint32_t> in_flight_to_; // sends in flight by destination
    std::vector<open_batch> batches_;         // by destination; size 0: none open
    std::size_t batches_open_ = 0;
    std::vector<std::vector<sent_handler>> spare_handlers_; // emptied, capacity kept
    /// Headers of parcels waiting for the receive budget (bounded by the senders' sends in
    /// flight), in arrival order.
    courier::detail::ring_fifo<header_buffer> deferred_;
    std::vector<MPI_Request> reqs_;
    std::vector<req_owner> owners_; // parallel to reqs_
    std::vector<int> indices_;
    std::vector<MPI_Status> statuses_;
    courier::detail::ring_fifo<std::unique_ptr<outgoing>> backlog_;
    std::size_t sends_in_flight_ = 0;
    std::size_t receiving_ = 0;
    std::size_t receiving_bytes_ = 0;
    /// Admitted parcels whose large landing buffers are not allocated yet (land()), and how
    /// many threads are allocating some now.
    std::vector<std::unique_ptr<incoming>> unlanded_;
    /// Finished parcels' entries, reset, for the next ones (at most max_spare_incoming).
    static constexpr std::size_t max_spare_incoming = 64;
    std::vector<std::unique_ptr<incoming>> spare_incoming_;
    std::unique_ptr<incoming> new_incoming();
    void recycle(std::unique_ptr<incoming> in) noexcept;
    std::size_t landing_now_ = 0;
    /// tag_key()s of parcels with receives not yet posted (post_pieces, land).
    /// A vector: few parcels hold a tag at once (each is over land_without_lock or over a
    /// piece, under the receive budget), and it keeps its capacity where a set's nodes did not.
    std::vector<std::uint64_t> held_tags_;
    std::uint32_t data_tags_ = data_tags;
    /// (destination, tag) of the messages with data messages still to post (pick_tag), and of
    /// those cut short (outgoing::cut), for good.
    std::vector<std::pair<std::uint32_t, int>> posting_tags_;
    std::vector<std::unique_ptr<outgoing>> sent_;
    std::vector<std::pair<std::uint32_t, serialization::message>> ready_;
    std::vector<std::uint32_t> heard_;
    statistics stats_;
};

} // namespace courier::parcelport::mpi_pp
