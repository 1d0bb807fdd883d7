// SPDX-License-Identifier: BSL-1.0
// The loopback transport: messages between in-process endpoints arrive intact and own their
// bytes, concurrent senders and pollers, each fault kind and the seed's reproducibility, the
// wait fd, and endpoints destroyed with messages in flight.
#include <courier/parcelport/loopback.hpp>
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cs = courier::serialization;
namespace pp = courier::parcelport;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

/// The endpoints of one hub, each keeping what it receives.
struct job {
    std::shared_ptr<pp::loopback_hub> hub;
    std::vector<std::unique_ptr<pp::transport>> eps;
    std::vector<std::vector<std::pair<std::uint32_t, cs::message>>> got;

    explicit job(std::uint32_t n, std::uint64_t seed = 1)
        : hub(pp::loopback_hub::create({n, seed})), got(n) {
        std::vector<std::vector<std::byte>> addresses;
        for (std::uint32_t r = 0; r < n; ++r) {
            eps.push_back(pp::make_loopback_transport(hub, r));
            addresses.push_back(eps.back()->address());
        }
        for (std::uint32_t r = 0; r < n; ++r) {
            eps[r]->set_peers(addresses, r);
            eps[r]->set_receive_handler([this, r](std::uint32_t src, cs::message&& m) {
                got[r].emplace_back(src, std::move(m));
            });
        }
    }
    /// Progresses every live endpoint until `done()` or `limit`; returns whether `done()` held.
    bool pump(std::function<bool()> const& done, std::chrono::milliseconds limit = 5000ms) {
        auto const until = clock_type::now() + limit;
        while (!done()) {
            for (auto& e : eps) {
                if (e) {
                    e->progress();
                }
            }
            if (clock_type::now() > until) {
                return false;
            }
        }
        return true;
    }
    /// Progresses every live endpoint a few times.
    void settle() {
        for (int i = 0; i < 4; ++i) {
            for (auto& e : eps) {
                if (e) {
                    e->progress();
                }
            }
        }
    }
};

int number_in(cs::message const& m) {
    int i = -1;
    cs::load(m, i);
    return i;
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

/// Records the error codes of on_sent calls.
struct sent_log {
    std::vector<std::error_code> codes;
    pp::transport::sent_handler handler() {
        return [this](std::error_code ec) { codes.push_back(ec); };
    }
};

char pattern(std::size_t i, std::uint32_t seed) {
    return static_cast<char>(i * 31 + i / 4096 + seed * 7);
}

cs::serialize_buffer<char> patterned(std::size_t n, std::uint32_t seed) {
    cs::serialize_buffer<char> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = pattern(i, seed);
    }
    return b;
}

pp::fault_rule rule(pp::fault_kind kind, std::uint64_t next_messages = 0) {
    pp::fault_rule r;
    r.kind = kind;
    r.next_messages = next_messages;
    return r;
}

} // namespace

