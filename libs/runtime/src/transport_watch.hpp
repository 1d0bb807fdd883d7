// SPDX-License-Identifier: BSL-1.0
// Which threads are inside a transport call, and since when.
//
// A transport call can block for good. libfabric's shm provider (1.17) takes a spin lock in
// the receiving process's shared memory: a process that ends while one of its threads holds
// it (std::exit, a kill, SIGSTOP) leaves every sender to that receiver spinning for ever. Two
// things follow, and this registry serves both:
// - a locality that ends on purpose (exit() during a run, ending after a peer failed) first
//   lets its threads leave their transport calls, and lets none enter a new one (close());
// - the liveness watchdog notices a thread stuck inside a call (stuck_for()) and ends the
//   locality instead of letting it hang.
// Entering a call costs a call to read a thread-local (own_slot), three relaxed loads and two
// stores to the thread's own cache line; leaving it, one store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace courier::detail::transport_watch {

struct alignas(64) slot {
    /// The epoch at which this thread entered its current (outermost) transport call; 0: not
    /// inside one.
    std::atomic<std::uint32_t> since{0};
    /// Whether that call is a progress pass (which receives: while one lasts, what peers send
    /// this locality waits), not a send.
    std::atomic<bool> progress{false};
    bool used = false; // owned by a live thread (the registry's mutex guards it)
};

/// Advanced by advance() (the liveness watchdog, every `period`); never 0.
extern std::atomic<std::uint32_t> g_epoch;
/// Set by close(): a thread about to enter the transport parks instead.
extern std::atomic<bool> g_closing;
extern constinit thread_local slot* t_slot;
/// t_slot, read through an opaque call: a Courier thread may resume on another OS thread, so
/// the address of a thread_local must not be kept across a suspension (as scheduler.cpp's),
/// and `call` is inlined into functions that suspend.
[[gnu::noinline]] slot* own_slot() noexcept;

inline constexpr std::chrono::milliseconds period{100};

slot* register_thread();
[[noreturn]] void park(slot& s);
/// Blocks the calling thread until the process ends (which another thread is doing).
[[noreturn]] void sleep_for_good();

enum class kind : bool { send, progress };

/// Marks the calling thread inside the transport for its lifetime (nested calls count once,
/// as the outermost one's kind).
class call {
public:
    [[gnu::always_inline]] explicit call(kind k = kind::send) noexcept {
        slot* s = own_slot();
        if (s == nullptr) [[unlikely]] {
            s = register_thread();
        }
        if (s->since.load(std::memory_order_relaxed) != 0) {
            return; // nested: a handler run by progress sends
        }
        s->progress.store(k == kind::progress, std::memory_order_relaxed);
        s->since.store(g_epoch.load(std::memory_order_relaxed), std::memory_order_release);
        std::atomic_signal_fence(std::memory_order_seq_cst); // the store before the load (close)
        if (g_closing.load(std::memory_order_relaxed)) [[unlikely]] {
            park(*s);
        }
        slot_ = s;
    }
    [[gnu::always_inline]] ~call() {
        if (slot_ != nullptr) {
            slot_->since.store(0, std::memory_order_release);
        }
    }
    call(call const&) = delete;
    call& operator=(call const&) = delete;

private:
    slot* slot_ = nullptr;
};

/// One period has passed.
void advance() noexcept;
/// How long the thread that has been inside a transport call the longest has been there
/// (within a period; zero if none is inside).
std::chrono::milliseconds stuck_for() noexcept;
/// The same, of progress passes only: how long this locality has not been receiving, at least.
std::chrono::milliseconds progress_stuck_for() noexcept;
/// Before the process ends on purpose: no thread enters a transport call from now on, and
/// every other thread inside one gets up to `wait` to leave it. Returns whether they all did.
bool close(std::chrono::milliseconds wait) noexcept;
/// How many slots exist (threads that ever entered a call, less those whose slot was reused).
std::size_t slot_count() noexcept;
/// For tests that run several close() in one process: calls may be entered again (threads
/// parked by an earlier close stay parked).
void reopen() noexcept;

} // namespace courier::detail::transport_watch
