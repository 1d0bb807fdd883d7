// SPDX-License-Identifier: BSL-1.0
// A quiet network rail reads its completion queue once per interval (poll_pacer.hpp): the
// decision alone, then a real tcp pair: reads while quiet are bounded by the elapsed time, and
// messages (eager after a quiet spell, a rendezvous whose bytes move only while progressed)
// still arrive intact.
#include "../src/libfabric/poll_pacer.hpp"
#include "endpoint_pair.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

using courier::parcelport::fabric::poll_pacer;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t us = 1000; // ns

TEST(poll_pacer, off_reads_on_every_pass) {
    poll_pacer p(0us, 200us);
    EXPECT_FALSE(p.enabled());
    for (std::int64_t t = 0; t < 100; ++t) {
        EXPECT_TRUE(p.due(t, [] { return false; }));
        p.polled(t, false);
    }
}

TEST(poll_pacer, quiet_reads_once_per_interval_and_busy_or_found_reads_every_pass) {
    poll_pacer p(5us, 200us);
    std::int64_t t = 1'000'000 * us; // far from the clock's epoch, as steady_clock is
    // Quiet from the start: one read, then none until 5 us have passed.
    ASSERT_TRUE(p.due(t, [] { return false; }));
    p.polled(t, false);
    int reads = 0, busy_asked = 0;
    for (std::int64_t step = 1; step <= 1000; ++step) { // 10 us in steps of 10 ns
        if (p.due(t + step * 10, [&] {
                ++busy_asked;
                return false;
            })) {
            ++reads;
            p.polled(t + step * 10, false);
        }
    }
    EXPECT_EQ(reads, 2); // at +5 us and +10 us
    EXPECT_GT(busy_asked, 900);
    // A transfer under way: every pass.
    t += 20 * us;
    for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(p.due(t + i, [] { return true; }));
        p.polled(t + i, false);
    }
    // Completions found: every pass for the next 200 us, then quiet again.
    t += 1 * us;
    ASSERT_TRUE(p.due(t, [] { return true; }));
    p.polled(t, true);
    for (std::int64_t step = 1; step < 200; ++step) {
        EXPECT_TRUE(p.due(t + step * us - 1, [] { return false; })) << step;
        p.polled(t + step * us - 1, false);
    }
    EXPECT_FALSE(p.due(t + 200 * us, [] { return false; }));
}

TEST(poll_pacer, a_send_makes_the_next_pass_read_and_starts_an_active_spell) {
    poll_pacer p(5us, 200us);
    std::int64_t t = 1'000'000 * us;
    ASSERT_TRUE(p.due(t, [] { return false; }));
    p.polled(t, false);
    EXPECT_FALSE(p.due(t + 1, [] { return false; }));
    p.kick();
    EXPECT_TRUE(p.due(t + 2, [] { return false; }));
    p.polled(t + 2, false);
    for (std::int64_t step = 1; step < 200; ++step) { // every pass within 200 us of the send
        EXPECT_TRUE(p.due(t + 2 + step * us, [] { return false; })) << step;
        p.polled(t + 2 + step * us, false);
    }
    EXPECT_FALSE(p.due(t + 2 + 200 * us, [] { return false; }));
}

TEST(poll_pacer, auto_reads_at_twenty_times_the_cost_of_a_quiet_read) {
    poll_pacer p(-1ns, 200us);
    ASSERT_TRUE(p.enabled());
    EXPECT_EQ(p.interval(), poll_pacer::min_interval);
    std::int64_t t = 1'000'000 * us;
    EXPECT_TRUE(p.quiet(t));
    for (int i = 0; i < 100; ++i, t += 100 * us) {
        p.polled(t, false, 2 * us); // a 2 us system call
    }
    EXPECT_NEAR(static_cast<double>(p.interval()), 40.0 * us, 1.0 * us);
    // Reads that found completions say nothing of a quiet read's cost.
    p.polled(t, true, 50 * us);
    EXPECT_NEAR(static_cast<double>(p.interval()), 40.0 * us, 1.0 * us);
    EXPECT_FALSE(p.quiet(t + 1));
    t += 1000 * us;
    for (int i = 0; i < 100; ++i, t += 100 * us) {
        p.polled(t, false, 10); // cheap reads: the lower bound
    }
    EXPECT_EQ(p.interval(), poll_pacer::min_interval);
    for (int i = 0; i < 100; ++i, t += 100 * us) {
        p.polled(t, false, 1000 * us); // descheduled reads: the upper bound
    }
    EXPECT_EQ(p.interval(), poll_pacer::max_interval);
    // A fixed interval ignores costs.
    poll_pacer fixed(7us, 200us);
    fixed.polled(t, false, 1000 * us);
    EXPECT_EQ(fixed.interval(), 7 * us);
    EXPECT_FALSE(fixed.quiet(t));
}

