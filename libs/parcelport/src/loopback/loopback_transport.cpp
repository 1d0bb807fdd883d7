// SPDX-License-Identifier: BSL-1.0
// The loopback transport (loopback.hpp): the endpoint, the hub's public face, the factory.
#include "endpoint.hpp"
#include "message_copy.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <courier/common/log.hpp>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace courier::parcelport {

namespace {

/// 8 bytes of hub id and 4 of rank, little-endian.
std::vector<std::byte> address_of(std::uint64_t hub_id, std::uint32_t rank) {
    std::vector<std::byte> a(12);
    for (int i = 0; i < 8; ++i) {
        a[i] = static_cast<std::byte>(hub_id >> (8 * i));
    }
    for (int i = 0; i < 4; ++i) {
        a[8 + i] = static_cast<std::byte>(rank >> (8 * i));
    }
    return a;
}

std::uint64_t next_incarnation() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

namespace detail {

loopback_endpoint::loopback_endpoint(std::shared_ptr<loopback_hub> owner, loopback_hub_state& hub,
                                     std::uint32_t rank)
    : owner_(std::move(owner)), hub_(hub), rank_(rank), incarnation_(next_incarnation()),
      event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (event_fd_ < 0) {
        throw std::system_error(errno, std::generic_category(), "loopback endpoint: eventfd");
    }
    try {
        hub_.enrol(rank_, this); // the last step: from here on, senders may reach us
    } catch (...) {
        ::close(event_fd_);
        throw;
    }
}

loopback_endpoint::~loopback_endpoint() {
    hub_.withdraw(rank_);
    // Nothing reaches this endpoint any more. The parcels it will never deliver tell their
    // senders; the completions it owes its own senders go with their handlers.
    std::vector<parcel> orphans;
    {
        std::lock_guard g(mutex_);
        std::move(inbox_.begin(), inbox_.end(), std::back_inserter(orphans));
        std::move(delayed_.begin(), delayed_.end(), std::back_inserter(orphans));
    }
    std::move(ready_.begin(), ready_.end(), std::back_inserter(orphans));
    for (auto& p : orphans) {
        post_completion(p, std::make_error_code(std::errc::connection_aborted));
    }
    ::close(event_fd_);
}

std::vector<std::byte> loopback_endpoint::address() const {
    return address_of(hub_.id(), rank_);
}

void loopback_endpoint::set_peers(std::vector<std::vector<std::byte>> const& addresses,
                                  std::uint32_t my_rank) {
    if (my_rank != rank_) {
        throw std::invalid_argument("loopback set_peers: told rank " + std::to_string(my_rank) +
                                    ", this endpoint is rank " + std::to_string(rank_));
    }
    if (addresses.size() != hub_.localities()) {
        throw std::invalid_argument("loopback set_peers: " + std::to_string(addresses.size()) +
                                    " addresses for a hub of " + std::to_string(hub_.localities()) +
                                    " localities");
    }
    for (std::uint32_t i = 0; i < addresses.size(); ++i) {
        if (addresses[i] != address_of(hub_.id(), i)) {
            throw std::invalid_argument("loopback set_peers: address " + std::to_string(i) +
                                        " is not that of rank " + std::to_string(i) +
                                        " of this endpoint's hub");
        }
    }
}

void loopback_endpoint::send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) {
    serialization::message const sent = std::move(m); // released when send() returns
    if (dest >= hub_.localities()) {
        throw std::out_of_range("courier: send to unknown locality " + std::to_string(dest) +
                                " (the loopback hub has " + std::to_string(hub_.localities()) +
                                ")");
    }
    auto make_parcel = [&](serialization::message const& from) {
        owned_copy c = copy_message(from);
        bytes_copied_.fetch_add(c.bytes, std::memory_order_relaxed);
        pool_buffers_.fetch_add(c.pool_buffers, std::memory_order_relaxed);
        parcel p;
        p.source = rank_;
        p.source_incarnation = incarnation_;
        p.token = token_.load(std::memory_order_relaxed);
        p.msg = std::move(c.msg);
        return p;
    };
    parcel p = make_parcel(sent);
    p.on_sent = std::move(on_sent);
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    auto fault = hub_.rules().decide(rank_, dest, p.msg.index_size());
    if (fault) {
        switch (fault->kind) {
        case fault_kind::drop:
            if (p.on_sent) {
                complete(std::move(p.on_sent), std::make_error_code(std::errc::connection_reset));
            }
            return;
        case fault_kind::delay:
            p.due = clock::now() + fault->delay;
            break;
        case fault_kind::reorder:
            p.held = true;
            p.due = clock::now() + fault->delay;
            break;
        case fault_kind::duplicate: {
            parcel twin = make_parcel(p.msg); // its own bytes; no on_sent
            route(dest, std::move(p));
            route(dest, std::move(twin));
            return;
        }
        case fault_kind::corrupt:
            p.msg.index_buffer()[fault->position] ^= fault->mask;
            break;
        case fault_kind::refuse:
            messages_sent_.fetch_sub(1, std::memory_order_relaxed);
            throw network_error("loopback: a send from rank " + std::to_string(rank_) +
                                " to rank " + std::to_string(dest) + " refused (fault rule)");
        }
    }
    route(dest, std::move(p));
}

