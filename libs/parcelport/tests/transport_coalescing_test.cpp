// SPDX-License-Identifier: BSL-1.0
// Coalescing through two real libfabric endpoints, on tcp and on shm: parcels sent while others
// are in flight share a message and arrive intact, a batch leaves once it holds
// coalesce_records parcels (on tcp: 16 parcels and 16 KiB), rendezvous parcels in a burst, a
// lone parcel, coalescing off, eager messages over shm's inject size to a busy peer, batches
// over it in two parts, a stream sent alone.
#include "endpoint_pair.hpp"

#include <algorithm>
#include <cstring>
#include <span>

namespace {

/// Checks that the parcels b received are (i, payload(i)) for i in [0, n), each exactly once,
/// all from locality 0.
template <class Payload>
void expect_each_once_from_a(pair_of_endpoints const& e, int n, Payload payload) {
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    for (auto const& [src, m] : e.got_b) {
        int i = -1;
        std::vector<char> v;
        cs::load(m, i, v);
        ASSERT_TRUE(i >= 0 && i < n) << i;
        ++seen[static_cast<std::size_t>(i)];
        EXPECT_EQ(v, payload(i)) << i;
        EXPECT_EQ(src, 0u);
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
}

/// Sends `n` parcels with send_coalesced, back to back with no progress in between; parcel i
/// carries i and, when `big` divides i + 1, a 300 KB pointer chunk (a rendezvous) instead of
/// 40 ints. Checks that each arrives once and intact and that each handler ran once without
/// error, and that a rendezvous parcel's handler ran only after the receiver took its bytes
/// (its DONE); returns the sender's statistics, and in `large_held` how many of the
/// rendezvous parcels send_coalesced held back.
pp::statistics coalesced_burst(pair_of_endpoints& e, int n, int big, int* large_held = nullptr) {
    std::vector<std::vector<int>> payloads;
    for (int i = 0; i < n; ++i) {
        bool large = big != 0 && (i + 1) % big == 0;
        payloads.emplace_back(large ? 75000 : 40, i * 7);
    }
    std::vector<int> handled(static_cast<std::size_t>(n), 0);
    int errors = 0, early = 0;
    std::uint64_t held = 0;
    std::size_t large_done = 0;
    // Large parcels b has delivered: it delivers a rendezvous parcel in the pass that sends
    // (or queues) its DONE, so a handler run by that DONE finds it there.
    auto large_delivered = [&] {
        return static_cast<std::size_t>(
            std::count_if(e.got_b.begin(), e.got_b.end(),
                          [](auto const& got) { return got.second.total_size() > 100000; }));
    };
    for (int i = 0; i < n; ++i) {
        bool const large = payloads[static_cast<std::size_t>(i)].size() > 40;
        bool h = e.a->send_coalesced(1, cs::save(i, payloads[static_cast<std::size_t>(i)]),
                                     [&, i, large](std::error_code ec) {
                                         ++handled[static_cast<std::size_t>(i)];
                                         errors += ec ? 1 : 0;
                                         // Completed before the receiver delivered as many
                                         // large parcels as have completed: before its DONE.
                                         if (large && large_delivered() < ++large_done) {
                                             ++early;
                                         }
                                     });
        held += h;
        if (h && large_held != nullptr && payloads[static_cast<std::size_t>(i)].size() > 40) {
            ++*large_held;
        }
    }
    auto all_handled = [&] {
        return std::all_of(handled.begin(), handled.end(), [](int h) { return h != 0; });
    };
    EXPECT_TRUE(
        e.pump([&] { return all_handled() && e.got_b.size() == static_cast<std::size_t>(n); }));
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(early, 0) << "rendezvous sends completed before their DONE";
    for (int h : handled) {
        EXPECT_EQ(h, 1);
    }
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (auto& [src, m] : e.got_b) {
        int i = -1;
        std::vector<int> v;
        cs::load(m, i, v);
        EXPECT_EQ(src, 0u);
        if (i < 0 || i >= n) {
            ADD_FAILURE() << "parcel number " << i;
            continue;
        }
        EXPECT_FALSE(seen[static_cast<std::size_t>(i)]) << i;
        seen[static_cast<std::size_t>(i)] = true;
        EXPECT_EQ(v, payloads[static_cast<std::size_t>(i)]) << i;
    }
    EXPECT_EQ(e.b->stats().messages_received, static_cast<std::uint64_t>(n));
    auto const st = e.a->stats();
    EXPECT_EQ(held, st.parcels_in_batches - st.lone_batches) << "send_coalesced says which it held";
    return st;
}

/// Sends 3 small parcels from a to b back to back, no progress between, and pumps until all
/// arrived: how many of them went in coalesced messages (checked against the batches sent).
std::uint64_t held_of_three(pair_of_endpoints& e) {
    int ended = 0;
    for (int i = 0; i < 3; ++i) {
        e.a->send_coalesced(1, cs::save(i), [&](std::error_code ec) { ended += ec ? 100 : 1; });
    }
    EXPECT_TRUE(e.pump([&] { return ended == 3 && e.got_b.size() == 3; }));
    EXPECT_EQ(ended, 3);
    auto const st = e.a->stats();
    // The ones not held left at once, each a batch of its own (a small parcel's cheapest send).
    std::uint64_t const held = st.parcels_in_batches - st.lone_batches;
    EXPECT_EQ(st.lone_batches, 3u - held);
    EXPECT_EQ(st.batches_sent - st.lone_batches, held == 0 ? 0u : 1u);
    return held;
}

} // namespace

TEST_P(transport, parcels_sent_while_others_are_in_flight_are_coalesced_and_arrive_intact) {
    // 300 parcels of ~200 bytes with no progress between sends: the first leaves alone
    // (coalesce_in_flight: 1 on tcp and on shm with message rings), the rest wait in batches of
    // at most one receive buffer (~5 KiB: about 25 parcels).
    auto st = coalesced_burst(*eps_, 300, 0);
    EXPECT_EQ(st.messages_sent, 300u);
    EXPECT_GE(st.batches_sent, 300u / 30);
    EXPECT_GE(st.lone_batches, 1u) << "the first, a batch of its own";
    EXPECT_GE(st.parcels_in_batches - st.lone_batches, 290u);
    EXPECT_LE(st.parcels_in_batches - st.lone_batches, 299u);
}

TEST_P(transport, counted_sends_end_through_the_counted_handler_once_per_batch) {
    // send_counted: no handler per parcel; the counted handler hears of every send's end, a
    // batch's parcels in one call.
    std::size_t ended = 0, calls = 0, failed = 0;
    eps_->a->set_counted_handler([&](std::size_t sends, std::error_code ec) {
        ended += sends;
        ++calls;
        failed += ec ? sends : 0;
    });
    auto payload = [](int i) { return std::vector<char>(40, static_cast<char>(i)); };
    constexpr int n = 300;
    std::size_t held = 0;
    for (int i = 0; i < n; ++i) {
        held += eps_->a->send_counted(1, cs::save(i, payload(i)), 0);
    }
    ASSERT_TRUE(eps_->pump([&] { return ended == n && eps_->got_b.size() == n; }));
    EXPECT_EQ(failed, 0u);
    expect_each_once_from_a(*eps_, n, payload);
    auto const st = eps_->a->stats();
    EXPECT_EQ(held, st.parcels_in_batches - st.lone_batches);
    EXPECT_GE(held, n - 10u) << "a burst without progress coalesces";
    // One call per batch (those of a lone parcel too) and one per parcel sent as a message.
    EXPECT_EQ(calls, st.batches_sent + (n - st.parcels_in_batches));
    EXPECT_EQ(eps_->b->stats().messages_received, static_cast<std::uint64_t>(n));
}

TEST_P(transport, a_counted_send_without_a_counted_handler_is_refused) {
    // Its end could reach no one: refused outright (the caller learns it), never lost.
    EXPECT_THROW(eps_->a->send_counted(1, cs::save(1), 0), std::logic_error);
    EXPECT_EQ(eps_->a->stats().messages_sent, 0u);
}

TEST_P(transport, a_batch_leaves_once_it_holds_coalesce_records_parcels_without_progress) {
    // A sender's long loop reaches no progress pass until it ends; a batch of
    // coalesce_records parcels is posted from within the loop, so that the receiver can run
    // them meanwhile. 100 parcels of ~200 bytes by 5: the first alone, then 19 batches posted
    // before any progress() (the 20th, of 4, waits for it).
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>(GetParam(), 42, pp::transport_options{}.read_budget,
                                                false, 0, true, 4096, true, 5);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    std::vector<int> payload(40, 3);
    int sent = 0;
    for (int i = 0; i < 100; ++i) {
        e->a->send_coalesced(1, cs::save(i, payload), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            ++sent;
        });
    }
    EXPECT_EQ(e->a->stats().lone_batches, 1u) << "the first, a batch of its own";
    EXPECT_EQ(e->a->stats().batches_sent, 1u + 19u) << "posted from within the loop";
    EXPECT_EQ(e->a->stats().parcels_in_batches, 1u + 95u);
    ASSERT_TRUE(e->pump([&] { return sent == 100 && e->got_b.size() == 100; }));
    auto st = e->a->stats();
    EXPECT_EQ(st.batches_sent, 1u + 20u);
    EXPECT_EQ(st.parcels_in_batches, 100u); // all but the first held
    EXPECT_EQ(st.lone_batches, 1u);
    std::vector<bool> seen(100, false);
    for (auto& [src, m] : e->got_b) {
        int i = -1;
        std::vector<int> v;
        cs::load(m, i, v);
        ASSERT_TRUE(i >= 0 && i < 100) << i;
        EXPECT_FALSE(seen[static_cast<std::size_t>(i)]) << i;
        seen[static_cast<std::size_t>(i)] = true;
        EXPECT_EQ(v, payload);
    }
}

