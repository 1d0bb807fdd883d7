// SPDX-License-Identifier: BSL-1.0
// A test-and-test-and-set spinlock for critical sections of a few instructions (waiter lists,
// a coalesced batch's next record).
// After a short spin it yields the OS thread, so a preempted holder on an oversubscribed machine
// (several localities on two cores) does not burn the other core.
#pragma once

#include <atomic>
#include <thread>

namespace courier::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

class spinlock {
public:
    void lock() noexcept {
        for (int spins = 0;; ++spins) {
            if (!locked_.exchange(true, std::memory_order_acquire)) {
                return;
            }
            while (locked_.load(std::memory_order_relaxed)) {
                if (++spins > 64) {
                    std::this_thread::yield();
                } else {
                    cpu_relax();
                }
            }
        }
    }
    bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> locked_{false};
};

} // namespace courier::detail