void loopback_endpoint::route(std::uint32_t dest, parcel&& p) {
    bool const taken =
        hub_.with_endpoint(dest, [&](loopback_endpoint& ep) { ep.accept(std::move(p)); });
    if (!taken && p.on_sent) {
        complete(std::move(p.on_sent), std::make_error_code(std::errc::not_connected));
    }
}

void loopback_endpoint::accept(parcel&& p) {
    bool const waits = p.due != clock::time_point{};
    {
        std::lock_guard g(mutex_);
        if (waits) {
            delayed_.push_back(std::move(p));
            delayed_count_.store(delayed_.size(), std::memory_order_relaxed);
        } else {
            enqueue_locked(std::move(p));
        }
    }
    if (!waits) {
        signal(); // a delayed parcel gives progress() nothing to do yet
    }
}

void loopback_endpoint::complete(sent_handler h, std::error_code ec) {
    {
        std::lock_guard g(mutex_);
        completions_.emplace_back(std::move(h), ec);
    }
    signal();
}

void loopback_endpoint::signal() noexcept {
    // One write per progress() pass at most: progress() reads the fd before it clears the
    // flag, so a sender that finds the flag clear writes after that read.
    if (!signalled_.exchange(true, std::memory_order_acq_rel)) {
        std::uint64_t one = 1;
        ssize_t ignored = ::write(event_fd_, &one, sizeof one);
        (void)ignored;
    }
}

void loopback_endpoint::enqueue_locked(parcel&& p) {
    inbox_.push_back(std::move(p));
    if (!delayed_.empty()) {
        release_locked([](parcel const& q) { return q.held; }); // right behind it
    }
}

template <class Pred>
bool loopback_endpoint::release_locked(Pred pred) {
    auto first = std::stable_partition(delayed_.begin(), delayed_.end(),
                                       [&](parcel const& q) { return !pred(q); });
    bool const any = first != delayed_.end();
    std::move(first, delayed_.end(), std::back_inserter(inbox_));
    delayed_.erase(first, delayed_.end());
    delayed_count_.store(delayed_.size(), std::memory_order_relaxed);
    return any;
}

void loopback_endpoint::release_due_locked(clock::time_point now) {
    bool const moved = release_locked([&](parcel const& q) { return !q.held && q.due <= now; });
    release_locked([&](parcel const& q) { return q.held && (moved || q.due <= now); });
}

