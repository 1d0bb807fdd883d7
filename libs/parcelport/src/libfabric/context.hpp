// SPDX-License-Identifier: BSL-1.0
// What the parts of the libfabric transport share: the operation contexts the completion queue
// hands back (op), the statistics counters, the peers (addresses, rank, job token, doorbell)
// and the backlog of posts the provider refused with -FI_EAGAIN.
#pragma once

#include "../doorbell.hpp"
#include "../message_rings.hpp"
#include "../net_bell.hpp"
#include "../wire.hpp"
#include "fabric.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

class outbox;
class direct_reader;

/// Every posted operation starts with fi_context2 (providers that need FI_CONTEXT use it); the
/// completion queue dispatches on `k` (completion_queue.cpp).
struct op {
    enum class kind : std::uint8_t { recv, send, read, batch, batch_part, push, ring_lone };
    fi_context2 ctx;
    kind k;
    explicit op(kind kk) : ctx{}, k(kk) {}
};

/// The transport's statistics, counted without a lock (read only as a snapshot).
struct counters {
    using c = std::atomic<std::uint64_t>;
    c messages_sent{0}, messages_received{0}, eager_bytes_sent{0}, rma_bytes_read{0}, rma_reads{0},
        rma_read_bytes_in_flight_max{0}, stalled_reads{0}, read_retries{0}, rendezvous_sends{0},
        registrations{0}, eagain_retries{0}, bytes_copied_on_send{0}, receive_buffers_reused{0},
        deferred_rendezvous{0}, refused_parcels{0}, pool_chunks_sent{0}, registration_cache_hits{0},
        registration_cache_misses{0}, pool_receive_buffers{0}, batches_sent{0},
        parcels_in_batches{0}, lone_batches{0}, doorbell_rings{0}, split_sends{0},
        outbox_chunks_sent{0}, outbox_chunks_received{0}, outbox_bytes_received{0}, direct_reads{0},
        done_messages{0}, pushed_sends{0}, pushed_receives{0}, pushed_bytes_received{0},
        completion_queue_reads{0};
    statistics snapshot() const;
};

/// Operations that completed without the provider (sent through a message ring): handed to
/// progress() as if the completion queue had returned them. A lock-free stack linked through
/// the operations' own contexts, which the provider never saw.
class local_completions {
public:
    void push(op* o) noexcept {
        op* h = head_.load(std::memory_order_relaxed);
        do {
            o->ctx.internal[0] = h;
        } while (!head_.compare_exchange_weak(h, o, std::memory_order_release,
                                              std::memory_order_relaxed));
    }
    bool empty() const noexcept { return head_.load(std::memory_order_acquire) == nullptr; }
    /// Calls `f(op*)` on each, in the order pushed; true if any.
    template <class F>
    bool drain(F&& f) {
        if (empty()) {
            return false;
        }
        op* list = head_.exchange(nullptr, std::memory_order_acquire);
        op* ordered = nullptr;
        while (list != nullptr) {
            op* next = static_cast<op*>(list->ctx.internal[0]);
            list->ctx.internal[0] = ordered;
            ordered = list;
            list = next;
        }
        // A handler that throws leaves the rest for the next drain (each runs exactly once).
        struct put_back {
            local_completions* self;
            op*& rest;
            ~put_back() {
                while (rest != nullptr) {
                    op* next = static_cast<op*>(rest->ctx.internal[0]);
                    self->push(rest);
                    rest = next;
                }
            }
        } guard{this, ordered};
        while (ordered != nullptr) {
            op* o = ordered;
            ordered = static_cast<op*>(o->ctx.internal[0]);
            o->ctx.internal[0] = nullptr;
            f(o);
        }
        return true;
    }

private:
    std::atomic<op*> head_{nullptr};
};

/// A locality's address as the transport publishes it: the provider's address, then the names
/// of its outbox, of its doorbell and of its message rings, its direct-read identity
/// (direct_reader::identity()) (empty: none), the core provider it opened ("net", "tcp",
/// "shm") and the pushed parcels it takes, each followed by its length in two bytes.
struct address_parts {
    std::vector<std::byte> provider;
    std::string outbox, bell, rings, direct, core;
    /// The pushed parcels it takes (push_classes): "" none, else the count of classes posted.
    std::string push;
};
std::vector<std::byte> join_address(address_parts const& p);
/// The parts of `a`; throws network_error naming locality `rank` when the lengths do not fit.
address_parts split_address(std::vector<std::byte> const& a, std::size_t rank);

