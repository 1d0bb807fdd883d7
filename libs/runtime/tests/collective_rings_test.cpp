// SPDX-License-Identifier: BSL-1.0
// The collectives' shared-memory inboxes (src/collective_rings.hpp) within one process: two
// "localities" each own an inbox and map the other's. What the rings promise: messages arrive
// whole and in order, a full ring or a message too large refuses (the caller then sends a
// parcel), a suspended receiver is seen by the sender, an inbox of another layout is not used,
// and the inbox's file goes with its owner. Also the flat encoding of collective values
// (courier/runtime/collectives.hpp), which must refuse malformed bytes. Across processes:
// tests/distributed (api.*.collectives_through_shared_memory.*).
#include "../src/collective_rings.hpp"

#include <courier/runtime/collectives.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace cd = courier::detail;
namespace cc = courier::collectives::detail;
using rings = cd::collective_rings;
using push_result = rings::push_result;

namespace {

std::string unique_name(char const* what) {
    static std::atomic<int> n{0};
    return "courier-test-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(n++);
}

std::span<std::byte const> bytes_of(std::string const& s) {
    return std::as_bytes(std::span(s.data(), s.size()));
}

struct pair_of_localities : ::testing::Test {
    std::string name0 = unique_name("a"), name1 = unique_name("b");
    rings a{name0, 0, 2}, b{name1, 1, 2};
    void SetUp() override {
        ASSERT_EQ(a.connect({"", name1}), 1u);
        ASSERT_EQ(b.connect({name0, ""}), 1u);
    }
    /// Every message waiting in b's ring from a, as strings.
    std::vector<std::string> drain_b() {
        std::vector<std::string> got;
        b.drain(0, [&](rings::view const& v) {
            got.emplace_back(reinterpret_cast<char const*>(v.payload.data()), v.payload.size());
        });
        return got;
    }
};

TEST_F(pair_of_localities, a_message_arrives_whole_with_its_key) {
    EXPECT_TRUE(a.reaches(1));
    EXPECT_TRUE(b.listens_to(0));
    EXPECT_FALSE(b.listens_to(1));   // itself
    EXPECT_TRUE(a.reads_from_me(1)); // b could read a's memory (one process here)
    std::string const text = "all_reduce value";
    EXPECT_EQ(a.push(1, 77, 5, 3, bytes_of(text)), push_result::sent);
    bool seen = false;
    EXPECT_TRUE(b.take_head(0, [&](rings::view const& v) {
        seen = true;
        EXPECT_EQ(v.wire_id, 77u);
        EXPECT_EQ(v.generation, 5u);
        EXPECT_EQ(v.step, 3u);
        EXPECT_EQ(std::string(reinterpret_cast<char const*>(v.payload.data()), v.payload.size()),
                  text);
        return true;
    }));
    EXPECT_TRUE(seen);
    EXPECT_FALSE(b.take_head(0, [](rings::view const&) { return true; })); // gone
    EXPECT_EQ(a.stats().sent, 1u);
    EXPECT_EQ(b.stats().received, 1u);
}

TEST_F(pair_of_localities, a_declined_head_stays_and_a_throwing_taker_consumes_it) {
    ASSERT_EQ(a.push(1, 1, 0, 0, bytes_of("x")), push_result::sent);
    EXPECT_FALSE(b.take_head(0, [](rings::view const&) { return false; }));
    EXPECT_THROW(
        b.take_head(0, [](rings::view const&) -> bool { throw std::runtime_error("bad"); }),
        std::runtime_error);
    EXPECT_TRUE(drain_b().empty());
}

TEST_F(pair_of_localities, a_full_ring_refuses_and_frees_up_when_drained) {
    for (std::uint32_t i = 0; i < rings::cells; ++i) {
        ASSERT_EQ(a.push(1, 1, i, 0, bytes_of(std::to_string(i))), push_result::sent);
    }
    EXPECT_EQ(a.push(1, 1, 99, 0, bytes_of("overflow")), push_result::full);
    auto got = drain_b();
    ASSERT_EQ(got.size(), rings::cells);
    for (std::uint32_t i = 0; i < rings::cells; ++i) {
        EXPECT_EQ(got[i], std::to_string(i)); // in order
    }
    EXPECT_EQ(a.push(1, 1, 100, 0, bytes_of("again")), push_result::sent);
    EXPECT_EQ(drain_b(), std::vector<std::string>{"again"});
}

TEST_F(pair_of_localities, what_does_not_fit_a_cell_or_has_no_ring_is_refused) {
    std::string const big(rings::payload_capacity + 1, 'x');
    EXPECT_EQ(a.push(1, 1, 0, 0, bytes_of(big)), push_result::no_ring);
    std::string const fits(rings::payload_capacity, 'y');
    EXPECT_EQ(a.push(1, 1, 0, 0, bytes_of(fits)), push_result::sent);
    EXPECT_EQ(drain_b(), std::vector<std::string>{fits});
    EXPECT_EQ(a.push(0, 1, 0, 0, bytes_of("self")), push_result::no_ring);
    EXPECT_EQ(a.push(7, 1, 0, 0, bytes_of("nobody")), push_result::no_ring);
}

TEST_F(pair_of_localities, what_a_message_names_by_address_lives_until_it_is_taken) {
    auto value = std::make_shared<std::vector<double>>(1000, 2.5);
    std::weak_ptr<std::vector<double>> alive = value;
    std::uint64_t const addr = reinterpret_cast<std::uintptr_t>(value->data());
    ASSERT_EQ(a.push(1, 1, 0, 0, std::as_bytes(std::span(&addr, 1)), std::move(value)),
              push_result::sent);
    EXPECT_FALSE(alive.expired());
    std::vector<double> copy(1000);
    EXPECT_TRUE(b.take_head(0, [&](rings::view const& v) {
        EXPECT_EQ(v.pid, ::getpid());
        std::uint64_t at;
        std::memcpy(&at, v.payload.data(), sizeof at);
        cc::ring_piece piece{copy.data(), at, copy.size() * sizeof(double)};
        cc::ring_read_pieces(v.pid, &piece, 1);
        return true;
    }));
    EXPECT_EQ(copy.back(), 2.5);
    EXPECT_FALSE(alive.expired()); // freed by the sender's next push, not by the receiver
    ASSERT_EQ(a.push(1, 1, 1, 0, bytes_of("next")), push_result::sent);
    EXPECT_TRUE(alive.expired());
    cc::ring_piece bad{copy.data(), 8, 8}; // an address nobody maps
    EXPECT_THROW(cc::ring_read_pieces(::getpid(), &bad, 1), courier::network_error);
}

TEST_F(pair_of_localities, a_sender_sees_a_suspended_receiver) {
    b.wait_begin(0);
    EXPECT_EQ(a.push(1, 1, 0, 0, bytes_of("wake")), push_result::sent_wake);
    b.wait_end(0);
    EXPECT_EQ(a.push(1, 1, 1, 0, bytes_of("quiet")), push_result::sent);
    EXPECT_EQ(a.stats().nudges, 1u);
    EXPECT_EQ(drain_b().size(), 2u);
}

std::vector<std::string> g_drained; // what set_drain's function received
void collect_drained(std::uint32_t, rings::view const& v) {
    g_drained.emplace_back(reinterpret_cast<char const*>(v.payload.data()), v.payload.size());
}

TEST_F(pair_of_localities, a_drain_asked_for_while_another_reads_is_done_by_that_reader) {
    // The reader is take_head: the drain asked for inside it (as by another thread, whose
    // try-lock fails) happens when it lets go, through the function set_drain gave.
    g_drained.clear();
    b.set_drain(&collect_drained);
    ASSERT_EQ(a.push(1, 1, 0, 0, bytes_of("m1")), push_result::sent);
    ASSERT_EQ(a.push(1, 1, 1, 0, bytes_of("m2")), push_result::sent);
    EXPECT_FALSE(b.take_head(0, [&](rings::view const&) {
        EXPECT_EQ(b.drain(0, [](rings::view const&) { ADD_FAILURE() << "lock not held"; }), 0u);
        return false; // not the message it waits for
    }));
    EXPECT_EQ(g_drained, (std::vector<std::string>{"m1", "m2"}));
    // The reader is a drain: a message published while it reads, and a drain asked for then,
    // are not left behind.
    ASSERT_EQ(a.push(1, 1, 2, 0, bytes_of("m3")), push_result::sent);
    std::vector<std::string> got;
    std::size_t n = b.drain(0, [&](rings::view const& v) {
        got.emplace_back(reinterpret_cast<char const*>(v.payload.data()), v.payload.size());
        if (got.size() == 1) {
            EXPECT_EQ(a.push(1, 1, 3, 0, bytes_of("m4")), push_result::sent);
            EXPECT_EQ(b.drain(0, [](rings::view const&) { ADD_FAILURE() << "lock not held"; }), 0u);
        }
    });
    EXPECT_EQ(n, 2u);
    EXPECT_EQ(got, (std::vector<std::string>{"m3", "m4"}));
    b.set_drain(nullptr);
}

/// b's inbox, mapped by the test as a hostile process on the host would map it.
struct forged_inbox {
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    explicit forged_inbox(std::string const& name) {
        int fd = ::shm_open(("/" + name).c_str(), O_RDWR, 0);
        EXPECT_GE(fd, 0);
        bytes = std::filesystem::file_size("/dev/shm/" + name);
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        EXPECT_NE(p, MAP_FAILED);
        base = static_cast<std::byte*>(p);
    }
    ~forged_inbox() { ::munmap(base, bytes); }
    /// The cell header's fields in the ring from `from`, cell `i`: wire id, generation, step,
    /// size, pid.
    std::byte* cell(std::uint32_t from, std::uint32_t i) const {
        return base + rings::ring_offset(from) + rings::cell_offset(i);
    }
    /// Sets the payload size in the header of cell `i` of the ring from `from`.
    void set_size(std::uint32_t from, std::uint32_t i, std::uint32_t size) const {
        std::memcpy(cell(from, i) + 20, &size, sizeof size);
    }
    /// Publishes cell `i` of the ring from `from` as the message whose sequence word is `seq`.
    void set_seq(std::uint32_t from, std::uint32_t i, std::uint32_t seq) const {
        std::memcpy(cell(from, i) + rings::seq_offset(), &seq, sizeof seq);
    }
};

TEST_F(pair_of_localities, what_a_hostile_writer_puts_in_an_inbox_is_refused) {
    forged_inbox forged(name1);
    // A size beyond the cell: not offered, dropped by the drain (logged).
    ASSERT_EQ(a.push(1, 1, 0, 0, bytes_of("size")), push_result::sent);
    forged.set_size(0, 0, 1u << 30);
    EXPECT_FALSE(b.take_head(0, [](rings::view const&) {
        ADD_FAILURE() << "offered";
        return true;
    }));
    EXPECT_TRUE(drain_b().empty());
    // A message naming memory of another process than the peer's: its pid is not believed, so
    // nothing may be read for it (decoding a vector named by address then fails).
    auto value = std::make_shared<std::vector<double>>(100, 1.0);
    ASSERT_EQ(a.push(1, 1, 1, 0, bytes_of("pid"), value), push_result::sent);
    std::int32_t const other = 1; // init, say
    std::memcpy(forged.cell(0, 1) + 24, &other, sizeof other);
    bool offered = false;
    EXPECT_TRUE(b.take_head(0, [&](rings::view const& v) {
        offered = true;
        EXPECT_EQ(v.pid, 0);
        return true;
    }));
    EXPECT_TRUE(offered);
    // The head's cell published as a later message (or an old one): not taken; the ring works
    // on (the producer's next message is the one the consumer waits for).
    for (std::uint32_t seq : {1000u, 1u, 0u}) {
        forged.set_seq(0, 2, seq);
        EXPECT_FALSE(b.take_head(0, [](rings::view const&) { return true; })) << seq;
        EXPECT_TRUE(drain_b().empty()) << seq;
    }
    ASSERT_EQ(a.push(1, 1, 2, 0, bytes_of("after")), push_result::sent);
    EXPECT_EQ(drain_b(), std::vector<std::string>{"after"});
    // A writer that publishes every cell, again and again: a drain takes at most a ring's
    // worth (here 8 forged messages, then what it finds next time), never loops on.
    for (std::uint32_t lap = 0; lap < 3; ++lap) {
        for (std::uint32_t i = 0; i < rings::cells; ++i) {
            std::uint32_t const number = 3 + lap * rings::cells + i; // 3: "after" was message 2
            forged.set_size(0, number, 0);
            forged.set_seq(0, number, number + 1);
        }
        EXPECT_EQ(drain_b().size(), rings::cells) << lap;
    }
    // b's head is now past what a sent: within a ring's worth of pushes, a sees it and stops
    // using b's inbox (parcels carry its messages), for good.
    int sent = 0;
    while (a.push(1, 1, 3, 0, bytes_of("late")) == push_result::sent) {
        ASSERT_LT(++sent, static_cast<int>(rings::cells));
    }
    EXPECT_EQ(a.push(1, 1, 3, 0, bytes_of("late")), push_result::no_ring);
    EXPECT_EQ(a.push(1, 1, 3, 0, bytes_of("late")), push_result::no_ring);
}

TEST_F(pair_of_localities, concurrent_senders_and_receivers_lose_nothing) {
    // Two threads of locality 0 send to locality 1 (one producer lock), two threads of
    // locality 1 drain (one consumer at a time); every message arrives once, each thread's in
    // its order.
    constexpr int per_thread = 20000;
    std::atomic<int> received{0};
    std::vector<int> last(2, -1);
    std::atomic<bool> order_ok{true};
    auto producer = [&](int who) {
        for (int i = 0; i < per_thread;) {
            int msg[2] = {who, i};
            if (a.push(1, 1, 0, 0, std::as_bytes(std::span(msg))) == push_result::sent) {
                ++i;
            }
        }
    };
    auto consumer = [&] {
        while (received.load() < 2 * per_thread) {
            b.drain(0, [&](rings::view const& v) {
                int msg[2];
                std::memcpy(msg, v.payload.data(), sizeof msg);
                // Drains do not overlap (the consumer lock), so `last` needs no lock of its own.
                if (msg[1] != last[static_cast<std::size_t>(msg[0])] + 1) {
                    order_ok = false;
                }
                last[static_cast<std::size_t>(msg[0])] = msg[1];
                received.fetch_add(1);
            });
        }
    };
    std::thread p0(producer, 0), p1(producer, 1), c0(consumer), c1(consumer);
    p0.join();
    p1.join();
    c0.join();
    c1.join();
    EXPECT_EQ(received.load(), 2 * per_thread);
    EXPECT_TRUE(order_ok.load());
}

TEST(collective_rings, an_inbox_loses_its_name_once_every_peer_has_mapped_it) {
    std::string n0 = unique_name("a"), n1 = unique_name("b"), n2 = unique_name("c");
    rings a(n0, 0, 3), b(n1, 1, 3), c(n2, 2, 3);
    ASSERT_EQ(a.connect({"", n1, n2}), 2u);
    EXPECT_FALSE(a.unlink_when_mapped()); // b and c have not mapped a's inbox yet
    ASSERT_EQ(b.connect({n0, "", n2}), 2u);
    EXPECT_FALSE(a.unlink_when_mapped());
    ASSERT_EQ(c.connect({n0, n1, ""}), 2u);
    EXPECT_TRUE(a.unlink_when_mapped());
    EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + n0));
    // Still usable: the mappings stay.
    ASSERT_EQ(b.push(0, 1, 0, 0, bytes_of("after")), push_result::sent);
    EXPECT_EQ(a.drain(1, [](rings::view const&) {}), 1u);
}

