// SPDX-License-Identifier: BSL-1.0
// The registry of threads inside transport calls (src/transport_watch.hpp): how long the oldest
// call has lasted, nested calls, and close(), which lets no thread enter a call and waits (a
// bounded time) for those inside to leave. close() is for good in a process; the tests of it
// reopen first, so the binary also runs whole in one process (threads parked by one test stay
// parked). The watchdog that ends a locality wedged in a call is tested across
// processes (tests/distributed: wedged_transport_call_ends_the_locality). Also the liveness
// thread's use of it: ticks during a long progress pass are not counted as a peer's silence.
#include "../src/silence_clock.hpp"
#include "../src/transport_watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tw = courier::detail::transport_watch;
using namespace std::chrono_literals;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Waits (at most 30 s) until `flag` is set; whether it was.
bool wait_for(std::atomic<bool> const& flag) {
    auto t0 = std::chrono::steady_clock::now();
    while (!flag.load()) {
        if (seconds_since(t0) > 30) {
            return false;
        }
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

/// A thread inside one transport call until release() (as a send spinning on a lock a dead peer
/// held); constructed once the thread is inside.
class held_call {
public:
    explicit held_call(tw::kind k = tw::kind::send)
        : thread_([this, k] {
              tw::call inside(k);
              entered_ = true;
              while (!release_.load()) {
                  std::this_thread::sleep_for(1ms);
              }
          }) {
        EXPECT_TRUE(wait_for(entered_));
    }
    ~held_call() { release(); }
    void release() {
        release_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
    }

private:
    std::atomic<bool> entered_{false}, release_{false};
    std::thread thread_;
};

} // namespace

TEST(transport_watch, the_oldest_call_is_measured_in_periods_and_nested_calls_count_once) {
    tw::reopen();
    EXPECT_EQ(tw::stuck_for().count(), 0);
    {
        tw::call outer;
        tw::advance();
        tw::advance();
        {
            tw::call nested; // a handler that progress runs, sending
            tw::advance();
        }
        EXPECT_EQ(tw::stuck_for(), 3 * tw::period); // the nested call did not end the outer one
    }
    EXPECT_EQ(tw::stuck_for().count(), 0);
    tw::call again;
    EXPECT_EQ(tw::stuck_for().count(), 0); // entered in the current period
}

TEST(transport_watch, another_threads_call_is_seen_and_its_slot_reused_after_it_ends) {
    tw::reopen();
    held_call other;
    tw::advance();
    EXPECT_EQ(tw::stuck_for(), tw::period);
    other.release();
    EXPECT_EQ(tw::stuck_for().count(), 0);
    std::size_t before = tw::slot_count();
    for (int i = 0; i < 100; ++i) { // ended threads give their slot back
        std::thread([] { tw::call inside; }).join();
    }
    EXPECT_LE(tw::slot_count(), before + 1);
    EXPECT_EQ(tw::stuck_for().count(), 0);
}

TEST(transport_watch, progress_passes_are_measured_apart_from_sends) {
    tw::reopen();
    held_call send; // a send spinning on a dead peer's lock: this locality still receives
    tw::advance();
    tw::advance();
    EXPECT_EQ(tw::stuck_for(), 2 * tw::period);
    EXPECT_EQ(tw::progress_stuck_for().count(), 0);
    {
        held_call pass(tw::kind::progress);
        tw::advance();
        EXPECT_EQ(tw::stuck_for(), 3 * tw::period);      // the send, still the oldest
        EXPECT_EQ(tw::progress_stuck_for(), tw::period); // the pass
    }
    EXPECT_EQ(tw::progress_stuck_for().count(), 0);
    {
        tw::call outer(tw::kind::progress);
        tw::call nested; // a handler run by the pass sends: still the pass
        tw::advance();
        EXPECT_EQ(tw::progress_stuck_for(), tw::period);
    }
    send.release();
    EXPECT_EQ(tw::stuck_for().count(), 0);
}

TEST(silence_clock, deaf_ticks_are_not_silence_up_to_the_allowance_in_a_row) {
    courier::detail::silence_clock clock(3);
    EXPECT_TRUE(clock.tick(false));
    EXPECT_FALSE(clock.tick(true));
    EXPECT_FALSE(clock.tick(true));
    EXPECT_FALSE(clock.tick(true));
    EXPECT_TRUE(clock.tick(true)); // a pass that never ends delays detection, never stops it
    EXPECT_TRUE(clock.tick(true));
    EXPECT_EQ(clock.uncounted(), 3u);
    EXPECT_TRUE(clock.tick(false)); // heard again: the allowance is whole again
    EXPECT_FALSE(clock.tick(true));
    EXPECT_EQ(clock.uncounted(), 4u);
}

TEST(transport_watch, close_waits_for_a_thread_to_leave_its_call_and_parks_later_entrants) {
    tw::reopen();
    std::atomic<bool> entered{false}, leaving{false};
    std::thread busy([&] {
        tw::call inside;
        entered = true;
        std::this_thread::sleep_for(100ms);
        leaving = true; // the last thing before the call ends
    });
    ASSERT_TRUE(wait_for(entered));
    EXPECT_TRUE(tw::close(30s));
    EXPECT_TRUE(leaving.load()); // close returned only after the call ended
    busy.join();
    // A thread entering a call now never gets inside: it parks (the process is about to end).
    std::atomic<bool> got_in{false};
    std::thread late([&] {
        tw::call inside;
        got_in = true;
    });
    late.detach();
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(got_in.load());
    EXPECT_EQ(tw::stuck_for().count(), 0); // parked outside the call
}

TEST(transport_watch, close_gives_up_on_a_thread_that_never_leaves_its_call) {
    tw::reopen();
    held_call stuck;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(tw::close(200ms));
    double waited = seconds_since(t0);
    EXPECT_GE(waited, 0.19);
    EXPECT_LT(waited, 10.0);
}

TEST(transport_watch, the_closing_threads_own_call_does_not_hold_it_up) {
    tw::reopen();
    tw::call inside; // exit() called from a handler that progress runs
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(tw::close(30s));
    EXPECT_LT(seconds_since(t0), 10.0);
}
