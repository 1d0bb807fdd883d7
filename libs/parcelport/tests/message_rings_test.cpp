// SPDX-License-Identifier: BSL-1.0
// The message rings between localities of one host (libs/parcelport/src/message_rings.hpp):
// the attach handshake, records in order across the ring's wrap, a full ring refusing, a
// reader that drops a ring with inconsistent records without reading out of bounds, and a
// producer and a consumer thread moving a million messages.
#include "../src/libfabric/context.hpp"
#include "../src/message_rings.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace det = courier::parcelport::detail;

namespace {

std::string fresh_name() {
    static std::atomic<int> n{0};
    return "courier-rings-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

struct received {
    std::uint32_t source;
    std::vector<std::byte> bytes;
};

std::vector<received> poll_all(det::message_rings& r) {
    std::vector<received> got;
    r.poll([&](std::uint32_t s, std::byte const* p, std::size_t n) {
        got.push_back({s, std::vector<std::byte>(p, p + n)});
    });
    return got;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
    }
    return v;
}

/// Two endpoints, ranks 0 and 1, connected to each other.
struct pair_of_rings {
    det::message_rings a{fresh_name()}, b{fresh_name()};
    pair_of_rings() {
        std::vector<std::string> names{a.name(), b.name()};
        a.connect(names, 0);
        b.connect(names, 1); // maps a's ring for rank 1; a maps b's on its next attach
        a.attach_pending();
    }
};

/// Writes `value` into `owner`'s rings file, at the place `where(ring, data)` names (as
/// offsets into a copy of the file) in its ring for rank 1: what a broken or hostile writer
/// could leave there. False if the file or the ring is not found.
template <class T, class Where>
bool tamper(det::message_rings const& owner, T value, Where where) {
    std::string path = "/dev/shm/" + owner.name() + "-rings";
    auto bytes = std::filesystem::file_size(path);
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    if (f == nullptr) {
        return false;
    }
    std::vector<std::byte> file(bytes);
    auto* ring = std::fread(file.data(), 1, bytes, f) == bytes
                     ? det::message_rings::find_ring(file.data(), bytes, 1)
                     : nullptr;
    bool ok = ring != nullptr;
    if (ok) {
        std::byte const* at = where(ring, det::message_rings::data_of(ring));
        std::fseek(f, static_cast<long>(at - file.data()), SEEK_SET);
        ok = std::fwrite(&value, sizeof value, 1, f) == 1;
    }
    std::fclose(f);
    return ok;
}

} // namespace

TEST(message_rings, a_ring_is_used_only_once_its_reader_has_attached_it) {
    det::message_rings a(fresh_name()), b(fresh_name());
    std::vector<std::string> names{a.name(), b.name()};
    a.connect(names, 0);
    auto msg = pattern(40, 1);
    EXPECT_FALSE(a.send(1, msg.data(), msg.size())) << "b has not mapped a's ring yet";
    EXPECT_FALSE(a.send(0, msg.data(), msg.size())) << "no ring to itself";
    EXPECT_FALSE(a.send(7, msg.data(), msg.size())) << "no such rank";
    EXPECT_EQ(a.unattached(), 1u) << "b's file does not exist yet";
    b.connect(names, 1);
    EXPECT_EQ(b.unattached(), 0u);
    ASSERT_TRUE(a.send(1, msg.data(), msg.size()));
    auto got = poll_all(b);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].source, 0u);
    EXPECT_EQ(got[0].bytes, msg);
    EXPECT_TRUE(poll_all(b).empty());
    EXPECT_EQ(a.stats().sent, 1u);
    EXPECT_EQ(b.stats().received, 1u);
}