TEST(loopback_transport, index_data_and_pointer_chunks_arrive_intact_between_three_endpoints) {
    job j(3);
    std::size_t const big = (5u << 20) + 123; // a multi-MiB pointer chunk
    sent_log log;
    std::vector<cs::serialize_buffer<char>> payloads;
    for (std::uint32_t s = 0; s < 3; ++s) {
        for (std::uint32_t d = 0; d < 3; ++d) {
            if (s != d) {
                payloads.push_back(patterned(s == 0 && d == 2 ? big : 65536 + s, s * 3 + d));
                j.eps[s]->send(d, cs::save(std::string("from ") + char('0' + s), payloads.back()),
                               log.handler());
            }
        }
    }
    ASSERT_TRUE(j.pump([&] {
        return log.codes.size() == 6 && j.got[0].size() + j.got[1].size() + j.got[2].size() == 6;
    }));
    for (auto ec : log.codes) {
        EXPECT_FALSE(ec) << ec.message();
    }
    for (std::uint32_t d = 0; d < 3; ++d) {
        ASSERT_EQ(j.got[d].size(), 2u);
        for (auto& [src, m] : j.got[d]) {
            std::string text;
            cs::serialize_buffer<char> data;
            cs::load(m, text, data);
            EXPECT_EQ(text, std::string("from ") + char('0' + src));
            ASSERT_EQ(data.size(), src == 0 && d == 2 ? big : 65536 + src);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < data.size(); ++i) {
                wrong += data[i] != pattern(i, src * 3 + d);
            }
            EXPECT_EQ(wrong, 0u) << "from " << src << " to " << d;
            bool owned = false;
            for (std::size_t i = 0; i < m.chunks().size(); ++i) {
                owned |= m.chunks()[i].type == cs::chunk_type::pointer && m.chunk_owner(i);
            }
            EXPECT_TRUE(owned) << "the received pointer chunk has an owner";
        }
    }
    EXPECT_EQ(j.eps[0]->stats().messages_sent, 2u);
    EXPECT_EQ(j.eps[1]->stats().messages_received, 2u);
    EXPECT_GE(j.eps[0]->stats().eager_bytes_sent, big + 65536);
    EXPECT_EQ(j.eps[0]->provider_name(), "loopback");
}

TEST(loopback_transport, concurrent_senders_and_pollers_deliver_every_message_exactly_once) {
    job j(3);
    constexpr int threads = 4, per_thread = 300;
    std::mutex m;
    std::vector<std::vector<int>> seen(threads, std::vector<int>(per_thread, 0));
    std::atomic<int> bad_source{0}, sent_ok{0}, sent_failed{0};
    for (std::uint32_t r = 0; r < 3; ++r) {
        j.eps[r]->set_receive_handler([&](std::uint32_t src, cs::message&& msg) {
            int t = -1, i = -1;
            cs::load(msg, t, i);
            bad_source += static_cast<std::uint32_t>(t % 3) != src;
            std::lock_guard g(m);
            ++seen[t][i];
        });
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> pollers;
    for (int p = 0; p < 2; ++p) {
        pollers.emplace_back([&] {
            while (!stop.load()) {
                for (auto& e : j.eps) {
                    e->progress();
                }
            }
        });
    }
    std::vector<std::thread> senders;
    for (int t = 0; t < threads; ++t) {
        senders.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                // Threads 0 and 3 share endpoint 0; every third message goes to the sender.
                j.eps[t % 3]->send((t + 1 + i) % 3, cs::save(t, i),
                                   [&](std::error_code ec) { ++(ec ? sent_failed : sent_ok); });
            }
        });
    }
    for (auto& s : senders) {
        s.join();
    }
    auto const until = clock_type::now() + 10s;
    while (sent_ok + sent_failed < threads * per_thread && clock_type::now() < until) {
        std::this_thread::sleep_for(1ms);
    }
    stop = true;
    for (auto& p : pollers) {
        p.join();
    }
    EXPECT_EQ(sent_ok.load(), threads * per_thread);
    EXPECT_EQ(sent_failed.load(), 0);
    EXPECT_EQ(bad_source.load(), 0);
    int wrong = 0;
    for (auto const& per : seen) {
        for (int count : per) {
            wrong += count != 1;
        }
    }
    EXPECT_EQ(wrong, 0) << "messages missing or delivered twice";
}