TEST(collective_rings, an_inbox_of_another_layout_is_not_used) {
    std::string n0 = unique_name("a"), n1 = unique_name("c");
    rings a(n0, 0, 2);
    rings other(n1, 1, 3); // a job of 3: another size
    EXPECT_EQ(a.connect({"", n1}), 0u);
    EXPECT_FALSE(a.reaches(1));
    EXPECT_TRUE(a.listens_to(1)); // named: its ring here is still read
    std::string n2 = unique_name("d");
    rings not_rank_1(n2, 0, 2); // the inbox of a locality 0, offered as locality 1's
    EXPECT_EQ(a.connect({"", n2}), 0u);
    EXPECT_FALSE(a.reaches(1));
}

TEST(collective_rings, a_missing_inbox_leaves_the_peer_to_parcels) {
    rings a(unique_name("a"), 0, 2);
    EXPECT_EQ(a.connect({"", "courier-test-no-such-inbox"}), 0u);
    EXPECT_FALSE(a.reaches(1));
}

TEST(collective_rings, the_inbox_file_goes_with_its_owner_and_a_leftover_is_replaced) {
    std::string name = unique_name("f");
    {
        // A leftover of a killed job with the same name (a locality's name is its job's and
        // rank's): replaced, so that peers map the live inbox, not one nobody reads.
        int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, 100), 0);
        ::close(fd);
        rings a(name, 0, 2);
        EXPECT_GT(std::filesystem::file_size("/dev/shm/" + name), 100u);
        rings peer(unique_name("g"), 1, 2);
        EXPECT_EQ(peer.connect({name, ""}), 1u);
    }
    EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
    EXPECT_THROW(rings(unique_name("g"), 0, rings::max_localities + 1), std::invalid_argument);
}

