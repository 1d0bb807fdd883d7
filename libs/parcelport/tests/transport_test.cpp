// SPDX-License-Identifier: BSL-1.0
// Two real libfabric endpoints, on tcp and on shm: eager and rendezvous round trips, payload
// integrity, zero-copy accounting, split messages, buffer reuse, descriptor tables, rma pool
// sends, the registration cache, the job token, and the shm outbox. Coalescing:
// transport_coalescing_test.cpp; the read budget and pieces: transport_reads_test.cpp.
#include "../src/libfabric/context.hpp"
#include "endpoint_pair.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

namespace fab = courier::parcelport::fabric;

namespace {
/// Parcel i's payload in the outbox tests: `count` ints, k * mul + i.
cs::serialize_buffer<int> numbered_ints(std::size_t count, int mul, int i) {
    cs::serialize_buffer<int> b(count);
    for (std::size_t k = 0; k < b.size(); ++k) {
        b[k] = static_cast<int>(k) * mul + i;
    }
    return b;
}

/// Each of `n` parcels (an int i, then numbered_ints(count, mul, i)) arrived once and intact.
void expect_each_once_intact(std::vector<std::pair<std::uint32_t, cs::message>>& got, int n,
                             std::size_t count, int mul) {
    std::set<int> seen;
    for (auto& [src, m] : got) {
        int i = -1;
        cs::serialize_buffer<int> b;
        cs::load(m, i, b);
        EXPECT_EQ(b, numbered_ints(count, mul, i)) << "parcel " << i;
        seen.insert(i);
    }
    EXPECT_EQ(seen.size(), std::size_t(n));
}

/// A shm pair with an outbox (8 MiB, chunks up to 1 MiB), no coalescing and read budget
/// `budget`, connected by a first parcel (shm needs both sides' progress for that); null if
/// shm is unavailable here (`why` says why).
std::unique_ptr<pair_of_endpoints> connected_shm_pair(std::size_t budget, std::string& why) {
    std::unique_ptr<pair_of_endpoints> e;
    try {
        // No message rings: the first message makes shm's connection (which needs both sides
        // to progress), so that b alone can then receive what a posted.
        e = std::make_unique<pair_of_endpoints>("shm", 42, budget, false, 0,
                                                /*coalescing=*/false, 4096, true, 0,
                                                std::size_t{8} << 20, std::size_t{1} << 20,
                                                /*shm_direct_read=*/false, /*shm_rings=*/false);
    } catch (std::exception const& ex) {
        why = ex.what();
        return nullptr;
    }
    bool sent = false;
    e->a->send(1, cs::save(-1), [&](std::error_code ec) { sent = !ec; });
    EXPECT_TRUE(e->pump([&] { return sent && e->got_b.size() == 1; }));
    e->got_b.clear();
    return e;
}

/// Sends parcels i = 0..n-1 (i, then numbered_ints(count, mul, i)) from a, each send's
/// handler counting into completions[i] when it succeeds, and progresses a alone until
/// whatever it still had to post reached b's queue: b has polled none of them.
void send_while_b_waits(pair_of_endpoints& e, int n, std::size_t count, int mul,
                        std::vector<int>& completions) {
    completions.assign(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
        e.a->send(1, cs::save(i, numbered_ints(count, mul, i)),
                  [&completions, i](std::error_code ec) {
                      completions[static_cast<std::size_t>(i)] += ec ? 0 : 1;
                  });
    }
    for (int k = 0; k < 20; ++k) {
        e.a->progress();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(e.got_b.size(), 0u);
}

/// Sends completed (handlers run without error), of `completions`.
int completed(std::vector<int> const& completions) {
    return static_cast<int>(
        std::count_if(completions.begin(), completions.end(), [](int c) { return c != 0; }));
}
} // namespace

// shm with every peer's message ring mapped reads its provider queue on every eighth pass
// while quiet (libfabric_transport::pass), and a message no ring takes (over a ring's 16 KiB)
// still reaches such a side through the provider. Read on every pass, the quiet passes below
// would count 800 reads.
TEST(shm_rings, a_quiet_side_reads_its_provider_queue_now_and_then_and_gets_what_no_ring_took) {
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>("shm", 42, pp::transport_options{}.read_budget,
                                                false, 0, /*coalescing=*/false,
                                                /*eager_threshold=*/std::size_t{64} << 10);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "no shm endpoint here: " << ex.what();
    }
    // Small messages both ways, through the rings once each side has mapped the other's.
    for (int i = 0; i < 4; ++i) {
        e->a->send(1, cs::save(i), nullptr);
        e->b->send(0, cs::save(i), nullptr);
        ASSERT_TRUE(e->pump([&] {
            return e->got_a.size() == std::size_t(i + 1) && e->got_b.size() == std::size_t(i + 1);
        }));
    }
    ASSERT_GT(e->b->stats().ring_messages_received, 0u);
    for (int i = 0; i < 200; ++i) { // past the hot window of the last activity
        e->b->progress();
    }
    auto const reads_before = e->b->stats().completion_queue_reads;
    for (int i = 0; i < 800; ++i) {
        e->b->progress();
    }
    auto const reads = e->b->stats().completion_queue_reads - reads_before;
    EXPECT_GE(reads, 95u);
    EXPECT_LE(reads, 105u);