TEST(loopback_transport, sender_memory_may_be_overwritten_at_once_and_freed_after_on_sent) {
    job j(2);
    std::size_t const n = 100000;
    auto memory = std::make_unique<std::vector<char>>(n);
    for (std::size_t i = 0; i < n; ++i) {
        (*memory)[i] = pattern(i, 5);
    }
    // Referenced, not copied, by the message: a pointer chunk over the caller's memory.
    cs::serialize_buffer<char> ref(memory->data(), n, cs::serialize_buffer<char>::reference);
    bool sent = false;
    j.eps[0]->send(1, cs::save(ref), [&](std::error_code ec) { sent = !ec; });
    ref = {};
    std::memset(memory->data(), 'x', n); // right after send(), before anyone progressed
    ASSERT_TRUE(j.pump([&] { return sent && j.got[1].size() == 1; }));
    char const* old_begin = memory->data();
    memory.reset(); // freed: under ASan a received chunk still pointing here would fail below
    cs::serialize_buffer<char> back;
    cs::load(j.got[1][0].second, back);
    ASSERT_EQ(back.size(), n);
    EXPECT_NE(back.data(), old_begin);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
        wrong += back[i] != pattern(i, 5);
    }
    EXPECT_EQ(wrong, 0u);
}

TEST(loopback_transport, drop_fails_the_send_with_connection_reset_and_delivers_nothing) {
    job j(2);
    auto r = rule(pp::fault_kind::drop, 1);
    r.dest = 1;
    j.hub->add_rule(r);
    sent_log log;
    j.eps[0]->send(1, cs::save(1), log.handler());
    j.eps[0]->send(1, cs::save(2), log.handler());
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 2; }));
    j.settle();
    EXPECT_EQ(log.codes[0], std::make_error_code(std::errc::connection_reset));
    EXPECT_FALSE(log.codes[1]);
    ASSERT_EQ(j.got[1].size(), 1u);
    EXPECT_EQ(number_in(j.got[1][0].second), 2);
    EXPECT_EQ(j.hub->fault_counts().drop, 1u);
    EXPECT_EQ(j.hub->fault_counts().total(), 1u);
}

TEST(loopback_transport, refuse_throws_network_error_and_never_runs_on_sent) {
    job j(2);
    auto r = rule(pp::fault_kind::refuse, 1);
    r.dest = 1;
    j.hub->add_rule(r);
    sent_log log;
    EXPECT_THROW(j.eps[0]->send(1, cs::save(1), log.handler()), courier::network_error);
    j.eps[0]->send(1, cs::save(2), log.handler());
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 1; }));
    j.settle();
    EXPECT_EQ(log.codes.size(), 1u); // the refused send's handler never ran
    EXPECT_FALSE(log.codes[0]);
    ASSERT_EQ(j.got[1].size(), 1u);
    EXPECT_EQ(number_in(j.got[1][0].second), 2);
    EXPECT_EQ(j.hub->fault_counts().refuse, 1u);
    EXPECT_EQ(j.hub->fault_counts().total(), 1u);
}

TEST(loopback_transport, delay_delivers_no_earlier_than_its_duration) {
    job j(2);
    auto r = rule(pp::fault_kind::delay, 1);
    r.delay = 60ms;
    j.hub->add_rule(r);
    auto const t0 = clock_type::now();
    j.eps[0]->send(1, cs::save(1), nullptr);
    j.eps[0]->send(1, cs::save(2), nullptr); // not delayed: overtakes the first
    EXPECT_EQ(j.eps[1]->wait_fd_coverage(), pp::wait_coverage::partial)
        << "a delayed message rings no fd when due";
    clock_type::time_point delayed_at{};
    ASSERT_TRUE(j.pump([&] {
        if (j.got[1].size() == 2 && delayed_at == clock_type::time_point{}) {
            delayed_at = clock_type::now();
        }
        return j.got[1].size() == 2;
    }));
    EXPECT_GE(delayed_at - t0, 60ms);
    EXPECT_EQ(number_in(j.got[1][0].second), 2);
    EXPECT_EQ(number_in(j.got[1][1].second), 1);
    EXPECT_EQ(j.eps[1]->wait_fd_coverage(), pp::wait_coverage::complete);
    EXPECT_EQ(j.hub->fault_counts().delay, 1u);
}

