// SPDX-License-Identifier: BSL-1.0
// The scheduler's progress hooks: functions the workers call to make progress (the network's
// poll), with a file descriptor to sleep on and a check whether sleeping is allowed now.
// Registration takes a spinlock; running a hook counts it as running, so that unregistering
// waits until no worker is inside it.
#include "log.hpp"
#include "scheduler.hpp"

#include <stdexcept>
#include <thread>

namespace courier::detail {

std::size_t scheduler::register_hook(std::function<bool()> poll, int fd,
                                     std::function<bool()> can_sleep,
                                     parcelport::wait_coverage coverage) {
    std::lock_guard g(hooks_lock_);
    for (std::size_t i = 0; i < max_hooks; ++i) {
        auto& h = hooks_[i];
        if (!h.active.load(std::memory_order_acquire) &&
            h.running.load(std::memory_order_acquire) == 0) {
            h.poll = std::move(poll);
            h.can_sleep = std::move(can_sleep);
            h.fd.store(fd, std::memory_order_release);
            h.fd_coverage.store(coverage, std::memory_order_release);
            h.active.store(true, std::memory_order_release);
            if (hook_end_.load(std::memory_order_relaxed) < i + 1) {
                hook_end_.store(i + 1, std::memory_order_release);
            }
            notify_one();
            return i;
        }
    }
    throw std::length_error("courier: too many progress hooks");
}

void scheduler::unregister_hook(std::size_t id) {
    if (id >= max_hooks) {
        return;
    }
    std::lock_guard g(hooks_lock_);
    auto& h = hooks_[id];
    if (!h.active.exchange(false, std::memory_order_seq_cst)) {
        return;
    }
    while (h.running.load(std::memory_order_seq_cst) != 0) { // each_running_hook says why
        std::this_thread::yield();
    }
    h.poll = nullptr;
    h.can_sleep = nullptr;
    h.fd.store(-1, std::memory_order_release);
    // A pass that read the old end scans a few inactive slots more: harmless.
    std::size_t end = 0;
    for (std::size_t i = 0; i < max_hooks; ++i) {
        if (hooks_[i].active.load(std::memory_order_acquire)) {
            end = i + 1;
        }
    }
    hook_end_.store(end, std::memory_order_release);
}

namespace {
/// Calls `f(h)` for each active hook among the first `end`, counted as running meanwhile, until
/// `f` returns false. The count's increment and the second look at `active` are sequentially
/// consistent, as unregister_hook's clearing of `active` and its read of the count: either
/// this pass sees the hook cleared, or unregister_hook sees it running and waits.
template <class F>
void each_running_hook(progress_hook* hooks, std::size_t end, F&& f) {
    for (std::size_t i = 0; i < end; ++i) {
        auto& h = hooks[i];
        if (!h.active.load(std::memory_order_acquire)) {
            continue;
        }
        h.running.fetch_add(1, std::memory_order_seq_cst);
        bool const go_on = !h.active.load(std::memory_order_seq_cst) || f(h);
        h.running.fetch_sub(1, std::memory_order_release);
        if (!go_on) {
            return;
        }
    }
}
} // namespace

bool scheduler::hooks_allow_sleep() {
    bool ok = true;
    each_running_hook(hooks_, hook_end_.load(std::memory_order_acquire), [&](progress_hook& h) {
        ok = !h.can_sleep || h.can_sleep();
        return ok;
    });
    return ok;
}

bool scheduler::run_hooks() {
    bool work = false;
    each_running_hook(hooks_, hook_end_.load(std::memory_order_acquire), [&](progress_hook& h) {
        try {
            work |= h.poll();
        } catch (std::exception const& e) {
            log(log_level::error, "progress hook threw: {}", e.what());
        }
        return true;
    });
    return work;
}

} // namespace courier::detail
