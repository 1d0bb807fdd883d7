// SPDX-License-Identifier: BSL-1.0
// The state of this locality in a distributed run (locality_state), and what the runtime's
// distributed parts (parcel_protocol, failure, termination, locality, components) share.
#pragma once

#include "bootstrap.hpp"
#include "collective_rings.hpp"
#include "flow_control.hpp"
#include "traffic.hpp"

#include <courier/parcelport/detail/slot_table.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/runtime/actions.hpp>
#include <courier/runtime/collectives.hpp>
#include <courier/serialization/chunk.hpp>
#include <courier/serialization/detail/hash.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <unordered_map>
#include <vector>

namespace courier::detail {

/// A parcel is a request {u8 kind, u64 action id, u64 request id, arguments} or a reply
/// {u8 kind, u64 request id, u8 control, u8 status, result or exception}. Request id 0: a post,
/// no reply wanted.
/// heartbeat: "I am alive" (liveness.cpp); goodbye: "I am leaving, do not miss me";
/// credit {u8 kind, i64 parcels, i64 bytes}: requests that started here (flow_control.hpp).
/// ordered_request {u8 kind, u64 sequence number, then a request's fields}: runs after the
/// sender's ordered requests with smaller numbers have run (async_ordered, post_ordered);
/// ordered_skip {u8 kind, u64 sequence number}: a number whose request was never sent.
/// reply_lost {u8 kind, u64 short request id}: the reply to that request (send_undo::
/// short_request_id) was sent and lost (its send failed for good, its action ran).
enum parcel_kind : std::uint8_t {
    request = 1,
    reply = 2,
    heartbeat = 3,
    goodbye = 4,
    credit = 5,
    ordered_request = 6,
    ordered_skip = 7,
    reply_lost = 8,
};
enum reply_status : std::uint8_t { status_ok = 0, status_failed = 1 };

using completion = reply_handler;

/// The components that live on this locality, by the lsb of their id, with the credits handed
/// out for them (components.cpp).
struct component_table {
    struct entry {
        std::shared_ptr<void> obj;
        std::type_info const* type;
        std::uint64_t outstanding; // credits handed out and not yet returned
    };
    std::mutex mutex;
    std::unordered_map<std::uint64_t, entry> entries;
    std::atomic<std::uint64_t> next{1};
    std::atomic<bool> open{true}; // false once shutdown destroyed them
};

/// The mailbox of the collectives in progress on this locality (collectives.cpp): messages that
/// came before their receive, and receives waiting for their message.
struct collective_table {
    struct key_hash {
        std::size_t operator()(collectives::detail::key const& k) const noexcept {
            return std::hash<std::uint64_t>{}(k.generation * 0x9e3779b97f4a7c15ull ^
                                              (std::uint64_t{k.step} << 32 | k.source));
        }
    };
    std::mutex mutex;
    std::unordered_map<collectives::detail::key, std::shared_ptr<collectives::detail::slot_base>,
                       key_hash>
        slots;
    /// Slots holding a message nobody received yet (written under the mutex, read without it).
    std::atomic<std::size_t> early{0};
    std::optional<std::uint32_t> failed; ///< a failed locality: every collective fails
    std::atomic<std::uint64_t> generation{0};
};

/// The names this locality serves (naming.cpp), and the lookups waiting for theirs.
struct naming_table {
    std::mutex mutex;
    std::unordered_map<std::string, id_type> ids;
    std::unordered_map<std::string, std::vector<request_context>> waiting;
    std::size_t waiting_count = 0;
};

/// What a locality of a distributed run holds: its transport, the requests awaiting replies,
/// which peers have failed, the launcher's connection and the counts termination needs.
/// Created by distributed_start, destroyed by distributed_close; a run without a launcher
/// uses a default one (rank 0 of 1, no transport).
/// What every locality knows of its peers' liveness (liveness.cpp). `tick` advances every
/// peer_timeout/10; `heard[r]` is the tick at which something last arrived from r.
struct liveness_state {
    std::vector<std::atomic<std::uint32_t>> heard;
    std::vector<std::atomic<bool>> departed;       // r said goodbye: its silence is no failure
    std::vector<std::atomic<bool>> beat_in_flight; // at most one heartbeat queued per peer
    std::atomic<std::uint32_t> tick{0};
    std::chrono::milliseconds timeout{0}; // 0: no checks
    bool exit_on_failure = true;
    std::thread thread;
    /// Watches every thread's transport calls (transport_watch.hpp); never enters one itself.
    /// It outlives the heartbeat thread: it is stopped last, once the transport is closed.
    std::thread watchdog;
    std::mutex mutex;
    std::condition_variable cv;
    bool stopping = false;          // the heartbeat thread
    bool watchdog_stopping = false; // the watchdog
};

/// Ordered requests (async_ordered, post_ordered): the next sequence number to each
/// destination, and from each source the number that runs next and the early arrivals.
struct ordered_state {
    struct stream {
        std::mutex mutex;
        std::uint64_t next = 0;
        bool running = false; // a task is running this stream's requests
        std::map<std::uint64_t, serialization::message> early;
    };
    std::once_flag sized; // the vectors get the job's size on first use (ordered_streams)
    std::vector<std::atomic<std::uint64_t>> next_seq; // by destination
    std::vector<std::unique_ptr<stream>> from;        // by source
};

struct locality_state {
    std::unique_ptr<parcelport::transport> tp;
    /// tp->stream_limit(dest) by destination, kept once the peers are set (set_stream_limits):
    /// the flat senders' first look (0: no streams to it; its requests go as messages).
    std::vector<std::size_t> stream_limits;
    std::uint32_t rank = 0;
    std::uint32_t size = 1;
    std::uint64_t job_token = 0; // in every eager header; strangers are told by it
    // A job across hosts with zero_copy_threshold "auto" serializes a parcel for a locality of
    // its own host (same_host_dest, by rank; empty in any other job) with the shm rail's
    // threshold (local_send_options), for the others with the network provider's
    // (parcel_options()): each rail gets the threshold its protocols are tuned for.
    std::vector<std::uint8_t> same_host_dest;
    serialization::options local_send_options;
    std::size_t hook = static_cast<std::size_t>(-1);
    // Requests awaiting replies, by request id (= the slot's id): no lock on the request or
    // reply path. `dest` and `control` are atomic because diagnosis, peer failure and the
    // quiescence count read them in published slots; `done` belongs to whoever claims the id.
    struct pending_request {
        completion done;
        std::atomic<bool> control{false};
        std::atomic<std::uint32_t> dest{0};
        // The request's share of dest's flow-control window (0: none taken), given back if its
        // send fails (sent()); written before publish, read by the claimer.
        std::int64_t flow_bytes = 0;
    };
    using pending_table = parcelport::detail::slot_table<pending_request>;
    pending_table pending;
    std::vector<std::atomic<bool>> dead; // by rank: reported failed (launcher or liveness)
    liveness_state live;
    /// The launcher's job id: locality r's shared-memory names are courier-JOB_ID-r (empty: each
    /// picked its own unique name).
    std::string job_id;
    std::unique_ptr<bootstrap> boot;
    std::thread monitor;
    std::mutex exit_mutex;
    std::condition_variable exit_cv;
    bool exit_requested = false;
    component_table components;
    collective_table collectives;
    /// The collectives' shared-memory inbox and the peers' on this host (null: none).
    std::unique_ptr<collective_rings> rings;
    naming_table names;
    flow_state flow;
    ordered_state ordered;
    // Parcels of threads that are not its workers, and termination's counts (traffic.hpp).
    traffic_counters traffic;
};

namespace state_detail {
extern locality_state g_default;            // outside a distributed run
extern std::atomic<locality_state*> g_here; // the published state (&g_default: none)
/// An in_process_job worker's locality, else the default.
locality_state& here_slow() noexcept;
} // namespace state_detail

/// This locality's state (the default one outside a distributed run). One load on every
/// parcel's path in a distributed run.
inline locality_state& here() noexcept {
    locality_state* published = state_detail::g_here.load(std::memory_order_acquire);
    if (published != &state_detail::g_default) {
        return *published;
    }
    return state_detail::here_slow();
}
/// Makes `s` this locality's state (nullptr: back to the default); returns the previous one.
std::unique_ptr<locality_state> replace_here(std::unique_ptr<locality_state> s) noexcept;

/// The registered action with wire id `id` ({nullptr, nullptr} if none; action_registry.cpp).
struct action_entry {
    char const* name;
    action_invoker invoke;
    flat_invoker flat; // null unless its arguments are all flat (a plain_action's)
};
action_entry find_action(std::uint64_t id) noexcept;
/// The wire ids of the runtime's own actions (termination.cpp's COURIER_PLAIN_ACTIONs, which
/// check that they are theirs).
inline constexpr std::uint64_t quiescence_probe_id =
    serialization::detail::fnv1a64("courier_quiescence_probe_action");
inline constexpr std::uint64_t exit_locality_id =
    serialization::detail::fnv1a64("courier_exit_locality_action");
/// Keeps st.tp's stream_limit() of every destination in st.stream_limits (after set_peers).
inline void set_stream_limits(locality_state& st) {
    st.stream_limits.assign(st.size, 0);
    for (std::uint32_t d = 0; d < st.size; ++d) {
        st.stream_limits[d] = d == st.rank ? 0 : st.tp->stream_limit(d);
    }
}
/// Whether an action is one of the runtime's own (termination), not counted as user traffic.
/// Inline: asked for every request sent and received.
inline bool is_control(std::uint64_t action_id) noexcept {
    return action_id == quiescence_probe_id || action_id == exit_locality_id;
}
/// Runs a received request (parcel_protocol.cpp): `in` is read past its kind byte, `bytes` is
/// the parcel's size (flow control); answers it unless it was posted.
/// `counted`: its receipt was counted and credited already (a request_batch counts all of its
/// requests when it starts).
void handle_request(std::uint32_t source, serialization::input_archive& in, std::size_t bytes,
                    bool counted = false);
/// Runs a request read where it lies, `stream` being its whole stream (one index chunk), if
/// its action takes flat arguments (action_entry::flat): with no message and no input archive.
/// A call is answered as handle_request answers it; a post whose arguments do not load is
/// dropped as a malformed parcel (logged, rate-limited), not reported as a failed posted
/// action. False, having done nothing, for any other parcel (a reply, an ordered request, a
/// control action, an action with other arguments): the caller reads it through a message.
/// `batch_flat`: null for a parcel of its own; for a request of a request_batch (its receipt
/// counted already, as handle_request's `counted`), the batch's count of requests run here
/// and not yet added to /parcels/count/received-flat: a post adds one to it, a call adds it
/// and itself to the counter before it runs (so what ran before a reply is counted when the
/// caller has the reply), and the batch adds the rest when its run ends: one counter update
/// per run of posts, not per post.
bool handle_flat_request(std::uint32_t source, std::span<std::byte const> stream,
                         std::uint64_t* batch_flat) noexcept;
/// What a request_batch counts of a request's stream when it starts (its head read once):
/// `user`, a request that handle_request counts as user traffic (one that is not the runtime's
/// own control); `call`, one that wants a reply (request id not 0).
struct request_counts {
    bool user = false;
    bool call = false;
};
request_counts count_request(std::span<std::byte const> stream) noexcept;
/// A parcel arrived from `source` (or from this locality itself).
void deliver(std::uint32_t source, serialization::message&& m);
/// The small parcels of one received coalesced message, or a lone small parcel
/// (transport::batch_handler): requests run as one task, in order; a successful reply whose
/// result loads from a flat stream completes its future from the bytes where they lie; the
/// others as deliver() handles them.
void deliver_batch(std::uint32_t source, std::span<std::span<std::byte const> const> parcels);
/// The completion of request `rid`, taken out of the table (empty if no longer pending: it was
/// answered, failed or never issued). Exactly one caller gets it.
completion take_pending(std::uint64_t rid);
/// `st`'s ordered streams, sized for its localities on first use.
ordered_state& ordered_streams(locality_state& st);
/// Sends a credit parcel to `dest` (flow_control.hpp). Throws what building or sending it
/// throws (no memory, the transport refusing it): flow_started keeps the credits then.
void send_credit(std::uint32_t dest, std::int64_t parcels, std::int64_t bytes);
/// The launcher's job time limit ran out: logs what this locality is waiting for.
void log_diagnosis();
/// Requests with replies still waiting on locality `st`.
std::size_t pending_requests(locality_state& st);
/// Destroys every component of locality `st` (at shutdown).
void clear_components(locality_state& st);
/// A locality is gone: every request waiting on it fails with network_error, and so will
/// every later one.
void peer_failed(std::uint32_t rank);
/// A locality failed: every collective in progress and every later one fails (collectives.cpp).
void collectives_peer_failed(locality_state& st, std::uint32_t rank);

/// Locality `rank`'s shared-memory names (/dev/shm/NAME, NAME-bell, NAME-outbox, NAME-rings) in job
/// `job_id`.
inline std::string shm_name(std::string const& job_id, std::uint32_t rank) {
    return "courier-" + job_id + "-" + std::to_string(rank);
}
/// Its collectives' inbox (collective_rings.hpp): /dev/shm/NAME-coll.
inline std::string collective_inbox_name(std::string const& job_id, std::uint32_t rank) {
    return shm_name(job_id, rank) + "-coll";
}
/// Whether locality `rank` was reported or declared failed.
inline bool has_failed(locality_state const& st, std::uint32_t rank) noexcept {
    return rank < st.dead.size() && st.dead[rank].load(std::memory_order_acquire);
}
/// Something arrived from `source`: it is alive.
inline void heard_from(locality_state& st, std::uint32_t source) noexcept {
    if (source < st.live.heard.size()) {
        st.live.heard[source].store(st.live.tick.load(std::memory_order_relaxed),
                                    std::memory_order_relaxed);
    }
}
/// Ends this locality at once with status 1, removing its shared-memory files (and those of
/// the peers known dead, which cannot remove their own).
[[noreturn]] void end_now(locality_state& st);
/// A parcel that is its kind alone: heartbeat or goodbye (also the wire fuzzer's seeds).
serialization::message control_word(parcel_kind kind);
/// Starts the heartbeat thread (after the transport is set up).
void liveness_start(locality_state& st);
/// Leaving normally: tells every peer not to miss this locality, then stops the heartbeat
/// thread. The watchdog keeps watching (a thread can still wedge in the transport until it is
/// closed, the heartbeat thread itself included).
void liveness_stop(locality_state& st);
/// Stops the watchdog: after the transport is closed, when no thread can be inside it.
void watchdog_stop(locality_state& st);
/// Whether any peer was reported or declared failed.
bool any_peer_failed(locality_state& st);
/// The lowest rank reported or declared failed; -1: none.
std::int64_t first_failed_peer(locality_state const& st);

} // namespace courier::detail
