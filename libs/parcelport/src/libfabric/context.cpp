// SPDX-License-Identifier: BSL-1.0
// The shared parts of the libfabric transport: statistics, peers, the -FI_EAGAIN backlog.
#include "context.hpp"

#include "direct_read.hpp"
#include "outbox.hpp"

#include <courier/common/log.hpp>

#include <cstring>

namespace courier::parcelport::fabric {

statistics counters::snapshot() const {
    statistics s;
    s.messages_sent = messages_sent;
    s.messages_received = messages_received;
    s.eager_bytes_sent = eager_bytes_sent;
    s.rma_bytes_read = rma_bytes_read;
    s.rma_reads = rma_reads;
    s.rma_read_bytes_in_flight_max = rma_read_bytes_in_flight_max;
    s.stalled_reads = stalled_reads;
    s.read_retries = read_retries;
    s.rendezvous_sends = rendezvous_sends;
    s.registrations = registrations;
    s.eagain_retries = eagain_retries;
    s.bytes_copied_on_send = bytes_copied_on_send;
    s.receive_buffers_reused = receive_buffers_reused;
    s.deferred_rendezvous = deferred_rendezvous;
    s.refused_parcels = refused_parcels;
    s.pool_chunks_sent = pool_chunks_sent;
    s.registration_cache_hits = registration_cache_hits;
    s.registration_cache_misses = registration_cache_misses;
    s.pool_receive_buffers = pool_receive_buffers;
    s.batches_sent = batches_sent;
    s.parcels_in_batches = parcels_in_batches;
    s.lone_batches = lone_batches;
    s.doorbell_rings = doorbell_rings;
    s.split_sends = split_sends;
    s.outbox_chunks_sent = outbox_chunks_sent;
    s.outbox_chunks_received = outbox_chunks_received;
    s.outbox_bytes_received = outbox_bytes_received;
    s.direct_reads = direct_reads;
    s.done_messages = done_messages;
    s.pushed_sends = pushed_sends;
    s.pushed_receives = pushed_receives;
    s.pushed_bytes_received = pushed_bytes_received;
    s.completion_queue_reads = completion_queue_reads;
    return s;
}

namespace {
std::size_t unserved(std::vector<std::vector<std::byte>> const& addresses, std::uint32_t rank) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < addresses.size(); ++i) {
        n += addresses[i].empty() && i != rank;
    }
    return n;
}
} // namespace

std::vector<std::byte> join_address(address_parts const& p) {
    std::vector<std::byte> a = p.provider;
    for (std::string const* name : {&p.outbox, &p.bell, &p.rings, &p.direct, &p.core, &p.push}) {
        for (char c : *name) {
            a.push_back(static_cast<std::byte>(c));
        }
        a.push_back(static_cast<std::byte>(name->size() & 0xff));
        a.push_back(static_cast<std::byte>(name->size() >> 8));
    }
    return a;
}

address_parts split_address(std::vector<std::byte> const& a, std::size_t rank) {
    address_parts p;
    std::size_t end = a.size();
    // The names at the end, last first.
    for (std::string* name : {&p.push, &p.core, &p.direct, &p.rings, &p.bell, &p.outbox}) {
        std::size_t len = end < 2 ? 0
                                  : std::to_integer<std::size_t>(a[end - 2]) |
                                        std::to_integer<std::size_t>(a[end - 1]) << 8;
        if (end < 2 || len > end - 2) {
            throw network_error("courier: malformed address of locality " + std::to_string(rank));
        }
        end -= 2 + len;
        name->assign(reinterpret_cast<char const*>(a.data()) + end, len);
    }
    p.provider.assign(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(end));
    return p;
}

namespace {
/// The count of push classes an address names ("" or anything but 1-8: none).
std::uint8_t parse_push(std::string const& s) noexcept {
    return s.size() == 1 && s[0] >= '1' && s[0] <= '8' ? static_cast<std::uint8_t>(s[0] - '0') : 0;
}
} // namespace