TEST_P(transport, by_default_counted_posts_leave_by_16_on_shm_and_sends_with_handlers_by_8) {
    // The auto rule (coalesce_records 0): on shm a batch of counted sends (posts nobody waits
    // for) leaves at 16 parcels, one whose parcels have handlers at 8 of them; on tcp 16 parcels
    // must also hold 16 KiB, more than a batch takes here, so only a full batch leaves before
    // the progress pass (records of 24 B fill none). 100 small parcels, no progress: on
    // shm the first leaves alone, then the batches (on tcp 99 records fill none).
    for (bool const counted : {true, false}) {
        std::unique_ptr<pair_of_endpoints> e;
        try {
            e = std::make_unique<pair_of_endpoints>(GetParam());
        } catch (std::exception const& ex) {
            GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
        }
        std::size_t ended = 0;
        e->a->set_counted_handler([&](std::size_t sends, std::error_code) { ended += sends; });
        constexpr int n = 100;
        for (int i = 0; i < n; ++i) {
            if (counted) {
                e->a->send_counted(1, cs::save(i), 0);
            } else {
                e->a->send_coalesced(1, cs::save(i), [&](std::error_code) { ++ended; });
            }
        }
        std::uint64_t const expected = GetParam() != "shm" ? 0u : counted ? 98u / 16 : 98u / 8;
        auto const st = e->a->stats();
        // The first alone, a batch of its own (two on shm if its message rings did not open).
        EXPECT_GE(st.lone_batches, 1u);
        EXPECT_LE(st.lone_batches, 2u);
        EXPECT_EQ(st.batches_sent - st.lone_batches, expected)
            << (counted ? "counted" : "handlers");
        ASSERT_TRUE(e->pump([&] { return ended == n && e->got_b.size() == n; }));
    }
}

