// SPDX-License-Identifier: BSL-1.0
// The MPI parcelport (make_mpi_transport): the transport interface over non-blocking MPI
// point-to-point calls on a duplicate of MPI_COMM_WORLD. Protocol and threading:
// libs/parcelport/README.md ("The MPI transport").
//
//  sender                                             receiver
//  header message, tag 1: wire::header (send_id =     MPI_Improbe(any source, tag 1), MPI_Imrecv
//  the data tag), a wire::descriptor per chunk        checks; a buffer per pointer/rma chunk (rma
//  (address and key 0), the index data if inline      chunks: rma pool memory), MPI_Irecv into
//  each pointer/rma chunk (and a non-inline index)    each, from the sender, with the data tag
//  MPI_Isend from the caller's memory, data tag, in   all received: deliver
//  pieces (64 MiB; MPI counts are int)
//  on_sent once every MPI_Isend completed
#include "../doorbell.hpp"
#include "../receive_buffer_pool.hpp"
#include "../wire.hpp"

#include <courier/common/log.hpp>
#include <courier/common/small_alloc.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization/error.hpp>

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <deque>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

namespace courier::parcelport {

namespace {

using serialization::chunk_type;

constexpr int header_tag = 1;
constexpr int first_data_tag = 2;
/// Data tags cycle per destination through this many values (MPI guarantees tags up to 32767).
/// Fewer messages than this are ever in flight to one destination (max_sends_in_flight), so a
/// tag is never used by two messages in flight; a tag reused after its message completed is
/// matched in order, because the receiver posts the receives of a message when its header
/// arrives, and the earlier message's header was sent first.
constexpr std::uint32_t data_tags = 32000;
/// Sends in flight at most (each holds its MPI requests); later ones wait in the backlog.
constexpr std::size_t max_sends_in_flight = 1024;
/// Headers taken from MPI per progress() pass at most.
constexpr int max_probes_per_pass = 64;
/// A coalesced message's size at most (a block of the small-object pool); a parcel joins one
/// only if its header message is at most a quarter of it.
constexpr std::size_t batch_bytes = courier::detail::small_alloc_max;

std::string mpi_error_string(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
        return "MPI error " + std::to_string(rc);
    }
    return std::string(text, static_cast<std::size_t>(len));
}

[[noreturn]] void fail(char const* what, int rc) {
    throw network_error(std::string("MPI: ") + what + ": " + mpi_error_string(rc));
}

/// Bytes from the small-object pool up to its largest class (no malloc per parcel in the
/// steady state), else from operator new.
class pooled_buffer {
public:
    pooled_buffer() noexcept = default;
    explicit pooled_buffer(std::size_t n)
        : n_(n == 0 ? 1 : n), p_(static_cast<std::byte*>(n_ <= courier::detail::small_alloc_max
                                                             ? courier::detail::small_alloc(n_)
                                                             : ::operator new(n_))) {}
    pooled_buffer(pooled_buffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
    pooled_buffer& operator=(pooled_buffer&& o) noexcept {
        if (this != &o) {
            release();
            n_ = o.n_;
            p_ = o.p_;
            o.p_ = nullptr;
        }
        return *this;
    }
    ~pooled_buffer() { release(); }
    std::byte* get() const noexcept { return p_; }

private:
    void release() noexcept {
        if (p_ != nullptr) {
            if (n_ <= courier::detail::small_alloc_max) {
                courier::detail::small_free(p_, n_);
            } else {
                ::operator delete(p_);
            }
            p_ = nullptr;
        }
    }
    std::size_t n_ = 0;
    std::byte* p_ = nullptr;
};

struct outgoing : courier::detail::pooled {
    std::uint32_t dest = 0;
    int mpi_dest = 0;
    serialization::message msg;
    transport::sent_handler on_sent;
    pooled_buffer eager;
    std::size_t eager_size = 0;
    bool index_inline = true;
    std::size_t pending = 0; // requests not yet completed
    int error = MPI_SUCCESS;
    /// A coalesced message (kind batch): each of its parcels' on_sent.
    std::vector<transport::sent_handler> handlers;
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
    std::size_t pending = 0; // requests not yet completed
    int error = MPI_SUCCESS;
};

struct header_buffer : courier::detail::pooled {
    pooled_buffer bytes;
    std::size_t size = 0;
    int mpi_source = 0;
};

enum class req_kind : std::uint8_t { send, header, data };
struct req_owner {
    req_kind kind;
    void* p;
};

class mpi_transport final : public transport {
public:
    explicit mpi_transport(transport_options const& o)
        : opts_(o), session_(hold_mpi(o.mpi_thread_multiple)), multiple_(o.mpi_thread_multiple) {
        if (opts_.eager_threshold == 0) {
            opts_.eager_threshold = default_eager_threshold("mpi");
        }
        if (opts_.read_budget == 0) {
            opts_.read_budget = default_read_budget("mpi");
        }
        // A piece is one MPI message (count is int): at most 1 GiB. The default, 64 MiB, keeps
        // one MPI call's copy (vader's single copy of a whole message) short, so that the
        // progress owner returns to other parcels (heartbeats) often.
        if (opts_.read_piece == 0) {
            opts_.read_piece = default_read_piece("mpi");
        }
        piece_ = std::min<std::size_t>(std::max<std::size_t>(opts_.read_piece, 4096),
                                       std::size_t{1} << 30);
        int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
        if (rc != MPI_SUCCESS) {
            fail("MPI_Comm_dup", rc);
        }
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &mpi_rank_);
        int size = 0;
        MPI_Comm_size(comm_, &size);
        mpi_size_ = size;
        job_token_ = opts_.job_token;
        if (opts_.doorbell) {
            // MPI has no wait fd: peers on this host wake a sleeping worker through the
            // doorbell (doorbell.hpp), as on shm. Its name travels in the address.
            std::string name = opts_.endpoint_name;
            if (name.empty()) {
                name = fmt::format("courier-{}-mpi{}-{:08x}", ::getpid(), mpi_rank_,
                                   std::random_device{}());
            }
            try {
                bell_ = std::make_unique<detail::doorbell>(name);
            } catch (std::exception const& e) {
                logging::warn("MPI: no doorbell ({}): idle workers poll in a backoff", e.what());
            }
        }
    }