bool loopback_endpoint::progress() {
    std::unique_lock poll(poll_mutex_, std::try_to_lock);
    if (!poll) {
        return false; // another thread polls; it has the same work
    }
    std::uint64_t drained = 0;
    ssize_t ignored = ::read(event_fd_, &drained, sizeof drained);
    (void)ignored;
    signalled_.store(false, std::memory_order_release);
    {
        std::lock_guard g(mutex_);
        if (!delayed_.empty()) {
            release_due_locked(clock::now());
        }
        std::move(inbox_.begin(), inbox_.end(), std::back_inserter(ready_));
        inbox_.clear();
        std::move(completions_.begin(), completions_.end(), std::back_inserter(finished_));
        completions_.clear();
        ready_count_.store(ready_.size() + finished_.size(), std::memory_order_release);
    }
    // One at a time from the members: if a handler throws, the rest wait for the next pass.
    // A message counts as ready until its handler has returned, so can_sleep() is false while
    // one runs: a caller that waits for quiet (in_process_job::drain) must not see it before
    // the handler's effects (a spawned task, a log line) exist.
    struct counted {
        std::atomic<std::size_t>& n;
        ~counted() { n.fetch_sub(1, std::memory_order_release); }
    };
    bool any = false;
    while (!finished_.empty()) {
        completion c = std::move(finished_.front());
        finished_.pop_front();
        counted done{ready_count_};
        any = true;
        c.first(c.second);
    }
    while (!ready_.empty()) {
        parcel p = std::move(ready_.front());
        ready_.pop_front();
        counted done{ready_count_};
        any = true;
        deliver(std::move(p));
    }
    return any;
}

void loopback_endpoint::deliver(parcel&& p) {
    if (p.token != token_.load(std::memory_order_relaxed)) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        logging::error("loopback rank {} dropped a message from rank {}: job token {}, expected {}",
                       rank_, p.source, p.token, token_.load(std::memory_order_relaxed));
        post_completion(p, std::make_error_code(std::errc::permission_denied));
        return;
    }
    post_completion(p, {}); // the receiver has every byte
    if (!p.batch.empty()) {
        messages_received_.fetch_add(p.batch.size(), std::memory_order_relaxed);
        if (on_batch_) {
            std::vector<std::span<std::byte const>> spans(p.batch.begin(), p.batch.end());
            on_batch_(p.source, spans);
            return;
        }
        for (auto const& b : p.batch) {
            serialization::message m;
            try {
                m = serialization::message::from_bytes(b);
            } catch (std::exception const& e) {
                logging::error("loopback rank {} dropped a malformed parcel from rank {}: {}",
                               rank_, p.source, e.what());
                continue;
            }
            if (on_receive_) {
                on_receive_(p.source, std::move(m));
            }
        }
        return;
    }
    messages_received_.fetch_add(1, std::memory_order_relaxed);
    if (on_receive_) {
        on_receive_(p.source, std::move(p.msg));
    }
}

void loopback_endpoint::post_completion(parcel& p, std::error_code ec) {
    if (!p.on_sent) {
        return;
    }
    hub_.with_endpoint(p.source, [&](loopback_endpoint& ep) {
        if (ep.incarnation() == p.source_incarnation) {
            ep.complete(std::move(p.on_sent), ec);
        }
    });
}

bool loopback_endpoint::can_sleep() {
    if (ready_count_.load(std::memory_order_acquire) != 0) {
        return false;
    }
    std::lock_guard g(mutex_);
    if (!inbox_.empty() || !completions_.empty()) {
        return false;
    }
    auto const now = clock::now();
    return std::none_of(delayed_.begin(), delayed_.end(),
                        [&](parcel const& q) { return q.due <= now; });
}

statistics loopback_endpoint::stats() const {
    statistics s;
    s.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    s.messages_received = messages_received_.load(std::memory_order_relaxed);
    s.eager_bytes_sent = bytes_copied_.load(std::memory_order_relaxed);
    s.bytes_copied_on_send = s.eager_bytes_sent;
    s.pool_receive_buffers = pool_buffers_.load(std::memory_order_relaxed);
    return s;
}

