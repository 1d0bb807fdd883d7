// SPDX-License-Identifier: BSL-1.0
// What a post the provider refuses for good leaves behind after it waited in the -FI_EAGAIN
// backlog (src/libfabric/context.hpp): a send's handler hears the failure (a lone parcel, a
// split message, a batch), its send slot is given back, later sends go; a receive buffer is
// posted again, so that the receives never run out. testing::refuse_posts makes posts of one
// name wait and then fail without reaching the provider.
#include "endpoint_pair.hpp"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace fab = courier::parcelport::fabric;

namespace {

class backlog_refusals : public ::testing::TestWithParam<std::string> {
protected:
    void TearDown() override { fab::testing::refuse_posts("", 0, 0); }

    /// A pair on the test's provider with `adjust`, and shm's eager messages through the
    /// provider (not the message rings, which never post). Null (the test skips) where the
    /// provider cannot be opened.
    std::unique_ptr<pair_of_endpoints> open(std::function<void(pp::transport_options&)> adjust) {
        try {
            return std::make_unique<pair_of_endpoints>(GetParam(), [&](pp::transport_options& o) {
                o.shm_rings = false;
                if (adjust) {
                    adjust(o);
                }
            });
        } catch (std::exception const& e) {
            skipped_ = std::string("provider ") + GetParam() + " unavailable here: " + e.what();
            return nullptr;
        }
    }
    std::string skipped_;
};

/// Sends `bytes` of a pattern from a to b, copied into the message (an eager message of
/// them); the result (set when the handler runs) in `ec`, and whether the handler ran in
/// `done`.
void send_pattern(pair_of_endpoints& e, std::size_t bytes, std::error_code& ec, bool& done) {
    cs::serialize_buffer<char> buf(bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
        buf[i] = static_cast<char>(i * 13 + 1);
    }
    cs::options copy_all;
    copy_all.zero_copy = false;
    e.a->send(1, cs::save(copy_all, buf), [&ec, &done](std::error_code c) {
        ec = c;
        done = true;
    });
}

/// Sends one more parcel of `bytes` and checks that it arrives whole and its send completes.
void later_send_arrives(pair_of_endpoints& e, std::size_t bytes) {
    std::error_code ec;
    bool done = false;
    std::size_t const n = e.got_b.size() + 1;
    send_pattern(e, bytes, ec, done);
    ASSERT_TRUE(e.pump([&] { return done && e.got_b.size() == n; }, std::chrono::seconds(30)))
        << "a send after the refused ones did not arrive";
    EXPECT_FALSE(ec) << ec.message();
    cs::serialize_buffer<char> back;
    cs::load(e.got_b.back().second, back);
    ASSERT_EQ(back.size(), bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(back[i], static_cast<char>(i * 13 + 1)) << "byte " << i;
    }
}

TEST_P(backlog_refusals, sends_refused_for_good_after_waiting_fail_their_handlers) {
    auto e = open(nullptr);
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    // Every message a sends waits, then fails: the first (two on shm without rings) as
    // messages, the rest in the batches they coalesce into behind them.
    fab::testing::refuse_posts("fi_send", 1000, -FI_EIO);
    constexpr int n = 12;
    std::vector<std::error_code> ecs(n);
    bool done[n] = {};
    for (int i = 0; i < n; ++i) {
        send_pattern(*e, 64, ecs[i], done[i]);
    }
    ASSERT_TRUE(e->pump([&] { return std::all_of(done, done + n, [](bool d) { return d; }); },
                        std::chrono::seconds(30)))
        << "a send refused for good after waiting never completed";
    for (int i = 0; i < n; ++i) {
        EXPECT_TRUE(ecs[i]) << "send " << i << " reported success";
    }
    EXPECT_TRUE(e->got_b.empty());
    // Each refused message and batch ended as a completion would: none still counts as in
    // flight, so nothing is held for b (a message in flight, or a batch open, would hold).
    EXPECT_FALSE(e->a->batches_now(1, 64)) << "a refused send still counts as in flight";
    fab::testing::refuse_posts("", 0, 0);
    later_send_arrives(*e, 64);
    later_send_arrives(*e, 64);
}

TEST_P(backlog_refusals, a_split_message_refused_for_good_after_waiting_fails_its_handler) {
    if (GetParam() != "shm") {
        GTEST_SKIP() << "only shm splits eager messages over its inject size in two parts";
    }
    auto e = open(nullptr);
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    std::uint64_t const splits = e->a->stats().split_sends;
    fab::testing::refuse_posts("fi_sendv", 1, -FI_EIO);
    std::error_code ec;
    bool done = false;
    send_pattern(*e, 4500, ec, done);
    ASSERT_TRUE(e->pump([&] { return done; }, std::chrono::seconds(30)))
        << "a split message refused for good after waiting never completed";
    EXPECT_TRUE(ec);
    EXPECT_EQ(e->a->stats().split_sends, splits + 1) << "the parcel was not sent split";
    EXPECT_TRUE(e->got_b.empty());
    later_send_arrives(*e, 4500); // split too: the slot's parts count was put back
    EXPECT_EQ(e->a->stats().split_sends, splits + 2);
}

TEST_P(backlog_refusals, streams_with_handlers_refused_for_good_fail_their_handlers) {
    // A stream with a handler of its own (the runtime's flat calls, whose handler fails the
    // call's future) hears its batch's failure, alone (posted at once) or held in a batch
    // behind a message in flight; a counted stream in the same batch is counted
    // failed. One in flight holds the next (coalesce_in_flight 1), on shm without rings too.
    auto e = open([](pp::transport_options& o) { o.coalesce_in_flight = 1; });
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    std::size_t counted = 0, counted_failed = 0;
    e->a->set_counted_handler([&](std::size_t sends, std::error_code ec) {
        counted += sends;
        counted_failed += ec ? sends : 0;
    });
    fab::testing::refuse_posts("fi_send", 1000, -FI_EIO);
    auto const m = cs::save(7, std::vector<int>{1, 2, 3});
    ASSERT_EQ(m.chunks().size(), 1u) << "a stream of one index chunk";
    std::span<std::byte const> const stream = m.data();
    pp::transport::stream_writer const write = copy_stream;
    std::error_code alone_ec, held_ec;
    bool alone_done = false, held_done = false;
    pp::transport::sent_handler alone = [&](std::error_code ec) {
        alone_ec = ec;
        alone_done = true;
    };
    pp::transport::sent_handler held = [&](std::error_code ec) {
        held_ec = ec;
        held_done = true;
    };
    using sent_as = pp::transport::stream_sent;
    ASSERT_EQ(e->a->send_stream(1, stream.size(), write, &stream, &alone, 0), sent_as::posted);
    ASSERT_TRUE(e->a->batches_now(1, stream.size())) << "the first is in flight, waiting";
    ASSERT_EQ(e->a->send_stream(1, stream.size(), write, &stream, nullptr, 0), sent_as::held);
    ASSERT_EQ(e->a->send_stream(1, stream.size(), write, &stream, &held, 0), sent_as::held);
    ASSERT_TRUE(
        e->pump([&] { return alone_done && held_done && counted == 1; }, std::chrono::seconds(30)))
        << "a stream's handler never heard of its batch's end";
    EXPECT_TRUE(alone_ec) << "the lone stream's handler heard success";
    EXPECT_TRUE(held_ec) << "the held stream's handler heard success";
    EXPECT_EQ(counted_failed, 1u);
    EXPECT_TRUE(e->got_b.empty());
    fab::testing::refuse_posts("", 0, 0);
    later_send_arrives(*e, 64);
}

TEST_P(backlog_refusals, counted_sends_refused_for_good_hand_over_their_tags) {
    // A counted send (the runtime's posts and replies: no handler of its own) whose batch is
    // refused for good after waiting hands its tag to the counted failure handler before its
    // end is counted, so that its sender can give back what it counted for it (termination
    // counts, a window share): a stream alone or held, a message held. A send that arrives
    // hands over nothing.
    auto e = open([](pp::transport_options& o) { o.coalesce_in_flight = 1; });
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    std::size_t counted = 0, counted_failed = 0, tags_seen = 0;
    std::vector<std::uint64_t> tags;
    e->a->set_counted_handler([&](std::size_t sends, std::error_code ec) {
        // The failed sends' tags came first.
        EXPECT_EQ(tags_seen, counted_failed + (ec ? sends : 0));
        counted += sends;
        counted_failed += ec ? sends : 0;
    });
    e->a->set_counted_failure_handler([&](std::uint64_t tag) {
        tags.push_back(tag);
        ++tags_seen;
    });
    fab::testing::refuse_posts("fi_send", 1000, -FI_EIO);
    auto const m = cs::save(7, std::vector<int>{1, 2, 3});
    std::span<std::byte const> const stream = m.data();
    pp::transport::stream_writer const write = copy_stream;
    using sent_as = pp::transport::stream_sent;
    ASSERT_EQ(e->a->send_stream(1, stream.size(), write, &stream, nullptr, 11), sent_as::posted);
    ASSERT_TRUE(e->a->batches_now(1, stream.size())) << "the first is in flight, waiting";
    ASSERT_EQ(e->a->send_stream(1, stream.size(), write, &stream, nullptr, 12), sent_as::held);
    ASSERT_TRUE(e->a->send_counted(1, cs::save(13), 13)) << "a small message behind it waits";
    ASSERT_TRUE(e->pump([&] { return counted == 3; }, std::chrono::seconds(30)))
        << "counted sends refused for good never ended";
    EXPECT_EQ(counted_failed, 3u);
    std::sort(tags.begin(), tags.end());
    EXPECT_EQ(tags, (std::vector<std::uint64_t>{11, 12, 13}));
    EXPECT_TRUE(e->got_b.empty());
    fab::testing::refuse_posts("", 0, 0);
    later_send_arrives(*e, 64);
    tags.clear();
    e->a->send_counted(1, cs::save(14), 14);
    ASSERT_TRUE(e->pump([&] { return counted == 4; }, std::chrono::seconds(30)));
    EXPECT_EQ(counted_failed, 3u);
    EXPECT_TRUE(tags.empty()) << "a send that arrived handed over its tag";
}

TEST_P(backlog_refusals, a_lone_send_refused_outright_throws_to_its_caller_and_leaves_nothing) {
    // A parcel that finds nothing held for its destination goes as a batch of its own; one the
    // provider refuses outright throws to its caller, as a message's send does (the runtime
    // then undoes its counts, keeps a credit for later, skips an ordered call's number), its
    // handler neither run nor taken, nothing of it counted, in flight or in the statistics.
    auto e = open([](pp::transport_options& o) { o.coalesce_in_flight = 1; });
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    std::size_t counted = 0;
    e->a->set_counted_handler([&](std::size_t sends, std::error_code) { counted += sends; });
    bool ran = false;
    pp::transport::sent_handler h = [&](std::error_code) { ran = true; };
    fab::testing::refuse_posts_outright("fi_send", 1, -FI_EIO);
    EXPECT_THROW(e->a->send_coalesced(1, cs::save(1), [&](std::error_code) { ran = true; }),
                 std::exception);
    fab::testing::refuse_posts_outright("fi_send", 1, -FI_EIO);
    EXPECT_THROW(e->a->send_counted(1, cs::save(2), 0), std::exception);
    auto const m = cs::save(3, std::vector<int>{1, 2, 3});
    std::span<std::byte const> const stream = m.data();
    pp::transport::stream_writer const write = copy_stream;
    fab::testing::refuse_posts_outright("fi_send", 1, -FI_EIO);
    EXPECT_THROW(e->a->send_stream(1, stream.size(), write, &stream, &h, 0), std::exception);
    EXPECT_TRUE(static_cast<bool>(h)) << "a refused stream's handler was taken";
    fab::testing::refuse_posts("", 0, 0);
    EXPECT_FALSE(ran) << "a handler ran for a send that threw";
    EXPECT_FALSE(e->a->batches_now(1, 64)) << "a refused send still counts as in flight";
    auto const st = e->a->stats();
    EXPECT_EQ(st.batches_sent, 0u);
    EXPECT_EQ(st.lone_batches, 0u);
    EXPECT_EQ(st.parcels_in_batches, 0u);
    later_send_arrives(*e, 64);
    EXPECT_EQ(counted, 0u) << "a refused counted send was counted";
}

TEST_P(backlog_refusals, receives_refused_for_good_after_waiting_are_posted_again) {
    constexpr std::size_t buffers = 4;
    auto e = open([](pp::transport_options& o) { o.posted_receives = buffers; });
    if (!e) {
        GTEST_SKIP() << skipped_;
    }
    // Each receive b posts again after a message waits, then fails; three rounds of every
    // buffer. Without a second post the fifth message would find no receive.
    fab::testing::refuse_posts("fi_recv", 3 * buffers, -FI_EIO);
    for (std::size_t i = 0; i < 4 * buffers; ++i) {
        later_send_arrives(*e, 64);
        if (HasFatalFailure()) {
            ADD_FAILURE() << "message " << i << " of " << 4 * buffers;
            return;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(providers, backlog_refusals, transport_providers, provider_label);

} // namespace
