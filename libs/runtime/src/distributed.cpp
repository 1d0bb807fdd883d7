// SPDX-License-Identifier: BSL-1.0
// Parcels. A request carries {u8 kind, u64 action id, u64 request id} and the arguments; a
// reply carries {u8 kind, u64 request id, u8 control, u8 status} and the result, or the
// exception's type name and message. Request id 0 = no reply wanted (post).
// Termination: locality 0 probes every locality for {idle, parcels sent, parcels received}
// (user parcels only) until two consecutive rounds agree and sent == received, then tells
// every locality to exit.
#include "distributed.hpp"

#include "bootstrap.hpp"
#include "log.hpp"
#include "scheduler.hpp"

#include <courier/parcelport/detail/slot_table.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/runtime/actions.hpp>
#include <courier/runtime/components.hpp>
#include <courier/runtime/init.hpp>

#include <array>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace courier {

remote_exception::remote_exception(std::string type, std::string message, std::uint32_t locality)
    : std::runtime_error("remote exception on locality " + std::to_string(locality) + ": " + type +
                         ": " + message),
      type_(std::move(type)), message_(std::move(message)), locality_(locality) {}

namespace detail {
std::tuple<bool, std::uint64_t, std::uint64_t> quiescence_probe();
void exit_locality();
} // namespace detail
} // namespace courier

COURIER_PLAIN_ACTION(courier::detail::quiescence_probe, courier_quiescence_probe_action);
COURIER_PLAIN_ACTION(courier::detail::exit_locality, courier_exit_locality_action);

