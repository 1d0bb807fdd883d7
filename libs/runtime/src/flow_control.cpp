// SPDX-License-Identifier: BSL-1.0
// Flow control between pairs of localities (flow_control.hpp).
#include "flow_control.hpp"

#include "locality_state.hpp"
#include "log.hpp"
#include "options.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <tuple>

namespace courier::detail {

namespace {

thread_local int tl_progress_depth = 0;

// Opaque (noinline): a Courier thread may resume on another OS thread, so the address of a
// thread_local must not be kept across a suspension.
[[gnu::noinline]] int& progress_depth() noexcept {
    asm volatile("" ::: "memory"); // nor treated as pure (two calls merged into one)
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

using counts = flow_state::counts;

/// What a parcel of `bytes` counts as: at most 2^36 (64 GiB; larger ones are over any window
/// anyway), the same on both sides, so that credits return what was taken.
std::int64_t flow_bytes(std::int64_t bytes) noexcept {
    return std::clamp<std::int64_t>(bytes, 0, std::int64_t{1} << 36);
}

/// `w` plus `parcels` and `bytes`, each field saturated at its largest value.
std::uint64_t saturating_add(std::uint64_t w, std::int64_t parcels, std::int64_t bytes) noexcept {
    auto const p = std::min<std::uint64_t>(static_cast<std::uint64_t>(counts::parcels_of(w)) +
                                               static_cast<std::uint64_t>(parcels),
                                           counts::parcel_max);
    auto const b = std::min<std::uint64_t>(static_cast<std::uint64_t>(counts::bytes_of(w)) +
                                               static_cast<std::uint64_t>(bytes),
                                           counts::byte_mask);
    return counts::pack(static_cast<std::int64_t>(p), static_cast<std::int64_t>(b));
}

/// Adds `parcels` and `bytes` to `c` (saturating); returns the new word. One compare-exchange
/// when uncontended: one locked instruction.
std::uint64_t add(counts& c, std::int64_t parcels, std::int64_t bytes) noexcept {
    std::uint64_t w = c.word.load(std::memory_order_relaxed);
    std::uint64_t next = 0;
    do {
        next = saturating_add(w, parcels, bytes);
    } while (!c.word.compare_exchange_weak(w, next, std::memory_order_acq_rel));
    return next;
}

/// flow_state::small_below of `f`'s windows: parcels try_take() never treats as large, and
/// that flow_bytes() leaves as they are (0 without flow control).
std::int64_t small_below(flow_state const& f) noexcept {
    if (f.window_parcels == 0) {
        return 0;
    }
    std::int64_t const large = f.large_window != 0 ? f.large_window / 16 : f.window_bytes + 1;
    return std::min(large, std::int64_t{1} << 36);
}

bool try_take(flow_state& f, counts& c, std::int64_t bytes) noexcept {
    std::int64_t window = f.window_bytes;
    std::int64_t half = window / 2;
    if (f.large_window != 0 && bytes >= f.large_window / 16) {
        // A large parcel within the transport's window for them. It waits only while a quarter
        // of the pair's window is in use too: the receiver credits a quarter at a time, so
        // what is in flight then brings the credit it waits for.
        window = f.large_window;
        half = std::max(window / 2, f.window_bytes / 4);
    }
    std::uint64_t w = c.word.load(std::memory_order_relaxed);
    do {
        std::int64_t const p = counts::parcels_of(w); // in flight before this parcel
        std::int64_t const b = counts::bytes_of(w);
        if (p >= f.window_parcels) {
            return false;
        }
        // Fits; or less than half the window is in use (so a parcel of any size gets through);
        // or fewer parcels are in flight than large_in_flight, so that parcels of more than
        // half the window travel two at a time: one at a time, the receiver waited for each
        // next one (its credit back, then its header) after landing the last.
        if (b + bytes > window && b >= half && p >= f.large_in_flight) {
            return false;
        }
    } while (
        !c.word.compare_exchange_weak(w, saturating_add(w, 1, bytes), std::memory_order_acq_rel));
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
    // Within flow_state::counts' fields, with room above the window for what may go past it.
    parcels = std::min(parcels, 1LL << 22);
    bytes = std::min(bytes, 1LL << 38);
    long long peers = std::max<long long>(1, static_cast<long long>(localities) - 1);
    if (total_parcels != 0) {
        parcels = std::min(parcels, std::max(16LL, total_parcels / peers));
    }
    if (total_bytes != 0) {
        bytes = std::min(bytes, std::max(65536LL, total_bytes / peers));
    }
    return {parcels, bytes};
}

void flow_configure(flow_state& f, std::int64_t parcels, std::int64_t bytes,
                    std::uint32_t localities) {
    bool const on = parcels > 0 && bytes > 0;
    // Within flow_state::counts' fields, as flow_window_from bounds them.
    f.window_parcels = on ? std::min(parcels, std::int64_t{1} << 22) : 0;
    f.window_bytes = on ? std::min(bytes, std::int64_t{1} << 38) : 0;
    f.small_below = small_below(f);
    f.out = std::vector<flow_state::counts>(localities);
    f.in = std::vector<flow_state::counts>(localities);
    f.kept_from = std::vector<std::atomic<bool>>(localities);
}

void flow_configure(flow_state& f, config const& cfg, std::uint32_t localities,
                    std::uint32_t large_in_flight, std::uint64_t large_window) {
    std::tie(f.window_parcels, f.window_bytes) = flow_window_from(cfg, localities);
    f.large_in_flight = std::max<std::int64_t>(1, large_in_flight);
    f.large_window = large_window != 0 && large_window < static_cast<std::uint64_t>(f.window_bytes)
                         ? static_cast<std::int64_t>(large_window)
                         : 0;
    f.small_below = small_below(f);
    f.out = std::vector<flow_state::counts>(localities);
    f.in = std::vector<flow_state::counts>(localities);
    f.kept_from = std::vector<std::atomic<bool>>(localities);
}

bool flow_try_acquire(locality_state& st, std::uint32_t dest, std::int64_t bytes) {
    flow_state& f = st.flow;
    if (f.window_parcels == 0 || dest >= f.out.size()) {
        return true;
    }
    bytes = flow_bytes(bytes);
    auto& c = f.out[dest];
    if (try_take(f, c, bytes)) {
        return true;
    }
    if (!may_wait()) {
        add(c, 1, bytes); // an overdraft
        f.overdrafts.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    return false;
}

bool flow_acquire(locality_state& st, std::uint32_t dest, std::int64_t bytes) {
    if (flow_try_acquire(st, dest, bytes)) {
        return true;
    }
    flow_state& f = st.flow;
    bytes = flow_bytes(bytes);
    auto& c = f.out[dest];
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
    flow_credit(st, dest, 1, flow_bytes(bytes));
}

namespace {
/// Sends a credit of `parcels` and `bytes` taken from `source`'s count; if it cannot go (no
/// memory, the transport refusing it), gives them back to the count and marks them kept for
/// the next progress pass. True if sent.
bool send_or_keep_credit(locality_state& st, std::uint32_t source, std::int64_t parcels,
                         std::int64_t bytes) noexcept {
    try {
        send_credit(source, parcels, bytes);
        return true;
    } catch (...) {
        flow_keep_credit(st, source, parcels, bytes);
        return false;
    }
}
} // namespace

void flow_keep_credit(locality_state& st, std::uint32_t source, std::int64_t parcels,
                      std::int64_t bytes) noexcept {
    if (source >= st.flow.in.size()) {
        return;
    }
    add(st.flow.in[source], parcels, bytes);
    // The source first: a pass that takes the flag then finds it marked.
    st.flow.kept_from[source].store(true, std::memory_order_release);
    st.flow.credits_kept.store(true, std::memory_order_release);
    static logging::rate_limit limit;
    logging::error_limited(limit,
                           "could not send a flow-control credit to locality {} (kept for the "
                           "next progress pass)",
                           source);
}

void flow_started(locality_state& st, std::uint32_t source, std::int64_t bytes,
                  std::int64_t parcels) noexcept {
    flow_state& f = st.flow;
    if (f.window_parcels == 0 || source >= f.in.size() || source == st.rank || parcels <= 0) {
        return;
    }
    auto& c = f.in[source];
    std::uint64_t const w = add(c, parcels, flow_bytes(bytes));
    if (counts::parcels_of(w) < f.window_parcels / 4 && counts::bytes_of(w) < f.window_bytes / 4) {
        return;
    }
    std::uint64_t const taken = c.word.exchange(0, std::memory_order_acq_rel);
    std::int64_t const p = counts::parcels_of(taken);
    std::int64_t const b = counts::bytes_of(taken);
    if ((p == 0 && b == 0) || has_failed(st, source)) {
        return; // another task's flush took them
    }
    if (send_or_keep_credit(st, source, p, b)) {
        f.credits_sent.fetch_add(1, std::memory_order_relaxed);
    }
}

void flow_send_kept_credits(locality_state& st) noexcept {
    flow_state& f = st.flow;
    if (!f.credits_kept.load(std::memory_order_relaxed)) {
        return;
    }
    // A transport that keeps refusing is asked again each millisecond, not on every pass (a
    // message built and an exception thrown each time).
    std::int64_t const now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    if (now < f.next_retry_ns.load(std::memory_order_relaxed) ||
        !f.credits_kept.exchange(false, std::memory_order_acq_rel)) {
        return; // not yet, or another pass took them
    }
    bool failed = false;
    for (std::uint32_t r = 0; r < f.in.size(); ++r) {
        if (!f.kept_from[r].exchange(false, std::memory_order_acq_rel)) {
            continue; // its count waits for its quarter of the window, as usual
        }
        std::uint64_t const taken = f.in[r].word.exchange(0, std::memory_order_acq_rel);
        std::int64_t const p = counts::parcels_of(taken);
        std::int64_t const b = counts::bytes_of(taken);
        bool const departed =
            r < st.live.departed.size() && st.live.departed[r].load(std::memory_order_relaxed);
        if ((p == 0 && b == 0) || has_failed(st, r) || departed) {
            continue; // taken with a later credit, or nobody to give it to
        }
        if (send_or_keep_credit(st, r, p, b)) {
            f.credits_sent.fetch_add(1, std::memory_order_relaxed);
            f.credits_retried.fetch_add(1, std::memory_order_relaxed);
        } else {
            failed = true;
        }
    }
    if (failed) {
        f.next_retry_ns.store(now + 1'000'000, std::memory_order_relaxed);
    }
}

namespace {
/// Takes `parcels` and `bytes` from `c`, each never below 0: credits for more than was taken (a
/// confused or forged peer) must not let this side send past its window. True if they were
/// more than was taken.
bool give_back(counts& c, std::int64_t parcels, std::int64_t bytes) noexcept {
    std::uint64_t w = c.word.load(std::memory_order_relaxed);
    std::int64_t p = 0, b = 0;
    do {
        p = counts::parcels_of(w);
        b = counts::bytes_of(w);
    } while (!c.word.compare_exchange_weak(
        w, counts::pack(p - std::min(p, parcels), b - std::min(b, bytes)),
        std::memory_order_acq_rel));
    return parcels > p || bytes > b;
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
    if (give_back(f.out[dest], parcels, bytes)) {
        f.excess_credits.fetch_add(1, std::memory_order_relaxed);
    }
    wake_waiters(f);
}

void flow_peer_failed(locality_state& st, std::uint32_t rank) {
    flow_state& f = st.flow;
    if (rank < f.out.size()) {
        f.out[rank].word.store(0, std::memory_order_release);
    }
    wake_waiters(f);
}

} // namespace courier::detail
