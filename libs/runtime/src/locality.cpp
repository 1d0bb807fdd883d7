// SPDX-License-Identifier: BSL-1.0
// This locality in the job: joining it (transport, bootstrap, the launcher's monitor), leaving
// it, and the locality API (find_here, find_all_localities, get_locality_id, ...).
#include "distributed.hpp"
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "parcel_send.hpp"
#include "scheduler.hpp"
#include "trace.hpp"
#include "transport_watch.hpp"

#include <courier/runtime/init.hpp>

#include <cstdlib>
#include <optional>

namespace courier {

remote_exception::remote_exception(std::string type, std::string message, std::uint32_t locality)
    : std::runtime_error("remote exception on locality " + std::to_string(locality) + ": " + type +
                         ": " + message),
      type_(std::move(type)), message_(std::move(message)), locality_(locality) {}

namespace detail {

namespace state_detail {
locality_state g_default;
std::atomic<locality_state*> g_here{&g_default};

locality_state& here_slow() noexcept {
    if (worker* w = current_worker(); w != nullptr && w->sched.locality != nullptr) {
        return *w->sched.locality; // an in_process_job's locality
    }
    return g_default;
}
} // namespace state_detail

namespace {
/// The distributed run's state (replace_here). Never destroyed by a static destructor: a
/// run ends by replace_here(nullptr), and a process that calls exit() during a run must not
/// free the state under the workers that still use it (end_at_exit normally ends such a process
/// before any static destructor; a TSan run was seen freeing it from this holder first).
std::unique_ptr<locality_state>& owned_state() {
    static auto* holder = new std::unique_ptr<locality_state>;
    return *holder;
}
} // namespace

bool in_a_locality_state() noexcept {
    return &here() != &state_detail::g_default;
}

std::unique_ptr<locality_state> replace_here(std::unique_ptr<locality_state> s) noexcept {
    state_detail::g_here.store(s ? s.get() : &state_detail::g_default, std::memory_order_release);
    std::swap(owned_state(), s);
    return s;
}

std::string threshold_provider(config const& cfg, placement const* where) {
    if (cfg.get("parcelport") == "mpi") {
        return "mpi";
    }
    std::string const& p = cfg.get("provider");
    if (p != "auto") {
        return p;
    }
    return where != nullptr && where->host_count > 1 ? parcelport::network_provider() : "shm";
}

std::size_t zero_copy_threshold_from(config const& cfg, placement const* where) {
    if (cfg.get("zero_copy_threshold") != "auto") {
        return static_cast<std::size_t>(cfg.get_bytes("zero_copy_threshold", 0, 1ll << 40));
    }
    std::size_t const push_max =
        cfg.get("push_max") == "auto"
            ? parcelport::transport_options::push_max_auto
            : static_cast<std::size_t>(cfg.get_bytes("push_max", 0, 1LL << 22));
    return parcelport::default_zero_copy_threshold(threshold_provider(cfg, where), push_max);
}

parcelport::transport_options transport_options_from(config const& cfg, std::size_t workers,
                                                     placement const* where) {
    parcelport::transport_options o;
    o.parcelport = cfg.get_choice("parcelport", {"libfabric", "mpi"});
    o.mpi_thread_multiple = cfg.get_choice("mpi_threads", {"serialized", "multiple"}) == "multiple";
    o.provider = cfg.get("provider");
    if (where != nullptr) {
        o.host = where->host;
        o.peers_on_this_host = where->local_size > 1;
        o.peers_on_other_hosts = where->host_count > 1;
    }
    o.tcp_send_queue = static_cast<std::size_t>(cfg.get_int("tcp_send_queue", 0, 1 << 16));
    o.tcp_receive_buffers =
        static_cast<std::size_t>(cfg.get_int("tcp_receive_buffers", 0, 1 << 20));
    if (o.parcelport == "libfabric") {
        // Before anything loads libfabric's providers (threshold_provider may probe them): rxm
        // reads these only then.
        parcelport::transport_options prepared = o;
        prepared.eager_threshold = cfg.get("eager_threshold") == "auto"
                                       ? 0
                                       : static_cast<std::size_t>(cfg.get_threshold(
                                             "eager_threshold", 256, 1 << 24, "tcp;ofi_rxm"));
        parcelport::prepare_libfabric(prepared);
    }
    // "auto" across hosts: each of the two providers gets its own default (0).
    bool per_rail = o.provider == "auto" && o.peers_on_other_hosts;
    o.eager_threshold = per_rail && cfg.get("eager_threshold") == "auto"
                            ? 0
                            : static_cast<std::size_t>(cfg.get_threshold(
                                  "eager_threshold", 256, 1 << 24, threshold_provider(cfg, where)));
    std::string const& iface = cfg.get("interface");
    if (iface != "auto") {
        o.interface = iface;
    } else if (o.peers_on_other_hosts) {
        o.interface = parcelport::network_interface_toward(where->launcher_address);
        if (o.interface.empty() || o.interface == "lo") {
            throw config_error("no network interface reaches the other hosts of this job (found "
                               "'" +
                               o.interface + "'); choose one with --courier:interface=NAME");
        }
    } else {
        o.interface = "lo";
    }
    o.read_budget = static_cast<std::size_t>(cfg.get_bytes("read_budget", 0, 1LL << 40));
    o.read_piece = static_cast<std::size_t>(cfg.get_bytes("read_piece", 0, 1LL << 40));
    if (cfg.get("push_max") != "auto") {
        o.push_max = static_cast<std::size_t>(cfg.get_bytes("push_max", 0, 1LL << 22));
    }
    o.max_parcel_bytes = static_cast<std::size_t>(cfg.get_bytes("max_parcel_size", 0, 1LL << 47));
    o.doorbell = cfg.get_int("shm_doorbell", 0, 1) != 0;
    o.split_messages = cfg.get_int("shm_split", 0, 1) != 0;
    o.shm_outbox = static_cast<std::size_t>(cfg.get_bytes("shm_outbox", 0, 1LL << 36));
    if (cfg.get("shm_outbox_chunk") != "auto") {
        // 0 stages nothing: no outbox (for the transport, a chunk limit of 0 means its default).
        o.shm_outbox_chunk =
            static_cast<std::size_t>(cfg.get_bytes("shm_outbox_chunk", 0, 1LL << 36));
        if (o.shm_outbox_chunk == 0) {
            o.shm_outbox = 0;
        }
    }
    auto const& idle = cfg.get_choice("shm_outbox_idle", {"auto", "0", "1"});
    o.shm_outbox_idle = idle == "auto" ? -1 : idle == "1";
    o.shm_direct_read = cfg.get_int("shm_direct_read", 0, 1) != 0;
    o.shm_rings = cfg.get_int("shm_rings", 0, 1) != 0;
    // auto: the doorbell with one worker, the completion queue's fd with more. A sleeping
    // worker arms the bell, and then every message to the locality rings it although another
    // worker is awake and polling (measured slower than the fd). One worker has nobody else to
    // poll: the bell then costs nothing, and the fd costs on every message. A bell reaches
    // only peers on this host: none between hosts.
    auto const& bell = cfg.get_choice("tcp_doorbell", {"auto", "0", "1"});
    o.tcp_doorbell = !o.peers_on_other_hosts && (bell == "1" || (bell == "auto" && workers == 1));
    o.network_doorbell = cfg.get_int("network_doorbell", 0, 1) != 0;
    o.quiet_poll_us =
        cfg.get("network_quiet_poll_us") == "auto"
            ? -1
            : static_cast<std::int32_t>(cfg.get_int("network_quiet_poll_us", 0, 1000000));
    o.coalescing = cfg.get_int("coalesce", 0, 1) != 0;
    o.coalesce_records = static_cast<std::size_t>(cfg.get_int("coalesce_records", 0, 1 << 20));
    o.coalesce_in_flight =
        static_cast<std::uint32_t>(cfg.get_int("coalesce_in_flight", 0, 1 << 20));
    o.attach_rma_pool = true; // rma_vector & co. travel with the pool's registrations
    o.registration_cache_entries =
        static_cast<std::size_t>(cfg.get_int("registration_cache", 0, 1 << 20));
    return o;
}

void liveness_options_from(config const& cfg, std::chrono::milliseconds& timeout,
                           bool& exit_on_failure) {
    double seconds = -1;
    try {
        seconds = std::stod(cfg.get("peer_timeout"));
    } catch (std::exception const&) {
        // not a number: refused below
    }
    if (!(seconds >= 0 && seconds <= 86400)) {
        throw config_error("--courier:peer_timeout=" + cfg.get("peer_timeout") +
                           ": expected seconds (0 .. 86400)");
    }
    timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    exit_on_failure = cfg.get_choice("on_peer_failure", {"exit", "continue"}) == "exit";
}

namespace {

/// The collectives' shared-memory inbox (collective_rings.hpp), made before the address
/// exchange so that every peer on this host finds it once the exchange is over. None when
/// turned off, for a job too large for one, without a job id to name it by, or alone on its
/// host; a failure to make it is logged, and collectives then use parcels.
void open_collective_inbox(config const& cfg, locality_state& st, bootstrap const& boot) {
    if (cfg.get_int("shm_collectives", 0, 1) == 0 || st.job_id.empty() || boot.size() < 2 ||
        boot.size() > collective_rings::max_localities || boot.where().local_size < 2) {
        return;
    }
    try {
        st.rings = std::make_unique<collective_rings>(collective_inbox_name(st.job_id, boot.rank()),
                                                      boot.rank(), boot.size());
    } catch (std::exception const& e) {
        log(log_level::warn, "collectives: no shared-memory inbox ({}); they use parcels",
            e.what());
    }
}

} // namespace

bool distributed_start(config const& cfg, scheduler& s, std::unique_ptr<bootstrap> boot) {
    // Published once the transport is set up (a failure below leaves the default state).
    auto owned = std::make_unique<locality_state>();
    locality_state& st = *owned;
    auto o = transport_options_from(cfg, s.workers().size(), &boot->where());
    st.job_id = boot->where().job_id;
    if (!st.job_id.empty()) {
        o.endpoint_name = shm_name(st.job_id, boot->rank());
    }
    liveness_options_from(cfg, st.live.timeout, st.live.exit_on_failure);
    st.tp = parcelport::make_transport(o);
    open_collective_inbox(cfg, st, *boot);
    auto result = boot->exchange(st.tp->address());
    st.rank = boot->rank();
    st.size = boot->size();
    // Before anything can deliver a parcel:
    st.dead = std::vector<std::atomic<bool>>(st.size);
    flow_configure(st.flow, cfg, st.size, st.tp->large_parcels_in_flight(),
                   st.tp->large_parcel_window());
    ordered_streams(st); // sized before anything can deliver a parcel
    st.live.heard = std::vector<std::atomic<std::uint32_t>>(st.size);
    st.live.departed = std::vector<std::atomic<bool>>(st.size);
    st.live.beat_in_flight = std::vector<std::atomic<bool>>(st.size);
    st.job_token = result.token;
    st.tp->set_job_token(result.token);
    st.tp->set_peers(result.addresses, st.rank);
    set_stream_limits(st);
    if (boot->where().host_count > 1 && cfg.get("parcelport") == "libfabric" &&
        cfg.get("provider") == "auto" && cfg.get("zero_copy_threshold") == "auto") {
        // Two rails: parcels for this host's localities take the shm rail's threshold.
        st.local_send_options = parcel_options();
        st.local_send_options.zero_copy_threshold =
            static_cast<std::size_t>(cfg.get_threshold("zero_copy_threshold", 0, 1ll << 40, "shm"));
        st.same_host_dest.assign(st.size, 0);
        for (std::uint32_t r = 0; r < st.size; ++r) {
            st.same_host_dest[r] = r != st.rank && st.tp->same_host(r) ? 1 : 0;
        }
    }
    if (st.rings) {
        // Every inbox exists once the exchange is over: each locality made its own before.
        std::vector<std::string> names(st.size);
        bool one_host = boot->where().host_count <= 1;
        for (std::uint32_t r = 0; r < st.size; ++r) {
            if (r != st.rank && (one_host || st.tp->same_host(r))) {
                names[r] = collective_inbox_name(st.job_id, r);
            }
        }
        std::size_t mapped = st.rings->connect(names);
        st.rings->set_drain(&deliver_from_inbox);
        // The peers map this inbox right after their exchange too: its name can usually go
        // now, so that a job killed at any later moment leaves nothing in /dev/shm. A peer
        // that takes longer leaves it to the liveness thread and the collectives' waits.
        auto const until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
        while (!st.rings->unlink_when_mapped() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        log(log_level::debug, "collectives: shared-memory inboxes of {} localities on this host",
            mapped);
    }
    st.tp->set_activity_handler([](std::uint32_t src) { heard_from(here(), src); });
    if (trace::recorder* tracer = trace::active()) {
        st.tp->set_read_handler([tracer](std::uint32_t src, std::size_t bytes,
                                         std::chrono::steady_clock::time_point started) {
            tracer->rma_read(src, bytes, started);
        });
    }
    st.tp->set_receive_handler(
        [](std::uint32_t src, serialization::message&& m) { deliver(src, std::move(m)); });
    // A send with no handler of its own (send_parcel) only ends: counted, per batch.
    st.tp->set_counted_handler(
        [](std::size_t sends, std::error_code) { count_send_ended(here(), sends); });
    st.tp->set_counted_failure_handler(
        [](std::uint64_t tag) { counted_send_failed(send_undo::of(tag)); });
    // Traced, every parcel is a task of its own (the trace shows each).
    if (cfg.get_int("batch_tasks", 0, 1) != 0 && trace::active() == nullptr) {
        st.tp->set_batch_handler(
            [](std::uint32_t src, std::span<std::span<std::byte const> const> parcels) {
                deliver_batch(src, parcels);
            });
    }
    parcelport::transport* tp = st.tp.get();
    st.boot = std::move(boot);
    replace_here(std::move(owned)); // before anything can deliver a parcel
    st.hook = s.register_hook(
        [tp, &st] {
            flow_send_kept_credits(st);
            transport_watch::call in_transport(transport_watch::kind::progress);
            progress_scope inside;
            return tp->progress();
        },
        tp->wait_fd(),
        [tp] {
            transport_watch::call in_transport;
            return tp->can_sleep();
        },
        tp->wait_fd_coverage());
    st.monitor = std::thread([&st] {
        for (;;) {
            auto notice = st.boot->wait_for_notice();
            if (notice.kind == launcher_notice::closed) {
                return;
            }
            if (notice.kind == launcher_notice::lost) {
                // courier-run is gone (killed): nobody would report failures or end the job.
                log(log_level::error, "lost courier-run (its rendezvous connection closed); "
                                      "ending this locality");
                end_now(st);
            }
            if (notice.kind == launcher_notice::failed) {
                peer_failed(notice.rank);
            } else {
                log_diagnosis();
            }
        }
    });
    liveness_start(st);
    log(log_level::info, "locality {} of {} on host {} up on {} (bootstrap: {})", st.rank, st.size,
        st.boot->where().host, st.tp->provider_name(), st.boot->name());
    return true;
}

void distributed_close() {
    clear_components(); // components live until shutdown
    locality_state& st = here();
    liveness_stop(st);
    if (st.boot) {
        st.boot->finished(); // a proper end: the launcher takes any other exit for a failure
        st.boot->close();
    }
    if (st.monitor.joinable()) {
        st.monitor.join();
    }
    st.boot.reset();
    if (st.tp) {
        auto ps = st.tp->stats();
        log(log_level::debug,
            "parcelport: {} parcels sent ({} of them in {} coalesced messages, {} by "
            "rendezvous), {} received, {} bytes read by RMA, {} -FI_EAGAIN retries",
            ps.messages_sent, ps.parcels_in_batches, ps.batches_sent, ps.rendezvous_sends,
            ps.messages_received, ps.rma_bytes_read, ps.eagain_retries);
    }
    st.rings.reset();
    {
        // Closing the endpoint after a peer failed can wedge as a send can (a lock the dead
        // peer held in shared memory): the watchdog watches it then. Not otherwise: the MPI
        // transport's close is MPI_Finalize, which rightly waits for every peer to get there.
        std::optional<transport_watch::call> in_transport;
        if (any_peer_failed(st)) {
            in_transport.emplace();
        }
        st.tp.reset();
    }
    watchdog_stop(st);     // no thread can be inside the transport now
    replace_here(nullptr); // the state goes; a later run starts afresh
}

} // namespace detail

id_type find_here() {
    return detail::locality_id(detail::here().rank);
}

std::vector<id_type> find_all_localities() {
    std::vector<id_type> v;
    for (std::uint32_t i = 0; i < detail::here().size; ++i) {
        v.push_back(detail::locality_id(i));
    }
    return v;
}

std::vector<id_type> find_remote_localities() {
    auto v = find_all_localities();
    v.erase(v.begin() + detail::here().rank);
    return v;
}

std::uint32_t get_locality_id() {
    return detail::here().rank;
}
parcelport::statistics get_parcelport_statistics() {
    return detail::here().tp ? detail::here().tp->stats() : parcelport::statistics{};
}

std::vector<std::pair<std::string, parcelport::statistics>>
get_parcelport_statistics_by_provider() {
    auto const& tp = detail::here().tp;
    return tp ? tp->stats_by_provider()
              : std::vector<std::pair<std::string, parcelport::statistics>>{};
}

flow_statistics get_flow_statistics() {
    auto const& f = detail::here().flow;
    flow_statistics s;
    s.window_parcels = f.window_parcels;
    s.window_bytes = f.window_bytes;
    for (auto const& c : f.out) {
        auto const [parcels, bytes] = c.load();
        s.parcels_in_flight += parcels;
        s.bytes_in_flight += bytes;
    }
    for (auto const& c : f.in) {
        auto const [parcels, bytes] = c.load();
        s.parcels_unreturned += parcels;
        s.bytes_unreturned += bytes;
    }
    s.waits = f.waits.load(std::memory_order_relaxed);
    s.overdrafts = f.overdrafts.load(std::memory_order_relaxed);
    s.credits_sent = f.credits_sent.load(std::memory_order_relaxed);
    s.credits_received = f.credits_received.load(std::memory_order_relaxed);
    return s;
}

std::uint32_t get_num_localities() {
    return detail::here().size;
}

std::uint32_t get_locality_id(id_type const& id) {
    if (!detail::names_a_locality(id.msb, detail::here().size)) {
        throw std::invalid_argument("courier: id_type does not name a locality");
    }
    return detail::owner_of(id.msb);
}

} // namespace courier