    auto const rings_before = e->b->stats().ring_messages_received;
    cs::options copy_all;
    copy_all.zero_copy = false;
    std::vector<char> v(std::size_t{32} << 10, 'q');
    v.back() = 'z';
    e->a->send(1, cs::save(copy_all, v), nullptr);
    ASSERT_TRUE(e->pump([&] { return e->got_b.size() == 5; }));
    std::vector<char> got;
    cs::load(e->got_b.back().second, got);
    EXPECT_EQ(got, v);
    EXPECT_EQ(e->b->stats().ring_messages_received, rings_before); // it came through shm itself
}

TEST_P(transport, eager_message_round_trip) {
    auto& e = *eps_;
    bool sent = false;
    e.a->send(1, cs::save(std::string("hello"), 42), [&](std::error_code ec) {
        EXPECT_FALSE(ec);
        sent = true;
    });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
    std::string s;
    int i = 0;
    cs::load(e.got_b[0].second, s, i);
    EXPECT_EQ(e.got_b[0].first, 0u);
    EXPECT_EQ(s, "hello");
    EXPECT_EQ(i, 42);
    auto st = e.a->stats();
    EXPECT_EQ(st.rendezvous_sends, 0u);
    EXPECT_EQ(st.registrations, 0u);
}

TEST_P(transport, messages_up_to_the_providers_default_eager_threshold_travel_whole) {
    // 96 KiB on tcp (with rxm's eager limit raised to match), 8 KiB on shm: index data just
    // under the threshold goes in one eager message, back to back (the send slots keep their
    // large eager buffers), and arrives intact.
    std::size_t const eager = pp::default_eager_threshold(GetParam());
    pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, false, 0, true, eager);
    cs::options copy_all;
    copy_all.zero_copy = false;
    constexpr int n = 40;
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        std::vector<char> v(eager - 512, static_cast<char>('a' + i % 26));
        v.back() = static_cast<char>(i);
        e.a->send(1, cs::save(copy_all, v, i), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            ++sent;
        });
        if (i % 8 == 7) { // a few in flight at a time, as a window
            ASSERT_TRUE(e.pump([&] { return sent == i + 1; }));
        }
    }
    ASSERT_TRUE(e.pump([&] { return sent == n && e.got_b.size() == std::size_t{n}; }));
    for (int i = 0; i < n; ++i) {
        std::vector<char> v;
        int k = -1;
        cs::load(e.got_b[static_cast<std::size_t>(i)].second, v, k);
        ASSERT_EQ(v.size(), eager - 512);
        EXPECT_EQ(v.back(), static_cast<char>(k));
        EXPECT_EQ(v.front(), static_cast<char>('a' + k % 26));
    }
    auto st = e.a->stats();
    EXPECT_EQ(st.rendezvous_sends, 0u);
    EXPECT_EQ(st.messages_sent, std::uint64_t{n});
    EXPECT_GE(st.eager_bytes_sent, std::uint64_t{n} * (eager - 512));
}

