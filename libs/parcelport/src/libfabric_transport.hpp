// SPDX-License-Identifier: BSL-1.0
// The libfabric transport's types (private to libs/parcelport): one FI_EP_RDM endpoint, one
// completion queue, pre-posted receives. Protocol (libs/parcelport/README.md): an eager message
// carries the header, the chunk descriptors and, when it fits, the index data; the receiver pulls
// pointer/rma chunks (and a non-inline index) with fi_read into its own buffers, delivers the
// message, and tells the sender with a DONE message that it may release its registrations and run
// on_sent. The code is in libfabric_transport.cpp (endpoint, progress, receiving), send.cpp (the
// send path and DONE) and rendezvous.cpp (the read budget and the RMA reads).
#pragma once
#include "doorbell.hpp"
#include "wire.hpp"

#include <courier/parcelport/detail/slot_table.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/rma/pool.hpp>
#include <courier/rma/registration_cache.hpp>
#include <courier/serialization/error.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

inline std::string fi_message(char const* what, long rc) {
    return std::string("libfabric: ") + what + ": " + fi_strerror(static_cast<int>(-rc)) + " (" +
           std::to_string(rc) + ")";
}

inline void check(char const* what, long rc) {
    if (rc != 0) {
        throw std::runtime_error(fi_message(what, rc));
    }
}

/// Receive buffers for RMA-read chunks, reused by power-of-two size class (4 KiB ... 1 GiB).
/// A fresh allocation of a large buffer costs a page fault per 4 KiB on first touch (and glibc
/// returns large blocks to the kernel on free), which at 4 MiB costs more than the copy itself;
/// a reused buffer is already mapped. The buffers go to the user inside the message (a
/// serialize_buffer adopts them); their deleter returns them here, also after the transport is
/// gone. At most `limit` bytes are kept.
class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
    static constexpr unsigned min_shift = 12, max_shift = 30;
    explicit buffer_pool(std::size_t limit) : limit_(limit) {}
    ~buffer_pool() {
        for (auto& list : free_) {
            for (std::byte* p : list) {
                delete[] p;
            }
        }
    }
    buffer_pool(buffer_pool const&) = delete;
    buffer_pool& operator=(buffer_pool const&) = delete;

    /// A buffer of at least `n` bytes; `reused` says whether it came from the pool.
    std::shared_ptr<std::byte[]> get(std::size_t n, bool& reused) {
        reused = false;
        unsigned shift = min_shift;
        while (shift <= max_shift && (std::size_t{1} << shift) < n) {
            ++shift;
        }
        if (n < (std::size_t{1} << min_shift) || shift > max_shift) {
            return std::shared_ptr<std::byte[]>(new std::byte[n == 0 ? 1 : n]);
        }
        std::byte* p = nullptr;
        {
            std::lock_guard g(mutex_);
            auto& list = free_[shift - min_shift];
            if (!list.empty()) {
                p = list.back();
                list.pop_back();
                cached_ -= std::size_t{1} << shift;
                reused = true;
            }
        }
        if (p == nullptr) {
            p = new std::byte[std::size_t{1} << shift];
        }
        return std::shared_ptr<std::byte[]>(
            p, [self = shared_from_this(), shift](std::byte* q) { self->put(q, shift); });
    }

private:
    void put(std::byte* p, unsigned shift) noexcept {
        {
            std::lock_guard g(mutex_);
            if (cached_ + (std::size_t{1} << shift) <= limit_) {
                free_[shift - min_shift].push_back(p);
                cached_ += std::size_t{1} << shift;
                return;
            }
        }
        delete[] p;
    }

    std::mutex mutex_;
    std::size_t limit_;
    std::size_t cached_ = 0;
    std::array<std::vector<std::byte*>, max_shift - min_shift + 1> free_;
};

/// Every posted operation starts with fi_context2 (providers that need FI_CONTEXT use it).
struct op {
    enum class kind : std::uint8_t { recv, send, read, raw, batch };
    fi_context2 ctx;
    kind k;
    explicit op(kind kk) : ctx{}, k(kk) {}
};

/// A raw message of send_raw_for_testing: its bytes stay here until the transport closes.
struct raw_op : op {
    std::vector<std::byte> bytes;
    raw_op() : op(kind::raw) {}
};