TEST(loopback_transport, reorder_delivers_a_message_right_behind_the_next_one) {
    job j(2);
    auto r = rule(pp::fault_kind::reorder, 1);
    r.delay = 10s; // the hold limit: here the next message must release it
    j.hub->add_rule(r);
    for (int i = 0; i < 3; ++i) {
        j.eps[0]->send(1, cs::save(i), nullptr);
    }
    ASSERT_TRUE(j.pump([&] { return j.got[1].size() == 3; }, 2000ms));
    EXPECT_EQ(number_in(j.got[1][0].second), 1);
    EXPECT_EQ(number_in(j.got[1][1].second), 0);
    EXPECT_EQ(number_in(j.got[1][2].second), 2);
    EXPECT_EQ(j.hub->fault_counts().reorder, 1u);
}

TEST(loopback_transport, reordered_message_without_a_successor_arrives_after_its_hold_limit) {
    job j(2);
    auto r = rule(pp::fault_kind::reorder, 1);
    r.delay = 30ms;
    j.hub->add_rule(r);
    bool sent = false;
    auto const t0 = clock_type::now();
    j.eps[0]->send(1, cs::save(7), [&](std::error_code ec) { sent = !ec; });
    ASSERT_TRUE(j.pump([&] { return sent && j.got[1].size() == 1; }));
    EXPECT_GE(clock_type::now() - t0, 30ms);
    EXPECT_EQ(number_in(j.got[1][0].second), 7);
}

TEST(loopback_transport, duplicate_delivers_two_independent_copies_and_runs_on_sent_once) {
    job j(2);
    j.hub->add_rule(rule(pp::fault_kind::duplicate, 1));
    sent_log log;
    j.eps[0]->send(1, cs::save(std::string("twice"), patterned(8192, 1)), log.handler());
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 1 && j.got[1].size() == 2; }));
    j.settle();
    EXPECT_EQ(log.codes.size(), 1u);
    ASSERT_EQ(j.got[1].size(), 2u);
    EXPECT_EQ(j.hub->fault_counts().duplicate, 1u);
    std::string text[2];
    cs::serialize_buffer<char> data[2];
    for (int k = 0; k < 2; ++k) {
        cs::load(j.got[1][k].second, text[k], data[k]);
        EXPECT_EQ(text[k], "twice");
        ASSERT_EQ(data[k].size(), 8192u);
    }
    EXPECT_NE(j.got[1][0].second.data().data(), j.got[1][1].second.data().data());
    EXPECT_NE(data[0].data(), data[1].data());
    data[0][100] = static_cast<char>(~data[0][100]); // one copy changes, the other does not
    EXPECT_EQ(data[1][100], pattern(100, 1));
}

TEST(loopback_transport, corrupt_changes_exactly_one_byte_after_the_message_header) {
    job j(2);
    j.hub->add_rule(rule(pp::fault_kind::corrupt, 1));
    auto m = cs::save(std::string(300, 'a'), 12345);
    std::vector<std::byte> before(m.data().begin(), m.data().end());
    j.eps[0]->send(1, std::move(m), nullptr);
    j.eps[0]->send(1, cs::save(std::string(300, 'a'), 12345), nullptr); // the rule is spent
    ASSERT_TRUE(j.pump([&] { return j.got[1].size() == 2; }));
    auto differences = [&](cs::message const& got) {
        std::vector<std::size_t> at;
        EXPECT_EQ(got.data().size(), before.size());
        for (std::size_t i = 0; i < std::min(before.size(), got.data().size()); ++i) {
            if (got.data()[i] != before[i]) {
                at.push_back(i);
            }
        }
        return at;
    };
    auto first = differences(j.got[1][0].second);
    ASSERT_EQ(first.size(), 1u);
    EXPECT_GE(first[0], cs::message_header_size);
    EXPECT_TRUE(differences(j.got[1][1].second).empty());
    EXPECT_EQ(j.hub->fault_counts().corrupt, 1u);
}