TEST_P(transport, on_tcp_a_large_inline_index_is_sent_from_the_message_not_copied) {
    // Eager parcels whose index is 4-64 KiB go out as two iovs (header and descriptors, then
    // the index from the message itself) where the provider takes iovs without a copy: tcp.
    // The receiver sees the same bytes as from one copied buffer. Sizes around the 4 KiB and
    // 64 KiB lines and up to the eager threshold, several in flight (not coalesced: a batch
    // copies what it carries).
    std::size_t const eager = pp::default_eager_threshold(GetParam());
    pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, false, 0,
                        /*coalescing=*/false, eager);
    cs::options copy_all;
    copy_all.zero_copy = false;
    std::vector<std::size_t> sizes = {100, 4000, 4100, 6000};
    if (eager > 66000) {
        sizes.insert(sizes.end(), {65400, 65600});
    }
    sizes.insert(sizes.end(), {eager - 600, eager - 512});
    int sent = 0;
    auto const before = e.a->stats();
    std::uint64_t index_bytes = 0, large_index_bytes = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::vector<char> v(sizes[i]);
        for (std::size_t k = 0; k < v.size(); ++k) {
            v[k] = static_cast<char>(k * 7 + i);
        }
        auto m = cs::save(copy_all, v, static_cast<int>(i));
        index_bytes += m.data().size();
        bool const apart = m.data().size() >= 4096 && m.data().size() <= 65536;
        large_index_bytes += apart ? m.data().size() : 0;
        e.a->send(1, std::move(m), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            ++sent;
        });
    }
    ASSERT_TRUE(
        e.pump([&] { return sent == int(sizes.size()) && e.got_b.size() == sizes.size(); }));
    std::set<int> seen;
    for (auto& [src, m] : e.got_b) {
        std::vector<char> v;
        int i = -1;
        cs::load(m, v, i);
        ASSERT_GE(i, 0);
        ASSERT_EQ(v.size(), sizes[std::size_t(i)]);
        for (std::size_t k = 0; k < v.size(); ++k) {
            ASSERT_EQ(v[k], static_cast<char>(k * 7 + std::size_t(i))) << "parcel " << i;
        }
        seen.insert(i);
    }
    EXPECT_EQ(seen.size(), sizes.size());
    auto const after = e.a->stats();
    std::uint64_t const copied = after.bytes_copied_on_send - before.bytes_copied_on_send;
    if (GetParam() == "shm") {
        EXPECT_EQ(copied, index_bytes); // shm copies eager messages through its inject buffers
    } else {
        EXPECT_EQ(copied, index_bytes - large_index_bytes);
    }
    EXPECT_EQ(after.rendezvous_sends, before.rendezvous_sends);
}

TEST_P(transport, messages_a_little_over_the_inject_size_go_in_two_parts_on_shm) {
    // Eager messages from below shm's inject size (4096 bytes in libfabric 1.17) to the
    // largest eager message (5 KiB). On shm without message rings the ones of 4097 to 5120
    // bytes go as two parts and are joined by the receiver; tcp never splits, nor shm with
    // split_messages off, nor shm with rings (each message goes whole through the ring).
    // Then all of them at once, in both directions: each arrives once and intact.
    bool const shm = GetParam() == "shm";
    for (auto [split, rings] : {std::pair{true, false}, {false, false}, {true, true}}) {
        pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, false, 0, true,
                            4096, split, 0, 0, 0, false, rings);
        cs::options copy_all;
        copy_all.zero_copy = false;
        auto payload = [](int i) {
            std::vector<char> v(static_cast<std::size_t>(3900 + 37 * i));
            for (std::size_t k = 0; k < v.size(); ++k) {
                v[k] = static_cast<char>(k * 31 + static_cast<std::size_t>(i));
            }
            return v;
        };
        constexpr int n = 32;
        int split_count = 0;
        for (int i = 0; i < n; ++i) {
            auto before = e.a->stats();
            bool sent = false;
            e.a->send(1, cs::save(copy_all, i, payload(i)), [&](std::error_code ec) {
                EXPECT_FALSE(ec);
                sent = true;
            });
            ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == std::size_t(i + 1); }));
            auto after = e.a->stats();
            auto eager = after.eager_bytes_sent - before.eager_bytes_sent;
            bool was_split = after.split_sends != before.split_sends;
            EXPECT_EQ(was_split, shm && split && !rings && eager > 4096 && eager <= 5120)
                << "message of " << eager << " bytes";
            bool const by_ring = after.ring_messages_sent != before.ring_messages_sent;
            // The first message may find the ring not attached yet.
            if (i > 0) {
                EXPECT_EQ(by_ring, shm && rings) << "message " << i;
            }
            EXPECT_EQ(after.rendezvous_sends, 0u);
            split_count += was_split;
        }
        if (shm && split && !rings) {
            EXPECT_GE(split_count, n / 2);
        }
        for (int i = 0; i < n; ++i) {
            e.a->send(1, cs::save(copy_all, n + i, payload(i)), nullptr);
            e.b->send(0, cs::save(copy_all, 2 * n + i, payload(i)), nullptr);
        }
        ASSERT_TRUE(e.pump([&] {
            return e.got_b.size() == std::size_t(2 * n) && e.got_a.size() == std::size_t(n);
        }));
        std::vector<int> seen(3 * n, 0);
        for (auto* got : {&e.got_b, &e.got_a}) {
            for (auto& [src, m] : *got) {
                int i = -1;
                std::vector<char> v;
                cs::load(m, i, v);
                ASSERT_TRUE(i >= 0 && i < 3 * n) << i;
                ++seen[static_cast<std::size_t>(i)];
                EXPECT_EQ(v, payload(i % n)) << i;
                EXPECT_EQ(src, i < 2 * n ? 0u : 1u) << i;
            }
        }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    }
}