struct recv_op : op {
    std::unique_ptr<std::byte[]> buf;
    fid_mr* mr = nullptr;
    recv_op() : op(kind::recv) {}
};

struct send_state;
struct send_op : op {
    send_state* s;
    explicit send_op(send_state* st) : op(kind::send), s(st) {}
};

struct send_state {
    std::uint64_t id = 0; // its slot's id in the send table
    std::uint32_t dest = 0;
    serialization::message msg;
    std::vector<fid_mr*> mrs;
    std::vector<rma::registration_cache::lease> leases; // released when the send completes
    transport::sent_handler on_sent;
    std::vector<std::byte> eager;
    std::vector<std::byte> table; // the descriptor list, when it does not fit the eager message
    send_op op{this};
    // A split message (wire::fragment, post_split): the second part's context, the parts'
    // headers, the parts posted so far (by the sender) and the parts whose completion is
    // still to come (the poller counts them down; the last one completes the send).
    send_op op2{this};
    std::array<wire::header, 2> frag{};
    std::uint8_t parts_posted = 0;
    std::atomic<std::uint8_t> parts_left{1};
    std::atomic<bool> part_failed{false};
    bool needs_done = false;
    // Set by the poller only (completions and DONEs are handled under poll_mutex_).
    bool eager_done = false;
    bool remote_done = false;
};

/// Sends in flight (see slot_table: a DONE for a completed or forged id finds nothing). Slots
/// keep their send_state, and with it the capacity of its vectors (the eager message above
/// all), so a send allocates nothing here once the table is warm. A recycled state gives its
/// buffers back beyond the first `kept_slots` slots, and beyond the first `kept_large_slots`
/// when they hold more than `kept_eager` bytes (bounded memory after a burst: at most
/// 256 x the largest eager message stays). Large eager messages must be kept: allocating and
/// zero-filling 64 KiB per send costs its page faults again each time (measured on tcp, 64 KiB
/// eager parcels: 53-61 us per round trip when freed, 25-30 us when kept).
using send_table = detail::slot_table<send_state>;
constexpr std::size_t kept_slots = 4096;
constexpr std::size_t kept_large_slots = 256;
constexpr std::size_t kept_eager = 16 * 1024;

/// A coalesced message (wire::batch) being filled or in flight: the eager messages of
/// several eager-only parcels to one destination, each still a send_state in the send table
/// (completed when the batch's send completes).
struct batch_op : op {
    std::uint32_t dest = 0;
    std::vector<std::byte> buf; // the header's room, then the records
    std::vector<send_state*> members;
    batch_op() : op(kind::batch) {}
};

/// send_coalesced() holds a parcel back only while this many messages to its destination are
/// in flight (posted, completion not yet seen), or a batch is open: one message in flight is
/// the common case of a request/reply exchange, whose latency coalescing must not touch.
constexpr std::uint32_t coalesce_in_flight = 2;

/// Per destination: eager messages (and batches) posted and not completed yet, and the batch
/// being filled, if any (under `m`).
struct peer_out {
    std::mutex m;
    std::atomic<std::uint32_t> in_flight{0};
    std::atomic<batch_op*> open{nullptr}; // changed under m; read without it for a first look
};

struct incoming;
struct read_op : op {
    incoming* in;
    explicit read_op(incoming* i) : op(kind::read), in(i) {}
};

struct incoming {
    std::uint32_t source = 0;
    std::uint64_t send_id = 0;
    serialization::message msg; // its index buffer is filled in place (copied or read)
    std::vector<serialization::serialization_chunk> chunks;
    std::vector<std::shared_ptr<std::byte[]>> owners; // parallel to chunks (null for index)
    std::vector<fid_mr*> mrs;
    std::deque<read_op> reads;
    // The reads of the current phase, posted in order by post_reads() (one backlog entry for
    // all that -FI_EAGAIN holds back, not one per read).
    struct read_piece {
        std::byte* local;
        std::size_t size;
        std::uint64_t remote;
        std::uint64_t key;
        void* desc;
    };
    std::vector<read_piece> pieces; // reads[i] is the context of pieces[i]
    std::size_t next_piece = 0;
    std::size_t outstanding = 0;
    std::size_t rma_bytes = 0; // counted against the read budget until finished (or stalled)
    std::chrono::steady_clock::time_point started; // when the current phase's reads began
    bool failed = false;
    // Phase one of a parcel whose descriptors are remote: reading the table.
    bool table_phase = false;
    wire::header h{};
    std::vector<std::byte> table;        // read from the sender
    std::vector<std::byte> inline_index; // kept from the eager message for phase two
};

