// SPDX-License-Identifier: BSL-1.0
// The scheduler's progress hooks: functions the workers call to make progress (the network's
// poll), with a file descriptor to sleep on and a check whether sleeping is allowed now.
// Registration takes a spinlock. A worker marks itself inside the hooks for a whole pass
// (worker::in_hooks: one store with a full barrier and one plain store per pass), any other
// thread counts a hook as running around its call (two atomic additions per hook), so that
// unregistering waits until nobody is inside it.
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
            hook_count_.fetch_add(1, std::memory_order_acq_rel);
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
    if (!h.active.exchange(false, std::memory_order_acq_rel)) {
        return;
    }
    while (h.running.load(std::memory_order_acquire) != 0) {
        std::this_thread::yield();
    }
    // Every worker that may have seen it active leaves its pass (not the calling one: it
    // called from outside the hooks, or from within one, which is its own business).
    worker const* self = current_worker();
    for (auto const& w : workers_) {
        while (w.get() != self && w->in_hooks.load(std::memory_order_seq_cst) != 0) {
            std::this_thread::yield();
        }
    }
    h.poll = nullptr;
    h.can_sleep = nullptr;
    h.fd.store(-1, std::memory_order_release);
    hook_count_.fetch_sub(1, std::memory_order_acq_rel);
}

namespace {
/// Marks the calling worker (of `s`) inside the hooks for its lifetime, else (another thread, or
/// a nested call) nothing. The mark is set with a full barrier: unregister_hook clears a hook's
/// `active`, then reads the marks, so either this worker sees it cleared or it is waited for.
class hooks_pass {
public:
    explicit hooks_pass(scheduler& s) noexcept : w_(current_worker()) {
        if (w_ != nullptr && &w_->sched == &s &&
            w_->in_hooks.load(std::memory_order_relaxed) == 0) {
            w_->in_hooks.store(1, std::memory_order_seq_cst);
        } else {
            w_ = nullptr;
        }
    }
    ~hooks_pass() {
        if (w_ != nullptr) {
            w_->in_hooks.store(0, std::memory_order_release);
        }
    }
    hooks_pass(hooks_pass const&) = delete;
    hooks_pass& operator=(hooks_pass const&) = delete;
    /// Whether the mark covers the calling thread (else each hook is counted as running).
    bool marked() const noexcept { return w_ != nullptr; }

private:
    worker* w_;
};

/// Counts a hook as running around a call from a thread the pass does not mark.
class hook_call {
public:
    hook_call(progress_hook& h, bool marked) noexcept : h_(marked ? nullptr : &h) {
        if (h_ != nullptr) {
            h_->running.fetch_add(1, std::memory_order_acq_rel);
        }
    }
    ~hook_call() {
        if (h_ != nullptr) {
            h_->running.fetch_sub(1, std::memory_order_acq_rel);
        }
    }
    hook_call(hook_call const&) = delete;
    hook_call& operator=(hook_call const&) = delete;

private:
    progress_hook* h_;
};
} // namespace

bool scheduler::hooks_allow_sleep() {
    hooks_pass pass(*this);
    bool ok = true;
    for (auto& h : hooks_) {
        if (!ok || !h.active.load(std::memory_order_acquire)) {
            continue;
        }
        hook_call call(h, pass.marked());
        if (h.active.load(std::memory_order_seq_cst) && h.can_sleep) {
            ok = h.can_sleep();
        }
    }
    return ok;
}

bool scheduler::run_hooks() {
    hooks_pass pass(*this);
    bool work = false;
    for (auto& h : hooks_) {
        if (!h.active.load(std::memory_order_acquire)) {
            continue;
        }
        hook_call call(h, pass.marked());
        if (h.active.load(std::memory_order_seq_cst)) {
            try {
                work |= h.poll();
            } catch (std::exception const& e) {
                log(log_level::error, "progress hook threw: {}", e.what());
            }
        }
    }
    return work;
}

} // namespace courier::detail
