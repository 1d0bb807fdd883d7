// SPDX-License-Identifier: BSL-1.0
// Flow control between pairs of localities (flow_control.hpp).
#include "flow_control.hpp"

#include "locality_state.hpp"
#include "log.hpp"
#include "options.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <tuple>

namespace courier::detail {

namespace {

thread_local int tl_progress_depth = 0;

// Opaque (noinline): a Courier thread may resume on another OS thread, so the address of a
// thread_local must not be kept across a suspension.
[[gnu::noinline]] int& progress_depth() noexcept {
    return tl_progress_depth;
}

/// Whether the calling thread may wait for credits: a Courier thread, or an OS thread of the
/// program's own; not the transport's progress, nor a worker outside its Courier threads.
bool may_wait() noexcept {
    if (progress_depth() != 0) {
        return false;
    }
    return current_fiber() != nullptr || current_worker() == nullptr;
}

bool try_take(flow_state& f, flow_state::counts& c, std::int64_t bytes) noexcept {
    std::int64_t p = c.parcels.load(std::memory_order_relaxed);
    do {
        if (p >= f.window_parcels) {
            return false;
        }
    } while (!c.parcels.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel));
    // `p` is what was in flight before this parcel.
    std::int64_t b = c.bytes.load(std::memory_order_relaxed);
    do {
        // Fits; or less than half the window is in use (so a parcel of any size gets through);
        // or fewer parcels are in flight than large_in_flight, so that parcels of more than
        // half the window travel two at a time: one at a time, the receiver waited for each
        // next one (its credit back, then its header) after landing the last.
        if (b + bytes > f.window_bytes && b >= f.window_bytes / 2 && p >= f.large_in_flight) {
            c.parcels.fetch_sub(1, std::memory_order_acq_rel);
            return false;
        }
    } while (!c.bytes.compare_exchange_weak(b, b + bytes, std::memory_order_acq_rel));
    return true;
}

void wake_waiters(flow_state& f) noexcept {
    f.guard.lock();
    waiter* chain = f.waiters.take_all();
    f.guard.unlock();
    waiter_list::notify_chain(chain);
}

} // namespace

progress_scope::progress_scope() noexcept {
    ++progress_depth();
}
progress_scope::~progress_scope() {
    --progress_depth();
}

std::pair<std::int64_t, std::int64_t> flow_window_from(config const& cfg,
                                                       std::uint32_t localities) {
    constexpr long long max = 1LL << 40;
    auto parcels = cfg.get_int("parcels_in_flight", 0, max);
    auto bytes = cfg.get_bytes("bytes_in_flight", 0, max);
    auto total_parcels = cfg.get_int("total_parcels_in_flight", 0, max);
    auto total_bytes = cfg.get_bytes("total_bytes_in_flight", 0, max);
    if (parcels == 0 || bytes == 0) {
        return {0, 0};
    }
    long long peers = std::max<long long>(1, static_cast<long long>(localities) - 1);
    if (total_parcels != 0) {
        parcels = std::min(parcels, std::max(16LL, total_parcels / peers));
    }
    if (total_bytes != 0) {
        bytes = std::min(bytes, std::max(65536LL, total_bytes / peers));
    }
    return {parcels, bytes};
}

void flow_configure(flow_state& f, config const& cfg, std::uint32_t localities,
                    std::uint32_t large_in_flight) {
    std::tie(f.window_parcels, f.window_bytes) = flow_window_from(cfg, localities);
    f.large_in_flight = std::max<std::int64_t>(1, large_in_flight);
    f.out = std::vector<flow_state::counts>(localities);
    f.in = std::vector<flow_state::counts>(localities);
}

bool flow_acquire(locality_state& st, std::uint32_t dest, std::int64_t bytes) {
    flow_state& f = st.flow;
    if (f.window_parcels == 0 || dest >= f.out.size()) {
        return true;
    }
    auto& c = f.out[dest];
    if (try_take(f, c, bytes)) {
        return true;
    }
    if (!may_wait()) {
        c.parcels.fetch_add(1, std::memory_order_acq_rel);
        c.bytes.fetch_add(bytes, std::memory_order_acq_rel);
        f.overdrafts.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    f.waits.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
        if (has_failed(st, dest)) {
            return false;
        }
        parked_waiter w;
        f.guard.lock();
        // Under the guard: credits that come after this check find this waiter queued.
        if (try_take(f, c, bytes)) {
            f.guard.unlock();
            return true;
        }
        if (has_failed(st, dest)) {
            f.guard.unlock();
            return false;
        }
        f.waiters.push(&w);
        w.park(f.guard);
    }
}

void flow_release(locality_state& st, std::uint32_t dest, std::int64_t bytes) {
    flow_credit(st, dest, 1, bytes);
}

void flow_started(locality_state& st, std::uint32_t source, std::int64_t bytes) {
    flow_state& f = st.flow;
    if (f.window_parcels == 0 || source >= f.in.size() || source == st.rank) {
        return;
    }
    auto& c = f.in[source];
    auto p = c.parcels.fetch_add(1, std::memory_order_acq_rel) + 1;
    auto b = c.bytes.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
    if (p < f.window_parcels / 4 && b < f.window_bytes / 4) {
        return;
    }
    p = c.parcels.exchange(0, std::memory_order_acq_rel);
    b = c.bytes.exchange(0, std::memory_order_acq_rel);
    if ((p == 0 && b == 0) || has_failed(st, source)) {
        return; // another task's flush took them
    }
    f.credits_sent.fetch_add(1, std::memory_order_relaxed);
    send_credit(source, p, b);
}

namespace {
/// Takes `n` from `c`, never below 0: credits for more than was taken (a confused or forged
/// peer) must not let this side send past its window. Returns the excess.
std::int64_t give_back(std::atomic<std::int64_t>& c, std::int64_t n) noexcept {
    std::int64_t v = c.load(std::memory_order_relaxed);
    while (!c.compare_exchange_weak(v, v - std::min(v, n), std::memory_order_acq_rel)) {
    }
    return n - std::min(v, n);
}
} // namespace

void flow_credit(locality_state& st, std::uint32_t dest, std::int64_t parcels, std::int64_t bytes) {
    flow_state& f = st.flow;
    if (f.window_parcels == 0 || dest >= f.out.size()) {
        return;
    }
    if (parcels < 0 || bytes < 0) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "dropped a credit from locality {} for {} parcels and {} bytes",
                               dest, parcels, bytes);
        return;
    }
    auto extra_parcels = give_back(f.out[dest].parcels, parcels);
    auto extra_bytes = give_back(f.out[dest].bytes, bytes);
    if (extra_parcels != 0 || extra_bytes != 0) {
        f.excess_credits.fetch_add(1, std::memory_order_relaxed);
    }
    wake_waiters(f);
}

void flow_peer_failed(locality_state& st, std::uint32_t rank) {
    flow_state& f = st.flow;
    if (rank < f.out.size()) {
        f.out[rank].parcels.store(0, std::memory_order_release);
        f.out[rank].bytes.store(0, std::memory_order_release);
    }
    wake_waiters(f);
}

} // namespace courier::detail
