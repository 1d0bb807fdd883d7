// SPDX-License-Identifier: BSL-1.0
// The shm doorbell: a ring reaches only an armed bell, once per arming; bells of other
// endpoints are found by name; what a bell creates in /dev/shm goes with it. And through the
// transport: a send to a shm endpoint whose workers are about to sleep makes its wait fd
// readable, and a tcp endpoint that cannot open a peer's bell does not wait on its own.
#include "../src/doorbell.hpp"
#include "../src/libfabric/context.hpp"
#include "endpoint_pair.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

namespace pp = courier::parcelport;
namespace fab = courier::parcelport::fabric;

namespace {

std::string unique_name(char const* what) {
    return std::string("courier-test-") + what + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::random_device{}());
}

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST(doorbell, a_ring_reaches_only_an_armed_bell_and_only_once_per_arming) {
    std::string na = unique_name("a"), nb = unique_name("b");
    pp::detail::doorbell a(na), b(nb);
    EXPECT_EQ(a.connect({na, nb}), 0u);
    EXPECT_EQ(b.connect({na, nb}), 0u);
    EXPECT_FALSE(a.ring(1)); // b is awake: no datagram
    EXPECT_FALSE(readable(b.fd(), 0));
    b.arm();
    EXPECT_TRUE(a.ring(1));
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_FALSE(a.ring(1)); // the ring lowered b's word: one datagram per sleep
    b.arm();                 // drops the old ring
    EXPECT_FALSE(readable(b.fd(), 0));
    b.disarm(); // found work after arming: nobody needs to ring
    EXPECT_FALSE(a.ring(1));
    EXPECT_FALSE(a.ring(0)); // itself, and ranks it does not know
    EXPECT_FALSE(a.ring(7));
}

TEST(doorbell, a_missing_peer_is_counted_and_never_rung_and_the_shm_object_goes_away) {
    std::string na = unique_name("c");
    std::filesystem::path obj = "/dev/shm/" + na + "-bell";
    {
        pp::detail::doorbell a(na);
        EXPECT_TRUE(std::filesystem::exists(obj));
        EXPECT_EQ(a.connect({na, unique_name("nobody"), ""}), 2u);
        EXPECT_FALSE(a.ring(1));
        EXPECT_FALSE(a.ring(2));
    }
    EXPECT_FALSE(std::filesystem::exists(obj));
}

TEST(doorbell, two_bells_of_one_name_cannot_coexist) {
    std::string n = unique_name("d");
    pp::detail::doorbell a(n);
    EXPECT_THROW(pp::detail::doorbell b(n), std::system_error);
}

TEST(doorbell, a_send_to_a_shm_endpoint_about_to_sleep_makes_its_wait_fd_readable) {
    pp::transport_options o;
    o.provider = "shm";
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_two(o, a, b, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
    a->set_peers(addrs, 0);
    b->set_peers(addrs, 1);
    int got = 0;
    b->set_receive_handler([&](std::uint32_t, courier::serialization::message&&) { ++got; });
    ASSERT_GE(b->wait_fd(), 0);
    EXPECT_TRUE(b->wait_fd_may_miss()); // the scheduler keeps a bounded sleep as a safety net
    ASSERT_TRUE(b->can_sleep());        // nothing pending: b's workers may sleep (bell armed)
    EXPECT_FALSE(readable(b->wait_fd(), 0));
    bool sent = false;
    a->send(1, courier::serialization::save(42), [&](std::error_code) { sent = true; });
    // The sender progresses (its first send to a peer may wait in its backlog), the receiver
    // does not: only the doorbell can make its fd readable.
    bool rang = false;
    for (int i = 0; i < 5000 && !rang; ++i) {
        a->progress();
        rang = readable(b->wait_fd(), 1);
    }
    EXPECT_TRUE(rang);
    for (int i = 0; i < 100000 && (got == 0 || !sent); ++i) {
        b->progress();
        a->progress();
    }
    EXPECT_EQ(got, 1);
    EXPECT_TRUE(sent);
    // Without a doorbell, shm has no wait fd at all.
    o.doorbell = false;
    auto c = pp::make_libfabric_transport(o);
    EXPECT_EQ(c->wait_fd(), -1);
}

} // namespace

// tcp with a peer whose doorbell cannot be opened (one on another host, as far as this side can
// tell): that peer could never ring this side, so this side must not wait on its own bell and
// falls back to the scheduler's bounded backoff (no wait fd); the peer, which opened this
// side's bell, still waits on its own. Messages flow both ways either way.
TEST(transport_tcp_doorbell, a_peer_whose_bell_cannot_be_opened_leaves_this_side_polling) {
    pp::transport_options o;
    o.provider = "tcp;ofi_rxm";
    o.job_token = 42;
    o.tcp_doorbell = true;
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_two(o, a, b, why)) {
        GTEST_SKIP() << "provider tcp unavailable here: " << why;
    }
    ASSERT_GE(a->wait_fd(), 0) << "a tcp transport with a doorbell waits on its bell";
    auto addr_a = a->address(), addr_b = b->address();
    // b's address with the last character of its bell's name changed, so that a looks for a
    // bell that does not exist.
    fab::address_parts parts = fab::split_address(addr_b, 1);
    ASSERT_FALSE(parts.bell.empty());
    parts.bell.back() = parts.bell.back() == 'x' ? 'y' : 'x';
    auto const bad_b = fab::join_address(parts);
    a->set_peers({addr_a, bad_b}, 0);
    b->set_peers({addr_a, addr_b}, 1);
    EXPECT_EQ(a->wait_fd(), -1);
    EXPECT_FALSE(a->wait_fd_may_miss());
    EXPECT_GE(b->wait_fd(), 0);
    EXPECT_TRUE(b->wait_fd_may_miss());
    int at_a = 0, at_b = 0;
    a->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_a; });
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    a->send(1, cs::save(std::string("to b")), nullptr);
    b->send(0, cs::save(std::string("to a")), nullptr);
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_a == 1 && at_b == 1; }, std::chrono::seconds(30)));
}