std::string loopback_endpoint::debug_state() const {
    std::size_t inbox = 0, held = 0, delayed = 0, completions = 0;
    {
        std::lock_guard g(mutex_);
        inbox = inbox_.size();
        for (auto const& q : delayed_) {
            (q.held ? held : delayed) += 1;
        }
        completions = completions_.size();
    }
    auto const f = hub_.rules().counts();
    auto n = [](std::uint64_t v) { return std::to_string(v); };
    return "loopback rank " + n(rank_) + " of " + n(hub_.localities()) + ": inbox " + n(inbox) +
           ", being delivered " + n(ready_count_.load(std::memory_order_relaxed)) + ", delayed " +
           n(delayed) + ", held " + n(held) + ", sent-handlers queued " + n(completions) +
           ", messages sent " + n(messages_sent_.load()) + ", received " +
           n(messages_received_.load()) + ", refused " + n(refused_.load()) +
           "; hub faults: drop " + n(f.drop) + ", delay " + n(f.delay) + ", reorder " +
           n(f.reorder) + ", duplicate " + n(f.duplicate) + ", corrupt " + n(f.corrupt) +
           ", refuse " + n(f.refuse);
}

} // namespace detail

// ---- the hub and the factory ---------------------------------------------------------------

std::uint64_t fault_counters::of(fault_kind k) const noexcept {
    switch (k) {
    case fault_kind::drop:
        return drop;
    case fault_kind::delay:
        return delay;
    case fault_kind::reorder:
        return reorder;
    case fault_kind::duplicate:
        return duplicate;
    case fault_kind::corrupt:
        return corrupt;
    case fault_kind::refuse:
        return refuse;
    }
    return 0;
}

loopback_hub::loopback_hub(loopback_options const& o)
    : state_(std::make_unique<detail::loopback_hub_state>(o)) {}

loopback_hub::~loopback_hub() = default;

std::shared_ptr<loopback_hub> loopback_hub::create(loopback_options const& o) {
    if (o.localities == 0) {
        throw std::invalid_argument("loopback hub: at least one locality is needed");
    }
    return std::shared_ptr<loopback_hub>(new loopback_hub(o));
}

std::uint32_t loopback_hub::localities() const noexcept {
    return state_->localities();
}

void loopback_hub::add_rule(fault_rule const& r) {
    state_->rules().add(r);
}

void loopback_hub::clear_rules() {
    state_->rules().clear();
}

fault_counters loopback_hub::fault_counts() const {
    return state_->rules().counts();
}

void loopback_hub::check_ranks(std::uint32_t source, std::uint32_t dest) const {
    if (source >= localities() || dest >= localities()) {
        throw std::out_of_range("loopback hub: inject from rank " + std::to_string(source) +
                                " to rank " + std::to_string(dest) + " of a hub of " +
                                std::to_string(localities()) + " localities");
    }
}

bool loopback_hub::inject(std::uint32_t source, std::uint32_t dest, serialization::message&& m) {
    check_ranks(source, dest);
    return state_->with_endpoint(dest, [&](detail::loopback_endpoint& ep) {
        detail::parcel p;
        p.source = source;
        p.token = ep.token();
        p.msg = std::move(m);
        ep.accept(std::move(p));
    });
}

bool loopback_hub::inject_batch(std::uint32_t source, std::uint32_t dest,
                                std::vector<std::vector<std::byte>> parcels) {
    check_ranks(source, dest);
    if (parcels.empty()) {
        return true;
    }
    return state_->with_endpoint(dest, [&](detail::loopback_endpoint& ep) {
        detail::parcel p;
        p.source = source;
        p.token = ep.token();
        p.batch = std::move(parcels);
        ep.accept(std::move(p));
    });
}

std::unique_ptr<transport> make_loopback_transport(std::shared_ptr<loopback_hub> hub,
                                                   std::uint32_t rank) {
    if (!hub) {
        throw std::invalid_argument("make_loopback_transport: no hub");
    }
    if (rank >= hub->localities()) {
        throw std::out_of_range("make_loopback_transport: rank " + std::to_string(rank) +
                                " of a hub of " + std::to_string(hub->localities()) +
                                " localities");
    }
    detail::loopback_hub_state& state = *hub->state_;
    return std::make_unique<detail::loopback_endpoint>(std::move(hub), state, rank);
}

} // namespace courier::parcelport