/// A split message (wire::fragment) of which one part has come. Part 0 stays in its receive
/// buffer (not re-posted until the message is whole: the other part, the smaller, is copied in
/// behind it); a part 1 that comes first is copied here.
struct fragment_wait {
    std::uint32_t source = 0;
    std::uint64_t id = 0;
    std::uint64_t total = 0;
    recv_op* head = nullptr;
    std::size_t head_len = 0; // the message bytes in head (after its fragment header)
    std::vector<std::byte> tail;
    std::chrono::steady_clock::time_point since; // when the first part came
};
/// The most split messages waiting for their other part; beyond it the oldest is dropped
/// (a peer that sends first parts and never the second cannot hold many receive buffers).
/// One that waits longer than transport_options::read_stall_timeout is dropped too (its
/// sender died between the parts).
constexpr std::size_t max_fragment_waits = 16;

/// A rendezvous parcel waiting for the read budget: its eager message, copied.
struct deferred_parcel {
    wire::header h;
    std::vector<std::byte> eager;
    std::size_t rma_bytes;
};

/// The transport's statistics, counted without a lock (read only as a snapshot).
struct counters {
    using c = std::atomic<std::uint64_t>;
    c messages_sent{0}, messages_received{0}, eager_bytes_sent{0}, rma_bytes_read{0}, rma_reads{0},
        stalled_reads{0}, rendezvous_sends{0}, registrations{0}, eagain_retries{0},
        bytes_copied_on_send{0}, receive_buffers_reused{0}, deferred_rendezvous{0},
        pool_chunks_sent{0}, registration_cache_hits{0}, registration_cache_misses{0},
        pool_receive_buffers{0}, batches_sent{0}, parcels_in_batches{0}, doorbell_rings{0},
        split_sends{0};
    statistics snapshot() const {
        statistics s;
        s.messages_sent = messages_sent;
        s.messages_received = messages_received;
        s.eager_bytes_sent = eager_bytes_sent;
        s.rma_bytes_read = rma_bytes_read;
        s.rma_reads = rma_reads;
        s.stalled_reads = stalled_reads;
        s.rendezvous_sends = rendezvous_sends;
        s.registrations = registrations;
        s.eagain_retries = eagain_retries;
        s.bytes_copied_on_send = bytes_copied_on_send;
        s.receive_buffers_reused = receive_buffers_reused;
        s.deferred_rendezvous = deferred_rendezvous;
        s.pool_chunks_sent = pool_chunks_sent;
        s.registration_cache_hits = registration_cache_hits;
        s.registration_cache_misses = registration_cache_misses;
        s.pool_receive_buffers = pool_receive_buffers;
        s.batches_sent = batches_sent;
        s.parcels_in_batches = parcels_in_batches;
        s.doorbell_rings = doorbell_rings;
        s.split_sends = split_sends;
        return s;
    }
};

class libfabric_transport;

/// The rma pool's and the registration cache's view of this transport's domain.
class fabric_registrar final : public rma::memory_registrar {
public:
    explicit fabric_registrar(libfabric_transport& t) : t_(t) {}
    rma::registration register_memory(void* base, std::size_t bytes) override;
    void deregister_memory(rma::registration const& r) noexcept override {
        fi_close(&static_cast<fid_mr*>(r.handle)->fid);
    }
    bool resolves_addresses_at_access() const noexcept override { return va_based_; }
    char const* name() const noexcept override { return "libfabric"; }
    void set_va_based(bool v) noexcept { va_based_ = v; }

private:
    libfabric_transport& t_;
    bool va_based_ = false;
};

