// SPDX-License-Identifier: BSL-1.0
#include <courier/runtime/sync.hpp>

#include <system_error>

namespace courier {

void mutex::lock() {
    guard_.lock();
    if (!locked_) {
        locked_ = true;
        guard_.unlock();
        return;
    }
    detail::parked_waiter w;
    waiters_.push(&w);
    w.park(guard_); // ownership is handed to us by unlock()
}

bool mutex::try_lock() noexcept {
    guard_.lock();
    bool got = !locked_;
    locked_ = true;
    guard_.unlock();
    return got;
}

void mutex::unlock() {
    guard_.lock();
    if (!locked_) {
        guard_.unlock();
        throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                                "courier::mutex::unlock: not locked");
    }
    detail::waiter* next = waiters_.pop();
    if (next == nullptr) {
        locked_ = false;
    }
    guard_.unlock();
    if (next != nullptr) {
        next->notify(); // stays locked: handed over
    }
}

void condition_variable::wait(std::unique_lock<mutex>& lock) {
    guard_.lock();
    detail::parked_waiter w;
    waiters_.push(&w);
    lock.unlock(); // after queuing: a notify between here and parking finds us queued
    w.park(guard_);
    lock.lock();
}

void condition_variable::notify_one() noexcept {
    guard_.lock();
    detail::waiter* w = waiters_.pop();
    guard_.unlock();
    if (w != nullptr) {
        w->notify();
    }
}

void condition_variable::notify_all() noexcept {
    guard_.lock();
    detail::waiter* chain = waiters_.take_all();
    guard_.unlock();
    detail::waiter_list::notify_chain(chain);
}

void latch::count_down(std::ptrdiff_t n) {
    auto before = count_.fetch_sub(n, std::memory_order_acq_rel);
    if (before < n) {
        throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                                "courier::latch::count_down below zero");
    }
    if (before == n) {
        guard_.lock();
        detail::waiter* chain = waiters_.take_all();
        guard_.unlock();
        detail::waiter_list::notify_chain(chain);
    }
}

void latch::wait() {
    if (try_wait()) {
        return;
    }
    guard_.lock();
    if (try_wait()) {
        guard_.unlock();
        return;
    }
    detail::parked_waiter w;
    waiters_.push(&w);
    w.park(guard_);
}

} // namespace courier