    ~mpi_transport() override { close(); }

    /// {u32 MPI rank, the doorbell's name (may be empty)}.
    std::vector<std::byte> address() const override {
        std::string bell = bell_ ? bell_->name() : std::string();
        std::vector<std::byte> a(4 + bell.size());
        std::uint32_t r = static_cast<std::uint32_t>(mpi_rank_);
        std::memcpy(a.data(), &r, 4);
        std::memcpy(a.data() + 4, bell.data(), bell.size());
        return a;
    }

    void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                   std::uint32_t my_rank) override {
        peers_.assign(addresses.size(), -1);
        rank_of_.assign(static_cast<std::size_t>(mpi_size_), UINT32_MAX);
        std::vector<std::string> bells(addresses.size());
        for (std::size_t i = 0; i < addresses.size(); ++i) {
            if (addresses[i].empty() && i != my_rank) {
                continue; // a peer this transport does not serve
            }
            std::uint32_t r = 0;
            if (addresses[i].size() < 4 || addresses[i].size() > 4 + 255 ||
                (std::memcpy(&r, addresses[i].data(), 4),
                 r >= static_cast<std::uint32_t>(mpi_size_))) {
                throw network_error("MPI: the address of locality " + std::to_string(i) +
                                    " is not a rank of this MPI job");
            }
            peers_[i] = static_cast<int>(r);
            rank_of_[r] = static_cast<std::uint32_t>(i);
            bells[i].assign(reinterpret_cast<char const*>(addresses[i].data()) + 4,
                            addresses[i].size() - 4);
        }
        if (bell_) {
            // Peers on other hosts have bells this host cannot open: never rung (a sleeping
            // worker there wakes by its scheduler's bounded sleep).
            bell_->connect(bells);
        }
        my_rank_ = my_rank;
        next_tag_.assign(addresses.size(), 0);
        in_flight_to_.assign(addresses.size(), 0);
        batches_ = std::vector<open_batch>(addresses.size());
    }

    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_activity_handler(activity_handler h) override { on_activity_ = std::move(h); }
    void set_job_token(std::uint64_t token) override { job_token_ = token; }

    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override {
        if (dest >= peers_.size() || peers_[dest] < 0) {
            throw std::out_of_range("courier: no locality " + std::to_string(dest) +
                                    " reachable through the MPI parcelport");
        }
        auto out = std::make_unique<outgoing>();
        out->dest = dest;
        out->mpi_dest = peers_[dest];
        out->msg = std::move(m);
        out->on_sent = std::move(on_sent);
        build_eager(*out);
        std::unique_lock g(mutex_);
        if (closed_) {
            throw network_error("MPI: the transport is closed");
        }
        if (sends_in_flight_ >= max_sends_in_flight || !backlog_.empty()) {
            backlog_.push_back(std::move(out));
            return;
        }
        post(std::move(out), g);
    }

    bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                        sent_handler on_sent) override {
        if (!opts_.coalescing || dest >= peers_.size() || peers_[dest] < 0 ||
            m.external_chunk_count() != 0 ||
            eager_size(m) + wire::record_prefix > batch_bytes / 4) {
            send(dest, std::move(m), std::move(on_sent));
            return false;
        }
        std::unique_lock g(mutex_);
        auto& b = batches_[dest];
        // A lone parcel leaves at once: it joins a batch only while two messages to its
        // destination are in flight, or a batch to it is open.
        if (closed_ || (b.size == 0 && in_flight_to_[dest] < 2)) {
            g.unlock();
            send(dest, std::move(m), std::move(on_sent));
            return false;
        }
        std::size_t n = eager_size(m);
        if (b.size != 0 && b.size + wire::record_size(n) > batch_bytes) {
            post_batch(dest, g);
        }
        if (b.size == 0) {
            b.bytes = pooled_buffer(batch_bytes);
            b.size = sizeof(wire::header);
            ++batches_open_;
            if (!spare_handlers_.empty()) { // a list with capacity: no allocation per batch
                b.handlers = std::move(spare_handlers_.back());
                spare_handlers_.pop_back();
            }
        }
        std::byte* rec = b.bytes.get() + b.size;
        std::uint32_t len[2] = {static_cast<std::uint32_t>(n), 0};
        std::memcpy(rec, len, sizeof len);
        write_eager(m, rec + wire::record_prefix, true);
        std::memset(rec + wire::record_prefix + n, 0,
                    wire::record_size(n) - wire::record_prefix - n);
        b.size += wire::record_size(n);
        b.handlers.push_back(std::move(on_sent));
        stats_.bytes_copied_on_send += m.data().size();
        return true;
    }

    bool progress() override {
        // A handler that called progress() would reuse this thread's lists below.
        thread_local bool in_handlers = false;
        if (in_handlers) {
            return false;
        }
        std::unique_lock g(mutex_, std::try_to_lock);
        if (!g.owns_lock() || closed_) {
            return false;
        }
        bool any = false;
        while (!backlog_.empty() && sends_in_flight_ < max_sends_in_flight) {
            auto out = std::move(backlog_.front());
            backlog_.pop_front();
            post(std::move(out), g);
            any = true;
        }
        // Headers first, then completions: MPI progresses the sends' completions during the
        // probes too, in the order they arrived, so a reply found here is delivered in the same
        // pass as the completion of the send it answers (on_sent before the reply's handler).
        any |= probe_headers();
        any |= test_requests();
        any |= admit_deferred();
        for (std::uint32_t d = 0; d < batches_.size(); ++d) {
            if (batches_[d].size != 0) {
                post_batch(d, g);
                any = true;
            }
        }
        // Per-thread lists keep their capacity: nothing is allocated per pass.
        thread_local std::vector<std::unique_ptr<outgoing>> sent;
        thread_local std::vector<std::pair<std::uint32_t, serialization::message>> ready;
        thread_local std::vector<std::uint32_t> heard;
        sent.swap(sent_);
        ready.swap(ready_);
        heard.swap(heard_);
        g.unlock();
        // Handlers run without the lock: they may send.
        struct flag_scope {
            bool& f;
            explicit flag_scope(bool& b) : f(b) { f = true; }
            ~flag_scope() { f = false; }
            flag_scope(flag_scope const&) = delete;
            flag_scope& operator=(flag_scope const&) = delete;
        };
        std::optional<flag_scope> handling(std::in_place, in_handlers);
        for (auto src : heard) {
            if (on_activity_) {
                on_activity_(src);
            }
        }
        for (auto& out : sent) {
            std::error_code ec;
            if (out->error != MPI_SUCCESS) {
                ec = std::make_error_code(std::errc::connection_reset);
                static logging::rate_limit limit;
                logging::error_limited(limit, "MPI: a send to locality {} failed: {}", out->dest,
                                       mpi_error_string(out->error));
            }
            if (out->on_sent) {
                out->on_sent(ec);
            }
            for (auto& h : out->handlers) {
                if (h) {
                    h(ec);
                }
            }
        }
        for (auto& [src, msg] : ready) {
            if (on_receive_) {
                on_receive_(src, std::move(msg));
            }
        }
        handling.reset();
        any = any || !sent.empty() || !ready.empty();
        bool spares = false;
        for (auto& out : sent) {
            spares |= out->handlers.capacity() != 0;
        }
        if (spares) { // batches' handler lists go back for the next batches
            std::lock_guard lk(mutex_);
            for (auto& out : sent) {
                if (out->handlers.capacity() != 0 && spare_handlers_.size() < 64) {
                    out->handlers.clear();
                    spare_handlers_.push_back(std::move(out->handlers));
                }
            }
        }
        sent.clear();
        ready.clear();
        heard.clear();
        return any;
    }

    std::string debug_state() const override {
        std::lock_guard g(mutex_);
        return fmt::format("mpi: {} sends in flight, {} in the backlog, {} parcels being "
                           "received ({} bytes), {} waiting for the receive budget, {} MPI "
                           "requests",
                           sends_in_flight_, backlog_.size(), receiving_, receiving_bytes_,
                           deferred_.size(), reqs_.size());
    }

    int wait_fd() const override { return bell_ ? bell_->fd() : -1; }
    /// A peer on another host (or without a bell) never rings.
    bool wait_fd_may_miss() const override { return true; }

    bool can_sleep() override {
        {
            std::lock_guard g(mutex_);
            // Requests in flight move only while this side progresses (MPI has no
            // asynchronous progress here), and an open batch waits for progress().
            if (!reqs_.empty() || !backlog_.empty() || batches_open_ != 0 || !deferred_.empty()) {
                return false;
            }
        }
        if (bell_) {
            // Raise the word, then look: a peer's post after this rings; one before it is
            // found.
            bell_->arm();
            if (progress()) {
                bell_->disarm();
                return false;
            }
        }
        return true;
    }

    statistics stats() const override {
        std::lock_guard g(mutex_);
        statistics s = stats_;
        s.doorbell_rings = rings_.load(std::memory_order_relaxed);
        return s;
    }

    std::string provider_name() const override { return "mpi"; }