void peer_table::set(endpoint& ep, std::vector<std::vector<std::byte>> const& addresses,
                     std::uint32_t rank, detail::doorbell* bell, detail::net_bell* net,
                     bool& bell_wait, bool& bell_partial, outbox* box, direct_reader* direct) {
    std::vector<fi_addr_t> addrs(addresses.size(), FI_ADDR_NOTAVAIL);
    std::vector<std::uint8_t> push(addresses.size(), 0);
    std::vector<std::string> bells(addresses.size()), boxes(addresses.size()),
        identities(addresses.size()), rings(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) {
        auto const& a = addresses[i];
        if (a.empty() && i != rank) {
            continue; // a peer another transport serves (routed_transport): no address, no bell
        }
        address_parts parts = split_address(a, i);
        if (parts.core != ep.core()) {
            // net and tcp under rxm both take socket addresses, but do not speak to each other:
            // say so here rather than fail every message to that peer.
            throw network_error("courier: locality " + std::to_string(i) + " opened provider '" +
                                parts.core + "', this one '" + std::string(ep.core()) +
                                "': every locality of a job must open the same one (\"tcp\" "
                                "opens net with a doorbell, one worker per locality, and "
                                "tcp;ofi_rxm with more workers: give every locality the same "
                                "--courier:threads or name the provider)");
        }
        push[i] = parse_push(parts.push);
        bells[i] = std::move(parts.bell);
        boxes[i] = std::move(parts.outbox);
        rings[i] = std::move(parts.rings);
        if (i != rank) {
            identities[i] = std::move(parts.direct);
        }
        addrs[i] = ep.insert(a.data(), static_cast<std::uint32_t>(i));
    }
    failed_ = std::make_unique<std::atomic<bool>[]>(addrs.size()); // all false
    addrs_ = std::move(addrs);
    ring_names_ = std::move(rings);
    push_ = std::move(push);
    rank_ = rank;
    bell_ = bell;
    net_bell_ = net;
    if (box != nullptr && box->connect(boxes) != 0) {
        logging::warn("could not map every peer's outbox; chunks from those peers are read from "
                      "their memory instead");
    }
    if (direct != nullptr) {
        if (std::size_t failed = direct->connect(identities); failed != 0) {
            logging::debug("{} peers cannot be read directly (process_vm_readv); their chunks are "
                           "read with fi_read",
                           failed);
        }
    }
    if (bell != nullptr && bell->connect(bells) > unserved(addresses, rank)) {
        if (ep.shm()) {
            logging::warn("could not open every peer's doorbell; idle localities will answer some "
                          "peers late");
            bell_partial = true; // those peers never ring: sleeps stay short
        } else {
            // A peer that cannot ring (another host) would find this locality asleep with
            // nothing to wake it: its idle workers poll in the bounded backoff instead. Peers
            // whose bells opened are still rung.
            bell_wait = false;
        }
    }
    if (net != nullptr && net->connect(bells, rank) > unserved(addresses, rank)) {
        // A peer without a network doorbell (its own could not be made, or it runs without
        // one) never rings this side: idle workers poll in the bounded backoff instead.
        logging::warn("a peer on another host has no network doorbell; idle workers here will "
                      "poll instead of sleeping until one rings");
        bell_wait = false;
    }
}

wire::header peer_table::header_of(wire::kind kind) const noexcept {
    return wire::make_header(kind, token_, rank_);
}

namespace {
// testing::refuse_posts: which posts, how many more, and what their retries get (or, refused
// outright, the posts themselves).
std::atomic<long> g_refused_with{0};
std::atomic<char const*> g_refused_what{nullptr};
std::atomic<bool> g_refused_outright{false};
} // namespace

long backlog::first_refusal() noexcept {
    return g_refused_outright.load(std::memory_order_relaxed)
               ? g_refused_with.load(std::memory_order_relaxed)
               : -FI_EAGAIN;
}

bool backlog::take_refusal(char const* what) noexcept {
    char const* named = g_refused_what.load(std::memory_order_acquire);
    if (named == nullptr || std::strcmp(named, what) != 0) {
        return false;
    }
    int left = refusals_left.load(std::memory_order_relaxed);
    while (left > 0 &&
           !refusals_left.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
    }
    return left > 0;
}

namespace testing {
void refuse_posts(char const* what, int n, long then) noexcept {
    g_refused_outright.store(false, std::memory_order_relaxed);
    g_refused_what.store(what, std::memory_order_release);
    g_refused_with.store(then, std::memory_order_relaxed);
    backlog::refusals_left.store(n, std::memory_order_relaxed);
}

void refuse_posts_outright(char const* what, int n, long code) noexcept {
    g_refused_outright.store(true, std::memory_order_relaxed);
    g_refused_what.store(what, std::memory_order_release);
    g_refused_with.store(code, std::memory_order_relaxed);
    backlog::refusals_left.store(n, std::memory_order_relaxed);
}
} // namespace testing

void backlog::defer(long rc, std::function<long()> post, char const* what, refused_handler refused,
                    bool injected) {
    if (rc != -FI_EAGAIN) {
        throw error_of(what, rc);
    }
    ++counters_.eagain_retries;
    std::lock_guard g(mutex_);
    queue_.push_back(entry{std::move(post), what, refused,
                           injected ? g_refused_with.load(std::memory_order_relaxed) : 0});
    size_.store(queue_.size(), std::memory_order_release);
}

bool backlog::retry() {
    if (size_.load(std::memory_order_acquire) == 0) {
        return false;
    }
    // One entry at a time from the front; one the provider still refuses goes back to the
    // front and the pass ends (taking the whole queue out and putting the rest back would cost
    // a move per waiting entry on every pass: quadratic under a flood).
    bool any = false;
    for (;;) {
        entry item;
        {
            std::lock_guard g(mutex_);
            if (queue_.empty()) {
                break;
            }
            item = std::move(queue_.front());
            queue_.pop_front();
            size_.store(queue_.size(), std::memory_order_release);
        }
        long rc = item.injected != 0 ? item.injected : item.post();
        if (rc == -FI_EAGAIN) {
            std::lock_guard g(mutex_);
            queue_.push_front(std::move(item));
            size_.store(queue_.size(), std::memory_order_release);
            break;
        }
        if (rc != 0) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "{}", error_of(item.what, rc).what());
            if (item.refused) {
                try {
                    item.refused(rc);
                } catch (std::exception const& e) {
                    logging::error_limited(limit, "after a refused {}: {}", item.what, e.what());
                }
            }
        } else if (!posted_.load(std::memory_order_relaxed)) {
            posted_.store(true, std::memory_order_relaxed); // its completion: take_posted()
        }
        any = true;
    }
    return any;
}

} // namespace courier::parcelport::fabric
