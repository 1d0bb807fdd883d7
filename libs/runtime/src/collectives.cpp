// SPDX-License-Identifier: BSL-1.0
// The mailbox behind the collectives: a message and its receive meet in a slot keyed by
// (generation, round, source); whichever comes first creates it, the second takes it out.
#include "collective_rings.hpp"
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"
#include "scheduler.hpp"
#include "wire_id_table.hpp"

#include <courier/runtime/async.hpp>
#include <courier/runtime/collectives.hpp>
#include <courier/runtime/this_thread.hpp>

#include <fmt/format.h>

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace courier::collectives::detail {

namespace {

// Messages that came before their receive, at most: a peer can run ahead of this locality
// (a leaf of a gather tree finishes without waiting), but not without bound.
constexpr std::size_t max_early_messages = std::size_t{1} << 20;

courier::detail::collective_table& table() {
    return courier::detail::here().collectives;
}

std::exception_ptr failure(std::uint32_t rank) {
    return std::make_exception_ptr(
        network_error(fmt::format("courier: collective failed: locality {} has failed", rank)));
}

courier::detail::collective_rings* rings() noexcept {
    return courier::detail::here().rings.get();
}

/// How each message type leaves an inbox (by the wire id of its message_action).
courier::detail::wire_id_table<ring_loader>& loaders() {
    static auto* t = new courier::detail::wire_id_table<ring_loader>; // never destroyed
    return *t;
}

// Moves a message out of an inbox into the mailbox (the collective_rings::drain callback).
void load_into_mailbox(std::uint32_t from, courier::detail::collective_rings::view const& v) {
    ring_loader const* load = loaders().find(v.wire_id);
    if (load == nullptr) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "collectives: dropped a message of unknown type {:#x} from "
                               "locality {} (generation {})",
                               v.wire_id, from, v.generation);
        // Its receiver learns it (a type error) instead of waiting for good.
        key const k{v.generation, v.step, from};
        if (auto s = match(k, true, [] { return make_slot<std::uint8_t>(true); })) {
            s->fail(std::make_exception_ptr(std::runtime_error(fmt::format(
                "courier: collective generation {} round {} from locality {}: a message of "
                "an unknown type",
                k.generation, k.step, from))));
        }
        return;
    }
    (*load)(key{v.generation, v.step, from}, v.payload, v.pid);
}

/// `ask`: make sure the ring is drained after this call began, by this thread or by the one
/// reading it now (before suspending, and for a nudge); else only if nobody reads it.
void drain_inbox(courier::detail::collective_rings& r, std::uint32_t from, bool ask = true) {
    r.drain(
        from,
        [from](courier::detail::collective_rings::view const& v) { load_into_mailbox(from, v); },
        ask);
}

} // namespace

/// A locality that sent into this one's inbox while a receiver here slept on it: drain it.
void drain_nudged_inbox() {
    courier::detail::request_context* ctx = courier::detail::current_request();
    courier::detail::collective_rings* r = rings();
    if (ctx != nullptr && r != nullptr) {
        drain_inbox(*r, ctx->source);
    }
}

} // namespace courier::collectives::detail

COURIER_PLAIN_ACTION(courier::collectives::detail::drain_nudged_inbox,
                     courier_collectives_nudge_action);