TEST_P(transport,
       by_default_a_parcel_is_held_behind_one_message_in_flight_but_on_shm_without_rings) {
    // The auto rule (coalesce_in_flight 0): a tcp send completes once the kernel has its bytes,
    // and one through a message ring in the next pass, so a lone request or reply finds nothing
    // in flight and leaves at once, and the second of a burst already joins a batch (the replies
    // to a batch of requests: one message for all but the first, not two of them alone); on
    // shm through the provider two must be in flight. Given explicitly, the count holds on all.
    EXPECT_EQ(held_of_three(*eps_), 2u);
    if (GetParam() == "shm") {
        pair_of_endpoints no_rings(GetParam(),
                                   [](pp::transport_options& o) { o.shm_rings = false; });
        EXPECT_EQ(held_of_three(no_rings), 1u);
    }
    for (std::uint32_t const n : {1u, 2u}) {
        std::unique_ptr<pair_of_endpoints> e;
        try {
            e = std::make_unique<pair_of_endpoints>(
                GetParam(), [n](pp::transport_options& o) { o.coalesce_in_flight = n; });
        } catch (std::exception const& ex) {
            GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
        }
        EXPECT_EQ(held_of_three(*e), 3u - n) << "coalesce_in_flight " << n;
    }
}

TEST_P(transport, gathered_parcels_go_as_one_message_on_tcp_when_sent_gathered) {
    // transport::gather: the replies to a received batch of requests. On tcp every parcel sent
    // to the destination from then on joins one batch, the first too, which send_gathered()
    // posts at once, before any progress pass; on shm, where a message is cheap, both do
    // nothing (the first leaves alone, as ever, and the others wait for a pass).
    auto& e = *eps_;
    bool const shm = GetParam() == "shm";
    int ended = 0;
    e.a->gather(1);
    for (int i = 0; i < 3; ++i) {
        e.a->send_coalesced(1, cs::save(i, std::vector<char>{}),
                            [&](std::error_code ec) { ended += ec ? 100 : 1; });
    }
    EXPECT_EQ(e.a->stats().messages_sent, shm ? 1u : 0u) << "held until send_gathered";
    e.a->send_gathered(1);
    auto held_batches = [&] {
        auto const st = e.a->stats();
        return st.batches_sent - st.lone_batches;
    };
    EXPECT_EQ(held_batches(), shm ? 0u : 1u) << "posted by send_gathered, not a pass";
    ASSERT_TRUE(e.pump([&] { return ended == 3 && e.got_b.size() == 3; }));
    EXPECT_EQ(ended, 3);
    EXPECT_EQ(held_batches(), 1u);
    EXPECT_EQ(e.a->stats().lone_batches, shm ? 1u : 0u) << "on shm the first left alone";
    EXPECT_EQ(e.a->stats().parcels_in_batches, 3u);
    expect_each_once_from_a(e, 3, [](int) { return std::vector<char>{}; });
    // Nothing gathered: send_gathered sends nothing, and a lone parcel still leaves alone.
    e.a->gather(1);
    e.a->send_gathered(1);
    EXPECT_EQ(e.a->stats().batches_sent, shm ? 2u : 1u);
    bool sent = false;
    e.a->send_coalesced(1, cs::save(3), [&](std::error_code) { sent = true; });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 4; }));
    EXPECT_EQ(held_batches(), 1u);
    EXPECT_EQ(e.a->stats().lone_batches, shm ? 2u : 1u);
}

