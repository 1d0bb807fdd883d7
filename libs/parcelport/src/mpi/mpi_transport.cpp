// SPDX-License-Identifier: BSL-1.0
// The MPI transport (mpi_transport.hpp): opening, addresses, the send calls, progress(), sleeping,
// closing.
#include "mpi_transport.hpp"

namespace courier::parcelport::mpi_pp {

mpi_transport::mpi_transport(transport_options const& o)
    : opts_(o), session_(hold_mpi(o.mpi_thread_multiple)), multiple_(o.mpi_thread_multiple) {
    if (opts_.eager_threshold == 0) {
        opts_.eager_threshold = default_eager_threshold("mpi");
    }
    // At least one descriptor's room past the descriptors: layout() then never lays out a
    // remote descriptor table (a header message carries every descriptor).
    opts_.eager_threshold = std::max(opts_.eager_threshold, sizeof(wire::descriptor));
    // auto: 16 when every peer is on this host (MPI's shared memory: 8 B - 512 B posts
    // 1.09-1.45x whole batches); between hosts a message costs a system call (over the tcp
    // BTL, batches of 16 gave 0.91x at 8 B), so only the batch's bytes bound it.
    batch_records_ = opts_.coalesce_records != 0  ? opts_.coalesce_records
                     : opts_.peers_on_other_hosts ? batch_bytes
                                                  : 16;
    // auto: 1. An MPI_Isend of an eager message completes once MPI has buffered it (vader's
    // FIFO, the tcp BTL's socket), so a lone request or reply finds none in flight, and one in
    // flight means a stream: over the tcp BTL osu_bw at 8 B 1.20x against 2 (5 of 5 paired
    // rounds), 1 KiB - 32 KiB and latency level; over vader level (0.99-1.05x).
    hold_in_flight_ = opts_.coalesce_in_flight != 0 ? opts_.coalesce_in_flight : 1;
    max_header_ = sizeof(wire::header) +
                  (std::size_t{wire::max_chunks} + 1) * sizeof(wire::descriptor) +
                  opts_.eager_threshold;
    if (opts_.read_budget == 0) {
        opts_.read_budget = default_read_budget("mpi");
    }
    // A piece is one MPI message (count is int): at most 1 GiB. The default, 8 MiB, keeps
    // one MPI call's copy (vader's single copy of a whole message) short, so that the
    // progress owner returns to other parcels (heartbeats) often: a pass can copy two pieces
    // (one completed in MPI_Testsome, the next matched in the MPI_Irecv that posts it), and a
    // 64 MiB piece took up to 0.8 s on a guest with slow page faults (the receiver's fresh
    // pages and the sender's untouched ones both fault inside process_vm_readv).
    if (opts_.read_piece == 0) {
        opts_.read_piece = default_read_piece("mpi");
    }
    piece_ =
        std::min<std::size_t>(std::max<std::size_t>(opts_.read_piece, 4096), std::size_t{1} << 30);
    if (opts_.mpi_data_tags != 0) {
        data_tags_ = std::min(opts_.mpi_data_tags, data_tags);
    }
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

std::vector<std::byte> mpi_transport::address() const {
    std::string bell = bell_ ? bell_->name() : std::string();
    std::vector<std::byte> a(4 + bell.size());
    std::uint32_t r = static_cast<std::uint32_t>(mpi_rank_);
    std::memcpy(a.data(), &r, 4);
    std::memcpy(a.data() + 4, bell.data(), bell.size());
    return a;
}

void mpi_transport::set_peers(std::vector<std::vector<std::byte>> const& addresses,
                              std::uint32_t my_rank) {
    peers_.assign(addresses.size(), -1);
    rank_of_.assign(static_cast<std::size_t>(mpi_size_), UINT32_MAX);
    std::vector<std::string> bells(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) {
        if (addresses[i].empty() && i != my_rank) {
            continue; // a peer this transport does not serve
        }
        std::uint32_t r = 0;
        if (addresses[i].size() < 4 || addresses[i].size() > 4 + 255 ||
            (std::memcpy(&r, addresses[i].data(), 4), r >= static_cast<std::uint32_t>(mpi_size_))) {
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
        // worker there wakes by its scheduler's short bounded sleep). Taken to be mutual: a
        // peer whose bell this side cannot open cannot ring this side's either.
        bell_partial_ = bell_->connect(bells) != 0;
    }
    my_rank_ = my_rank;
    next_tag_.assign(addresses.size(), 0);
    in_flight_to_.assign(addresses.size(), 0);
    batches_ = std::vector<open_batch>(addresses.size());
}

std::unique_ptr<outgoing>
mpi_transport::make_outgoing(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) {
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
    return out;
}

void mpi_transport::enqueue(std::unique_ptr<outgoing> out, std::unique_lock<std::mutex>& g) {
    if (closed_) {
        throw network_error("MPI: the transport is closed");
    }
    if (sends_in_flight_ >= max_sends_in_flight || !backlog_.empty()) {
        backlog_.push_back(std::move(out));
        return;
    }
    post(std::move(out), g);
}

void mpi_transport::send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) {
    auto out = make_outgoing(dest, std::move(m), std::move(on_sent));
    std::unique_lock g(mutex_);
    enqueue(std::move(out), g);
}

void mpi_transport::send_control(std::uint32_t dest, serialization::message&& m,
                                 sent_handler on_sent) {
    auto out = make_outgoing(dest, std::move(m), std::move(on_sent));
    std::unique_lock g(mutex_, std::try_to_lock);
    if (!g.owns_lock()) {
        std::lock_guard q(controls_mutex_);
        controls_.push_back(std::move(out));
        has_controls_.store(true, std::memory_order_release);
        return;
    }
    enqueue(std::move(out), g);
}

void mpi_transport::take_controls() {
    if (!has_controls_.load(std::memory_order_acquire)) {
        return;
    }
    std::lock_guard q(controls_mutex_);
    for (auto& out : controls_) {
        backlog_.push_back(std::move(out));
    }
    controls_.clear();
    has_controls_.store(false, std::memory_order_relaxed);
}

bool mpi_transport::send_coalesced(std::uint32_t dest, serialization::message&& m,
                                   sent_handler on_sent) {
    if (!opts_.coalescing || dest >= peers_.size() || peers_[dest] < 0) {
        send(dest, std::move(m), std::move(on_sent));
        return false;
    }
    eager_layout const l = layout(m);
    if (!l.eager_only || wire::record_size(l.eager_size) > batch_bytes / 4) {
        send(dest, std::move(m), std::move(on_sent));
        return false;
    }
    std::unique_lock g(mutex_);
    auto& b = batches_[dest];
    // A lone parcel leaves at once: it joins a batch only while hold_in_flight_ messages to
    // its destination are in flight, or a batch to it is open.
    if (closed_ || (b.size == 0 && in_flight_to_[dest] < hold_in_flight_)) {
        g.unlock();
        send(dest, std::move(m), std::move(on_sent));
        return false;
    }
    std::size_t const n = l.eager_size;
    // A loop: with MPI_THREAD_MULTIPLE post_batch() lets the lock go while it posts, and
    // another sender may have opened (and filled) a new batch meanwhile.
    while (b.size != 0 && b.size + wire::record_size(n) > batch_bytes) {
        post_batch(dest, g);
    }
    if (b.size == 0) {
        b.bytes = pooled_bytes(batch_bytes);
        b.size = sizeof(wire::header);
        ++batches_open_;
        if (!spare_handlers_.empty()) { // a list with capacity: no allocation per batch
            b.handlers = std::move(spare_handlers_.back());
            spare_handlers_.pop_back();
        }
    }
    std::byte* rec = b.bytes.get() + b.size;
    write_record_prefix(rec, n);
    write_header_message(m, l, rec + wire::record_prefix);
    std::memset(rec + wire::record_prefix + n, 0, wire::record_size(n) - wire::record_prefix - n);
    b.size += wire::record_size(n);
    b.handlers.push_back(std::move(on_sent));
    stats_.bytes_copied_on_send += m.data().size();
    if (b.handlers.size() >= batch_records_) {
        post_batch(dest, g); // the receiver runs these while this sender goes on
    }
    return true;
}

bool mpi_transport::progress() {
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
    take_controls();
    while (!backlog_.empty() && sends_in_flight_ < max_sends_in_flight) {
        auto out = std::move(backlog_.front());
        backlog_.pop_front();
        if (!post(std::move(out), g)) {
            break; // every data tag to its destination is held: later
        }
        any = true;
    }
    // Headers first, then completions: MPI progresses the sends' completions during the
    // probes too, in the order they arrived, so a reply found here is delivered in the same
    // pass as the completion of the send it answers (on_sent before the reply's handler).
    any |= probe_headers();
    any |= test_requests();
    any |= admit_deferred();
    if (!unlanded_.empty() && !short_progress_only()) {
        land(g);
        any = true;
    }
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
    { // Handlers run without the lock: they may send.
        in_handlers = true;
        struct reentry_guard {
            bool& flag;
            ~reentry_guard() { flag = false; }
        } guard{in_handlers};
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
            out->complete(ec);
        }
        for (auto& [src, msg] : ready) {
            if (on_receive_) {
                on_receive_(src, std::move(msg));
            }
        }
    }
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

std::string mpi_transport::debug_state() const {
    std::lock_guard g(mutex_);
    return fmt::format("mpi: {} sends in flight, {} in the backlog, {} parcels being "
                       "received ({} bytes; {} waiting for landing buffers, {} threads "
                       "allocating them), {} waiting for the receive budget, {} MPI requests",
                       sends_in_flight_, backlog_.size(), receiving_, receiving_bytes_,
                       unlanded_.size(), landing_now_, deferred_.size(), reqs_.size());
}

bool mpi_transport::can_sleep() {
    {
        std::lock_guard g(mutex_);
        // Requests in flight move only while this side progresses (MPI has no
        // asynchronous progress here), and an open batch waits for progress().
        if (!reqs_.empty() || !backlog_.empty() || batches_open_ != 0 || !deferred_.empty() ||
            !unlanded_.empty() || landing_now_ != 0) {
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

int mpi_transport::send_raw_for_testing(std::uint32_t dest, int tag,
                                        std::span<std::byte const> bytes) {
    std::lock_guard g(mutex_);
    return MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peers_.at(dest), tag,
                    comm_);
}

statistics mpi_transport::stats() const {
    std::lock_guard g(mutex_);
    statistics s = stats_;
    s.doorbell_rings = rings_.load(std::memory_order_relaxed);
    return s;
}

void mpi_transport::close() noexcept {
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
    take_controls();
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
        out->complete(std::make_error_code(std::errc::connection_aborted));
    }
    // Completed sends reported above; anything completed but undelivered is dropped.
    ready_.clear();
    if (comm_ != MPI_COMM_NULL) {
        MPI_Comm_free(&comm_);
    }
}

} // namespace courier::parcelport::mpi_pp

namespace courier::parcelport {

std::unique_ptr<transport> make_mpi_transport(transport_options const& o) {
    return std::make_unique<mpi_pp::mpi_transport>(o);
}

} // namespace courier::parcelport
