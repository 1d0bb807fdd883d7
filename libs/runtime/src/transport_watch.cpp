// SPDX-License-Identifier: BSL-1.0
// Which threads are inside a transport call, and since when (transport_watch.hpp).
#include "transport_watch.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <thread>

namespace courier::detail::transport_watch {

std::atomic<std::uint32_t> g_epoch{1};
std::atomic<bool> g_closing{false};
constinit thread_local slot* t_slot = nullptr;

slot* own_slot() noexcept {
    asm volatile("" ::: "memory"); // nor treated as pure (two calls merged into one)
    return t_slot;
}

namespace {

// Never destroyed: threads may end (and give their slot back) during static destruction.
struct registry {
    std::mutex mutex;
    std::deque<slot> slots; // stable addresses; a slot is reused once its thread has ended
};
registry& the_registry() {
    static auto* r = new registry;
    return *r;
}

// Gives the thread's slot back when it ends.
struct releaser {
    ~releaser() {
        if (slot* s = t_slot) {
            std::lock_guard lk(the_registry().mutex);
            s->since.store(0, std::memory_order_relaxed);
            s->used = false;
            t_slot = nullptr;
        }
    }
};
thread_local releaser t_releaser;

} // namespace

slot* register_thread() {
    (void)&t_releaser; // constructed on this first use: its destructor runs at thread exit
    registry& r = the_registry();
    std::lock_guard lk(r.mutex);
    slot* found = nullptr;
    for (auto& s : r.slots) {
        if (!s.used) {
            found = &s;
            break;
        }
    }
    if (found == nullptr) {
        found = &r.slots.emplace_back();
    }
    found->used = true;
    t_slot = found;
    return found;
}

void park(slot& s) {
    s.since.store(0, std::memory_order_release);
    sleep_for_good();
}

void sleep_for_good() {
    for (;;) {
        std::this_thread::sleep_for(std::chrono::hours(1)); // the process ends meanwhile
    }
}

std::size_t slot_count() noexcept {
    registry& r = the_registry();
    std::lock_guard lk(r.mutex);
    return r.slots.size();
}

void reopen() noexcept {
    g_closing.store(false, std::memory_order_seq_cst);
}

void advance() noexcept {
    g_epoch.fetch_add(1, std::memory_order_relaxed);
}

namespace {

std::chrono::milliseconds longest_call(bool progress_only) noexcept {
    std::uint32_t const now = g_epoch.load(std::memory_order_relaxed);
    std::uint32_t longest = 0;
    registry& r = the_registry();
    std::lock_guard lk(r.mutex);
    for (auto& s : r.slots) {
        std::uint32_t since = s.since.load(std::memory_order_acquire);
        // `since` is stored with release after the flag: the flag read here is that call's or
        // a newer one's (the thread left and entered again meanwhile), a misjudgement of one
        // look that the next corrects.
        bool counted = !progress_only || s.progress.load(std::memory_order_relaxed);
        if (since != 0 && counted && now - since > longest) {
            longest = now - since;
        }
    }
    return longest * period;
}

} // namespace

std::chrono::milliseconds stuck_for() noexcept {
    return longest_call(false);
}

std::chrono::milliseconds progress_stuck_for() noexcept {
    return longest_call(true);
}

bool close(std::chrono::milliseconds wait) noexcept {
    g_closing.store(true, std::memory_order_seq_cst);
    // A thread that read g_closing as false just now may still hold its `since` store in its
    // store buffer. membarrier(GLOBAL) makes every running thread (of every process) pass a
    // full barrier before it returns, so every such store is seen below (call() has a compiler
    // barrier between its store and its load): the asymmetric fence of userspace RCU. It needs
    // no registration and costs an RCU grace period (milliseconds), once, at the end. Where it
    // is refused (nohz_full kernels, seccomp, before Linux 4.3), a millisecond drains any store
    // buffer in practice, which is no guarantee of the memory model.
    if (::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    slot const* mine = t_slot;
    auto const until = std::chrono::steady_clock::now() + wait;
    registry& r = the_registry();
    for (;;) {
        bool inside = false;
        {
            std::lock_guard lk(r.mutex);
            for (auto& s : r.slots) {
                inside |= &s != mine && s.since.load(std::memory_order_acquire) != 0;
            }
        }
        if (!inside) {
            return true;
        }
        if (std::chrono::steady_clock::now() >= until) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

} // namespace courier::detail::transport_watch