/// `n` parcels from a to b sent back to back with send_coalesced, parcel i carrying i and a
/// 300,000-char pointer chunk (a rendezvous), kept alive in `payloads` until read. Counts each
/// send's end, its errors, and the ends that came before b had as many parcels (before their
/// reads: `early`); `held` counts the sends send_coalesced held back.
struct rendezvous_burst {
    static std::vector<char> payload(int i) {
        return std::vector<char>(300000, static_cast<char>(i));
    }
    std::vector<std::vector<char>> payloads;
    int ended = 0, errors = 0, early = 0, held = 0;
    rendezvous_burst(pair_of_endpoints& e, int n) {
        payloads.reserve(static_cast<std::size_t>(n)); // no move while b reads them
        for (int i = 0; i < n; ++i) {
            payloads.push_back(payload(i));
            held +=
                e.a->send_coalesced(1, cs::save(i, payloads.back()), [&, this](std::error_code ec) {
                    ++ended;
                    errors += ec ? 1 : 0;
                    early += e.got_b.size() < static_cast<std::size_t>(ended) ? 1 : 0;
                });
        }
    }
};

TEST_P(transport, a_done_rides_in_the_batch_open_to_its_sender) {
    // b has a batch open to a (on tcp: gather, as the runtime does for a batch's replies) when
    // it finishes reading a's rendezvous parcels: their DONEs go in that batch at the end of
    // the pass, not as messages of their own. On shm gather opens nothing (nor would a DONE
    // ride there: it is a few stores into the peer's ring), and the DONEs go as DONE messages
    // (the answers may still batch behind one another).
    // Either way each send completes once, after its parcel arrived.
    read_everything();
    auto& e = *eps_;
    bool const shm = GetParam() == "shm";
    constexpr int n = 3;
    rendezvous_burst burst(e, n);
    auto const& [payloads, ended, errors, early, held] = burst;
    // b answers with a small parcel per pass, which joins the gathered batch: on tcp the
    // batches then carry parcels and DONEs together.
    int answers = 0, answered = 0;
    testing::internal::CaptureStderr();
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(ended == n && e.got_b.size() == static_cast<std::size_t>(n) &&
             e.got_a.size() == static_cast<std::size_t>(answers) && answered == answers) &&
           std::chrono::steady_clock::now() < until) {
        e.b->gather(0);
        if (answers < 20) {
            e.b->send_coalesced(0, cs::save(answers++, std::vector<char>{}),
                                [&](std::error_code ec) { answered += ec ? 100 : 1; });
        }
        e.b->progress();
        e.a->progress();
    }
    std::string const err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, "") << "a batch's records did not add up, or one was dropped";
    EXPECT_EQ(e.got_a.size(), static_cast<std::size_t>(answers));
    EXPECT_EQ(answered, answers);
    ASSERT_EQ(ended, n);
    ASSERT_EQ(e.got_b.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(early, 0) << "sends completed before their parcels arrived";
    expect_each_once_from_a(e, n, rendezvous_burst::payload);
    auto const st = e.b->stats();
    if (shm) {
        EXPECT_GE(st.done_messages, 1u);
    } else {
        EXPECT_EQ(st.done_messages, 0u) << "a DONE went alone while a batch to its sender was open";
        EXPECT_GE(st.batches_sent, 1u);
        EXPECT_EQ(st.parcels_in_batches, static_cast<std::uint64_t>(answers))
            << "every answer joined the gathered batch";
    }
}

