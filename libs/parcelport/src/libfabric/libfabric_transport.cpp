// SPDX-License-Identifier: BSL-1.0
// Opening, addressing and closing the libfabric transport; the per-provider defaults.
#include "libfabric_transport.hpp"
#include "pushed.hpp"

#include <courier/common/log.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <random>
#include <stdexcept>

namespace courier::parcelport {

namespace {
/// The per-provider defaults of transport.hpp (why each value: its comments there).
struct provider_defaults {
    std::size_t read_budget, read_piece, eager_threshold;
};
provider_defaults defaults_for(std::string_view provider) noexcept {
    auto core = fabric::core_provider(provider);
    if (core == "mpi") { // the MPI parcelport (mpi_transport.cpp)
        return {std::size_t{64} << 20, std::size_t{8} << 20, std::size_t{8} << 10};
    }
    if (core == "shm") {
        return {std::size_t{512} << 10, std::size_t{1} << 30, std::size_t{8} << 10};
    }
    if (fabric::tcp_sockets(core)) {
        return {std::size_t{4} << 20, std::size_t{1} << 20, std::size_t{96} << 10};
    }
    return {std::size_t{16} << 20, std::size_t{1} << 20, std::size_t{4} << 10};
}
} // namespace

std::size_t default_read_budget(std::string_view provider) noexcept {
    return defaults_for(provider).read_budget;
}
std::size_t default_eager_threshold(std::string_view provider) noexcept {
    return defaults_for(provider).eager_threshold;
}
std::size_t default_read_piece(std::string_view provider) noexcept {
    return defaults_for(provider).read_piece;
}
std::size_t default_push_max(std::string_view core_provider) noexcept {
    return core_provider == "net" ? std::size_t{256} << 10 : 0;
}
std::size_t default_zero_copy_threshold(std::string_view provider, std::size_t push_max) {
    std::size_t const eager = default_eager_threshold(provider);
    // "tcp" is opened as tcp_provider() says (make_transport): net where libfabric offers it.
    std::string const opened = provider == "tcp" ? tcp_provider() : std::string(provider);
    std::string_view const core = fabric::core_provider(opened);
    if (push_max == transport_options::push_max_auto) {
        push_max = default_push_max(core);
    }
    // Only where every block from 64 KiB up to the eager threshold may be pushed: a block over
    // push_max would be read (a round trip) where it went in the eager message before.
    if (core != "net" || push_max < eager) {
        return eager;
    }
    return std::min(eager, fabric::push_classes::min_chunk_bytes);
}
std::size_t default_shm_outbox_chunk() noexcept {
    return fabric::amd_processor() ? std::size_t{1} << 20 : std::size_t{32} << 10;
}

namespace {
/// The largest eager message of a transport with `eager_threshold`: a receive buffer.
std::size_t receive_size_for(std::size_t eager_threshold) noexcept {
    return sizeof(wire::header) + eager_threshold + 32 * sizeof(wire::descriptor);
}
} // namespace

namespace {
/// Whether this host has RDMA devices, where rxm may run over verbs: its eager limit must then
/// equal its buffer size, and its queues are the NIC's. (Read without libfabric: this decides
/// what to set before libfabric loads.)
bool rdma_devices_present() {
    std::error_code ec;
    std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
    return !ec && it != std::filesystem::directory_iterator();
}
} // namespace

void prepare_libfabric(transport_options const& o) {
    static std::once_flag once;
    std::call_once(once, [&] {
        auto const core = fabric::core_provider(o.provider);
        if (!fabric::tcp_sockets(core) && (core == "verbs" || rdma_devices_present())) {
            return; // rxm may run over verbs: its settings stay as they are
        }
        auto set = [](char const* name, std::size_t value) {
            if (value != 0) {
                ::setenv(name, std::to_string(value).c_str(), 0); // a user's own value wins
            }
        };
        // rxm sends a message over its eager limit (16 KiB by default) by segments or by its
        // own rendezvous, a round trip more; over tcp it places an eager message straight
        // into the posted buffer, so the limit is raised to our largest eager message.
        std::size_t const largest = receive_size_for(
            o.eager_threshold != 0 ? o.eager_threshold : default_eager_threshold("tcp"));
        set("FI_OFI_RXM_EAGER_LIMIT", largest > 16384 ? largest : 0);
        set("FI_OFI_RXM_MSG_TX_SIZE", o.tcp_send_queue);
        set("FI_OFI_RXM_MSG_RX_SIZE", o.tcp_receive_buffers);
    });
}

std::unique_ptr<transport> make_libfabric_transport(transport_options const& o) {
    return std::make_unique<fabric::libfabric_transport>(o);
}

} // namespace courier::parcelport