/// The localities of the job as this endpoint addresses them, and what every message carries.
/// Set once (set_peers) before any send; read-only afterwards.
class peer_table {
public:
    peer_table(counters& c) : counters_(c) {}
    /// Parses each locality's address (split_address), inserts it into the endpoint's address
    /// vector and opens the doorbells and outboxes, and checks the peers' direct-read
    /// identities.
    /// `net` (between hosts, instead of `bell`) takes the peers' bell names the same way.
    void set(endpoint& ep, std::vector<std::vector<std::byte>> const& addresses, std::uint32_t rank,
             detail::doorbell* bell, detail::net_bell* net, bool& bell_wait, bool& bell_partial,
             outbox* box, direct_reader* direct);
    std::size_t size() const noexcept { return addrs_.size(); }
    /// The message ring names the addresses carried, by rank (set() fills them; the transport
    /// connects its rings with them).
    std::vector<std::string> const& ring_names() const noexcept { return ring_names_; }
    fi_addr_t operator[](std::uint32_t rank) const noexcept { return addrs_[rank]; }
    /// The runtime declared locality `rank` failed (transport::peer_failed): its reads are not
    /// posted again. Any thread.
    void mark_failed(std::uint32_t rank) noexcept {
        if (rank < addrs_.size()) {
            failed_[rank].store(true, std::memory_order_relaxed);
        }
    }
    bool failed(std::uint32_t rank) const noexcept {
        return rank < addrs_.size() && failed_[rank].load(std::memory_order_relaxed);
    }
    std::uint32_t rank() const noexcept { return rank_; }
    /// How many classes of pushed parcels locality `rank` keeps receives posted for (its
    /// address says; 0: it takes none, so every parcel to it is read).
    unsigned push_classes_of(std::uint32_t rank) const noexcept {
        return rank < push_.size() ? push_[rank] : 0;
    }
    void set_token(std::uint64_t t) noexcept { token_ = t; }
    /// The transport's activity handler (set-up time): `rank` showed signs of life.
    void set_activity_handler(transport::activity_handler h) { on_activity_ = std::move(h); }
    void active(std::uint32_t rank) const {
        if (on_activity_) {
            on_activity_(rank);
        }
    }
    /// The transport's read handler (set-up time): reads of `bytes` from `rank` completed.
    void set_read_handler(transport::read_handler h) { on_read_ = std::move(h); }
    void read_done(std::uint32_t rank, std::size_t bytes,
                   std::chrono::steady_clock::time_point started) const {
        if (on_read_) {
            on_read_(rank, bytes, started);
        }
    }
    /// A header of `kind` from this locality, with the job token; the rest zero.
    wire::header header_of(wire::kind kind) const noexcept;
    /// Magic, version, job token and a source this endpoint serves: a message of this job (any
    /// kind).
    bool header_ok(wire::header const& h) const noexcept {
        return h.magic == wire::magic && h.version == wire::version && h.token == token_ &&
               h.source < addrs_.size() && addrs_[h.source] != FI_ADDR_NOTAVAIL;
    }
    /// After posting something for `rank` (rc 0), or when the provider refused it for now
    /// (-FI_EAGAIN: the peer must progress, e.g. shm's first contact or a full queue): rings
    /// the peer's doorbell, if there is one. Passes `rc` through.
    long wake(std::uint32_t rank, long rc) noexcept {
        if ((rc == 0 || rc == -FI_EAGAIN) &&
            ((bell_ != nullptr && bell_->ring(rank)) ||
             (net_bell_ != nullptr && net_bell_->ring(rank, rc == 0)))) {
            ++counters_.doorbell_rings;
        }
        return rc;
    }
    /// wake() for a pushed message posted for `rank`: between hosts (the network doorbell) it
    /// rings with a push notice, whatever the time, which keeps the peer awake until the
    /// message lands (net_bell.hpp).
    long wake_for_push(std::uint32_t rank, long rc) noexcept {
        if (rc == 0 && net_bell_ != nullptr) {
            if (net_bell_->notify_push(rank)) {
                ++counters_.doorbell_rings;
            }
            return rc;
        }
        return wake(rank, rc);
    }
    /// A pushed message landed (the network doorbell counts them against its notices).
    void push_landed() noexcept {
        if (net_bell_ != nullptr) {
            net_bell_->push_landed();
        }
    }

private:
    counters& counters_;
    std::vector<fi_addr_t> addrs_;
    std::unique_ptr<std::atomic<bool>[]> failed_; // by rank: mark_failed
    std::vector<std::string> ring_names_;
    std::vector<std::uint8_t> push_; // by rank: push_classes_of
    std::uint32_t rank_ = 0;
    transport::activity_handler on_activity_;
    transport::read_handler on_read_;
    std::uint64_t token_ = 0;
    detail::doorbell* bell_ = nullptr;
    detail::net_bell* net_bell_ = nullptr;
};