TEST(message_rings, messages_arrive_whole_and_in_order_across_many_wraps) {
    pair_of_rings p;
    std::vector<std::vector<std::byte>> sent;
    std::size_t read = 0;
    unsigned seed = 0;
    // Sizes that do not divide the ring, so records wrap at every offset class.
    for (int round = 0; round < 2000; ++round) {
        std::size_t n = 1 + (round * 977) % 3000;
        auto m = pattern(n, seed++);
        ASSERT_TRUE(p.a.send(1, m.data(), m.size())) << "round " << round;
        sent.push_back(std::move(m));
        if (round % 7 == 6) {
            for (auto& g : poll_all(p.b)) {
                ASSERT_LT(read, sent.size());
                ASSERT_EQ(g.bytes, sent[read]) << "message " << read;
                ++read;
            }
        }
    }
    for (auto& g : poll_all(p.b)) {
        ASSERT_EQ(g.bytes, sent[read]);
        ++read;
    }
    EXPECT_EQ(read, sent.size());
}

TEST(message_rings, a_full_ring_refuses_without_writing_and_takes_again_once_read) {
    pair_of_rings p;
    auto m = pattern(1000, 3);
    std::size_t accepted = 0;
    while (p.a.send(1, m.data(), m.size())) {
        ++accepted;
        ASSERT_LT(accepted, 1000u) << "never full";
    }
    // 1008-byte records fill the ring.
    EXPECT_EQ(accepted, det::message_rings::ring_bytes / 1008);
    EXPECT_EQ(p.a.stats().refused, 1u);
    auto big = pattern(det::message_rings::max_message + 1, 4);
    EXPECT_FALSE(p.a.send(1, big.data(), big.size())) << "over max_message";
    auto got = poll_all(p.b);
    EXPECT_EQ(got.size(), accepted) << "a refusal wrote nothing";
    EXPECT_TRUE(p.a.send(1, m.data(), m.size()));
    EXPECT_EQ(poll_all(p.b).size(), 1u);
}

TEST(message_rings, a_ring_with_a_corrupted_record_is_dropped_and_nothing_past_it_is_read) {
    pair_of_rings p;
    auto m = pattern(64, 5);
    ASSERT_TRUE(p.a.send(1, m.data(), m.size()));
    ASSERT_TRUE(p.a.send(1, m.data(), m.size()));
    // The second record's length corrupted (as a broken writer would leave it).
    ASSERT_TRUE(
        tamper(p.a, std::uint32_t{1} << 30, [](auto*, std::byte* data) { return data + 8 + 64; }));
    auto got = poll_all(p.b);
    ASSERT_EQ(got.size(), 1u) << "the first record is intact";
    EXPECT_EQ(got[0].bytes, m);
    ASSERT_TRUE(p.a.send(1, m.data(), m.size()));
    EXPECT_TRUE(poll_all(p.b).empty()) << "a dropped ring is not read again";
}

TEST(message_rings, a_head_beyond_the_ring_is_dropped) {
    pair_of_rings p;
    ASSERT_TRUE(
        tamper(p.a, std::uint64_t{10 * det::message_rings::ring_bytes},
               [](auto* ring, std::byte*) { return reinterpret_cast<std::byte*>(&ring->head); }));
    EXPECT_TRUE(poll_all(p.b).empty());
}

TEST(message_rings, a_wrap_mark_past_the_published_head_is_dropped) {
    // A wrap mark says the rest of the ring is skipped; one where less than that has been
    // published is not what a writer leaves: the ring is dropped, nothing past the head read.
    pair_of_rings p;
    auto m = pattern(64, 6);
    ASSERT_TRUE(p.a.send(1, m.data(), m.size()));
    ASSERT_TRUE(tamper(p.a, det::rings_layout::wrap_mark,
                       [](auto*, std::byte* data) { return data + 4; })); // the first's mark
    testing::internal::CaptureStderr();
    EXPECT_TRUE(poll_all(p.b).empty());
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("a wrap mark beyond its head"), std::string::npos) << err;
    ASSERT_TRUE(p.a.send(1, m.data(), m.size()));
    EXPECT_TRUE(poll_all(p.b).empty()) << "a dropped ring is not read again";
}