TEST_P(transport, rendezvous_pulls_pointer_chunks_without_copying_on_send) {
    auto& e = *eps_;
    std::vector<double> big(1 << 20); // 8 MiB
    std::iota(big.begin(), big.end(), 0.25);
    cs::serialize_buffer<char> buf(std::size_t{100000});
    std::fill(buf.begin(), buf.end(), 'z');
    bool sent = false;
    e.a->send(1, cs::save(big, buf, std::string("tail")), [&](std::error_code ec) {
        EXPECT_FALSE(ec);
        sent = true;
    });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
    std::vector<double> big2;
    cs::serialize_buffer<char> buf2;
    std::string tail;
    auto& m = e.got_b[0].second;
    cs::load(m, big2, buf2, tail);
    EXPECT_EQ(big2, big);
    EXPECT_EQ(buf2, buf);
    EXPECT_EQ(tail, "tail");
    // The received serialize_buffer adopted the receive buffer (no copy out of it).
    ASSERT_EQ(m.external_chunk_count(), 2u);
    EXPECT_EQ(reinterpret_cast<std::byte const*>(buf2.data()), m.chunks()[3].address);
    auto sa = e.a->stats();
    auto sb = e.b->stats();
    EXPECT_EQ(sa.rendezvous_sends, 1u);
    // Only the small index data was copied into the eager buffer, never the 8 MiB payload.
    EXPECT_GT(sa.bytes_copied_on_send, 0u);
    EXPECT_LT(sa.bytes_copied_on_send, 64u);
    EXPECT_LT(sa.eager_bytes_sent, 1024u);
    EXPECT_EQ(sb.rma_bytes_read, big.size() * sizeof(double) + 100000);
}

TEST_P(transport, receive_buffers_are_reused_once_released) {
    auto& e = *eps_;
    std::vector<char> payload(1 << 20, 'p');
    for (int round = 0; round < 3; ++round) {
        bool sent = false;
        cs::serialize_buffer<char> out(payload.data(), payload.size(),
                                       cs::serialize_buffer<char>::reference);
        e.a->send(1, cs::save(out), [&](std::error_code) { sent = true; });
        ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
        cs::serialize_buffer<char> in;
        cs::load(e.got_b[0].second, in);
        ASSERT_EQ(in.size(), payload.size());
        EXPECT_EQ(in[12345], 'p');
        // While the received buffer is alive it is the user's; once released it is reused.
        e.got_b.clear();
    }
    EXPECT_EQ(e.b->stats().receive_buffers_reused, 2u);
}

TEST_P(transport, index_data_too_big_for_the_eager_buffer_is_read_remotely) {
    auto& e = *eps_;
    std::vector<std::string> many(2000, std::string(50, 's')); // ~100 KB of index data
    bool sent = false;
    e.a->send(1, cs::save(many), [&](std::error_code) { sent = true; });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
    std::vector<std::string> out;
    cs::load(e.got_b[0].second, out);
    EXPECT_EQ(out, many);
    EXPECT_GE(e.b->stats().rma_bytes_read, 100000u);
}