namespace courier::collectives::detail {

bool register_ring_loader(std::uint64_t wire_id, ring_loader load) {
    // The id is also the message action's, whose registration judges collisions; the same
    // type registered again (another translation unit) keeps its first loader.
    if (loaders().add(wire_id, load) == courier::detail::wire_id_table<ring_loader>::added::full) {
        courier::detail::log(courier::detail::log_level::error,
                             "more than {} collective message types registered",
                             courier::detail::wire_id_table<ring_loader>::max_entries);
        std::abort();
    }
    return true;
}

serialization::options ring_serialization_options() noexcept {
    serialization::options o;
    o.zero_copy = false;
    return o;
}

bool ring_sends_to(std::uint32_t rank) noexcept {
    courier::detail::collective_rings* r = rings();
    return r != nullptr && r->reaches(rank);
}

bool ring_listens_to(std::uint32_t rank) noexcept {
    courier::detail::collective_rings* r = rings();
    return r != nullptr && r->listens_to(rank);
}

bool ring_reads_from_sender(std::uint32_t rank) noexcept {
    courier::detail::collective_rings* r = rings();
    return r != nullptr && r->reads_from_me(rank);
}

void ring_read_pieces(std::int32_t pid, ring_piece const* pieces, std::size_t count) {
    // process_vm_readv takes at most IOV_MAX pieces per call, and may stop short.
    constexpr std::size_t batch = 64;
    iovec local[batch], remote[batch];
    std::uint64_t total = 0;
    for (std::size_t first = 0; first < count; first += batch) {
        std::size_t const n = std::min(batch, count - first);
        std::size_t want = 0;
        for (std::size_t i = 0; i < n; ++i) {
            ring_piece const& p = pieces[first + i];
            local[i] = iovec{p.local, p.bytes};
            remote[i] =
                iovec{reinterpret_cast<void*>(static_cast<std::uintptr_t>(p.remote)), p.bytes};
            want += p.bytes;
        }
        ssize_t got = ::process_vm_readv(pid, local, n, remote, n, 0);
        if (got != static_cast<ssize_t>(want)) {
            throw network_error(
                fmt::format("courier: collective: could not read {} bytes of process {} ({})", want,
                            pid, got < 0 ? std::strerror(errno) : fmt::format("read {}", got)));
        }
        total += want;
    }
    if (courier::detail::collective_rings* r = rings()) {
        r->count_read(total);
    }
}

namespace {

/// Puts a message into `to`'s inbox and nudges `to` if it sleeps on it; true if it was sent.
bool push(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation, std::uint32_t step,
          std::span<std::byte const> payload, std::shared_ptr<void const> keep,
          std::uint64_t* lent) {
    courier::detail::collective_rings* r = rings();
    if (r == nullptr) {
        return false;
    }
    using result = courier::detail::collective_rings::push_result;
    result res = r->push(to, wire_id, generation, step, payload, std::move(keep), lent);
    if (res == result::sent_wake) {
        try {
            courier::post<courier_collectives_nudge_action>(locality(to));
        } catch (std::exception const& e) {
            // The message is in the ring: the receiver's failure, if that is it, is reported
            // by the failure detection.
            courier::detail::log(courier::detail::log_level::warn,
                                 "collectives: could not wake locality {} for a message: {}", to,
                                 e.what());
        }
    }
    return res == result::sent || res == result::sent_wake;
}

/// The locality whose failure broke the collectives, if one has.
std::optional<std::uint32_t> broken() {
    auto& t = table();
    std::lock_guard lk(t.mutex);
    return t.failed;
}

} // namespace

bool ring_send(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation,
               std::uint32_t step, std::span<std::byte const> payload,
               std::shared_ptr<void const> keep) {
    return push(to, wire_id, generation, step, payload, std::move(keep), nullptr);
}

bool ring_lend(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation,
               std::uint32_t step, std::span<std::byte const> payload, loan& l) {
    std::uint64_t seq = 0;
    if (!push(to, wire_id, generation, step, payload, nullptr, &seq)) {
        return false;
    }
    l = loan{to, seq};
    return true;
}

bool ring_wait_taken(std::span<loan const> loans, bool bounded) {
    courier::detail::collective_rings* r = rings();
    if (r == nullptr) {
        return true;
    }
    // A receiver that failed reads nothing more; one whose collective failed (another
    // locality did) may never take its message.
    auto all_taken = [&](bool check_broken) {
        for (loan const& l : loans) {
            if (!r->taken(l.to, l.seq)) {
                if (courier::detail::has_failed(courier::detail::here(), l.to)) {
                    std::rethrow_exception(failure(l.to));
                }
                // Leaving by an exception (bounded), the receiver may not know of the failure
                // yet and still read: only its own failure or the time limit ends the wait.
                if (check_broken && !bounded) {
                    if (std::optional<std::uint32_t> f = broken()) {
                        std::rethrow_exception(failure(*f));
                    }
                }
                return false;
            }
        }
        return true;
    };
    if (all_taken(false)) {
        return true;
    }
    // The receivers are in the collective and copy soon: spin for --courier:collective_spin_us,
    // then sleep in growing steps (a receiver that comes late costs no core).
    courier::detail::worker* w = courier::detail::current_worker();
    courier::detail::scheduler_options const idle =
        w != nullptr ? w->sched.options() : courier::detail::scheduler_options{};
    auto const start = std::chrono::steady_clock::now();
    for (std::uint32_t spins = 1; std::chrono::steady_clock::now() - start < idle.collective_spin;
         ++spins) {
        if (all_taken(spins % 64 == 0)) {
            return true;
        }
        if (spins % 64 == 0) {
            courier::this_thread::yield();
        }
        if (idle.oversubscribed) {
            std::this_thread::yield(); // the receiver may need this core
        }
    }
    std::chrono::milliseconds limit = courier::detail::here().live.timeout;
    if (limit.count() == 0) { // no liveness checks: the default timeout
        limit = std::chrono::seconds(5);
    }
    std::chrono::microseconds nap{20};
    while (!all_taken(true)) {
        if (bounded && std::chrono::steady_clock::now() - start > limit) {
            return false;
        }
        courier::this_thread::sleep_for(nap);
        nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
    }
    return true;
}

bool ring_take(key const& k, std::uint64_t wire_id,
               courier::detail::function_ref<void(std::span<std::byte const>, std::int32_t)> load,
               bool* other) {
    courier::detail::collective_rings* r = rings();
    return r != nullptr &&
           r->take_head(k.source, [&](courier::detail::collective_rings::view const& v) {
               if (v.wire_id != wire_id || v.generation != k.generation || v.step != k.step) {
                   if (other != nullptr) {
                       *other = true;
                   }
                   return false;
               }
               load(v.payload, v.pid);
               return true;
           });
}

int ring_head_polls() noexcept {
    courier::detail::worker* w = courier::detail::current_worker();
    if (w == nullptr) {
        return 64;
    }
    auto const& o = w->sched.options();
    return o.oversubscribed || o.collective_spin.count() == 0 ? 1 : 64;
}

void ring_wait(std::uint32_t from, courier::detail::function_ref<bool()> ready,
               courier::detail::function_ref<void()> suspend) {
    courier::detail::collective_rings* r = rings();
    if (r == nullptr) {
        suspend();
        return;
    }
    r->unlink_when_mapped(); // also done by the liveness thread, which may not run
    // Spin for --courier:collective_spin_us, giving the core away between polls when the host
    // is oversubscribed (a thread that is no worker: the defaults).
    courier::detail::worker* w = courier::detail::current_worker();
    courier::detail::scheduler_options const idle =
        w != nullptr ? w->sched.options() : courier::detail::scheduler_options{};
    auto const deadline = std::chrono::steady_clock::now() + idle.collective_spin;
    for (std::uint32_t spins = 1;; ++spins) {
        drain_inbox(*r, from, false);
        if (ready()) {
            return;
        }
        // The message may come as a parcel instead (too large for a cell, a full ring): poll
        // the network as an idle worker would, not only every few tasks.
        if (w != nullptr && w->sched.has_hooks()) {
            w->sched.run_hooks();
            if (ready()) {
                return;
            }
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            break;
        }
        if (spins % 8 == 0) {
            courier::this_thread::yield(); // the worker's other tasks
            w = courier::detail::current_worker();
        }
        if (idle.oversubscribed) {
            std::this_thread::yield(); // the sender may need this core
        }
    }
    // Suspended: a sender that sees the count posts a nudge; what came before it is drained
    // here (collective_rings.hpp, "Waiting").
    r->wait_begin(from);
    struct end_wait {
        courier::detail::collective_rings& r;
        std::uint32_t from;
        ~end_wait() { r.wait_end(from); }
    } ending{*r, from};
    drain_inbox(*r, from);
    if (!ready()) {
        suspend();
    }
}

std::shared_ptr<slot_base> match(key const& k, bool arriving,
                                 courier::detail::function_ref<std::shared_ptr<slot_base>()> make) {
    auto& t = table();
    std::unique_lock lk(t.mutex);
    if (t.failed) {
        if (arriving) {
            return nullptr;
        }
        std::uint32_t rank = *t.failed;
        lk.unlock();
        std::shared_ptr<slot_base> fresh = make();
        fresh->fail(failure(rank));
        return fresh;
    }
    auto it = t.slots.find(k);
    if (it == t.slots.end()) {
        if (arriving && t.early >= max_early_messages) {
            lk.unlock();
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "dropped a collective message from locality {} (generation "
                                   "{}): {} messages already wait for their receive",
                                   k.source, k.generation, max_early_messages);
            return nullptr;
        }
        std::shared_ptr<slot_base> fresh = make();
        t.early += arriving ? 1 : 0;
        t.slots.emplace(k, fresh);
        return fresh;
    }
    if (it->second->arrived == arriving) {
        lk.unlock();
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "dropped a duplicate collective message from locality {} "
                               "(generation {}, round {})",
                               k.source, k.generation, k.step);
        if (!arriving) { // two receives of one message: a bug in an algorithm
            throw std::logic_error("courier: a collective message was received twice");
        }
        return nullptr;
    }
    std::shared_ptr<slot_base> s = std::move(it->second);
    t.early -= s->arrived ? 1 : 0;
    t.slots.erase(it);
    return s;
}