private:
    /// The header message of `m` with its index inline: its size.
    static std::size_t eager_size(serialization::message const& m) {
        return sizeof(wire::header) + m.chunks().size() * sizeof(wire::descriptor) +
               m.data().size();
    }

    /// Writes `m`'s header message to `to` (the index data only if `index_inline`).
    void write_eager(serialization::message const& m, std::byte* to, bool index_inline) const {
        auto chunks = m.chunks();
        auto data = m.data();
        wire::header h{};
        h.magic = wire::magic;
        h.version = wire::version;
        h.kind = wire::parcel;
        h.flags = index_inline ? wire::index_inline : 0;
        h.token = job_token_;
        h.source = my_rank_;
        h.chunk_count = static_cast<std::uint32_t>(chunks.size());
        h.index_size = data.size();
        std::memcpy(to, &h, sizeof h); // send_id (the data tag) is set when posted
        std::byte* p = to + sizeof h;
        for (auto const& c : chunks) {
            wire::descriptor d{};
            d.type = static_cast<std::uint8_t>(c.type);
            d.size = c.size;
            std::memcpy(p, &d, sizeof d);
            p += sizeof d;
        }
        if (index_inline && !data.empty()) {
            std::memcpy(p, data.data(), data.size());
        }
    }

    void build_eager(outgoing& out) {
        auto chunks = out.msg.chunks();
        if (chunks.size() > wire::max_chunks) {
            throw std::length_error("courier: a message of " + std::to_string(chunks.size()) +
                                    " chunks (at most " + std::to_string(wire::max_chunks) + ")");
        }
        auto data = out.msg.data();
        out.index_inline = data.size() <= opts_.eager_threshold;
        std::size_t n = sizeof(wire::header) + chunks.size() * sizeof(wire::descriptor) +
                        (out.index_inline ? data.size() : 0);
        out.eager = pooled_buffer(n);
        out.eager_size = n;
        write_eager(out.msg, out.eager.get(), out.index_inline);
    }

    /// Posts the open batch to `dest` (lock held).
    void post_batch(std::uint32_t dest, std::unique_lock<std::mutex>& g) {
        auto& b = batches_[dest];
        auto out = std::make_unique<outgoing>();
        out->dest = dest;
        out->mpi_dest = peers_[dest];
        out->handlers = std::move(b.handlers);
        wire::header h{};
        h.magic = wire::magic;
        h.version = wire::version;
        h.kind = wire::batch;
        h.token = job_token_;
        h.source = my_rank_;
        h.chunk_count = static_cast<std::uint32_t>(out->handlers.size());
        h.index_size = b.size - sizeof h;
        std::memcpy(b.bytes.get(), &h, sizeof h);
        out->eager = std::move(b.bytes);
        out->eager_size = b.size;
        b = open_batch{};
        --batches_open_;
        ++stats_.batches_sent;
        stats_.parcels_in_batches += out->handlers.size();
        if (sends_in_flight_ >= max_sends_in_flight || !backlog_.empty()) {
            backlog_.push_back(std::move(out));
            return;
        }
        post(std::move(out), g);
    }

    std::size_t data_pieces(outgoing const& out) const {
        std::size_t n = 0;
        for (auto const& c : out.msg.chunks()) {
            if (c.type != chunk_type::index) {
                n += (c.size + piece_ - 1) / piece_;
            }
        }
        if (!out.index_inline) {
            n += (out.msg.data().size() + piece_ - 1) / piece_;
        }
        return n;
    }

    /// Posts `out`'s header and data messages. Called with the lock held; with
    /// MPI_THREAD_MULTIPLE the MPI calls are made without it.
    void post(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g) {
        std::size_t pieces = data_pieces(*out);
        int tag = 0;
        if (pieces != 0) {
            tag = first_data_tag + static_cast<int>(next_tag_[out->dest]++ % data_tags);
        }
        std::uint64_t id = static_cast<std::uint64_t>(tag);
        std::memcpy(out->eager.get() + offsetof(wire::header, send_id), &id, sizeof id);
        ++sends_in_flight_;
        ++in_flight_to_[out->dest];
        ++stats_.messages_sent;
        stats_.eager_bytes_sent += out->eager_size;
        stats_.rendezvous_sends += pieces != 0;
        if (out->index_inline) {
            stats_.bytes_copied_on_send += out->msg.data().size();
        }
        for (auto const& c : out->msg.chunks()) {
            // rma chunks (pool memory) travel as they are, like every chunk here: MPI
            // registers, if it must, by itself.
            stats_.pool_chunks_sent += c.type == chunk_type::rma && c.size != 0;
        }
        thread_local std::vector<MPI_Request> reqs;
        reqs.clear();
        outgoing* o = out.release();
        if (multiple_) {
            g.unlock();
        }
        int rc = isend(*o, tag, reqs);
        if (bell_ && rc == MPI_SUCCESS && bell_->ring(o->dest)) {
            ++rings_;
        }
        if (multiple_) {
            g.lock();
        }
        o->pending = reqs.size();
        for (auto r : reqs) {
            reqs_.push_back(r);
            owners_.push_back({req_kind::send, o});
        }
        if (rc != MPI_SUCCESS) {
            o->error = rc;
            if (o->pending == 0) {
                --sends_in_flight_;
                --in_flight_to_[o->dest];
                sent_.emplace_back(o);
            }
        }
    }

    int isend(outgoing& out, int tag, std::vector<MPI_Request>& reqs) {
        MPI_Request r = MPI_REQUEST_NULL;
        int rc = MPI_Isend(out.eager.get(), static_cast<int>(out.eager_size), MPI_BYTE,
                           out.mpi_dest, header_tag, comm_, &r);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        reqs.push_back(r);
        auto send_bytes = [&](std::byte const* p, std::size_t n) {
            for (std::size_t done = 0; done < n; done += piece_) {
                int count = static_cast<int>(std::min(piece_, n - done));
                MPI_Request q = MPI_REQUEST_NULL;
                int e = MPI_Isend(p + done, count, MPI_BYTE, out.mpi_dest, tag, comm_, &q);
                if (e != MPI_SUCCESS) {
                    return e;
                }
                reqs.push_back(q);
            }
            return MPI_SUCCESS;
        };
        for (auto const& c : out.msg.chunks()) {
            if (c.type != chunk_type::index && c.size != 0) {
                if ((rc = send_bytes(c.address, c.size)) != MPI_SUCCESS) {
                    return rc;
                }
            }
        }
        if (!out.index_inline) {
            auto data = out.msg.data();
            rc = send_bytes(data.data(), data.size());
        }
        return rc;
    }

    /// Completed requests: sends finish, headers are taken apart, parcels become ready.
    bool test_requests() {
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

    void completed(req_owner o, int err, MPI_Status const& st) {
        switch (o.kind) {
        case req_kind::send: {
            auto* out = static_cast<outgoing*>(o.p);
            if (err != MPI_SUCCESS && out->error == MPI_SUCCESS) {
                out->error = err;
            }
            if (--out->pending == 0) {
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
            if (err != MPI_SUCCESS && in->error == MPI_SUCCESS) {
                in->error = err;
            }
            heard_.push_back(in->source);
            if (--in->pending == 0) {
                finish(std::unique_ptr<incoming>(in));
            }
            break;
        }
        }
    }

    /// Deferred parcels, in order, while the receive budget has room (one always).
    bool admit_deferred() {
        bool any = false;
        while (!deferred_.empty() && (receiving_ == 0 || receiving_bytes_ < opts_.read_budget)) {
            header_buffer h = std::move(deferred_.front());
            deferred_.pop_front();
            take_header(h, true);
            any = true;
        }
        return any;
    }

    static bool cancelled(MPI_Status const& st) {
        int flag = 0;
        MPI_Test_cancelled(&st, &flag);
        return flag != 0;
    }

    /// Takes headers waiting in MPI while the receive budget allows (one parcel always).
    bool probe_headers() {
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
            // Nothing a header can be is larger than its descriptors at the chunk limit plus
            // the eager threshold; a larger one is taken out of MPI with no room (MPI reports
            // truncation) and dropped.
            std::size_t limit = sizeof(wire::header) +
                                std::size_t{wire::max_chunks} * sizeof(wire::descriptor) +
                                opts_.eager_threshold;
            bool absurd = count < 0 || static_cast<std::size_t>(count) > limit;
            h->size = absurd ? 0 : static_cast<std::size_t>(count);
            h->bytes = pooled_buffer(h->size);
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
                owners_.push_back({req_kind::header, h.release()});
            }
        }
        return any;
    }

    /// A received header: checked, then the parcel is ready (everything inline) or its
    /// chunks' receives are posted.
    void take_header(header_buffer const& hb, bool admitted = false) {
        take_header(hb.bytes.get(), hb.size, hb.mpi_source, false, admitted);
    }

    /// `in_batch`: a record of a batch, which must be a whole parcel (no data messages).
    /// `admitted`: a deferred header whose turn has come (the budget is not checked again).
    void take_header(std::byte const* bytes, std::size_t size, int mpi_source, bool in_batch,
                     bool admitted = false) {
        auto drop = [&](std::string const& why) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a malformed parcel from MPI rank {}: {}",
                                   mpi_source, why);
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
        if (h.chunk_count > wire::max_chunks || h.index_size > wire::max_chunk_bytes) {
            return drop("absurd sizes");
        }
        std::size_t fixed = sizeof h + std::size_t{h.chunk_count} * sizeof(wire::descriptor);
        if (size != fixed + (index_inline ? h.index_size : 0)) {
            return drop("its length does not match its header");
        }
        std::vector<serialization::serialization_chunk> chunks =
            serialization::message::chunk_list();
        chunks.reserve(h.chunk_count); // one growth at most (none from a reused list)
        std::vector<std::shared_ptr<std::byte[]>> owners;
        std::uint64_t total = index_inline ? 0 : h.index_size;
        std::size_t offset = 0;
        bool external = false;
        std::byte const* p = bytes + sizeof h;
        try {
            for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
                wire::descriptor d;
                std::memcpy(&d, p + i * sizeof d, sizeof d);
                if (d.size > wire::max_chunk_bytes) {
                    return drop("a chunk of " + std::to_string(d.size) + " bytes");
                }
                if (d.type == static_cast<std::uint8_t>(chunk_type::index)) {
                    chunks.push_back({chunk_type::index, d.size, offset, nullptr, 0});
                    offset += d.size;
                } else if (d.type == static_cast<std::uint8_t>(chunk_type::pointer) ||
                           d.type == static_cast<std::uint8_t>(chunk_type::rma)) {
                    total += d.size;
                    if (total > wire::machine_memory()) {
                        return drop("more than this machine's memory");
                    }
                    external |= d.size != 0;
                    chunks.push_back({static_cast<chunk_type>(d.type), d.size, 0, nullptr, 0});
                } else {
                    return drop("unknown chunk type " + std::to_string(d.type));
                }
            }
            if (offset != h.index_size) {
                return drop("index chunks do not add up to the index size");
            }
            if (!external && index_inline) {
                auto m = serialization::message::from_parts(
                    {p + std::size_t{h.chunk_count} * sizeof(wire::descriptor), h.index_size},
                    std::move(chunks));
                ++stats_.messages_received;
                ready_.emplace_back(from, std::move(m));
                return;
            }
            if (in_batch || h.send_id < first_data_tag || h.send_id >= first_data_tag + data_tags) {
                return drop("a data tag out of range");
            }
            // Over the receive budget (or behind parcels that are): the header waits as a copy
            // and the chunks stay with the sender's MPI. Eager parcels (heartbeats) still
            // arrive meanwhile. In order: a deferred parcel's receives are posted before those
            // of any later parcel, as tag matching needs.
            if (!admitted && (!deferred_.empty() ||
                              (receiving_ != 0 && receiving_bytes_ + total > opts_.read_budget))) {
                header_buffer d;
                d.bytes = pooled_buffer(size);
                std::memcpy(d.bytes.get(), bytes, size);
                d.size = size;
                d.mpi_source = mpi_source;
                deferred_.push_back(std::move(d));
                ++stats_.deferred_rendezvous;
                return;
            }
            owners.resize(chunks.size());
            auto in = std::make_unique<incoming>();
            in->source = from;
            in->msg = serialization::message::with_index_buffer(h.index_size);
            if (index_inline && h.index_size != 0) {
                std::memcpy(in->msg.index_buffer(),
                            p + std::size_t{h.chunk_count} * sizeof(wire::descriptor),
                            h.index_size);
            }
            for (std::size_t i = 0; i < chunks.size(); ++i) {
                auto& c = chunks[i];
                if (c.type != chunk_type::index && c.size != 0) {
                    owners[i] = receive_buffer(c.size, c.type == chunk_type::rma);
                    c.address = owners[i].get();
                }
            }
            in->chunks = std::move(chunks);
            in->owners = std::move(owners);
            in->bytes = total;
            post_receives(std::move(in), mpi_source, static_cast<int>(h.send_id), index_inline);
        } catch (std::exception const& e) {
            drop(e.what());
        }
    }

    /// A coalesced message: each record is a parcel's header message, taken as if it had come
    /// alone; a record with a bad length or padding ends the batch.
    void take_batch(std::byte const* bytes, std::size_t size, wire::header const& h,
                    int mpi_source) {
        std::size_t at = sizeof h;
        if (h.index_size != size - sizeof h) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a malformed batch from MPI rank {}", mpi_source);
            return;
        }
        for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
            std::uint32_t len[2];
            if (size - at < wire::record_prefix ||
                (std::memcpy(len, bytes + at, sizeof len), len[1] != 0) ||
                wire::record_size(len[0]) > size - at) {
                static logging::rate_limit limit;
                logging::error_limited(limit, "a batch from MPI rank {} ends in a bad record",
                                       mpi_source);
                return;
            }
            take_header(bytes + at + wire::record_prefix, len[0], mpi_source, true, false);
            at += wire::record_size(len[0]);
        }
    }

    std::shared_ptr<std::byte[]> receive_buffer(std::size_t n, bool rma_chunk) {
        if (rma_chunk) {
            try {
                auto b = rma::allocate_shared(n);
                ++stats_.pool_receive_buffers;
                return b;
            } catch (rma::pool_exhausted const&) {
                // Over the pool's limit: the bytes still arrive; a loader that needs pool
                // memory then reports the limit itself.
            }
        }
        bool reused = false;
        auto b = buffers_->get(n, reused);
        stats_.receive_buffers_reused += reused;
        return b;
    }

    void post_receives(std::unique_ptr<incoming> in, int mpi_source, int tag, bool index_inline) {
        thread_local std::vector<MPI_Request> reqs;
        reqs.clear();
        int rc = MPI_SUCCESS;
        auto recv_bytes = [&](std::byte* p, std::size_t n) {
            for (std::size_t done = 0; done < n && rc == MPI_SUCCESS; done += piece_) {
                int count = static_cast<int>(std::min(piece_, n - done));
                MPI_Request q = MPI_REQUEST_NULL;
                rc = MPI_Irecv(p + done, count, MPI_BYTE, mpi_source, tag, comm_, &q);
                if (rc == MPI_SUCCESS) {
                    reqs.push_back(q);
                }
            }
        };
        for (auto& c : in->chunks) {
            if (c.type != chunk_type::index && c.size != 0) {
                recv_bytes(const_cast<std::byte*>(c.address), c.size);
            }
        }
        if (!index_inline) {
            recv_bytes(in->msg.index_buffer(), in->msg.index_size());
        }
        if (rc != MPI_SUCCESS) {
            // The receives posted stay (MPI may write into their buffers): the parcel is
            // dropped once they complete.
            in->error = rc;
        }
        if (reqs.empty()) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "MPI: posting receives from locality {} failed: {}",
                                   in->source, mpi_error_string(rc));
            return;
        }
        in->pending = reqs.size();
        stats_.rma_reads += reqs.size(); // the receives of chunk pieces stand for the reads
        ++receiving_;
        receiving_bytes_ += in->bytes;
        auto* raw = in.release();
        for (auto r : reqs) {
            reqs_.push_back(r);
            owners_.push_back({req_kind::data, raw});
        }
    }

    void finish(std::unique_ptr<incoming> in) {
        --receiving_;
        receiving_bytes_ -= in->bytes;
        stats_.rma_bytes_read += in->bytes;
        if (in->error != MPI_SUCCESS) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "MPI: receiving a parcel from locality {} failed: {}",
                                   in->source, mpi_error_string(in->error));
            return;
        }
        try {
            in->msg.complete_parts(std::move(in->chunks));
        } catch (std::exception const& e) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}",
                                   in->source, e.what());
            return;
        }
        for (std::size_t i = 0; i < in->owners.size(); ++i) {
            if (in->owners[i]) {
                in->msg.set_chunk_owner(i, std::move(in->owners[i]));
            }
        }
        ++stats_.messages_received;
        ready_.emplace_back(in->source, std::move(in->msg));
    }

    /// Ends what is still in flight without waiting for peers that may be gone: receives are
    /// cancelled, sends get a bounded time to complete; a request still active then is freed
    /// and its buffers are left to it (never freed under MPI). on_sent runs for every send.
    void close() noexcept {
        std::unique_lock g(mutex_);
        closed_ = true;
        for (std::size_t i = 0; i < reqs_.size(); ++i) {
            if (owners_[i].kind != req_kind::send) {
                MPI_Cancel(&reqs_[i]);
            }
        }
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!reqs_.empty() && std::chrono::steady_clock::now() < until) {
            test_requests();
            if (!reqs_.empty()) {
                std::this_thread::yield();
            }
        }
        std::size_t abandoned = reqs_.size();
        for (std::size_t i = 0; i < reqs_.size(); ++i) {
            MPI_Request_free(&reqs_[i]); // buffers deliberately kept: MPI may still use them
        }
        for (auto& out : backlog_) {
            out->error = MPI_ERR_OTHER;
            sent_.push_back(std::move(out));
        }
        backlog_.clear();
        for (std::uint32_t d = 0; d < batches_.size(); ++d) {
            if (batches_[d].size != 0) {
                auto out = std::make_unique<outgoing>();
                out->handlers = std::move(batches_[d].handlers);
                sent_.push_back(std::move(out));
            }
        }
        auto sent = std::move(sent_);
        g.unlock();
        if (abandoned != 0) {
            logging::error("MPI: closing with {} operations unfinished (a peer gone?); their "
                           "buffers are kept",
                           abandoned);
        }
        for (auto& out : sent) {
            auto ec = std::make_error_code(std::errc::connection_aborted);
            if (out->on_sent) {
                out->on_sent(ec);
            }
            for (auto& h : out->handlers) {
                if (h) {
                    h(ec);
                }
            }
        }
        // Completed sends reported above; anything completed but undelivered is dropped.
        ready_.clear();
        if (comm_ != MPI_COMM_NULL) {
            MPI_Comm_free(&comm_);
        }
    }

    transport_options opts_;
    std::shared_ptr<void> session_; // MPI stays initialized while this transport lives
    bool multiple_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    int mpi_rank_ = 0;
    int mpi_size_ = 1;
    std::size_t piece_ = std::size_t{1} << 30;
    std::uint64_t job_token_ = 0;
    std::uint32_t my_rank_ = 0;
    std::vector<int> peers_;             // courier rank -> MPI rank (-1: not served)
    std::vector<std::uint32_t> rank_of_; // MPI rank -> courier rank
    receive_handler on_receive_;
    activity_handler on_activity_;
    std::shared_ptr<receive_buffer_pool> buffers_ =
        std::make_shared<receive_buffer_pool>(std::size_t{256} << 20);

    std::unique_ptr<detail::doorbell> bell_; // null: doorbell off or not available
    std::atomic<std::uint64_t> rings_{0};

    mutable std::mutex mutex_; // everything below; with serialized MPI, every MPI call
    bool closed_ = false;
    std::vector<std::uint32_t> next_tag_;
    std::vector<std::uint32_t> in_flight_to_; // sends in flight by destination
    std::vector<open_batch> batches_;         // by destination; size 0: none open
    std::size_t batches_open_ = 0;
    std::vector<std::vector<sent_handler>> spare_handlers_; // emptied, capacity kept
    /// Headers of parcels waiting for the receive budget (bounded by the senders' sends in
    /// flight), in arrival order.
    std::deque<header_buffer> deferred_;
    std::vector<MPI_Request> reqs_;
    std::vector<req_owner> owners_; // parallel to reqs_
    std::vector<int> indices_;
    std::vector<MPI_Status> statuses_;
    std::deque<std::unique_ptr<outgoing>> backlog_;
    std::size_t sends_in_flight_ = 0;
    std::size_t receiving_ = 0;
    std::size_t receiving_bytes_ = 0;
    std::vector<std::unique_ptr<outgoing>> sent_;
    std::vector<std::pair<std::uint32_t, serialization::message>> ready_;
    std::vector<std::uint32_t> heard_;
    statistics stats_;
};

} // namespace

std::unique_ptr<transport> make_mpi_transport(transport_options const& o) {
    return std::make_unique<mpi_transport>(o);
}

} // namespace courier::parcelport
