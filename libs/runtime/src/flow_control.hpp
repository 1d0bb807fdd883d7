// SPDX-License-Identifier: BSL-1.0
// Flow control between each pair of localities: a window of parcels and bytes that a sender may
// have in flight to one destination, "in flight" meaning sent and not yet started as a task on
// the destination. It bounds both the sender's queues and the receiver's parcels admitted but
// not yet run, so that a flood of posts costs bounded memory on both sides.
//
// Credits. A request (async, post; not the runtime's control actions, not replies) takes one
// parcel and its bytes (message::total_size()) from its destination's window before it is sent;
// the receiver gives them back when the parcel's task starts, batched: a credit parcel once a
// quarter of the window (parcels or bytes) has started since the last one. A parcel that does
// not fit waits, suspending its Courier thread (an OS thread blocks), until credits come back.
// A parcel larger than the byte window's room is admitted while less than half of the byte
// window is in use, or while fewer parcels (of any size) are in flight than the transport's
// large_parcels_in_flight() (two; one over MPI), so any size gets through and parcels of more
// than half the window still travel two at a time where that pays; and a waiting sender always
// gets its credits back: while it waits, at least a quarter of its window is in use and will
// start. What is in flight goes over the window only by one parcel admitted while less than
// half was in use, or by parcels admitted while fewer than large_parcels_in_flight() were in
// flight (the count is taken when a parcel takes its slot: senders racing for one destination
// can each add one more). A transport may ask for a smaller byte window for its large parcels
// (large_parcel_window(): the MPI transport's 4 MiB for parcels of 256 KiB or more); they wait
// there only while a quarter of the pair's window is in use, so their credits still come back.
//
// Where waiting is impossible (inside the transport's progress, or on a worker's own stack
// between tasks) a parcel is sent over the window; such sends are counted.
//
// The window of a pair is min(parcels_in_flight, total_parcels_in_flight / (localities - 1))
// parcels and the same for bytes (at least 16 parcels and 64 KiB): every locality computes it
// alike from the same options, so a receiver's admitted parcels stay within the totals too.
#pragma once