/// Posts the provider refused with -FI_EAGAIN, retried in order by progress(). A post is a
/// callable returning the provider's code; it stays queued while it says -FI_EAGAIN.
/// A post refused outright throws to its caller; one refused for good when retried (its caller
/// has returned) is logged and handed to its `refused` handler, which ends what the post was
/// for as its failed completion would (a send's handler hears the error, a receive buffer is
/// posted again later), so that nothing of this side waits for a completion that will never
/// come. A DONE (no handler) refused for good leaves its sender's send waiting.
class backlog {
public:
    /// What a post refused for good when retried is handed to: fn(ctx, arg, the provider's
    /// code); none if fn is null. Three words, trivially copied: every post builds one, and
    /// only a deferred post keeps it. No default member initializers: `{}` zeroes it, and
    /// clang refuses a default argument `= {}` of a nested type that has them.
    struct refused_handler {
        void (*fn)(void* ctx, std::uint64_t arg, long rc);
        void* ctx;
        std::uint64_t arg;
        explicit operator bool() const noexcept { return fn != nullptr; }
        void operator()(long rc) const { fn(ctx, arg, rc); }
    };

    explicit backlog(counters& c) : counters_(c) {}
    /// Runs `post`; on -FI_EAGAIN queues it (wrapped in a std::function, which allocates, only
    /// then) with `refused`. Any other error throws network_error naming `what`.
    template <class Post>
    void post_or_defer(Post&& post, char const* what, refused_handler refused = {}) {
        if (!posted_.load(std::memory_order_relaxed)) {
            posted_.store(true, std::memory_order_relaxed);
        }
        bool const injected = refusals_pending() && take_refusal(what);
        long rc = injected ? first_refusal() : post();
        if (rc != 0) {
            defer(rc, std::function<long()>(std::forward<Post>(post)), what, refused, injected);
        }
    }
    /// Whether anything was posted (or tried) since the last call: the poller then reads the
    /// completion queue for a while (progress()). A locked instruction only when there was.
    bool take_posted() noexcept {
        return posted_.load(std::memory_order_relaxed) &&
               posted_.exchange(false, std::memory_order_relaxed);
    }
    /// Retries queued posts from the front until one is refused again; true if any went.
    /// Costs one atomic load when empty.
    bool retry();
    std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
    /// testing::refuse_posts's count of posts still to refuse (0 outside the tests: one relaxed
    /// load per post).
    static inline std::atomic<int> refusals_left{0};

private:
    struct entry {
        std::function<long()> post;
        char const* what = nullptr;
        refused_handler refused;
        long injected = 0; // testing::refuse_posts: the code its retry gets instead of posting
    };
    void defer(long rc, std::function<long()> post, char const* what, refused_handler refused,
               bool injected);
    static bool refusals_pending() noexcept {
        return refusals_left.load(std::memory_order_relaxed) > 0;
    }
    static bool take_refusal(char const* what) noexcept;
    /// What an injected refusal's post gets: -FI_EAGAIN, or with testing::refuse_posts_outright
    /// its code.
    static long first_refusal() noexcept;

    counters& counters_;
    std::mutex mutex_;
    std::deque<entry> queue_;
    std::atomic<std::size_t> size_{0};
    std::atomic<bool> posted_{false};
};

namespace testing {
/// Makes the next `n` posts named `what` ("fi_send", "fi_recv", ...) through any backlog of
/// the process refused with -FI_EAGAIN without reaching the provider, and each of them, when
/// retried, refused with `then` (a negative libfabric code; -FI_EAGAIN keeps it queued). For
/// the tests of what a post refused for good leaves behind.
void refuse_posts(char const* what, int n, long then) noexcept;
/// As refuse_posts, for posts refused outright with `code` (a negative libfabric code, not
/// -FI_EAGAIN): each throws to its poster at once, as the provider's own refusal does.
void refuse_posts_outright(char const* what, int n, long code) noexcept;
} // namespace testing

/// What the poller's current pass handled (under the poll lock): messages and completions
/// (`events`), and how many of those were quiet: a control message's arrival or the end of its
/// send (transport::send_control). A pass whose every event was quiet did no work
/// (libfabric_transport::pass()).
struct pass_tally {
    std::uint32_t events = 0;
    std::uint32_t quiet = 0;
};

/// The parts every object of the transport works with (owned by libfabric_transport, which
/// outlives them all).
struct transport_parts {
    endpoint& ep;
    peer_table& peers;
    backlog& posts;
    counters& stats;
    /// shm: the message rings (null: none) and the completions of what went through them.
    detail::message_rings* rings = nullptr;
    local_completions* local = nullptr;
    pass_tally& tally; // the poller's current pass

    /// Sends the `n` bytes at `p` to `dest` through its message ring if it takes them: then
    /// `o` (if any: a DONE has no completion) completes in the next progress pass, the peer is
    /// woken (unless the message is `quiet`: wire::quiet), and true is returned. After that the
    /// caller must not touch what `o` belongs to (it may complete at once).
    bool send_by_ring(std::uint32_t dest, void const* p, std::size_t n, op* o, bool quiet = false) {
        if (rings == nullptr || !rings->send(dest, p, n)) {
            return false;
        }
        if (o != nullptr) {
            local->push(o);
        }
        if (!quiet) {
            peers.wake(dest, 0);
        }
        return true;
    }
};

} // namespace courier::parcelport::fabric