class libfabric_transport final : public transport {
    friend class fabric_registrar;

public:
    explicit libfabric_transport(transport_options const& o) : opts_(o) {
        open();
        if (opts_.read_budget == 0) {
            opts_.read_budget = default_read_budget(info_->fabric_attr->prov_name);
        }
        if (opts_.read_piece == 0) {
            opts_.read_piece = default_read_piece(info_->fabric_attr->prov_name);
        }
        max_read_ = std::min(max_read_, std::max<std::size_t>(opts_.read_piece, 4096));
    }
    ~libfabric_transport() override { close(); }

    /// The provider's address, then the doorbell's name (empty without one), then the name's
    /// length in two bytes.
    std::vector<std::byte> address() const override {
        std::vector<std::byte> a(256);
        std::size_t len = a.size();
        check("fi_getname", fi_getname(&ep_->fid, a.data(), &len));
        a.resize(len);
        std::string bell = bell_ ? bell_->name() : std::string();
        for (char c : bell) {
            a.push_back(static_cast<std::byte>(c));
        }
        a.push_back(static_cast<std::byte>(bell.size() & 0xff));
        a.push_back(static_cast<std::byte>(bell.size() >> 8));
        return a;
    }

    void set_peers(std::vector<std::vector<std::byte>> const& addrs, std::uint32_t rank) override {
        rank_ = rank;
        peers_.assign(addrs.size(), FI_ADDR_NOTAVAIL);
        out_ = std::make_unique<peer_out[]>(addrs.size());
        std::vector<std::string> bells(addrs.size());
        for (std::size_t i = 0; i < addrs.size(); ++i) {
            auto const& a = addrs[i];
            std::size_t bell_len = a.size() < 2
                                       ? SIZE_MAX
                                       : std::to_integer<std::size_t>(a[a.size() - 2]) |
                                             std::to_integer<std::size_t>(a[a.size() - 1]) << 8;
            if (bell_len > a.size() - 2) {
                throw std::runtime_error("courier: malformed address of locality " +
                                         std::to_string(i));
            }
            std::size_t fi_len = a.size() - 2 - bell_len;
            for (std::size_t k = fi_len; k < fi_len + bell_len; ++k) {
                bells[i].push_back(static_cast<char>(a[k]));
            }
            int n = fi_av_insert(av_, a.data(), 1, &peers_[i], 0, nullptr);
            if (n != 1) {
                throw std::runtime_error("libfabric: fi_av_insert failed for locality " +
                                         std::to_string(i));
            }
        }
        if (bell_ && bell_->connect(bells) != 0) {
            if (shm_) {
                std::fprintf(stderr, "courier: could not open every peer's doorbell; idle "
                                     "localities will answer some peers late\n");
            } else {
                // A peer that cannot ring (another host) would find this locality asleep
                // with nothing to wake it: its idle workers poll in the bounded backoff
                // instead. Peers whose bells opened are still rung.
                bell_wait_ = false;
            }
        }
    }

    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_job_token(std::uint64_t token) override { opts_.job_token = token; }

    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override {
        send_impl(dest, std::move(m), std::move(on_sent), false);
    }
    bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                        sent_handler on_sent) override {
        return send_impl(dest, std::move(m), std::move(on_sent), opts_.coalescing);
    }
    bool progress() override;
    /// Sends `n` bytes at `p` to `dest` as one raw message, exactly as given (no header of
    /// ours): the tests forge malformed messages with it. The bytes are kept until the
    /// transport closes. Returns false if the provider said -FI_EAGAIN (progress both sides
    /// and call again: a first message waits for the connection); throws for an unknown
    /// `dest` or another error. Not for concurrent use.
    bool send_raw_for_testing(std::uint32_t dest, void const* p, std::size_t n);
    int wait_fd() const override { return bell_ && bell_wait_ ? bell_->fd() : wait_fd_; }
    bool wait_fd_may_miss() const override { return bell_ && bell_wait_; }
    bool can_sleep() override {
        if (!shm_ && transfers_pending()) {
            // Over tcp the bytes of a send or of a read move only while both sides progress,
            // and no completion (hence no ring) marks their progress: a worker that slept
            // mid-transfer stalled it until its timeout (osu_courier bw at 1-4 MiB: 0.6x).
            return false;
        }
        if (bell_ && bell_wait_) {
            // Raise the word, then look: a peer's post after this rings; one before it is
            // found here.
            bell_->arm();
            if (progress()) {
                bell_->disarm();
                return false;
            }
            return true;
        }
        if (open_batches_.load(std::memory_order_acquire) != 0) {
            return false; // a coalesced message waits for progress()
        }
        if (wait_fd_ < 0) {
            return true; // no fd to wait on: the scheduler sleeps briefly and polls again
        }
        // Wait for a poller to finish rather than stay awake: with two idle workers, each
        // one's polling made the other's check fail, and they kept each other awake (under
        // TSan, an idle locality used 0.4-0.6 s of CPU per second).
        std::lock_guard lk(poll_mutex_);
        fid* f = &cq_->fid;
        return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
    }
    /// Sends not yet completed, or rendezvous reads under way or waiting for the budget.
    bool transfers_pending() {
        {
            std::lock_guard g(mutex_);
            if (reading_bytes_ != 0 || !deferred_.empty()) {
                return true;
            }
        }
        bool any = false;
        sends_.for_each_published([&](send_table::slot&, std::uint64_t) { any = true; });
        return any;
    }
    statistics stats() const override { return counters_.snapshot(); }
    std::string provider_name() const override { return info_->fabric_attr->prov_name; }
    std::string debug_state() const override {
        std::size_t sends = 0;
        sends_.for_each_published([&](send_table::slot&, std::uint64_t) { ++sends; });
        std::lock_guard g(mutex_);
        std::size_t reads = 0;
        for (auto const& [p, in] : incoming_) {
            reads += in->outstanding;
        }
        return "sends in flight " + std::to_string(sends) + ", incoming rendezvous " +
               std::to_string(incoming_.size()) + " (reads outstanding " + std::to_string(reads) +
               "), backlog " + std::to_string(backlog_.size()) + ", messages sent " +
               std::to_string(counters_.messages_sent) + ", received " +
               std::to_string(counters_.messages_received) + ", EAGAIN retries " +
               std::to_string(counters_.eagain_retries);
    }