#include <courier/runtime/detail/spinlock.hpp>
#include <courier/runtime/detail/waiter.hpp>

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace courier::detail {

struct config;
struct locality_state;

struct flow_state {
    std::int64_t window_parcels = 0; // 0: no flow control
    std::int64_t window_bytes = 0;
    /// Parcels of more than half the byte window that may be in flight to a destination at
    /// once (set by flow_configure from the transport; at least 1).
    std::int64_t large_in_flight = 1;
    /// The transport's large_parcel_window() where smaller than window_bytes (else 0): the
    /// byte window of parcels of a sixteenth of it or more.
    std::int64_t large_window = 0;
    /// Parcels and bytes in one word, so that taking or returning both is one locked
    /// instruction, not two (per parcel on each side; benchmarks/RESULTS.md, Per-parcel cost,
    /// counts them). Parcels in the top 24
    /// bits, bytes in the low 40: flow_window_from bounds the windows to fit (at most 2^22
    /// parcels and 2^38 bytes) and a parcel counts as at most 2^36 bytes (flow_control.cpp,
    /// flow_bytes()), so what is in flight stays far within both fields; every addition
    /// saturates each field rather than carry into the other.
    struct counts {
        static constexpr unsigned parcel_shift = 40;
        static constexpr std::uint64_t byte_mask = (std::uint64_t{1} << parcel_shift) - 1;
        static constexpr std::uint64_t parcel_max = (std::uint64_t{1} << (64 - parcel_shift)) - 1;
        std::atomic<std::uint64_t> word{0};

        static std::uint64_t pack(std::int64_t parcels, std::int64_t bytes) noexcept {
            return (static_cast<std::uint64_t>(parcels) << parcel_shift) |
                   (static_cast<std::uint64_t>(bytes) & byte_mask);
        }
        static std::int64_t parcels_of(std::uint64_t w) noexcept {
            return static_cast<std::int64_t>(w >> parcel_shift);
        }
        static std::int64_t bytes_of(std::uint64_t w) noexcept {
            return static_cast<std::int64_t>(w & byte_mask);
        }
        /// Parcels and bytes, read together (statistics, counters, tests).
        std::pair<std::int64_t, std::int64_t> load() const noexcept {
            std::uint64_t const w = word.load(std::memory_order_relaxed);
            return {parcels_of(w), bytes_of(w)};
        }
    };
    /// Parcels of fewer bytes than this are never large ones (large_window's sixteenth, at
    /// most 2^36: flow_bytes() leaves them as they are): flow_take_fitting() may take them.
    /// Set by flow_configure; 0: none.
    std::int64_t small_below = 0;
    std::vector<counts> out; // by destination: taken and not yet given back
    std::vector<counts> in;  // by source: started here and not yet given back
    spinlock guard;
    waiter_list waiters;
    std::atomic<std::uint64_t> waits{0};        // times a sender had to wait
    std::atomic<std::uint64_t> overdrafts{0};   // sends over the window (could not wait)
    std::atomic<std::uint64_t> credits_sent{0}; // credit parcels sent
    std::atomic<std::uint64_t> credits_received{0};
    std::atomic<std::uint64_t> excess_credits{0}; // credits for more than was in flight
    /// A credit could not be sent and is kept in `in` (by flow_started or a retry), its source
    /// marked in `kept_from`: a progress pass sends it (flow_send_kept_credits).
    std::atomic<bool> credits_kept{false};
    std::vector<std::atomic<bool>> kept_from;      // by source
    std::atomic<std::int64_t> next_retry_ns{0};    // after a retry that failed: 1 ms later
    std::atomic<std::uint64_t> credits_retried{0}; // kept credits a progress pass sent
};

/// The window of a pair (parcels, bytes; 0 parcels: no flow control) the options give in a
/// job of `localities`; throws config_error for bad values (init checks them in every run).
std::pair<std::int64_t, std::int64_t> flow_window_from(config const& cfg, std::uint32_t localities);
/// Sizes `f` for `localities` with flow_window_from().
/// `large_in_flight`: the transport's large_parcels_in_flight() (taken as at least 1);
/// `large_window`: its large_parcel_window() (0: none).
void flow_configure(flow_state& f, config const& cfg, std::uint32_t localities,
                    std::uint32_t large_in_flight, std::uint64_t large_window = 0);
/// Sizes `f` for `localities` with a window of `parcels` and `bytes` (in-process jobs), bounded
/// as flow_window_from bounds the options' (0 parcels or bytes: no flow control).
void flow_configure(flow_state& f, std::int64_t parcels, std::int64_t bytes,
                    std::uint32_t localities);

/// Takes a parcel of `bytes` from `dest`'s window, waiting while it does not fit. False (nothing
/// taken) if `dest` failed meanwhile.
bool flow_acquire(locality_state& st, std::uint32_t dest, std::int64_t bytes);
/// flow_acquire without the wait: false (nothing taken) where flow_acquire would wait.
bool flow_try_acquire(locality_state& st, std::uint32_t dest, std::int64_t bytes);
/// flow_try_acquire()'s common case, inline (a small post's path): takes a parcel of `bytes`
/// (fewer than f.small_below) from `dest`'s window if it fits as the window stands, with one
/// compare-exchange. False: nothing taken (no flow control, a large parcel, or one that does not
/// fit as it is); flow_try_acquire() then decides, as it would have alone.
inline bool flow_take_fitting(flow_state& f, std::uint32_t dest, std::int64_t bytes) noexcept {
    if (bytes < 0 || bytes >= f.small_below || dest >= f.out.size()) {
        return false;
    }
    using counts = flow_state::counts;
    auto& c = f.out[dest];
    std::uint64_t w = c.word.load(std::memory_order_relaxed);
    do {
        // Within the window, so neither field nears its largest value: a plain addition.
        if (counts::parcels_of(w) >= f.window_parcels ||
            counts::bytes_of(w) + bytes > f.window_bytes) {
            return false;
        }
    } while (
        !c.word.compare_exchange_weak(w, w + counts::pack(1, bytes), std::memory_order_acq_rel));
    return true;
}
/// Gives a taken parcel back without sending it (the send was refused).
void flow_release(locality_state& st, std::uint32_t dest, std::int64_t bytes);
/// `parcels` requests from `source` of `bytes` in all start running here: their credit goes
/// back (batched). `bytes` counts at most 2^36, as flow_acquire counts one parcel: several at
/// once are small ones (a request_batch's).
/// A credit that cannot be sent (no memory, the transport refusing it) is logged and kept:
/// it goes with the next request from `source` that starts here, or at the next progress pass
/// (flow_send_kept_credits), whichever comes first: a sender that waits for it has nothing
/// more to send that would start a request here.
void flow_started(locality_state& st, std::uint32_t source, std::int64_t bytes,
                  std::int64_t parcels = 1) noexcept;
/// Sends the credits that could not be sent before (flow_state::credits_kept): every progress
/// hook calls it (a relaxed load per pass while there are none). What cannot be sent again
/// stays kept and is tried again 1 ms later; credits to a peer that failed or said goodbye
/// are dropped.
void flow_send_kept_credits(locality_state& st) noexcept;
/// A credit of `parcels` and `bytes` to `source` was not sent, or was lost after it was (a
/// failed counted send): kept, to go again as flow_started's kept credits do.
void flow_keep_credit(locality_state& st, std::uint32_t source, std::int64_t parcels,
                      std::int64_t bytes) noexcept;
/// A credit parcel from `dest` gave back `parcels` and `bytes`.
void flow_credit(locality_state& st, std::uint32_t dest, std::int64_t parcels, std::int64_t bytes);
/// `rank` failed: its window is void; senders waiting on it wake up.
void flow_peer_failed(locality_state& st, std::uint32_t rank);

/// Marks the calling thread as inside the transport's progress (where no send may wait).
class progress_scope {
public:
    progress_scope() noexcept;
    ~progress_scope();
    progress_scope(progress_scope const&) = delete;
    progress_scope& operator=(progress_scope const&) = delete;
};

} // namespace courier::detail