namespace courier {
namespace detail {

namespace {

enum parcel_kind : std::uint8_t { request = 1, reply = 2 };
enum reply_status : std::uint8_t { status_ok = 0, status_failed = 1 };

/// Registered actions by wire id: an insert-only open-addressing table. Every incoming request
/// looks its action up here, from any worker, without a lock (a shared lock was two atomic
/// read-modify-writes on one cache line that all workers share); registrations, at static
/// initialization or later (a loaded plugin), take a mutex among themselves and publish an
/// entry by storing its id last.
class action_registry {
public:
    struct entry {
        char const* name;
        action_invoker invoke;
    };
    /// The action with this id, or {nullptr, nullptr}.
    entry find(std::uint64_t id) const noexcept {
        if (id == 0) {
            return {};
        }
        for (std::size_t i = home(id);; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_acquire);
            if (at == id) {
                return {slots_[i].name, slots_[i].invoke};
            }
            if (at == 0) {
                return {};
            }
        }
    }
    /// Adds an action; an id already taken by another name is fatal (rename one of them).
    void add(std::uint64_t id, char const* name, action_invoker invoke) {
        std::lock_guard lk(mutex_);
        if (id == 0) {
            std::fprintf(stderr, "courier: action '%s' hashes to the reserved id 0; rename it\n",
                         name);
            std::abort();
        }
        if (count_ + 1 > max_actions) {
            std::fprintf(stderr, "courier: more than %zu actions registered (adding '%s')\n",
                         max_actions, name);
            std::abort();
        }
        std::size_t i = home(id);
        for (;; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_relaxed);
            if (at == id) {
                if (std::string_view(slots_[i].name) != name) {
                    std::fprintf(stderr,
                                 "courier: action ids of '%s' and '%s' collide; rename one\n",
                                 slots_[i].name, name);
                    std::abort();
                }
                return; // the same action registered again (another translation unit)
            }
            if (at == 0) {
                break;
            }
        }
        slots_[i].name = name;
        slots_[i].invoke = invoke;
        slots_[i].id.store(id, std::memory_order_release);
        ++count_;
    }

private:
    static constexpr std::size_t capacity = 4096; // a power of two
    static constexpr std::size_t mask = capacity - 1;
    static constexpr std::size_t max_actions = capacity * 3 / 4; // keeps probes short
    struct slot {
        std::atomic<std::uint64_t> id{0};
        char const* name = nullptr;
        action_invoker invoke = nullptr;
    };
    static std::size_t home(std::uint64_t id) noexcept {
        return static_cast<std::size_t>((id * 0x9e3779b97f4a7c15ull) >> 52) & mask;
    }
    std::array<slot, capacity> slots_{};
    std::size_t count_ = 0;
    std::mutex mutex_;
};

action_registry& actions() {
    static action_registry r;
    return r;
}

bool is_control(std::uint64_t action_id) {
    return action_id == courier_quiescence_probe_action::id ||
           action_id == courier_exit_locality_action::id;
}

using completion = reply_handler;

struct distributed_state {
    std::unique_ptr<parcelport::transport> tp;
    std::uint32_t rank = 0;
    std::uint32_t size = 1;
    std::size_t hook = static_cast<std::size_t>(-1);
    // Requests awaiting replies, by request id (= the slot's id): no lock on the request or
    // reply path. `dest` and `control` are atomic because diagnosis, peer failure and the
    // quiescence count read them in published slots; `done` belongs to whoever claims the id.
    struct pending_request {
        completion done;
        std::atomic<bool> control{false};
        std::atomic<std::uint32_t> dest{0};
    };
    using pending_table = parcelport::detail::slot_table<pending_request>;
    pending_table pending;
    std::vector<std::atomic<bool>> dead; // by rank: reported failed by the launcher
    std::unique_ptr<bootstrap> boot;
    std::thread monitor;
    std::atomic<std::uint64_t> sent{0}, received{0}; // user parcels, for termination
    std::atomic<std::uint64_t> in_flight{0};         // every send not yet completed
    std::mutex exit_mutex;
    std::condition_variable exit_cv;
    bool exit_requested = false;
};

distributed_state g;

void deliver(std::uint32_t source, serialization::message&& m);
completion take_pending(std::uint64_t rid);

/// A parcel has left (or failed to): a failed request fails its caller's future at once.
void sent(std::uint64_t rid, std::error_code const& ec) {
    if (ec && rid != 0) {
        if (completion done = take_pending(rid)) {
            done(nullptr, std::make_exception_ptr(network_error(
                              "courier: sending to a locality failed: " + ec.message())));
        }
    }
    g.in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

void send_parcel(std::uint32_t dest, serialization::message&& m, std::uint64_t rid,
                 std::function<void(std::error_code const&)> on_sent) {
    if (dest == g.rank) {
        // Local target: the same parcel path without the network (no copy: the message still
        // references the sender's arguments, kept alive by it).
        deliver(dest, std::move(m));
        if (on_sent) {
            on_sent({});
        }
        return;
    }
    g.in_flight.fetch_add(1, std::memory_order_acq_rel);
    // One handler per parcel, built here: without a caller's callback it captures only the
    // request id (0 for a reply), which std::function stores inline; only a caller's own
    // callback costs an allocation.
    parcelport::transport::sent_handler handler;
    if (on_sent) {
        handler = [rid, cb = std::move(on_sent)](std::error_code ec) {
            cb(ec);
            sent(rid, ec);
        };
    } else {
        handler = [rid](std::error_code ec) { sent(rid, ec); };
    }
    // A worker polls the network regularly (when idle and every few tasks), so parcels it
    // sends may be coalesced; another thread's go out at once. A parcel held in a batch must
    // not wait for this worker's task to end: another worker sends it at its next progress
    // pass, and if every other worker sleeps, one is woken for it (the burst_then_compute
    // test). With a single worker per locality a batch waits until the task yields or ends.
    if (scheduler* s = current_scheduler(); s != nullptr && detail::current_worker() != nullptr) {
        if (g.tp->send_coalesced(dest, std::move(m), std::move(handler))) {
            s->notify_one();
        }
        return;
    }
    g.tp->send(dest, std::move(m), std::move(handler));
}

void send_reply(std::uint32_t dest, std::uint64_t rid, bool control,
                std::function<void(serialization::output_archive&)> const& body, bool ok) {
    serialization::message m;
    {
        serialization::output_archive ar(m);
        ar.save(static_cast<std::uint8_t>(reply));
        ar.save(rid);
        ar.save(static_cast<std::uint8_t>(control));
        ar.save(static_cast<std::uint8_t>(ok ? status_ok : status_failed));
        body(ar);
    }
    if (!control) {
        g.sent.fetch_add(1, std::memory_order_acq_rel);
    }
    send_parcel(dest, std::move(m), 0, nullptr);
}

void handle_request(std::uint32_t source, serialization::input_archive& in) {
    auto action_id = in.load_value<std::uint64_t>();
    auto rid = in.load_value<std::uint64_t>();
    bool control = is_control(action_id);
    if (!control) {
        g.received.fetch_add(1, std::memory_order_acq_rel);
    }
    auto const found = actions().find(action_id); // (no structured binding: lambdas use it)
    action_invoker invoke = found.invoke;
    char const* name = found.name != nullptr ? found.name : "?";
    auto fail_reply = [&](std::string const& type, std::string const& what) {
        if (rid == 0) {
            log(log_level::error, "posted action {} from locality {} failed: {}: {}", name, source,
                type, what);
            return;
        }
        send_reply(
            source, rid, control,
            [&](serialization::output_archive& ar) {
                ar.save(type);
                ar.save(what);
            },
            false);
    };
    if (invoke == nullptr) {
        log(log_level::error, "rejected a parcel from locality {}: unknown action id {:#018x}",
            source, action_id);
        fail_reply("courier::unknown_action",
                   fmt::format("no action with id {:#018x} is registered on locality {}", action_id,
                               g.rank));
        return;
    }
    // Run the action, writing the result into a fresh reply; on an exception, reply with it.
    serialization::message result;
    try {
        serialization::output_archive ar(result);
        ar.save(static_cast<std::uint8_t>(reply));
        ar.save(rid);
        ar.save(static_cast<std::uint8_t>(control));
        ar.save(static_cast<std::uint8_t>(status_ok));
        invoke(in, ar);
    } catch (std::exception const& e) {
        fail_reply(serialization::detail::demangle(typeid(e).name()), e.what());
        return;
    } catch (...) {
        fail_reply("unknown", "an exception of unknown type");
        return;
    }
    if (rid == 0) {
        return;
    }
    if (!control) {
        g.sent.fetch_add(1, std::memory_order_acq_rel);
    }
    send_parcel(source, std::move(result), 0, nullptr);
}

// The completion of request `rid`, taken out of the table (empty if no longer pending: it was
// answered, failed or never issued). Exactly one caller gets it.
completion take_pending(std::uint64_t rid) {
    auto* slot = g.pending.claim(rid);
    if (slot == nullptr) {
        return {};
    }
    completion done = std::move(slot->value.done); // leaves the slot's handler empty
    g.pending.release(slot);
    return done;
}

void handle_reply(std::uint32_t source, serialization::input_archive& in) {
    auto rid = in.load_value<std::uint64_t>();
    bool control = in.load_value<std::uint8_t>() != 0;
    auto status = in.load_value<std::uint8_t>();
    if (!control) {
        g.received.fetch_add(1, std::memory_order_acq_rel);
    }
    completion done = take_pending(rid);
    if (!done) {
        log(log_level::error, "reply from locality {} for unknown request {}", source, rid);
        return;
    }
    if (status == status_ok) {
        done(&in, nullptr);
        return;
    }
    std::string type, what;
    in.load(type);
    in.load(what);
    done(nullptr, std::make_exception_ptr(remote_exception(type, what, source)));
}

void handle_parcel(std::uint32_t source, serialization::message const& msg) noexcept {
    try {
        serialization::input_archive in(msg);
        auto kind = in.load_value<std::uint8_t>();
        if (kind == request) {
            handle_request(source, in);
        } else if (kind == reply) {
            handle_reply(source, in);
        } else {
            log(log_level::error, "dropped a parcel of unknown kind {} from locality {}", kind,
                source);
        }
    } catch (std::exception const& e) {
        log(log_level::error, "dropped a malformed parcel from locality {}: {}", source, e.what());
    } catch (...) {
        log(log_level::error, "dropped a parcel from locality {}: unknown exception", source);
    }
}

/// Replies whose index data is at most this large and that have no external chunk are handled
/// where they arrive.
constexpr std::size_t inline_reply_bytes = 4096;

void deliver(std::uint32_t source, serialization::message&& m) {
    // A small reply only fulfils a promise (resuming the waiting thread, or queueing its
    // continuations as tasks): handled at once, on the thread that received it, it costs no
    // task and no switch. Requests (actions may block) and large replies (their loading
    // copies) run as tasks, so that progress passes stay short.
    auto d = m.data();
    if (d.size() > serialization::message_header_size && d.size() <= inline_reply_bytes &&
        m.external_chunk_count() == 0 &&
        std::to_integer<std::uint8_t>(d[serialization::message_header_size]) == reply) {
        handle_parcel(source, m);
        return;
    }
    post([source, msg = std::move(m)]() mutable { handle_parcel(source, msg); });
}

// The launcher's job time limit ran out: say what this locality is waiting for.
void log_diagnosis() {
    std::size_t pending = 0, control = 0;
    std::string dests;
    g.pending.for_each_published([&](auto& slot, std::uint64_t id) {
        ++(slot.value.control.load(std::memory_order_relaxed) ? control : pending);
        if (dests.size() < 200) {
            dests += fmt::format(" {}->{}", id, slot.value.dest.load(std::memory_order_relaxed));
        }
    });
    bool exiting = false;
    {
        std::lock_guard lk(g.exit_mutex);
        exiting = g.exit_requested;
    }
    auto* s = current_scheduler();
    log(log_level::error,
        "diagnosis of locality {}: live tasks {}, requests awaiting replies {} (+{} control){}, "
        "user parcels sent {} received {}, sends in flight {}, exit requested {}; transport: {}",
        g.rank, s != nullptr ? s->live_tasks() : 0, pending, control, dests, g.sent.load(),
        g.received.load(), g.in_flight.load(), exiting, g.tp->debug_state());
}

} // namespace

// A locality is gone: every request waiting on it fails with network_error, and so will every
// later one; a task blocked in get() on it wakes up with the exception.
void peer_failed(std::uint32_t rank) {
    if (rank >= g.dead.size() || g.dead[rank].exchange(true)) {
        return;
    }
    log(log_level::error, "locality {} has failed", rank);
    std::vector<completion> failed;
    g.pending.for_each_published([&](auto& slot, std::uint64_t id) {
        // dest was read after the id: if the slot is claimed (and reused) meanwhile, the
        // claim fails, so a dest of another request never takes this one.
        if (slot.value.dest.load(std::memory_order_relaxed) == rank) {
            if (completion done = take_pending(id)) {
                failed.push_back(std::move(done));
            }
        }
    });
    for (auto& done : failed) {
        done(nullptr, std::make_exception_ptr(network_error("courier: locality " +
                                                            std::to_string(rank) + " has failed")));
    }
}

bool register_action(std::uint64_t id, char const* name, action_invoker invoke) {
    actions().add(id, name, invoke);
    return true;
}

char const* registered_action_name(std::uint64_t id) noexcept {
    return actions().find(id).name;
}

void send_request(std::uint32_t dest, std::uint64_t action_id,
                  function_ref<void(serialization::output_archive&)> write_args,
                  completion complete, std::function<void(std::error_code const&)> on_sent,
                  bool wants_reply) {
    if (!runtime_running()) {
        throw std::logic_error("courier: remote actions need a running runtime");
    }
    if (dest >= g.size) {
        throw std::out_of_range("courier: locality " + std::to_string(dest) + " does not exist (" +
                                std::to_string(g.size) + " localities)");
    }
    bool control = is_control(action_id);
    auto dead = [&] { return dest < g.dead.size() && g.dead[dest].load(); };
    auto fail_dead = [&](completion& done) {
        if (done) {
            done(nullptr, std::make_exception_ptr(network_error(
                              "courier: locality " + std::to_string(dest) + " has failed")));
        }
        if (on_sent) {
            on_sent(std::make_error_code(std::errc::host_unreachable));
        }
    };
    if (dead()) {
        fail_dead(complete);
        return;
    }
    // The request's slot first: its id goes into the message. Until published, a failure
    // gives it back.
    distributed_state::pending_table::slot* slot = wants_reply ? g.pending.acquire() : nullptr;
    std::uint64_t rid = slot != nullptr ? slot->id() : 0;
    serialization::message m;
    try {
        serialization::output_archive ar(m);
        ar.save(static_cast<std::uint8_t>(request));
        ar.save(action_id);
        ar.save(rid);
        write_args(ar);
    } catch (...) {
        if (slot != nullptr) {
            g.pending.release(slot);
        }
        throw;
    }
    if (slot != nullptr) {
        slot->value.done = std::move(complete);
        slot->value.control.store(control, std::memory_order_relaxed);
        slot->value.dest.store(dest, std::memory_order_relaxed);
        g.pending.publish(slot);
        if (dead()) {
            // The peer failed after the first check and peer_failed() may have scanned the
            // table before this request was in it: fail it here (unless that scan took it).
            completion done = take_pending(rid);
            fail_dead(done);
            return;
        }
    }
    if (!control) {
        g.sent.fetch_add(1, std::memory_order_acq_rel);
    }
    // A send the transport refuses (say, a message it cannot describe) must not leave a
    // request pending or a parcel counted: shutdown would wait for them forever.
    auto undo = [&] {
        if (wants_reply) {
            take_pending(rid);
        }
        if (!control) {
            g.sent.fetch_sub(1, std::memory_order_acq_rel);
        }
    };
    try {
        send_parcel(dest, std::move(m), rid, std::move(on_sent));
    } catch (...) {
        undo();
        throw;
    }
}

std::tuple<bool, std::uint64_t, std::uint64_t> quiescence_probe() {
    bool idle = current_scheduler()->live_tasks() <= 1 && pending_requests() == 0;
    return {idle, g.sent.load(), g.received.load()};
}

void exit_locality() {
    std::lock_guard lk(g.exit_mutex);
    g.exit_requested = true;
    g.exit_cv.notify_all();
}

std::size_t pending_requests() {
    std::size_t n = 0;
    g.pending.for_each_published([&](auto& slot, std::uint64_t) {
        n += !slot.value.control.load(std::memory_order_relaxed);
    });
    return n;
}

parcelport::transport_options transport_options_from(config const& cfg, std::size_t workers) {
    parcelport::transport_options o;
    o.provider = cfg.get("provider");
    if (o.provider == "tcp") {
        o.provider = "tcp;ofi_rxm"; // the tcp provider needs the rxm utility for FI_EP_RDM
    }
    o.eager_threshold =
        static_cast<std::size_t>(cfg.get_threshold("eager_threshold", 256, 1 << 24));
    o.read_budget = static_cast<std::size_t>(cfg.get_int("read_budget", 0, 1LL << 40));
    o.read_piece = static_cast<std::size_t>(cfg.get_int("read_piece", 0, 1LL << 40));
    o.doorbell = cfg.get_int("shm_doorbell", 0, 1) != 0;
    o.split_messages = cfg.get_int("shm_split", 0, 1) != 0;
    // auto: the doorbell with one worker, the completion queue's fd with more. A sleeping
    // worker arms the bell, and then every message to the locality rings it, although another
    // worker is awake and polling: with 2 workers per locality on 2 cores, 8 B tcp round trips
    // took 50-59 us one-way in 5 of 6 runs against 14-77 (median ~28) with the fd. One worker
    // has nobody else to poll: the bell costs nothing then, and the fd ~1.3 us per message.
    auto const& bell = cfg.get_choice("tcp_doorbell", {"auto", "0", "1"});
    o.tcp_doorbell = bell == "1" || (bell == "auto" && workers == 1);
    o.coalescing = cfg.get_int("coalesce", 0, 1) != 0;
    o.attach_rma_pool = true; // rma_vector & co. travel with the pool's registrations
    o.registration_cache_entries =
        static_cast<std::size_t>(cfg.get_int("registration_cache", 0, 1 << 20));
    return o;
}

bool distributed_start(config const& cfg, scheduler& s) {
    auto boot = make_bootstrap_from_environment();
    g.rank = 0;
    g.size = 1;
    g.exit_requested = false;
    g.sent = g.received = 0;
    if (!boot) {
        return false;
    }
    auto o = transport_options_from(cfg, s.workers().size());
    if (char const* job = std::getenv("COURIER_JOB_ID"); job != nullptr && *job != '\0') {
        o.endpoint_name = fmt::format("courier-{}-{}", job, boot->rank());
    }
    g.tp = parcelport::make_libfabric_transport(o);
    auto result = boot->exchange(g.tp->address());
    g.rank = boot->rank();
    g.size = boot->size();
    g.dead = std::vector<std::atomic<bool>>(g.size); // before anything can deliver a parcel
    g.tp->set_job_token(result.token);
    g.tp->set_peers(result.addresses, g.rank);
    g.tp->set_receive_handler(
        [](std::uint32_t src, serialization::message&& m) { deliver(src, std::move(m)); });
    g.hook = s.register_hook([] { return g.tp->progress(); }, g.tp->wait_fd(),
                             [] { return g.tp->can_sleep(); }, g.tp->wait_fd_may_miss());
    g.boot = std::move(boot);
    g.monitor = std::thread([] {
        for (;;) {
            auto notice = g.boot->wait_for_notice();
            if (notice.kind == launcher_notice::closed) {
                return;
            }
            if (notice.kind == launcher_notice::failed) {
                peer_failed(notice.rank);
            } else {
                log_diagnosis();
            }
        }
    });
    log(log_level::info, "locality {} of {} up on {}", g.rank, g.size, g.tp->provider_name());
    return true;
}

void distributed_shutdown_all() {
    if (g.size <= 1) {
        return;
    }
    std::tuple<std::uint64_t, std::uint64_t> previous{~0ull, ~0ull};
    for (;;) {
        bool idle = current_scheduler()->live_tasks() == 0 && pending_requests() == 0;
        std::uint64_t sent = g.sent.load(), received = g.received.load();
        for (std::uint32_t k = 1; k < g.size; ++k) {
            auto [i, s, r] =
                async<courier_quiescence_probe_action>(id_type{(std::uint64_t{k} + 1) << 32, 0})
                    .get();
            idle = idle && i;
            sent += s;
            received += r;
        }
        std::tuple<std::uint64_t, std::uint64_t> now{sent, received};
        if (idle && sent == received && now == previous) {
            break;
        }
        previous = now;
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    for (std::uint32_t k = 1; k < g.size; ++k) {
        async<courier_exit_locality_action>(id_type{(std::uint64_t{k} + 1) << 32, 0}).get();
    }
}

void distributed_wait_for_exit() {
    std::unique_lock lk(g.exit_mutex);
    g.exit_cv.wait(lk, [] { return g.exit_requested; });
}

void distributed_stop() {
    // Let the last replies leave before the endpoint closes; a send to a failed locality may
    // never complete, so with a dead peer the wait is bounded.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (g.tp && g.in_flight.load() != 0) {
        bool any_dead = false;
        for (auto const& d : g.dead) {
            any_dead = any_dead || d.load();
        }
        if (any_dead && std::chrono::steady_clock::now() > until) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (g.hook != static_cast<std::size_t>(-1)) {
        unregister_progress_hook(g.hook);
        g.hook = static_cast<std::size_t>(-1);
    }
}

void clear_components();

void distributed_close() {
    clear_components(); // components live until shutdown
    if (g.boot) {
        g.boot->close();
    }
    if (g.monitor.joinable()) {
        g.monitor.join();
    }
    g.boot.reset();
    if (g.tp) {
        auto st = g.tp->stats();
        log(log_level::debug,
            "parcelport: {} parcels sent ({} of them in {} coalesced messages, {} by "
            "rendezvous), {} received, {} bytes read by RMA, {} -FI_EAGAIN retries",
            st.messages_sent, st.parcels_in_batches, st.batches_sent, st.rendezvous_sends,
            st.messages_received, st.rma_bytes_read, st.eagain_retries);
    }
    g.tp.reset();
}

} // namespace detail

id_type find_here() {
    return id_type{(std::uint64_t{detail::g.rank} + 1) << 32, 0};
}

std::vector<id_type> find_all_localities() {
    std::vector<id_type> v;
    for (std::uint32_t i = 0; i < detail::g.size; ++i) {
        v.push_back(id_type{(std::uint64_t{i} + 1) << 32, 0});
    }
    return v;
}

std::vector<id_type> find_remote_localities() {
    auto v = find_all_localities();
    v.erase(v.begin() + detail::g.rank);
    return v;
}

std::uint32_t get_locality_id() {
    return detail::g.rank;
}
parcelport::statistics get_parcelport_statistics() {
    return detail::g.tp ? detail::g.tp->stats() : parcelport::statistics{};
}

std::uint32_t get_num_localities() {
    return detail::g.size;
}

std::uint32_t get_locality_id(id_type const& id) {
    std::uint64_t hi = id.msb >> 32;
    if (hi == 0 || hi > detail::g.size) {
        throw std::invalid_argument("courier: id_type does not name a locality");
    }
    return static_cast<std::uint32_t>(hi - 1);
}

} // namespace courier