TEST_P(transport, both_directions_and_many_messages_in_flight) {
    auto& e = *eps_;
    constexpr int n = 2000; // more than the posted receives: exercises -FI_EAGAIN and refill
    int sent = 0;
    std::vector<std::vector<int>> payloads;
    for (int i = 0; i < n; ++i) {
        payloads.emplace_back(static_cast<std::size_t>(i % 3 == 0 ? 5000 : 10), i);
    }
    for (int i = 0; i < n; ++i) {
        e.a->send(1, cs::save(i, payloads[static_cast<std::size_t>(i)]),
                  [&](std::error_code ec) { sent += !ec; });
        e.b->send(0, cs::save(-i), [&](std::error_code ec) { sent += !ec; });
    }
    ASSERT_TRUE(e.pump([&] {
        return sent == 2 * n && e.got_b.size() == std::size_t{n} &&
               e.got_a.size() == std::size_t{n};
    }));
    std::vector<bool> seen(n);
    for (auto& [src, m] : e.got_b) {
        int i = 0;
        std::vector<int> v;
        cs::load(m, i, v);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, n);
        EXPECT_EQ(v, payloads[static_cast<std::size_t>(i)]);
        seen[static_cast<std::size_t>(i)] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), n);
    // Every send left the send table (slots are reused), and a second wave through the
    // recycled slots completes the same way.
    EXPECT_NE(e.a->debug_state().find("sends in flight 0,"), std::string::npos)
        << e.a->debug_state();
    e.got_b.clear();
    for (int i = 0; i < n; ++i) {
        e.a->send(1, cs::save(i, payloads[static_cast<std::size_t>(i)]),
                  [&](std::error_code ec) { sent += !ec; });
    }
    ASSERT_TRUE(e.pump([&] { return sent == 3 * n && e.got_b.size() == std::size_t{n}; }));
    EXPECT_NE(e.a->debug_state().find("sends in flight 0,"), std::string::npos)
        << e.a->debug_state();
}

TEST_P(transport, a_message_with_the_wrong_job_token_is_dropped) {
    pair_of_endpoints e(GetParam(), 7); // b expects token 7, a sends 42
    bool sent = false;
    testing::internal::CaptureStderr();
    e.a->send(1, cs::save(1), [&](std::error_code) { sent = true; });
    e.pump([&] { return sent; });
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) {
        e.a->progress();
        e.b->progress();
    }
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(e.got_b.empty());
    EXPECT_NE(err.find("job token"), std::string::npos) << err;
}

// The rma pool is registered with `a`: an rma_vector leaves `a` without any registration and
// arrives at `b` in pool memory, which the loaded rma_vector adopts (no copy on either side).
TEST_P(transport, rma_vectors_travel_without_registration_or_copies) {
    eps_.reset(); // the pool attaches to one transport per process: make `a` that one
    pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, true);
    ASSERT_EQ(courier::rma::attached_registrar() != nullptr, true);
    courier::rma_vector<double> v(1 << 18); // 2 MiB
    std::iota(v.begin(), v.end(), 1.0);
    auto obj = courier::make_rma_object<std::array<int, 4096>>();
    (*obj)[4095] = 7;
    auto before_a = e.a->stats();
    auto before_pool = courier::rma::get_pool_statistics();
    bool sent = false;
    e.a->send(1, cs::save(v, obj), [&](std::error_code ec) {
        EXPECT_FALSE(ec);
        sent = true;
    });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
    auto after_a = e.a->stats();
    EXPECT_EQ(after_a.registrations, before_a.registrations) << "the sender registered memory";
    EXPECT_EQ(after_a.pool_chunks_sent - before_a.pool_chunks_sent, 2u);
    EXPECT_EQ(after_a.bytes_copied_on_send - before_a.bytes_copied_on_send,
              e.got_b[0].second.index_size());
    auto& m = e.got_b[0].second;
    courier::rma_vector<double> w;
    courier::rma_object<std::array<int, 4096>> obj2;
    cs::load(m, w, obj2);
    EXPECT_EQ(w, v);
    EXPECT_EQ((*obj2)[4095], 7);
    EXPECT_EQ(e.b->stats().pool_receive_buffers, 2u);
    EXPECT_TRUE(courier::rma::contains(w.data(), w.size() * sizeof(double)));
    EXPECT_EQ(reinterpret_cast<std::byte const*>(w.data()), m.chunks()[1].address)
        << "the rma_vector adopted the receive buffer";
    auto after_pool = courier::rma::get_pool_statistics();
    EXPECT_EQ(after_pool.adopted_loads - before_pool.adopted_loads, 2u);
    EXPECT_EQ(after_pool.copied_loads, before_pool.copied_loads);
    // And back, from b (not attached: its registration comes from the cache) to a.
    sent = false;
    e.b->send(0, cs::save(w), [&](std::error_code ec) {
        EXPECT_FALSE(ec);
        sent = true;
    });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_a.size() == 1; }));
    courier::rma_vector<double> back;
    cs::load(e.got_a[0].second, back);
    EXPECT_EQ(back, v);
    EXPECT_EQ(e.b->stats().registration_cache_misses, 1u);
}