bool mailbox_holds_early() noexcept {
    return table().early.load(std::memory_order_acquire) != 0;
}

std::uint64_t next_generation() {
    auto& t = table();
    {
        std::lock_guard lk(t.mutex);
        if (t.failed) {
            std::rethrow_exception(failure(*t.failed));
        }
    }
    return t.generation.fetch_add(1, std::memory_order_relaxed);
}

id_type locality(std::uint32_t rank) {
    return courier::detail::locality_id(rank);
}

std::exception_ptr type_mismatch(key const& k, std::type_info const& expected,
                                 std::type_info const& got) {
    return std::make_exception_ptr(std::runtime_error(fmt::format(
        "courier: collective generation {} round {} from locality {}: expected a {}, got a {} "
        "(do all localities call the same collectives in the same order?)",
        k.generation, k.step, k.source, serialization::detail::demangle(expected.name()),
        serialization::detail::demangle(got.name()))));
}

} // namespace courier::collectives::detail

namespace courier::detail {

void deliver_from_inbox(std::uint32_t from, collective_rings::view const& v) {
    collectives::detail::load_into_mailbox(from, v);
}

void collectives_peer_failed(locality_state& st, std::uint32_t rank) {
    std::vector<std::shared_ptr<collectives::detail::slot_base>> waiting;
    {
        std::lock_guard lk(st.collectives.mutex);
        if (st.collectives.failed) {
            return;
        }
        st.collectives.failed = rank;
        for (auto& [k, s] : st.collectives.slots) {
            if (!s->arrived) {
                waiting.push_back(std::move(s));
            }
        }
        st.collectives.slots.clear();
        st.collectives.early = 0;
    }
    for (auto& s : waiting) {
        s->fail(collectives::detail::failure(rank));
    }
}

} // namespace courier::detail