// ---- the flat encoding ----
template <class T>
T round_trip(T const& v) {
    std::byte buf[cc::ring_payload_limit];
    cc::ring_writer w{buf, buf + sizeof buf};
    EXPECT_TRUE(cc::ring_encode(v, w));
    return cc::ring_decode<T>({buf, static_cast<std::size_t>(w.at - buf)});
}

TEST(collective_values, flat_values_round_trip) {
    static_assert(cc::ring_flat<double>::value && cc::ring_flat<std::vector<int>>::value &&
                  cc::ring_flat<std::vector<std::vector<char>>>::value);
    static_assert(!cc::ring_flat<std::string>::value && !cc::ring_flat<std::vector<bool>>::value);
    static_assert(!cc::ring_flat<bool>::value); // a byte that is not 0 or 1 is no bool
    EXPECT_EQ(round_trip(3.25), 3.25);
    EXPECT_EQ(round_trip(std::vector<int>{1, 2, 3}), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(round_trip(std::vector<int>{}), std::vector<int>{});
    std::vector<std::vector<char>> nested{{'a'}, {}, {'b', 'c'}};
    EXPECT_EQ(round_trip(nested), nested);
}

TEST(collective_values, what_does_not_fit_is_not_encoded) {
    std::byte buf[cc::ring_payload_limit];
    cc::ring_writer w{buf, buf + sizeof buf};
    EXPECT_FALSE(cc::ring_encode(std::vector<double>(124), w)); // 4 + 992 bytes
    cc::ring_writer w2{buf, buf + sizeof buf};
    EXPECT_TRUE(cc::ring_encode(std::vector<double>(123), w2)); // 4 + 984
}

TEST(collective_values, malformed_bytes_are_refused) {
    std::byte buf[cc::ring_payload_limit];
    cc::ring_writer w{buf, buf + sizeof buf};
    ASSERT_TRUE(cc::ring_encode(std::vector<std::vector<int>>{{1, 2}, {3}}, w));
    std::size_t const n = static_cast<std::size_t>(w.at - buf);
    for (std::size_t cut = 0; cut < n; ++cut) { // every truncation
        EXPECT_THROW(cc::ring_decode<std::vector<std::vector<int>>>({buf, cut}),
                     courier::serialization::serialization_error)
            << cut;
    }
    // Trailing bytes, a wrong size for a scalar, an absurd count.
    EXPECT_THROW(cc::ring_decode<std::vector<std::vector<int>>>({buf, n + 1}),
                 courier::serialization::serialization_error);
    EXPECT_THROW(cc::ring_decode<double>({buf, 4}), courier::serialization::serialization_error);
    std::uint32_t huge = 0xffffffffu;
    std::memcpy(buf, &huge, sizeof huge);
    EXPECT_THROW(cc::ring_decode<std::vector<double>>({buf, 16}),
                 courier::serialization::serialization_error);
    EXPECT_THROW(cc::ring_decode<std::vector<std::vector<int>>>({buf, 16}),
                 courier::serialization::serialization_error);
    // Vectors named by address: refused without a sender to read from, and once their total
    // passes the bound (each one within it): at most that much is ever allocated for them.
    std::vector<std::vector<double>> big(3, std::vector<double>(1000));
    cc::ring_writer w3{buf, buf + sizeof buf};
    ASSERT_TRUE(cc::ring_encode(big, w3, true));
    std::size_t const n3 = static_cast<std::size_t>(w3.at - buf);
    EXPECT_THROW(cc::ring_decode<std::vector<std::vector<double>>>({buf, n3}, 0),
                 courier::serialization::serialization_error);
    std::uint32_t const many = (cc::ring_max_by_address / 2) / sizeof(double) + 1;
    for (int i = 0; i < 3; ++i) { // patch each element's count: 3 x (half the bound + 8 B)
        std::memcpy(buf + 5 + i * 13, &many, sizeof many);
    }
    EXPECT_THROW(cc::ring_decode<std::vector<std::vector<double>>>({buf, n3}, ::getpid()),
                 courier::serialization::serialization_error);
}

} // namespace