// A registration is cached: sending the same buffer again registers nothing. And a cached
// registration of memory that was unmapped and mapped again at the same address reads the new
// contents (these providers resolve addresses when the read happens).
TEST_P(transport, the_registration_cache_reuses_and_stays_correct_when_memory_is_reused) {
    auto& e = *eps_;
    constexpr std::size_t n = std::size_t{1} << 20;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    auto send_and_check = [&](char fill) {
        std::memset(p, fill, n);
        cs::serialize_buffer<char> view(static_cast<char*>(p), n,
                                        cs::serialize_buffer<char>::reference);
        bool sent = false;
        e.a->send(1, cs::save(view), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            sent = true;
        });
        std::size_t want = e.got_b.size() + 1;
        ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == want; }));
        cs::serialize_buffer<char> got;
        cs::load(e.got_b.back().second, got);
        ASSERT_EQ(got.size(), n);
        EXPECT_EQ(got[0], fill);
        EXPECT_EQ(got[n - 1], fill);
    };
    send_and_check('a');
    auto s1 = e.a->stats();
    EXPECT_EQ(s1.registration_cache_misses, 1u);
    send_and_check('b');
    auto s2 = e.a->stats();
    EXPECT_EQ(s2.registrations, s1.registrations) << "the second send registered again";
    EXPECT_EQ(s2.registration_cache_hits, 1u);
    // Free the memory and map new memory at the same address.
    ASSERT_EQ(::munmap(p, n), 0);
    void* q = ::mmap(p, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_EQ(q, p) << "could not map at the same address";
    send_and_check('c');
    EXPECT_EQ(e.a->stats().registration_cache_hits, 2u) << "the reused address was a cache hit";
    ::munmap(q, n);
}

// More chunks than the eager message can describe (a deep copy with many arrays): the
// descriptor list travels as a table the receiver reads first.
TEST_P(transport, a_message_with_thousands_of_chunks_reads_its_descriptor_table) {
    auto& e = *eps_;
    std::vector<std::vector<char>> arrays(2000);
    cs::message m;
    {
        cs::output_archive ar(m);
        for (std::size_t i = 0; i < arrays.size(); ++i) {
            arrays[i].assign(4096 + i, static_cast<char>('a' + i % 26));
            ar.save(arrays[i]);
        }
    }
    ASSERT_EQ(m.external_chunk_count(), arrays.size());
    bool sent = false;
    e.a->send(1, std::move(m), [&](std::error_code ec) {
        EXPECT_FALSE(ec);
        sent = true;
    });
    ASSERT_TRUE(e.pump([&] { return sent && e.got_b.size() == 1; }));
    cs::input_archive in(e.got_b[0].second);
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        std::vector<char> v;
        in.load(v);
        ASSERT_EQ(v, arrays[i]) << i;
    }
    in.finish();
    EXPECT_LT(e.a->stats().eager_bytes_sent, 4096u) << "the descriptors went out of band";
}

TEST_P(transport, on_shm_chunks_up_to_the_outbox_chunk_are_copied_through_the_outbox) {
    // A 64 KiB chunk is staged in the sender's outbox and copied out by the receiver: no RMA
    // read. A 2 MiB chunk (over shm_outbox_chunk, 1 MiB) is read as before. tcp has no outbox.
    bool const shm = GetParam() == "shm";
    pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, false, 0, true, 4096,
                        true, 0, std::size_t{8} << 20, std::size_t{1} << 20, false, true, no_push);
    auto const a0 = e.a->stats();
    auto const b0 = e.b->stats();
    EXPECT_EQ(reads_to_receive_any(e, 65536), shm ? 0u : 1u);
    auto const a1 = e.a->stats();
    auto const b1 = e.b->stats();
    EXPECT_EQ(a1.outbox_chunks_sent - a0.outbox_chunks_sent, shm ? 1u : 0u);
    EXPECT_EQ(b1.outbox_chunks_received - b0.outbox_chunks_received, shm ? 1u : 0u);
    EXPECT_EQ(b1.outbox_bytes_received - b0.outbox_bytes_received, shm ? 65536u : 0u);
    EXPECT_GE(reads_to_receive_any(e, std::size_t{2} << 20), 1u);
    auto const a2 = e.a->stats();
    EXPECT_EQ(a2.outbox_chunks_sent, a1.outbox_chunks_sent);
    EXPECT_EQ(e.b->stats().rma_bytes_read - b1.rma_bytes_read, std::size_t{2} << 20);
}

