// SPDX-License-Identifier: BSL-1.0
// The shm doorbell: a ring reaches only an armed bell, once per arming; bells of other
// endpoints are found by name; what a bell creates in /dev/shm goes with it. And through the
// transport: a send to a shm endpoint whose workers are about to sleep makes its wait fd
// readable.
#include "../src/doorbell.hpp"

#include <courier/parcelport/transport.hpp>
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

namespace pp = courier::parcelport;

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
    try {
        a = pp::make_libfabric_transport(o);
        b = pp::make_libfabric_transport(o);
    } catch (std::exception const& e) {
        GTEST_SKIP() << "provider shm unavailable here: " << e.what();
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