TEST(loopback_transport, the_same_seed_gives_the_same_faults_and_another_seed_others) {
    // Per message: -1 dropped, 0 intact, else 1 + the corrupted byte's position.
    auto outcome = [](std::uint64_t seed) {
        job j(2, seed);
        auto drop = rule(pp::fault_kind::drop);
        drop.probability = 0.3;
        auto corrupt = rule(pp::fault_kind::corrupt);
        corrupt.probability = 0.3;
        j.hub->add_rule(drop);
        j.hub->add_rule(corrupt);
        constexpr int n = 64;
        auto const reference = cs::save(std::string(64, 'z'), 0);
        std::vector<long> result(n, -1);
        std::vector<std::error_code> codes(n);
        for (int i = 0; i < n; ++i) {
            j.eps[0]->send(1, cs::save(std::string(64, 'z'), 0),
                           [&, i](std::error_code ec) { codes[i] = ec; });
            j.pump([&] { return codes[i] || j.got[1].size() == 1; });
            if (!j.got[1].empty()) {
                auto d = j.got[1][0].second.data();
                result[i] = 0;
                for (std::size_t k = 0; k < d.size(); ++k) {
                    if (d[k] != reference.data()[k]) {
                        result[i] = static_cast<long>(k) + 1;
                    }
                }
                j.got[1].clear();
            }
        }
        return result;
    };
    auto a = outcome(5);
    EXPECT_EQ(a, outcome(5));
    EXPECT_NE(a, outcome(6));
    EXPECT_GT(std::count(a.begin(), a.end(), -1), 0) << "some messages were dropped";
    EXPECT_GT(std::count_if(a.begin(), a.end(), [](long v) { return v > 0; }), 0)
        << "some messages were corrupted";
}

TEST(loopback_transport, wait_fd_is_readable_after_a_send_and_quiet_once_progress_drained_it) {
    job j(2);
    int const fd = j.eps[1]->wait_fd();
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(readable(fd));
    EXPECT_TRUE(j.eps[1]->can_sleep());
    bool sent = false;
    j.eps[0]->send(1, cs::save(1), [&](std::error_code) { sent = true; });
    EXPECT_TRUE(readable(fd));
    EXPECT_FALSE(j.eps[1]->can_sleep());
    EXPECT_TRUE(j.eps[1]->progress());
    EXPECT_FALSE(readable(fd)) << "progress() resets the fd before draining";
    EXPECT_TRUE(j.eps[1]->can_sleep());
    EXPECT_EQ(j.got[1].size(), 1u);
    // The sender's fd says its on_sent is due.
    EXPECT_TRUE(readable(j.eps[0]->wait_fd()));
    EXPECT_FALSE(j.eps[0]->can_sleep());
    EXPECT_TRUE(j.eps[0]->progress());
    EXPECT_TRUE(sent);
    EXPECT_FALSE(readable(j.eps[0]->wait_fd()));
    EXPECT_FALSE(j.eps[0]->progress());
    // A thread asleep on the fd wakes when a message comes.
    std::atomic<bool> woke{false};
    std::thread sleeper([&] {
        pollfd p{fd, POLLIN, 0};
        woke = ::poll(&p, 1, 5000) == 1;
    });
    std::this_thread::sleep_for(10ms);
    j.eps[0]->send(1, cs::save(2), nullptr);
    sleeper.join();
    EXPECT_TRUE(woke.load());
}

// A caller waiting for quiet (in_process_job::drain) polls can_sleep() from another thread:
// while a receive handler or an on_sent runs, its message is not done, so the endpoint may
// not say it can sleep (it did, and a drain returned before the handler had logged).
TEST(loopback_transport, cannot_sleep_while_a_receive_handler_or_on_sent_runs) {
    job j(2);
    std::vector<bool> seen;
    j.eps[1]->set_receive_handler(
        [&](std::uint32_t, cs::message&&) { seen.push_back(j.eps[1]->can_sleep()); });
    j.eps[0]->send(1, cs::save(1), [&](std::error_code) { seen.push_back(j.eps[0]->can_sleep()); });
    EXPECT_TRUE(j.eps[1]->progress());
    EXPECT_TRUE(j.eps[0]->progress());
    EXPECT_EQ(seen, (std::vector<bool>{false, false}));
    EXPECT_TRUE(j.eps[0]->can_sleep());
    EXPECT_TRUE(j.eps[1]->can_sleep());
}