private:
    void open();
    void close() noexcept;
    void post_recv(recv_op* r);
    void handle_recv(recv_op* r, std::size_t len);
    /// Magic, version, job token and a known source: a message of this job (any kind).
    bool header_ok(wire::header const& h) const noexcept {
        return h.magic == wire::magic && h.version == wire::version && h.token == opts_.job_token &&
               h.source < peers_.size();
    }
    /// A received message that is not a fragment (done, parcel or batch), header unchecked.
    void handle_message(std::byte const* p, std::size_t len);
    /// A part of a split message (header `h` checked); false if `r` may be re-posted, true if
    /// it holds a part 0 and stays until the message is whole (or dropped).
    bool handle_fragment(recv_op* r, wire::header const& h, std::size_t len);
    /// Drops the split messages whose other part has not come within read_stall_timeout
    /// (checked every 256 progress passes), re-posting the receive buffers they held.
    void drop_stale_fragments();
    /// Logs why `f` is dropped and re-posts the receive buffer it holds, if any (the caller
    /// erases it from fragments_).
    void drop_fragment_wait(fragment_wait const& f, char const* why);
    /// A send's completion (success or error) came: true if it was its last part. Only a split
    /// message has two (post_split); every other send skips the atomic decrement. The one
    /// other decrement, send_impl's for a second part refused outright, makes that part 0's
    /// completion the last.
    static bool last_part(send_state* s) noexcept {
        return s->parts_left.load(std::memory_order_acquire) == 1 ||
               s->parts_left.fetch_sub(1, std::memory_order_acq_rel) == 1;
    }
    /// Posts the published send `s` as two messages within the inject size (split_max_).
    void post_split(send_state* s);
    /// admit_parcel(), logging and dropping a malformed parcel.
    void admit_or_drop(wire::header const& h, std::byte const* p, std::size_t len);
    /// Admits every parcel of a coalesced message (wire::batch); a malformed record ends it.
    void handle_batch(wire::header const& h, std::byte const* p, std::size_t len);
    /// True if the parcel went into a batch.
    bool send_impl(std::uint32_t dest, serialization::message&& m, sent_handler on_sent,
                   bool coalesce);
    /// Appends the published send `s` (its eager message built, no FI_MR_LOCAL) to the batch
    /// of its destination if it is eager-only, small, and a message to that destination is in
    /// flight or a batch is open; false: the caller posts it itself.
    bool try_coalesce(send_state* s);
    /// Posts the open batches (progress() does, at the end of each pass).
    void flush_batches();
    /// Posts `b`, detached from its peer_out; if the provider refuses it outright, its
    /// parcels complete with an error.
    void post_batch(batch_op* b);
    /// The batch's send completed (or failed: `ec`): its parcels' eager parts are delivered.
    void complete_batch(batch_op* b, std::error_code ec);
    batch_op* take_batch(std::uint32_t dest);
    void handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                       std::size_t rma_bytes);
    /// Runs handle_parcel now, or defers a rendezvous parcel while the reads in flight use
    /// up the budget (opts_.read_budget): that bounds the receiver's memory under a flood of
    /// large messages and keeps the pooled destination buffers few and cache-warm.
    void admit_parcel(wire::header const& h, std::byte const* p, std::size_t len);
    /// Gives back read budget; parcels waiting for it are admitted by the next progress()
    /// (admit_deferred), not here: by then the worker has run the tasks of the parcels just
    /// delivered, their landing buffers went back to the pool, and the next read lands in one
    /// that is still in cache.
    void release_read_budget(std::size_t bytes);
    /// Returns the read budget of parcels whose reads have been outstanding for longer than
    /// opts_.read_stall_timeout (checked every 256 progress passes). Their buffers stay until
    /// the reads complete, if ever: nothing is freed under a read the provider may still do.
    void release_stalled_reads();
    std::uint64_t progress_calls_ = 0; // by the poller only
    /// Admits the waiting parcels that the budget now allows; true if any.
    bool admit_deferred();
    /// Posts the reads of `in` not posted yet, in order; stops at the first that fails
    /// (returning its code, -FI_EAGAIN when the provider's queue is full).
    long post_reads(incoming* in);
    void start_reads(std::unique_ptr<incoming> in, std::vector<wire::descriptor> const& ds,
                     bool index_inline);
    /// Sets up a rendezvous from its descriptors: destination buffers, then the reads.
    void begin_reads(wire::header const& h, std::vector<wire::descriptor> const& ds,
                     bool index_inline, std::byte const* inline_index, std::size_t rma_bytes);
    /// Phase two of a parcel whose descriptor table was read (wire::descriptors_remote).
    void continue_after_table(std::unique_ptr<incoming> in);
    void finish_incoming(incoming* in);
    void send_done(std::uint32_t dest, std::uint64_t id);
    void complete_send(send_state* s, std::error_code ec);
    /// Clears a send whose slot the caller holds (claimed, or never published) and gives the
    /// slot back.
    void recycle_send(send_table::slot* slot) noexcept;
    /// fi_mr_reg. `counted`: in statistics::registrations (the pool counts its own).
    fid_mr* register_memory(void const* p, std::size_t n, std::uint64_t access,
                            bool counted = true);
    /// The remote address and key of [p, p + n) for a peer's fi_read: the rma pool's
    /// registration when the memory is pool memory registered here (nothing to do), else one
    /// from the registration cache (held by `s` until the send completes).
    std::pair<std::uint64_t, std::uint64_t> remote_access(void const* p, std::size_t n,
                                                          send_state& s);
    /// A destination for an RMA-read chunk: rma chunks go to pool memory (which a received
    /// rma_vector adopts), the rest to the receive buffer pool.
    std::shared_ptr<std::byte[]> receive_buffer(std::size_t n, bool rma_chunk);
    void* desc_of(fid_mr* mr) const { return mr != nullptr ? fi_mr_desc(mr) : nullptr; }
    /// A header of `kind` from this locality, with the job token; the rest zero.
    wire::header header_of(wire::kind kind) const {
        wire::header h{};
        h.magic = wire::magic;
        h.version = wire::version;
        h.kind = kind;
        h.token = opts_.job_token;
        h.source = rank_;
        return h;
    }
    /// Retries `post` until it stops saying -FI_EAGAIN (progressing meanwhile), or queues it.
    /// (The callable is wrapped in a std::function, which allocates, only when deferred.)
    template <class Post>
    void post_or_defer(Post&& post, char const* what) {
        long rc = post();
        if (rc != 0) {
            defer(rc, std::function<long()>(std::forward<Post>(post)), what);
        }
    }
    void defer(long rc, std::function<long()> post, char const* what);
    /// After posting something for `rank` (rc 0), or when the provider refused it for now
    /// (-FI_EAGAIN: the peer must progress, e.g. shm's first contact or a full queue): rings
    /// the peer's doorbell, if there is one. Passes `rc` through.
    long wake_peer(std::uint32_t rank, long rc) noexcept {
        if ((rc == 0 || rc == -FI_EAGAIN) && bell_ && bell_->ring(rank)) {
            ++counters_.doorbell_rings;
        }
        return rc;
    }

    transport_options opts_;
    fi_info* info_ = nullptr;
    fid_fabric* fabric_ = nullptr;
    fid_domain* domain_ = nullptr;
    fid_av* av_ = nullptr;
    fid_cq* cq_ = nullptr;
    fid_ep* ep_ = nullptr;
    int wait_fd_ = -1;
    bool bell_wait_ = true; ///< idle workers wait on bell_ (false: some peer cannot ring it)
    bool shm_ = false;      ///< the core provider is shm
    bool mr_local_ = false, mr_virt_ = false, mr_prov_key_ = false;
    std::size_t recv_size_ = 0;
    // Messages of more than split_part_ and at most split_max_ bytes go as two (shm only:
    // post_split); 0: never.
    std::size_t split_part_ = 0, split_max_ = 0;
    // The largest coalesced message: a receive buffer, or on shm the inject size (a larger
    // batch would take shm's CMA protocol; batches are not split).
    std::size_t batch_limit_ = 0;
    std::vector<fragment_wait> fragments_; // the poller's
    std::size_t max_read_ = 0;
    std::vector<fi_addr_t> peers_;
    std::vector<std::unique_ptr<raw_op>> raw_ops_; // send_raw_for_testing's messages
    std::uint32_t rank_ = 0;
    receive_handler on_receive_;
    std::vector<std::unique_ptr<recv_op>> recvs_;
    std::atomic<std::uint64_t> next_key_{1};

    mutable std::mutex mutex_; // incoming_, backlog_, deferred_, reading_bytes_
    std::mutex poll_mutex_;    // the completion queue is polled by one thread at a time
    mutable send_table sends_; // lock-free
    std::unordered_map<incoming*, std::unique_ptr<incoming>> incoming_;
    std::deque<std::pair<std::function<long()>, char const*>> backlog_;
    std::atomic<std::size_t> backlog_size_{0}; // backlog_.size(), read without the lock
    std::size_t reading_bytes_ = 0;            // rendezvous bytes being read (mutex_)
    std::deque<deferred_parcel> deferred_;     // waiting for the read budget (mutex_)
    std::atomic<bool> admit_pending_{false};   // budget was released with parcels waiting
    counters counters_;                        // lock-free: the send and receive paths only add
    std::shared_ptr<buffer_pool> pool_ = std::make_shared<buffer_pool>(std::size_t{256} << 20);
    fabric_registrar registrar_{*this};
    std::unique_ptr<rma::registration_cache> cache_;
    bool pool_attached_ = false;
    std::unique_ptr<detail::doorbell> bell_; // shm, and tcp if asked: peers' posts wake us
    // Coalescing (send_coalesced): per destination, what is in flight and the open batch;
    // the destinations whose batch was opened since the last flush; every batch_op made
    // (owned here; the free ones are listed in batch_free_).
    std::unique_ptr<peer_out[]> out_;
    std::atomic<std::uint32_t> open_batches_{0};
    std::mutex batch_mutex_; // open_list_, batch_all_, batch_free_
    std::vector<std::uint32_t> open_list_;
    std::vector<std::uint32_t> flushing_; // flush_batches' copy of open_list_ (the poller's)
    std::vector<std::unique_ptr<batch_op>> batch_all_;
    std::vector<batch_op*> batch_free_;
};

} // namespace courier::parcelport::fabric