namespace courier::detail {
void component_incref(std::uint64_t lsb, std::uint64_t credits);
void component_decref(std::uint64_t lsb, std::uint64_t credits);
} // namespace courier::detail

COURIER_PLAIN_ACTION(courier::detail::component_incref, courier_component_incref_action);
COURIER_PLAIN_ACTION(courier::detail::component_decref, courier_component_decref_action);

namespace courier::detail {

namespace {
constexpr std::uint64_t initial_credits = std::uint64_t{1} << 48;

struct component_entry {
    std::shared_ptr<void> obj;
    std::type_info const* type;
    std::uint64_t outstanding; // credits handed out and not yet returned
};
std::mutex g_components_mutex;
std::unordered_map<std::uint64_t, component_entry> g_components;
std::atomic<std::uint64_t> g_next_component{1};
std::atomic<bool> g_components_open{true};

std::uint32_t owner_of(std::uint64_t msb) {
    return static_cast<std::uint32_t>((msb >> 32) - 1);
}
} // namespace

id_type register_component(std::shared_ptr<void> obj, std::type_info const& type) {
    std::uint64_t lsb = g_next_component.fetch_add(1);
    {
        std::lock_guard lk(g_components_mutex);
        g_components.emplace(lsb, component_entry{std::move(obj), &type, initial_credits});
        g_components_open.store(true);
    }
    std::uint64_t msb = ((std::uint64_t{get_locality_id()} + 1) << 32) | 1;
    return id_type{msb, lsb, std::make_shared<gid_ref>(msb, lsb, initial_credits)};
}

id_type new_reference(id_type const& id) {
    {
        std::lock_guard lk(g_components_mutex);
        auto it = g_components.find(id.lsb);
        if (it == g_components.end()) {
            return id_type{id.msb, id.lsb, nullptr};
        }
        it->second.outstanding += initial_credits;
    }
    return id_type{id.msb, id.lsb, std::make_shared<gid_ref>(id.msb, id.lsb, initial_credits)};
}

void component_incref(std::uint64_t lsb, std::uint64_t credits) {
    std::lock_guard lk(g_components_mutex);
    auto it = g_components.find(lsb);
    if (it == g_components.end()) {
        throw std::invalid_argument("no component " + std::to_string(lsb) + " on locality " +
                                    std::to_string(get_locality_id()) + " to add credits to");
    }
    it->second.outstanding += credits;
}

void component_decref(std::uint64_t lsb, std::uint64_t credits) {
    std::shared_ptr<void> dying; // destroyed outside the lock (its destructor may do anything)
    {
        std::lock_guard lk(g_components_mutex);
        auto it = g_components.find(lsb);
        if (it == g_components.end()) {
            if (g_components_open.load()) {
                log(log_level::error, "credits returned for unknown component {}", lsb);
            }
            return;
        }
        if (credits >= it->second.outstanding) {
            if (credits > it->second.outstanding) {
                log(log_level::error, "component {}: {} credits returned, {} outstanding", lsb,
                    credits, it->second.outstanding);
            }
            dying = std::move(it->second.obj);
            g_components.erase(it);
        } else {
            it->second.outstanding -= credits;
        }
    }
}

gid_ref::~gid_ref() {
    std::uint64_t c = credits.load();
    if (c == 0 || !g_components_open.load() || !runtime_running()) {
        return; // after shutdown every component is gone anyway
    }
    try {
        std::uint32_t owner = owner_of(msb);
        if (owner == get_locality_id()) {
            component_decref(lsb, c);
        } else if (owner < get_num_localities()) {
            post<courier_component_decref_action>(find_all_localities()[owner], lsb, c);
        }
    } catch (std::exception const& e) {
        log(log_level::warn, "could not return {} credits of component {}: {}", c, lsb, e.what());
    }
}

std::uint64_t gid_ref::split() {
    std::uint64_t c = credits.load();
    for (;;) {
        if (c >= 2) {
            if (credits.compare_exchange_weak(c, c - c / 2)) {
                return c / 2;
            }
            continue;
        }
        // One credit left (it keeps the component alive meanwhile): ask its locality for more.
        std::uint32_t owner = owner_of(msb);
        if (owner == get_locality_id()) {
            component_incref(lsb, initial_credits);
        } else {
            async<courier_component_incref_action>(find_all_localities()[owner], lsb,
                                                   initial_credits)
                .get();
        }
        c = credits.fetch_add(initial_credits) + initial_credits;
    }
}

std::shared_ptr<void> find_component(std::uint64_t lsb, std::type_info const& type) {
    std::lock_guard lk(g_components_mutex);
    auto it = g_components.find(lsb);
    if (it == g_components.end()) {
        throw std::invalid_argument("no component " + std::to_string(lsb) + " on locality " +
                                    std::to_string(get_locality_id()));
    }
    if (*it->second.type != type) {
        throw std::invalid_argument("component " + std::to_string(lsb) + " is a " +
                                    serialization::detail::demangle(it->second.type->name()) +
                                    ", not a " + serialization::detail::demangle(type.name()));
    }
    return it->second.obj;
}

void clear_components() {
    std::unordered_map<std::uint64_t, component_entry> all;
    {
        std::lock_guard lk(g_components_mutex);
        g_components_open.store(false);
        all.swap(g_components);
    }
    // destroyed here, outside the lock
}

} // namespace courier::detail

namespace courier {
std::size_t get_component_count() {
    std::lock_guard lk(detail::g_components_mutex);
    return detail::g_components.size();
}
} // namespace courier