TEST_P(transport, a_full_outbox_sends_from_the_callers_memory_and_loses_nothing) {
    // An outbox with room for four 60000-byte chunks, and twenty sent at once: the ones that
    // find no room are read from the sender's memory; all arrive, once each and intact; once
    // every DONE came, the outbox is empty again and takes the next chunk.
    if (GetParam() != "shm") {
        std::printf("no outbox on %s: nothing to fill\n", GetParam().c_str());
        return;
    }
    pair_of_endpoints e(GetParam(), 42, pp::transport_options{}.read_budget, false, 0, true, 4096,
                        true, 0, 4096 + 4 * 60032, 65536);
    constexpr int n = 20;
    auto payload = [](int i) { return numbered_ints(15000, 7, i); };
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        e.a->send(1, cs::save(i, payload(i)), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            ++sent;
        });
    }
    ASSERT_TRUE(e.pump([&] { return sent == n && e.got_b.size() == std::size_t(n); }));
    auto const s = e.a->stats();
    EXPECT_GE(s.outbox_chunks_sent, 1u);
    EXPECT_LT(s.outbox_chunks_sent, std::uint64_t{n});
    EXPECT_EQ(e.b->stats().outbox_chunks_received, s.outbox_chunks_sent);
    EXPECT_EQ(e.b->stats().rma_reads, n - s.outbox_chunks_sent);
    expect_each_once_intact(e.got_b, n, 15000, 7);
    // Every block went back: a chunk as large as the outbox allows is staged again.
    e.got_b.clear();
    bool done = false;
    e.a->send(1, cs::save(n, payload(n)), [&](std::error_code) { done = true; });
    ASSERT_TRUE(e.pump([&] { return done && e.got_b.size() == 1; }));
    EXPECT_EQ(e.a->stats().outbox_chunks_sent, s.outbox_chunks_sent + 1);
}

TEST(shm_outbox, a_lone_calls_chunk_is_read_and_a_streams_chunks_are_staged) {
    // With shm_outbox_idle = 0 (the default on Intel processors) a parcel to a peer with
    // nothing in flight has its 16 KiB chunk read from the sender's memory: one copy of lines
    // no one wrote rather than two. Parcels sent while a message to the peer is in flight (a
    // stream; coalesce_in_flight, 1 on shm with message rings) are staged. Every parcel arrives
    // intact either way.
    pp::transport_options o;
    o.provider = "shm";
    o.job_token = 42;
    o.shm_outbox_idle = 0;
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    if (std::string why; !open_two_altered(
            o, a, b, [](fab::address_parts&) {}, got, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    cs::serialize_buffer<char> buf(16384);
    for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = static_cast<char>(i * 11 + 3);
    }
    send_one_checked(*a, *b, got, buf);
    EXPECT_EQ(a->stats().outbox_chunks_sent, 0u) << "a lone call's chunk was staged";
    EXPECT_EQ(b->stats().rma_reads, 1u);
    EXPECT_EQ(b->stats().rma_bytes_read, 16384u);
    // A stream: eight parcels sent before b polls any. The first finds nothing in flight and
    // is read; the other seven are staged.
    constexpr int n = 8;
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        a->send(1, cs::save(i, numbered_ints(4096, 5, i)), [&](std::error_code ec) {
            EXPECT_FALSE(ec);
            ++sent;
        });
    }
    got.clear();
    ASSERT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return sent == n && got.size() == n; }, std::chrono::seconds(30)));
    EXPECT_EQ(a->stats().outbox_chunks_sent, std::uint64_t{n - 1});
    EXPECT_EQ(b->stats().outbox_chunks_received, std::uint64_t{n - 1});
    EXPECT_EQ(b->stats().rma_reads, 2u);
    std::set<int> seen;
    for (auto& m : got) {
        int i = -1;
        cs::serialize_buffer<int> v;
        cs::load(m, i, v);
        EXPECT_EQ(v, numbered_ints(4096, 5, i)) << "parcel " << i;
        seen.insert(i);
    }
    EXPECT_EQ(seen.size(), std::size_t(n));
}