TEST(loopback_transport, destroying_endpoints_with_messages_in_flight_frees_them_and_fails_sends) {
    job j(3);
    auto r = rule(pp::fault_kind::delay, 1);
    r.delay = 10s;
    r.dest = 1;
    j.hub->add_rule(r);
    sent_log log;
    for (int i = 0; i < 4; ++i) { // the first is delayed; rank 1 never progresses
        j.eps[0]->send(1, cs::save(i, patterned(1 << 20, i)), log.handler());
    }
    j.eps[1].reset();
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 4; }));
    for (auto ec : log.codes) {
        EXPECT_EQ(ec, std::make_error_code(std::errc::connection_aborted));
    }
    j.eps[0]->send(1, cs::save(9), log.handler()); // no endpoint for rank 1 now
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 5; }));
    EXPECT_EQ(log.codes[4], std::make_error_code(std::errc::not_connected));
    // A rank gets a new endpoint once its old one is gone, and only one at a time.
    auto again = pp::make_loopback_transport(j.hub, 1);
    EXPECT_THROW(pp::make_loopback_transport(j.hub, 1), std::logic_error);
    // Rank 0 goes with a message from rank 2 and one from itself undelivered.
    sent_log from2;
    j.eps[2]->send(0, cs::save(patterned(1 << 20, 2)), from2.handler());
    j.eps[0]->send(0, cs::save(3), log.handler());
    j.eps[0].reset();
    ASSERT_TRUE(j.pump([&] { return from2.codes.size() == 1; }));
    EXPECT_EQ(from2.codes[0], std::make_error_code(std::errc::connection_aborted));
    EXPECT_EQ(log.codes.size(), 5u) << "a destroyed sender's on_sent does not run";
    // The rest go with messages still queued (LSan checks that nothing leaks).
    j.eps[2]->send(1, cs::save(patterned(1 << 16, 4)), nullptr);
    again->send(2, cs::save(5), nullptr);
    j.eps.clear();
    again.reset();
    std::weak_ptr<pp::loopback_hub> hub = j.hub;
    j.hub.reset();
    EXPECT_TRUE(hub.expired());
}

TEST(loopback_transport, peers_tokens_and_destinations_are_checked) {
    job j(3);
    EXPECT_THROW(j.eps[0]->send(3, cs::save(1), nullptr), std::out_of_range);
    auto other = pp::loopback_hub::create({3, 1});
    auto stranger = pp::make_loopback_transport(other, 0);
    std::vector<std::vector<std::byte>> addresses{j.eps[0]->address(), j.eps[1]->address(),
                                                  j.eps[2]->address()};
    EXPECT_NO_THROW(j.eps[0]->set_peers(addresses, 0));
    EXPECT_THROW(j.eps[0]->set_peers(addresses, 1), std::invalid_argument);
    auto wrong = addresses;
    wrong[0] = stranger->address();
    EXPECT_THROW(j.eps[0]->set_peers(wrong, 0), std::invalid_argument);
    wrong = {addresses[0], addresses[1]};
    EXPECT_THROW(j.eps[0]->set_peers(wrong, 0), std::invalid_argument);
    auto bad_rule = rule(pp::fault_kind::drop);
    bad_rule.probability = 1.5;
    EXPECT_THROW(j.hub->add_rule(bad_rule), std::invalid_argument);
    bad_rule = rule(pp::fault_kind::drop);
    bad_rule.dest = 3;
    EXPECT_THROW(j.hub->add_rule(bad_rule), std::invalid_argument);
    // Another job's message is refused; its sender hears of it.
    j.eps[1]->set_job_token(7);
    sent_log log;
    j.eps[0]->send(1, cs::save(1), log.handler());
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 1; }));
    EXPECT_EQ(log.codes[0], std::make_error_code(std::errc::permission_denied));
    EXPECT_TRUE(j.got[1].empty());
    j.eps[0]->set_job_token(7);
    j.eps[0]->send(1, cs::save(2), log.handler());
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 2; }));
    EXPECT_FALSE(log.codes[1]);
    ASSERT_EQ(j.got[1].size(), 1u);
    EXPECT_NE(j.eps[1]->debug_state().find("refused 1"), std::string::npos)
        << j.eps[1]->debug_state();
}