namespace courier::parcelport::fabric {

libfabric_transport::libfabric_transport(transport_options const& o) : opts_(o) {
    if (opts_.eager_threshold == 0) {
        opts_.eager_threshold = default_eager_threshold(opts_.provider);
    }
    peers_.set_token(opts_.job_token);
    prepare_libfabric(opts_);
    std::size_t const recv_size = receive_size_for(opts_.eager_threshold);
    endpoint_ = std::make_unique<endpoint>(opts_);
    endpoint& ep = *endpoint_;
    std::string prov = ep.provider();
    if (opts_.read_budget == 0) {
        opts_.read_budget = default_read_budget(prov);
    }
    if (opts_.read_piece == 0) {
        opts_.read_piece = default_read_piece(prov);
    }
    if (opts_.shm_outbox_chunk == 0) {
        opts_.shm_outbox_chunk = default_shm_outbox_chunk();
    }
    std::size_t max_read = std::min<std::size_t>(ep.max_msg_size(), std::size_t{1} << 30);
    max_read = std::min(max_read, std::max<std::size_t>(opts_.read_piece, 4096));
    // Split messages (shm): a part must fit in the inject size with its header, and a joined
    // message in a receive buffer behind part 0's header.
    std::size_t split_part = 0, split_max = 0;
    if (ep.shm() && opts_.split_messages && ep.inject_size() > 2 * sizeof(wire::header)) {
        split_part = ep.inject_size();
        split_max =
            std::min(2 * (split_part - sizeof(wire::header)), recv_size - sizeof(wire::header));
    }
    // The largest coalesced message: a receive buffer, or on shm the largest split message (a
    // batch over the inject size goes as two parts within it, not by shm's CMA protocol).
    std::size_t batch_limit = split_part != 0 ? split_max : recv_size;
    // shm names its region after the pid unless told otherwise, and a killed process leaves
    // the region behind: a later process with the same pid then fails fi_enable with EBUSY. A
    // name unique to the job and rank avoids that, and lets courier-run remove the leftovers of
    // a killed locality (the doorbell's shared word is named after it too).
    bool wants_bell = ep.shm() ? opts_.doorbell : (tcp_sockets(ep.core()) && opts_.tcp_doorbell);
    std::string name = opts_.endpoint_name;
    if (name.empty() && (ep.shm() || wants_bell)) {
        static std::atomic<unsigned> counter{0};
        name = fmt::format("courier-{}-{}-{}", ::getpid(), counter++, std::random_device{}());
    }
    if (wants_bell) {
        opening_step("doorbell");
        try {
            bell_ = std::make_unique<detail::doorbell>(name);
        } catch (std::exception const& e) {
            logging::warn("{}; idle workers will {} instead", e.what(),
                          ep.shm() ? "poll" : "wait on the completion queue");
        }
    }
    // Between hosts the network doorbell (net_bell.hpp) stands in for the queue's wait fd.
    if (tcp_sockets(ep.core()) && !bell_ && opts_.network_doorbell && opts_.peers_on_other_hosts) {
        opening_step("network doorbell");
        try {
            net_bell_ = std::make_unique<detail::net_bell>(opts_.interface, net_bell_quiet);
        } catch (std::exception const& e) {
            logging::warn("{}; idle workers will wait on the completion queue", e.what());
        }
    }
    // A wait fd lets idle workers sleep until a completion arrives, but costs on every message.
    // libfabric 1.17's shm never signals it when a peer writes into our region (fi_trywait
    // always says "busy") while every completion still costs a write and a read on it; rxm over
    // tcp signals it through nested epoll sets, net once per sleep (endpoint::may_sleep). With
    // a doorbell, peers wake us instead; shm without one gets the scheduler's bounded-backoff
    // sleep.
    ep.enable(!ep.shm() && !bell_ && !net_bell_, name);
    try {
        memory_ = std::make_unique<memory>(ep, counters_, opts_);
        if (ep.shm() && opts_.shm_outbox != 0) {
            opening_step("outbox");
            try {
                outbox_ = std::make_unique<outbox>(name, opts_.shm_outbox, opts_.shm_outbox_chunk);
                outbox_mr_.mr = ep.register_memory(outbox_->region(), outbox_->size(),
                                                   FI_REMOTE_READ | FI_READ);
                outbox_->set_registration(
                    fi_mr_key(outbox_mr_.mr),
                    ep.mr_virt_addr() ? reinterpret_cast<std::uint64_t>(outbox_->region()) : 0);
            } catch (std::exception const& e) {
                logging::warn("{}; chunks will be read from the sender's memory instead", e.what());
                outbox_.reset();
            }
        }
        if (ep.shm() && opts_.shm_rings) {
            try {
                rings_ = std::make_unique<detail::message_rings>(name);
            } catch (std::exception const& e) {
                logging::warn("{}; small messages will go through the provider's queues", e.what());
            }
        }
        if (ep.shm() && ep.mr_virt_addr() && opts_.shm_direct_read) {
            direct_ = std::make_unique<direct_reader>();
            // Peers copy this side's rma chunks out of its pool, which they map (direct_read.hpp).
            shared_pool_ = rma::share_with_host();
        }
        transport_parts parts{ep, peers_, backlog_, counters_, rings_.get(), &local_, tally_};
        sender_ = std::make_unique<sender>(parts, *memory_, recv_size, split_part, split_max);
        sender_->set_outbox(outbox_.get(), opts_.shm_outbox_idle < 0 ? fabric::amd_processor()
                                                                     : opts_.shm_outbox_idle != 0);
        if (shared_pool_) {
            sender_->set_shared_pool(shared_pool_->base, shared_pool_->size, direct_.get());
        }
        // A send over sockets completes once the kernel has its bytes, and one through a
        // message ring in the next pass, whether the peer has read it or not: there a parcel
        // is held behind one message in flight (coalesce_in_flight), elsewhere behind two.
        socket_core_ = tcp_sockets(ep.core()) || ep.core() == "sockets";
        // A batch leaves at coalesce_records parcels if given, else on shm at 16, or at 8 of
        // them with a handler (rendezvous announcements, sends waited for), elsewhere at 16
        // parcels holding 16 KiB (tcp: a message is a system call; 16 tiny parcels do not pay
        // for it, and a window of 64 posts of 1 KiB as one ~100 KiB batch idled the receiver).
        // On shm, 16 counted posts against 8: 8 B posts 1.08x, 64 B 1.02x (11 paired rounds);
        // 8 announcements: osu_bw at 64 KiB was 0.90x with 16 (7 rounds), level with 8. Over
        // sockets rendezvous announcements join batches too, which leave at 4 of them (osu_bw
        // 1.04-1.25x at 128 KiB - 1 MiB, 7 paired rounds; 2 level with 4); other providers
        // (verbs, efa) are not measured and send each announcement alone.
        leave_rule const leave = opts_.coalesce_records != 0 ? leave_rule{opts_.coalesce_records, 0}
                                 : ep.shm()                  ? leave_rule{16, 0, 8}
                                 : socket_core_ ? leave_rule{16, std::size_t{16} << 10, 0, 4}
                                                : leave_rule{16, std::size_t{16} << 10};
        // On shm with rings, 1 against 2: 8 B posts 1.07x (9 of 9 paired rounds), the rest
        // level (benchmarks/RESULTS.md, "Message rate").
        std::uint32_t const hold = opts_.coalesce_in_flight != 0 ? opts_.coalesce_in_flight
                                   : socket_core_ || rings_      ? 1
                                                                 : coalesce_in_flight;
        coalescer_ = std::make_unique<coalescer>(parts, batch_limit, leave, split_part, hold);
        coalescer_->set_counted_handler(&counted_, &counted_failed_);
        sender_->set_counted_handlers(&counted_, &counted_failed_);
        // Over sockets a DONE rides in the batch open to its destination, if one is (a
        // message costs both sides system calls: with every call answered, the replies wait in
        // a batch when the DONEs go; osu_bw at 128-512 KiB 1.07x, 7 paired rounds). Not on
        // shm, where a DONE is a few stores into the peer's ring and riding delays it to the
        // end of the pass (osu_bw 0.96-0.99x at 512 KiB - 1 MiB).
        sender_->set_coalescer(coalescer_.get(),
                               socket_core_ && opts_.coalescing && !ep.mr_local());
        rendezvous_ =
            std::make_unique<rendezvous>(parts, *memory_, *sender_, on_receive_, opts_, max_read,
                                         recv_size, outbox_.get(), direct_.get());
        receiver_ = std::make_unique<receiver>(parts, *memory_, *sender_, *rendezvous_, on_receive_,
                                               on_batch_, opts_, recv_size);
        receiver_->post_buffers(opts_.posted_receives);
        std::size_t const push_max = opts_.push_max == transport_options::push_max_auto
                                         ? default_push_max(ep.core())
                                         : opts_.push_max;
        // A pushed message streams in with no completion until its last byte. Between hosts
        // the network doorbell keeps a receiver awake 1 ms after the last arrival, which a
        // pushed message slower than that on the wire (512 KiB at 1 Gb/s) would outlast: its
        // sender rings with a push notice, which keeps the receiver awake until it lands
        // (net_bell.hpp). Within a host the pushed send's completion rings the receiver's
        // doorbell (sender::on_completion); net's own wait fd sees the arrival.
        if (push_max != 0 && ep.core() == "net" && ep.tagged() && !ep.mr_local() &&
            ep.iov_limit() >= 2) {
            push_ = push_classes::covering(push_max);
            sender_->set_push(push_, push_max);
            receiver_->post_push_buffers(push_);
        }
    } catch (...) {
        // As in the destructor: the endpoint closes before the objects built so far free the
        // buffers and registrations it may still use (receives posted already).
        endpoint_->close_endpoint();
        throw;
    }
}

libfabric_transport::~libfabric_transport() {
    log_error_summary();
    // The endpoint first: no operation runs while the objects below free their buffers and
    // registrations (in reverse order of their declaration), then the rest of the fabric.
    endpoint_->close_endpoint();
}

std::vector<std::byte> libfabric_transport::address() const {
    return join_address(
        {endpoint_->name(), outbox_ ? outbox_->name() : std::string(),
         bell_       ? bell_->name()
         : net_bell_ ? net_bell_->name()
                     : std::string(),
         rings_ ? rings_->name() : std::string(),
         direct_ ? direct_reader::identity() + direct_reader::pool_identity(shared_pool_)
                 : std::string(),
         std::string(endpoint_->core()),
         push_.count != 0 ? std::to_string(push_.count) : std::string()});
}

void libfabric_transport::set_peers(std::vector<std::vector<std::byte>> const& addresses,
                                    std::uint32_t my_rank) {
    peers_.set(*endpoint_, addresses, my_rank, bell_.get(), net_bell_.get(), bell_wait_,
               bell_partial_, outbox_.get(), direct_.get());
    coalescer_->set_peers(addresses.size());
    sender_->set_peers(addresses.size());
    if (rings_) {
        try {
            rings_->connect(peers_.ring_names(), my_rank);
        } catch (std::exception const& e) {
            // Peers never see this side's rings attached, so they send through the provider;
            // this side still reads theirs.
            logging::warn("{}; small messages to this host's peers will go through the "
                          "provider's queues",
                          e.what());
        }
    }
}

void libfabric_transport::peer_failed(std::uint32_t rank) noexcept {
    peers_.mark_failed(rank);
    if (direct_) {
        if (std::size_t n = direct_->release(rank); n != 0) {
            logging::debug("let go of failed locality {}'s rma pool segment ({} MiB mapped)", rank,
                           n >> 20);
        }
    }
}

statistics libfabric_transport::stats() const {
    statistics s = counters_.snapshot();
    if (coalescer_) {
        coalescer_->add_ring_lone_stats(s);
    }
    if (rings_) {
        auto r = rings_->stats();
        s.ring_messages_sent = r.sent;
        s.ring_messages_received = r.received;
        s.ring_refusals = r.refused;
    }
    if (direct_) {
        s.mapped_read_bytes = direct_->mapped_bytes();
    }
    return s;
}

bool libfabric_transport::gathers(std::uint32_t dest) const noexcept {
    // Over sockets only, where each message costs system calls; not on shm, where a message is
    // cheap and the first replies leaving alone start the sender's next work sooner (gathered,
    // osu_bw at 1 KiB was 0.96x; 7 paired rounds), nor where nothing coalesces (mr_local:
    // sender::batched takes no parcel).
    return socket_core_ && opts_.coalescing && !endpoint_->mr_local() && dest < peers_.size();
}

void libfabric_transport::gather(std::uint32_t dest) noexcept {
    if (!gathers(dest)) {
        return;
    }
    try {
        coalescer_->open_for(dest);
    } catch (std::bad_alloc const&) {
        // No batch: the replies leave as they would have without gathering.
    }
}

void libfabric_transport::send_gathered(std::uint32_t dest) noexcept {
    if (gathers(dest) && coalescer_->post_open(dest)) {
        pacer_.kick();
    }
}

bool libfabric_transport::can_sleep() {
    if (!endpoint_->shm() && transfers_pending()) {
        // Over tcp the bytes of a send or of a read move only while both sides progress, and
        // no completion (hence no ring) marks their progress: a worker that slept mid-transfer
        // would stall it until its timeout.
        return false;
    }
    if (backlog_.size() != 0) {
        // A deferred post (-FI_EAGAIN) goes out only from this side's progress, and nothing
        // (no ring, no completion) wakes this side when the peer has made room.
        return false;
    }
    if (bell_ && bell_wait_) {
        // Raise the word, then look: a peer's post after this rings; one before it is found.
        // The look is a whole pass, the completion queue included (a gated pass may skip it).
        // While another thread polls, this one does not sleep (that pass may have decided not
        // to read the queue) and does not wait for the lock either: a poller that starts pass
        // after pass (a large transfer's read steps) kept a worker waiting here, inside a
        // transport call, for seconds, which the liveness watchdog took for a wedged call.
        bell_->arm();
        bool found = false;
        {
            std::unique_lock lk(poll_mutex_, std::try_to_lock);
            found = !lk || pass(true);
        }
        if (found) {
            bell_->disarm();
            return false;
        }
        return true;
    }
    if (net_bell_ && bell_wait_) {
        // Drop the rings that came while awake; then awake for a while after anything arrived
        // or a ring came (net_bell.hpp: a peer that posted within its quiet time of that does
        // not ring). Else look once more: a message whose ring was dropped is found now, and
        // one posted after this rings.
        net_bell_->arm();
        if (net_bell_->awake()) {
            return false;
        }
        std::lock_guard lk(poll_mutex_);
        if (pass(true)) {
            net_bell_->heard();
            return false;
        }
        return true;
    }
    if (coalescer_->has_open() || !local_.empty()) {
        return false; // a coalesced message waits for progress(), or completions of ring sends
    }
    if (endpoint_->wait_fd() < 0) {
        // No fd to wait on: the scheduler sleeps briefly and polls again. A gated queue is
        // read first (a completion or message in it would otherwise wait out the sleep).
        if (!rings_) {
            return true;
        }
        std::lock_guard lk(poll_mutex_);
        return !gated() || !pass(true);
    }
    // Wait for a poller to finish rather than stay awake: with two idle workers, each one's
    // polling would make the other's check fail, and they would keep each other awake.
    std::lock_guard lk(poll_mutex_);
    return endpoint_->may_sleep();
}

std::string libfabric_transport::debug_state() const {
    return fmt::format("sends in flight {}, {}, backlog {}, messages sent {}, received {}, "
                       "EAGAIN retries {}",
                       sender_->in_flight(), rendezvous_->debug_state(), backlog_.size(),
                       counters_.messages_sent.load(), counters_.messages_received.load(),
                       counters_.eagain_retries.load());
}

} // namespace courier::parcelport::fabric