/// Two tcp transports paced at `interval_us`, connected; false (with the reason) if tcp cannot
/// open here.
bool open_paced(std::int32_t interval_us, std::unique_ptr<pp::transport>& a,
                std::unique_ptr<pp::transport>& b, std::vector<cs::message>& got,
                std::string& why) {
    pp::transport_options o;
    o.provider = "tcp;ofi_rxm";
    o.job_token = 42;
    o.tcp_doorbell = false;
    o.quiet_poll_us = interval_us;
    if (!open_two(o, a, b, why)) {
        return false;
    }
    std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
    a->set_peers(addrs, 0);
    b->set_peers(addrs, 1);
    b->set_receive_handler([&got](std::uint32_t, cs::message&& m) { got.push_back(std::move(m)); });
    return true;
}

cs::serialize_buffer<char> pattern(std::size_t n, int seed) {
    cs::serialize_buffer<char> buf(n);
    for (std::size_t i = 0; i < n; ++i) {
        buf[i] = static_cast<char>(i * 13 + static_cast<std::size_t>(seed) + i / 4096);
    }
    return buf;
}

TEST(poll_pacer_tcp, a_quiet_rail_reads_its_queue_once_per_interval_and_loses_nothing) {
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    std::string why;
    if (!open_paced(50, a, b, got, why)) {
        GTEST_SKIP() << "tcp unavailable here: " << why;
    }
    send_one_checked(*a, *b, got, pattern(100, 1)); // connects
    // Let the active spell after that message end (2 ms), then spin b alone for 20 ms.
    auto const settle = std::chrono::steady_clock::now() + 5ms;
    while (std::chrono::steady_clock::now() < settle) {
        a->progress();
        b->progress();
    }
    auto const reads_before = b->stats().completion_queue_reads;
    auto const start = std::chrono::steady_clock::now();
    std::uint64_t passes = 0;
    while (std::chrono::steady_clock::now() - start < 20ms) {
        b->progress();
        ++passes;
    }
    auto const elapsed_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
    auto const reads = b->stats().completion_queue_reads - reads_before;
    // One read per 50 us at most (and one at the start); fewer under load, never more.
    EXPECT_LE(reads, static_cast<std::uint64_t>(elapsed_us) / 50 + 2)
        << passes << " passes in " << elapsed_us << " us";
    EXPECT_GE(reads, 1u);
    // After the quiet spell: an eager message and a rendezvous (1 MiB, read by b from a, both
    // paced) arrive intact.
    send_one_checked(*a, *b, got, pattern(1000, 2));
    send_one_checked(*a, *b, got, pattern(std::size_t{1} << 20, 3));
    EXPECT_EQ(got.size(), 3u);
}

TEST(poll_pacer_tcp, unpaced_reads_its_queue_on_every_pass) {
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    std::string why;
    if (!open_paced(0, a, b, got, why)) {
        GTEST_SKIP() << "tcp unavailable here: " << why;
    }
    send_one_checked(*a, *b, got, pattern(100, 1));
    auto const reads_before = b->stats().completion_queue_reads;
    for (int i = 0; i < 1000; ++i) {
        b->progress();
    }
    EXPECT_EQ(b->stats().completion_queue_reads - reads_before, 1000u);
}

} // namespace