TEST_P(transport, rendezvous_parcels_in_a_burst_complete_after_their_reads_and_batch) {
    // Every fifth parcel carries a 300 KB pointer chunk. The small ones around it are
    // coalesced, and so are the rendezvous parcels' announcements: on shm, whose batches leave
    // after 8 parcels with handlers, and on tcp, whose batches leave at 4 announcements (or at
    // 16 parcels of 16 KiB, or at the end of a progress pass). Either way each one's handler
    // runs once, after its DONE came back.
    read_everything();
    int large_held = 0;
    auto st = coalesced_burst(*eps_, 100, 5, &large_held);
    EXPECT_GT(st.batches_sent, 0u);
    EXPECT_GT(large_held, 0);
    EXPECT_EQ(st.rendezvous_sends, 20u);
    EXPECT_EQ(eps_->b->stats().rma_bytes_read, 20u * 75000 * sizeof(int));
}

TEST_P(transport, on_tcp_rendezvous_announcements_to_a_busy_destination_leave_in_fours) {
    // Nine rendezvous parcels back to back, no progress pass: the first leaves alone (nothing
    // in flight), the other eight join batches, which on tcp leave at once at 4 announcements:
    // two batches before any pass; on shm a batch leaves at 8 parcels with handlers: one.
    // Either way each parcel arrives intact and its send completes after its read.
    read_everything();
    auto& e = *eps_;
    bool const shm = GetParam() == "shm";
    constexpr int n = 9;
    rendezvous_burst burst(e, n);
    auto const& [payloads, ended, errors, early, held] = burst;
    EXPECT_EQ(held, 8);
    EXPECT_EQ(e.a->stats().batches_sent, shm ? 1u : 2u) << "before any progress pass";
    ASSERT_TRUE(
        e.pump([&] { return ended == n && e.got_b.size() == static_cast<std::size_t>(n); }));
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(early, 0) << "sends completed before their parcels arrived";
    EXPECT_EQ(e.a->stats().rendezvous_sends, std::uint64_t{n});
    expect_each_once_from_a(e, n, rendezvous_burst::payload);
}

TEST_P(transport, a_lone_parcel_is_not_held_back) {
    auto& e = *eps_;
    for (int round = 0; round < 20; ++round) {
        bool sent = false;
        e.a->send_coalesced(1, cs::save(round), [&](std::error_code) { sent = true; });
        ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
        e.got_b.clear();
    }
    // Each left at once, a batch of its own (nothing held it: no other parcel joined it).
    auto const st = e.a->stats();
    EXPECT_EQ(st.lone_batches, 20u);
    EXPECT_EQ(st.batches_sent, 20u);
    EXPECT_EQ(st.parcels_in_batches, 20u);
}