TEST(message_rings, a_ring_whose_tail_is_not_a_record_boundary_is_never_read) {
    // A writer's file whose ring for rank 1 has a tail that no record can end at (as a broken
    // or hostile writer might leave): the reader refuses to attach it, so it never reads from
    // an offset its checks did not make (the record prefix there could lie past the mapping).
    det::message_rings a(fresh_name()), b(fresh_name());
    std::vector<std::string> names{a.name(), b.name()};
    a.connect(names, 0);
    ASSERT_TRUE(
        tamper(a, std::uint64_t{det::message_rings::ring_bytes - 3},
               [](auto* ring, std::byte*) { return reinterpret_cast<std::byte*>(&ring->tail); }));
    testing::internal::CaptureStderr();
    b.connect(names, 1);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(b.unattached(), 0u) << "refused for good, not retried";
    EXPECT_NE(err.find("not usable"), std::string::npos) << err;
    auto msg = pattern(16, 9);
    EXPECT_FALSE(a.send(1, msg.data(), msg.size())) << "b never attached a's ring";
    EXPECT_TRUE(poll_all(b).empty());
}

TEST(local_completions, a_handler_that_throws_leaves_the_rest_for_the_next_drain) {
    namespace fab = courier::parcelport::fabric;
    fab::local_completions q;
    std::vector<fab::op> ops(5, fab::op(fab::op::kind::send));
    for (auto& o : ops) {
        q.push(&o);
    }
    std::vector<fab::op*> seen;
    auto handle = [&](fab::op* o) {
        seen.push_back(o);
        if (seen.size() == 2) {
            throw std::runtime_error("a handler failed");
        }
    };
    EXPECT_THROW(q.drain(handle), std::runtime_error);
    EXPECT_FALSE(q.empty()) << "the three not handled are still there";
    EXPECT_TRUE(q.drain(handle));
    EXPECT_TRUE(q.empty());
    ASSERT_EQ(seen.size(), 5u);
    std::vector<fab::op*> expected;
    for (auto& o : ops) {
        expected.push_back(&o);
    }
    EXPECT_EQ(seen, expected) << "each once, in the order pushed";
    EXPECT_FALSE(q.drain(handle));
}

TEST(message_rings, the_files_go_with_their_owners) {
    std::string path;
    {
        det::message_rings a(fresh_name());
        path = "/dev/shm/" + a.name() + "-rings";
        EXPECT_TRUE(std::filesystem::exists(path));
        EXPECT_THROW(det::message_rings again(a.name()), std::system_error) << "a name in use";
    }
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(message_rings, a_producer_and_a_consumer_thread_move_a_million_messages_in_order) {
    pair_of_rings p;
    constexpr std::uint64_t total = 1'000'000;
    std::atomic<bool> done{false}, stop{false};
    std::uint64_t refused = 0;
    std::thread producer([&] {
        for (std::uint64_t i = 0; i < total && !stop;) {
            std::size_t n = 16 + (i % 5) * 40; // the last byte is not i's
            bool ok = p.a.send(1, n, [&](std::byte* at) {
                std::memset(at, static_cast<int>(i & 0xff), n);
                std::memcpy(at, &i, sizeof i);
            });
            if (ok) {
                ++i;
            } else {
                ++refused;
                std::this_thread::yield();
            }
        }
        done = true;
    });
    std::uint64_t expect = 0;
    bool ok = true;
    while (expect < total && ok) {
        p.b.poll([&](std::uint32_t, std::byte const* at, std::size_t n) {
            std::uint64_t v;
            std::memcpy(&v, at, sizeof v);
            if (ok) {
                ok = v == expect && n == 16 + (expect % 5) * 40 &&
                     at[n - 1] == static_cast<std::byte>(expect & 0xff);
                ++expect;
            }
        });
    }
    stop = true;
    producer.join();
    EXPECT_TRUE(ok) << "message " << expect << " out of order or damaged";
    EXPECT_EQ(expect, total);
    EXPECT_TRUE(done);
    EXPECT_EQ(p.a.stats().refused, refused);
}