TEST(loopback_transport, rules_stop_after_max_count_or_next_messages_and_can_be_cleared) {
    job j(2);
    auto capped = rule(pp::fault_kind::drop);
    capped.max_count = 2;
    j.hub->add_rule(capped);
    sent_log log;
    for (int i = 0; i < 5; ++i) {
        j.eps[0]->send(1, cs::save(i), log.handler());
    }
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 5; }));
    EXPECT_EQ(j.hub->fault_counts().drop, 2u);
    EXPECT_EQ(j.got[1].size(), 3u);
    j.hub->clear_rules();
    auto from_1 = rule(pp::fault_kind::drop, 2);
    from_1.source = 1; // does not match rank 0's sends
    j.hub->add_rule(from_1);
    j.eps[0]->send(1, cs::save(5), log.handler());
    j.eps[1]->send(0, cs::save(6), log.handler());
    j.eps[1]->send(0, cs::save(7), log.handler());
    j.eps[1]->send(0, cs::save(8), log.handler()); // the third: past next_messages
    ASSERT_TRUE(j.pump([&] { return log.codes.size() == 9; }));
    EXPECT_EQ(j.hub->fault_counts().drop, 4u);
    ASSERT_EQ(j.got[0].size(), 1u);
    EXPECT_EQ(number_in(j.got[0][0].second), 8);
    EXPECT_EQ(j.got[1].size(), 4u);
    EXPECT_NE(j.eps[0]->debug_state().find("drop 4"), std::string::npos);
}

TEST(loopback_transport,
     an_injected_batch_reaches_the_batch_handler_whole_or_else_one_message_each) {
    job j(2);
    auto bytes_of = [](int i) {
        cs::message m = cs::save(i);
        auto d = m.data();
        return std::vector<std::byte>(d.begin(), d.end());
    };
    std::vector<std::vector<std::byte>> parcels{bytes_of(7), bytes_of(8),
                                                std::vector<std::byte>(3, std::byte{1})};
    // Without a batch handler: one message each, in order; the malformed one is dropped.
    ASSERT_TRUE(j.hub->inject_batch(1, 0, parcels));
    ASSERT_TRUE(j.pump([&] { return j.got[0].size() == 2; }));
    j.settle();
    ASSERT_EQ(j.got[0].size(), 2u);
    EXPECT_EQ(number_in(j.got[0][0].second), 7);
    EXPECT_EQ(number_in(j.got[0][1].second), 8);
    EXPECT_EQ(j.got[0][0].first, 1u);
    // With one: all three together, byte for byte, from rank 1; none as a message.
    std::vector<std::vector<std::byte>> seen;
    std::uint32_t from = 99;
    j.eps[0]->set_batch_handler(
        [&](std::uint32_t src, std::span<std::span<std::byte const> const> ps) {
            from = src;
            for (auto p : ps) {
                seen.emplace_back(p.begin(), p.end());
            }
        });
    ASSERT_TRUE(j.hub->inject_batch(1, 0, parcels));
    ASSERT_TRUE(j.pump([&] { return seen.size() == 3; }));
    EXPECT_EQ(from, 1u);
    EXPECT_EQ(seen, parcels);
    EXPECT_EQ(j.got[0].size(), 2u);
}