TEST_P(transport, with_coalescing_off_every_parcel_is_its_own_message) {
    std::unique_ptr<pair_of_endpoints> off;
    try {
        off = std::make_unique<pair_of_endpoints>(GetParam(), 42, 0, false, 0, false);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    auto st = coalesced_burst(*off, 100, 0);
    EXPECT_EQ(st.batches_sent, 0u);
    EXPECT_EQ(st.parcels_in_batches, 0u);
}

TEST_P(transport, an_eager_message_over_the_inject_size_to_a_busy_peer_goes_through_the_outbox) {
    // shm with an outbox: parcels of ~6 KB (eager: index inline, over shm's 4096-byte inject
    // size). Sent one at a time, each goes split in two parts (the latency path). Sent in a
    // burst, all but the first two find the destination busy: their index is staged in the
    // outbox and announced, the announcements in batches. tcp has no outbox and sends them
    // whole. Either way every parcel arrives once and intact and its handler runs once. (No
    // message rings: with them each goes whole through the ring, see the next test.)
    bool const shm = GetParam() == "shm";
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>(GetParam(), 42, pp::transport_options{}.read_budget,
                                                false, 0, true, 8192, true, 0, 8u << 20, 0, false,
                                                /*shm_rings=*/false);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    cs::options copy_all;
    copy_all.zero_copy = false;
    auto payload = [](int i) {
        std::vector<char> v(6000 + static_cast<std::size_t>(i));
        for (std::size_t k = 0; k < v.size(); ++k) {
            v[k] = static_cast<char>(k * 13 + static_cast<std::size_t>(i));
        }
        return v;
    };
    constexpr int lone = 8, burst = 64;
    int handled = 0, errors = 0;
    auto on_sent = [&](std::error_code ec) {
        ++handled;
        errors += ec ? 1 : 0;
    };
    for (int i = 0; i < lone; ++i) {
        e->a->send_coalesced(1, cs::save(copy_all, i, payload(i)), on_sent);
        ASSERT_TRUE(e->pump([&] { return handled == i + 1 && e->got_b.size() == i + 1u; }));
    }
    auto const alone = e->a->stats();
    EXPECT_EQ(alone.outbox_chunks_sent, 0u) << "a lone parcel keeps its eager message";
    EXPECT_EQ(alone.split_sends, shm ? std::uint64_t{lone} : 0u);
    for (int i = lone; i < lone + burst; ++i) {
        e->a->send_coalesced(1, cs::save(copy_all, i, payload(i)), on_sent);
    }
    ASSERT_TRUE(
        e->pump([&] { return handled == lone + burst && e->got_b.size() == lone + burst; }));
    EXPECT_EQ(errors, 0);
    auto const st = e->a->stats();
    if (shm) {
        EXPECT_GE(st.outbox_chunks_sent - alone.outbox_chunks_sent, std::uint64_t{burst - 2});
        EXPECT_GE(st.rendezvous_sends, std::uint64_t{burst - 2});
        EXPECT_GT(st.parcels_in_batches, 0u) << "the announcements join batches";
        EXPECT_LE(st.split_sends - alone.split_sends, 2u);
    } else {
        EXPECT_EQ(st.outbox_chunks_sent, 0u);
        EXPECT_EQ(st.rendezvous_sends, 0u);
    }
    expect_each_once_from_a(*e, lone + burst, payload);
}

TEST_P(transport, on_shm_eager_messages_go_whole_through_the_message_ring) {
    // shm with message rings and an outbox: the parcels of ~6 KB of the test above, lone and
    // in a burst, and small ones coalesced. Every eager message goes whole through the ring:
    // no split, no staged index, no rendezvous, no DONE. tcp has no rings. A burst that
    // fills the ring goes on through the provider (refusals), and everything arrives once,
    // intact.
    bool const shm = GetParam() == "shm";
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>(GetParam(), 42, pp::transport_options{}.read_budget,
                                                false, 0, true, 8192, true, 0, 8u << 20);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    cs::options copy_all;
    copy_all.zero_copy = false;
    auto payload = [](int i) {
        std::vector<char> v(i % 2 == 0 ? 6000 + static_cast<std::size_t>(i)
                                       : 8 + static_cast<std::size_t>(i));
        for (std::size_t k = 0; k < v.size(); ++k) {
            v[k] = static_cast<char>(k * 13 + static_cast<std::size_t>(i));
        }
        return v;
    };
    int handled = 0, errors = 0;
    auto on_sent = [&](std::error_code ec) {
        ++handled;
        errors += ec ? 1 : 0;
    };
    // The first message may find the ring not attached yet: one round trip first.
    e->a->send(1, cs::save(-1), nullptr);
    ASSERT_TRUE(e->pump([&] { return e->got_b.size() == 1; }));
    e->got_b.clear();
    auto const start = e->a->stats();
    constexpr int lone = 8, burst = 200;
    for (int i = 0; i < lone; ++i) {
        e->a->send_coalesced(1, cs::save(copy_all, i, payload(i)), on_sent);
        ASSERT_TRUE(e->pump([&] { return handled == i + 1 && e->got_b.size() == i + 1u; }));
    }
    auto const alone = e->a->stats();
    if (shm) {
        EXPECT_EQ(alone.ring_messages_sent - start.ring_messages_sent, std::uint64_t{lone});
    }
    for (int i = lone; i < lone + burst; ++i) {
        e->a->send_coalesced(1, cs::save(copy_all, i, payload(i)), on_sent);
    }
    ASSERT_TRUE(
        e->pump([&] { return handled == lone + burst && e->got_b.size() == lone + burst; }));
    EXPECT_EQ(errors, 0);
    auto const st = e->a->stats();
    auto const got = e->b->stats();
    if (shm) {
        EXPECT_EQ(st.outbox_chunks_sent, 0u);
        EXPECT_EQ(st.rendezvous_sends, 0u);
        EXPECT_EQ(st.done_messages + got.done_messages, 0u);
        EXPECT_GT(st.parcels_in_batches, 0u) << "the burst coalesced";
        // Sent by ring, or through the provider when the ring was full (refused): whole or
        // split, never staged.
        EXPECT_GT(st.ring_messages_sent - alone.ring_messages_sent, 0u);
        EXPECT_EQ(got.ring_messages_received, st.ring_messages_sent);
        if (st.ring_refusals == 0) {
            EXPECT_EQ(st.split_sends, 0u);
        }
    } else {
        EXPECT_EQ(st.ring_messages_sent, 0u);
        EXPECT_EQ(got.ring_messages_received, 0u);
    }
    expect_each_once_from_a(*e, lone + burst, payload);
}

TEST_P(transport, parcels_over_a_third_of_the_inject_size_coalesce_in_batches_of_two_parts_on_shm) {
    // Parcels of ~1.5 KB with no progress between sends. On shm a batch may grow past the
    // 4096-byte inject size (to the largest split message, ~4.8 KB with this 4 KiB eager
    // threshold) and then goes as two parts that the receiver joins: three such parcels share a
    // batch, where a batch of one inject held two and so took none (a third of it at most).
    // On tcp batches are a receive buffer and never split. Every parcel arrives once, intact.
    // (Without message rings, which take such a batch whole.)
    bool const shm = GetParam() == "shm";
    cs::options copy_all;
    copy_all.zero_copy = false;
    auto payload = [](int i) {
        std::vector<char> v(1400 + static_cast<std::size_t>(i % 7));
        for (std::size_t k = 0; k < v.size(); ++k) {
            v[k] = static_cast<char>(k * 7 + static_cast<std::size_t>(i));
        }
        return v;
    };
    std::unique_ptr<pair_of_endpoints> ep;
    try {
        ep =
            std::make_unique<pair_of_endpoints>(GetParam(), 42, pp::transport_options{}.read_budget,
                                                false, 0, true, 4096, true, 0, 0, 0, false,
                                                /*shm_rings=*/false);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    auto& e = *ep;
    constexpr int n = 120;
    int handled = 0, errors = 0;
    for (int i = 0; i < n; ++i) {
        e.a->send_coalesced(1, cs::save(copy_all, i, payload(i)), [&](std::error_code ec) {
            ++handled;
            errors += ec ? 1 : 0;
        });
    }
    ASSERT_TRUE(e.pump([&] { return handled == n && e.got_b.size() == std::size_t{n}; }));
    EXPECT_EQ(errors, 0);
    auto const st = e.a->stats();
    EXPECT_GE(st.parcels_in_batches, std::uint64_t{n - 2});
    EXPECT_LE(st.batches_sent, std::uint64_t{(n + 1) / 2}) << "at least two parcels a batch";
    if (shm) {
        EXPECT_GE(st.split_sends, st.batches_sent / 2) << "batches over the inject size";
    } else {
        EXPECT_EQ(st.split_sends, 0u);
    }
    expect_each_once_from_a(e, n, payload);
    EXPECT_EQ(e.b->stats().messages_received, std::uint64_t{n});
}

TEST_P(transport, a_stream_leaves_at_once_in_a_batch_of_its_own_or_joins_the_batch_held) {
    // transport::send_stream (the runtime's flat posts and calls): a stream to a destination
    // nothing is held for is written into a batch that is posted at once, before any progress
    // pass; the next, behind it in flight, joins a batch that the next pass sends. Their ends
    // are counted with their batches. One too large for a batch is not taken and nothing is
    // sent.
    auto& e = *eps_;
    std::size_t ended = 0;
    e.a->set_counted_handler(
        [&](std::size_t sends, std::error_code ec) { ended += ec ? 1000 : sends; });
    auto const m = cs::save(7, std::vector<int>{1, 2, 3});
    ASSERT_EQ(m.chunks().size(), 1u) << "a stream of one index chunk";
    std::span<std::byte const> const stream = m.data();
    pp::transport::stream_writer const write = copy_stream;
    using sent_as = pp::transport::stream_sent;
    EXPECT_FALSE(e.a->batches_now(1, stream.size())) << "nothing in flight to b";
    ASSERT_TRUE(e.a->takes_streams(1, stream.size()));
    // The limit a runtime keeps instead of asking per stream: takes_streams' answer, exactly.
    std::size_t const limit = e.a->stream_limit(1);
    EXPECT_EQ(e.a->stream_limit(7), 0u) << "no such peer";
    EXPECT_GE(limit, stream.size());
    for (std::size_t n = 1; n <= limit + 4096; n += n < 64 ? 1 : 61) {
        ASSERT_EQ(e.a->takes_streams(1, n), n <= limit) << n << " B, limit " << limit;
    }
    EXPECT_TRUE(e.a->takes_streams(1, limit));
    EXPECT_FALSE(e.a->takes_streams(1, limit + 1));
    ASSERT_EQ(e.a->send_stream(1, stream.size(), write, &stream, nullptr, 0), sent_as::posted);
    EXPECT_EQ(e.a->stats().batches_sent, 1u) << "posted at once, before any progress pass";
    EXPECT_EQ(e.a->stats().parcels_in_batches, 1u);
    EXPECT_EQ(e.a->stats().lone_batches, 1u);
    ASSERT_EQ(e.a->send_stream(1, stream.size(), write, &stream, nullptr, 0), sent_as::held)
        << "the first is in flight (no pass has seen it complete)";
    EXPECT_EQ(e.a->stats().batches_sent, 1u) << "held until a pass";
    ASSERT_TRUE(e.pump([&] { return ended == 2 && e.got_b.size() == 2; }));
    EXPECT_EQ(e.a->stats().batches_sent, 2u);
    EXPECT_EQ(e.a->stats().lone_batches, 1u);
    for (auto const& [src, got] : e.got_b) {
        int i = 0;
        std::vector<int> v;
        cs::load(got, i, v);
        EXPECT_EQ(i, 7);
        EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
    }
    std::vector<std::byte> big(std::size_t{1} << 20);
    std::span<std::byte const> const huge(big);
    EXPECT_FALSE(e.a->takes_streams(1, huge.size()));
    EXPECT_EQ(e.a->send_stream(1, huge.size(), write, &huge, nullptr, 0), sent_as::refused);
    EXPECT_EQ(e.a->stats().batches_sent, 2u);
    EXPECT_EQ(ended, 2u);
}

INSTANTIATE_TEST_SUITE_P(providers, transport, transport_providers, provider_label);

TEST(tcp_coalescing, a_batch_leaves_once_it_holds_16_parcels_and_16_KiB_without_progress) {
    // A tcp batch holds up to a receive buffer (~100 KiB): one of 16 parcels and 16 KiB
    // amortizes its send already and leaves from within the sender's loop, so that the receiver
    // works meanwhile (a window of 64 posts of 1 KiB as one batch ran at 0.75x). Parcels of
    // 1000 bytes: the first alone (a batch of its own), then 6 batches of 16 before any
    // progress(); 16 parcels of 40 ints are under 16 KiB and stay.
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>("tcp", 42, pp::transport_options{}.read_budget,
                                                false, 0, true, pp::default_eager_threshold("tcp"));
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "tcp unavailable here: " << ex.what();
    }
    int sent = 0;
    auto send = [&](int i, std::size_t bytes) {
        e->a->send_coalesced(1, cs::save(i, std::vector<char>(bytes, static_cast<char>(i))),
                             [&](std::error_code ec) {
                                 EXPECT_FALSE(ec);
                                 ++sent;
                             });
    };
    for (int i = 0; i < 100; ++i) {
        send(i, 1000);
    }
    auto held = [&] {
        auto const st = e->a->stats();
        return std::pair{st.batches_sent - st.lone_batches,
                         st.parcels_in_batches - st.lone_batches};
    };
    EXPECT_EQ(e->a->stats().lone_batches, 1u);
    EXPECT_EQ(held(), std::pair(std::uint64_t{6}, std::uint64_t{96}))
        << "posted from within the loop";
    for (int i = 100; i < 118; ++i) {
        send(i, 160);
    }
    EXPECT_EQ(held().first, 6u) << "16 small parcels are not enough bytes";
    ASSERT_TRUE(e->pump([&] { return sent == 118 && e->got_b.size() == 118; }));
    std::vector<bool> seen(118, false);
    for (auto& [src, m] : e->got_b) {
        int i = -1;
        std::vector<char> v;
        cs::load(m, i, v);
        ASSERT_TRUE(i >= 0 && i < 118) << i;
        EXPECT_FALSE(seen[static_cast<std::size_t>(i)]) << i;
        seen[static_cast<std::size_t>(i)] = true;
        EXPECT_EQ(v, std::vector<char>(i < 100 ? 1000 : 160, static_cast<char>(i)));
    }
}
