// SPDX-License-Identifier: BSL-1.0
// Lone streams through two real libfabric endpoints, on tcp, shm and net: on shm a counted
// stream with nothing open to its destination is written straight into the message ring
// (coalescer::send_lone_by_ring), in flight until the next progress pass, which counts its end;
// streams sent from one thread while another runs the passes each arrive and end once.
#include "endpoint_pair.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

namespace {

TEST_P(transport, a_lone_stream_goes_straight_into_the_shm_ring_and_ends_in_the_next_pass) {
    // On shm a counted stream with nothing open to its destination is written into the
    // message ring as a batch of one, with no batch buffer (ring_lone_writes). Like any batch
    // through a ring it is in flight until the next progress pass (the next stream is held)
    // and its end is counted there, not at the send. After that pass the next lone stream
    // goes the same way again. tcp and net have no rings: none is written so.
    auto& e = *eps_;
    bool const shm = GetParam() == "shm";
    std::size_t ended = 0;
    e.a->set_counted_handler(
        [&](std::size_t sends, std::error_code ec) { ended += ec ? 1000 : sends; });
    // The first message may find the ring not attached yet: one first, until it has ended
    // (nothing in flight after it).
    bool warm = false;
    e.a->send(1, cs::save(-1), [&](std::error_code) { warm = true; });
    ASSERT_TRUE(e.pump([&] { return warm && e.got_b.size() == 1; }));
    e.got_b.clear();
    auto const m = cs::save(9, std::vector<int>{4, 5, 6});
    std::span<std::byte const> const stream = m.data();
    using sent_as = pp::transport::stream_sent;
    auto const start = e.a->stats();
    ASSERT_EQ(e.a->send_stream(1, stream.size(), copy_stream, &stream, nullptr, 0),
              sent_as::posted);
    auto const one = e.a->stats();
    EXPECT_EQ(one.ring_lone_writes - start.ring_lone_writes, shm ? 1u : 0u);
    EXPECT_EQ(one.lone_batches - start.lone_batches, 1u);
    EXPECT_EQ(one.batches_sent - start.batches_sent, 1u);
    EXPECT_EQ(one.parcels_in_batches - start.parcels_in_batches, 1u);
    EXPECT_EQ(one.messages_sent - start.messages_sent, 1u);
    EXPECT_EQ(one.bytes_copied_on_send - start.bytes_copied_on_send, stream.size());
    if (shm) {
        EXPECT_EQ(one.ring_messages_sent - start.ring_messages_sent, 1u);
        EXPECT_EQ(ended, 0u) << "its end is counted by the next pass, not by the send";
    }
    EXPECT_EQ(e.a->send_stream(1, stream.size(), copy_stream, &stream, nullptr, 0), sent_as::held)
        << "the first is in flight until a pass sees it end";
    ASSERT_TRUE(e.pump([&] { return ended == 2 && e.got_b.size() == 2; }));
    ASSERT_EQ(e.a->send_stream(1, stream.size(), copy_stream, &stream, nullptr, 0), sent_as::posted)
        << "nothing in flight after the pass";
    EXPECT_EQ(e.a->stats().ring_lone_writes - start.ring_lone_writes, shm ? 2u : 0u);
    ASSERT_TRUE(e.pump([&] { return ended == 3 && e.got_b.size() == 3; }));
    for (auto const& [src, got] : e.got_b) {
        int i = 0;
        std::vector<int> v;
        cs::load(got, i, v);
        EXPECT_EQ(src, 0u);
        EXPECT_EQ(i, 9);
        EXPECT_EQ(v, (std::vector<int>{4, 5, 6}));
    }
    EXPECT_EQ(e.b->stats().ring_messages_received, e.a->stats().ring_messages_sent);
}

TEST_P(transport, streams_sent_from_another_thread_while_passes_run_each_end_once) {
    // One thread sends counted streams while this one runs the passes that end them: lone
    // ones (straight into shm's ring, their completion listed and relisted as passes take it)
    // and held ones mixed. Each arrives once, intact, and each end is counted once.
    auto& e = *eps_;
    std::atomic<std::size_t> ended{0};
    std::atomic<int> failed{0};
    e.a->set_counted_handler([&](std::size_t sends, std::error_code ec) {
        ended.fetch_add(sends, std::memory_order_relaxed);
        failed.fetch_add(ec ? 1 : 0, std::memory_order_relaxed);
    });
    e.a->send(1, cs::save(-1, std::vector<int>{}), nullptr);
    ASSERT_TRUE(e.pump([&] { return e.got_b.size() == 1; }));
    e.got_b.clear();
    constexpr int n = 1000;
    std::atomic<bool> done{false};
    std::thread sender([&] {
        for (int i = 0; i < n; ++i) {
            try {
                auto const m = cs::save(i, std::vector<int>{i, i * 3});
                std::span<std::byte const> const stream = m.data();
                if (e.a->send_stream(1, stream.size(), copy_stream, &stream, nullptr, 0) ==
                    pp::transport::stream_sent::refused) {
                    failed.fetch_add(1, std::memory_order_relaxed);
                }
            } catch (...) { // refused outright: a failure of the test, not of the process
                failed.fetch_add(1, std::memory_order_relaxed);
            }
            if (i % 31 == 0) {
                std::this_thread::yield(); // lets passes run between some of them
            }
        }
        done.store(true, std::memory_order_release);
    });
    bool const all = e.pump([&] {
        return done.load(std::memory_order_acquire) &&
               ended.load(std::memory_order_relaxed) == std::size_t{n} &&
               e.got_b.size() == std::size_t{n};
    });
    sender.join();
    ASSERT_TRUE(all) << ended.load() << " ended, " << e.got_b.size() << " arrived of " << n;
    EXPECT_EQ(failed.load(), 0);
    std::vector<int> seen(n, 0);
    for (auto const& [src, got] : e.got_b) {
        int i = -1;
        std::vector<int> v;
        cs::load(got, i, v);
        ASSERT_TRUE(i >= 0 && i < n) << i;
        ++seen[static_cast<std::size_t>(i)];
        EXPECT_EQ(v, (std::vector<int>{i, i * 3}));
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    auto const st = e.a->stats();
    EXPECT_EQ(st.parcels_in_batches, std::uint64_t{n});
    if (GetParam() == "shm") {
        EXPECT_GT(st.ring_lone_writes, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(providers, transport, transport_providers, provider_label);

} // namespace