TEST(shm_outbox, one_progress_pass_lands_at_most_the_read_budget) {
    // Copies out of an outbox complete within the pass that admits them, and their budget
    // comes back at once; the bytes they landed still count against the budget until the
    // pass ends, so that the tasks of the parcels delivered run (and free their landing
    // buffers) before more land. Sixteen parcels of 200 KB, all staged, are waiting when b
    // polls with a 512 KiB budget: its first pass that delivers any delivers at most two, and
    // the rest follow intact.
    std::string why;
    auto e = connected_shm_pair(std::size_t{512} << 10, why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    constexpr int n = 16;
    std::vector<int> completions;
    send_while_b_waits(*e, n, 50000, 3, completions);
    ASSERT_EQ(e->a->stats().outbox_chunks_sent, std::uint64_t{n});
    // b's first passes may only connect; the first that delivers anything delivers two.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (e->got_b.empty() && std::chrono::steady_clock::now() < until) {
        e->b->progress();
    }
    // Two fit the budget (200 KB + 200 KB <= 512 KiB); one if shm handed that pass only one.
    EXPECT_GE(e->got_b.size(), 1u);
    EXPECT_LE(e->got_b.size(), 2u) << "one pass landed more than the budget";
    EXPECT_GT(e->b->stats().deferred_rendezvous, 0u);
    ASSERT_TRUE(e->pump([&] {
        return completed(completions) == n && e->got_b.size() == static_cast<std::size_t>(n);
    }));
    expect_each_once_intact(e->got_b, n, 50000, 3);
    EXPECT_EQ(e->b->stats().outbox_chunks_received, std::uint64_t{n});
}

TEST(shm_outbox, the_dones_of_one_pass_go_as_one_message) {
    // Sixteen rendezvous parcels of 80 KB, all waiting when b polls, land within its first
    // passes (a 16 MiB budget): in each pass b answers the first at once and the others
    // together at its end, two DONE messages per pass (it sent sixteen before). Every send
    // completes, each once and only by its DONE.
    std::string why;
    auto e = connected_shm_pair(std::size_t{16} << 20, why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    constexpr int n = 16;
    std::vector<int> completions;
    send_while_b_waits(*e, n, 20000, 5, completions);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int passes = 0; // b's passes that delivered any (a does not progress meanwhile)
    while (e->got_b.size() < std::size_t(n) && std::chrono::steady_clock::now() < until) {
        std::size_t before = e->got_b.size();
        e->b->progress();
        passes += e->got_b.size() != before;
    }
    ASSERT_EQ(e->got_b.size(), std::size_t(n));
    auto const dones = e->b->stats().done_messages;
    EXPECT_LE(dones, 2u * static_cast<std::uint64_t>(passes));
    EXPECT_LT(dones, std::uint64_t{n} / 2) << passes << " passes";
    // a progressed (its eager sends completed), but no DONE has reached it yet.
    EXPECT_EQ(completed(completions), 0) << "a send completed before its DONE arrived";
    ASSERT_TRUE(e->pump([&] { return completed(completions) == n; }));
    for (int c : completions) {
        EXPECT_EQ(c, 1);
    }
    expect_each_once_intact(e->got_b, n, 20000, 5);
    EXPECT_EQ(e->b->stats().done_messages, dones);
}

TEST(shm_outbox, a_receiver_that_cannot_map_the_senders_outbox_reads_the_chunk_from_it) {
    // The sender stages the chunk in its outbox either way; b is given a's address with the
    // outbox's name replaced by one that does not exist, so b cannot map it and reads the
    // announced range with fi_read (the outbox is registered): the chunk arrives intact.
    pp::transport_options o;
    o.provider = "shm";
    o.job_token = 42;
    o.shm_direct_read = false;
    o.shm_outbox_chunk = std::size_t{1} << 20; // the 64 KiB chunk is staged on any processor
    o.shm_outbox_idle = 1;                     // and to an idle peer
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    auto no_outbox = [](fab::address_parts& parts) {
        EXPECT_FALSE(parts.outbox.empty()) << "a has an outbox";
        parts.outbox = "courier-no-such-outbox";
    };
    if (std::string why; !open_two_altered(o, a, b, no_outbox, got, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    cs::serialize_buffer<char> buf(65536);
    for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = static_cast<char>(i * 13 + 5);
    }
    send_one_checked(*a, *b, got, buf);
    EXPECT_EQ(a->stats().outbox_chunks_sent, 1u);
    EXPECT_EQ(b->stats().outbox_chunks_received, 0u);
    EXPECT_EQ(b->stats().rma_reads, 1u);
    EXPECT_EQ(b->stats().rma_bytes_read, 65536u);
}

INSTANTIATE_TEST_SUITE_P(providers, transport, transport_providers, provider_label);
