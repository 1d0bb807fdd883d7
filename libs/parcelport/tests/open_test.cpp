// SPDX-License-Identifier: BSL-1.0
// Opening the libfabric transport fails cleanly at every step: a failure injected at each one
// throws network_error naming the step, closes whatever was opened (ASan/LSan find no leak),
// leaves the rma pool detached, and a transport opened afterwards works.
#include "../src/libfabric/fabric.hpp"
#include "endpoint_pair.hpp"
#include "pump.hpp"

#include <courier/parcelport/transport.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

namespace pp = courier::parcelport;
namespace cs = courier::serialization;

namespace {

pp::transport_options options(std::string const& provider) {
    pp::transport_options o;
    o.provider = provider;
    o.job_token = 7;
    o.attach_rma_pool = true; // attaching is a step whose undoing matters
    return o;
}

class opening : public ::testing::TestWithParam<std::string> {
protected:
    void TearDown() override { pp::fabric::testing::fail_opening_at(-1); }
};

TEST_P(opening, a_failure_at_every_step_closes_what_was_opened) {
    pp::fabric::testing::fail_opening_at(-1);
    try {
        (void)pp::make_libfabric_transport(options(GetParam()));
    } catch (std::exception const& e) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << e.what();
    }
    int const steps = pp::fabric::testing::opening_steps();
    // getinfo, fabric, domain, av, cq, endpoint, bind, enable, cache, attach, receives at least
    ASSERT_GE(steps, 11);
    for (int k = 0; k < steps; ++k) {
        pp::fabric::testing::fail_opening_at(k);
        try {
            (void)pp::make_libfabric_transport(options(GetParam()));
            ADD_FAILURE() << "step " << k << " did not fail";
        } catch (courier::network_error const& e) {
            EXPECT_NE(std::string(e.what()).find("injected failure (step " + std::to_string(k)),
                      std::string::npos)
                << e.what();
        }
        EXPECT_EQ(courier::rma::attached_registrar(), nullptr)
            << "step " << k << " left the rma pool attached to a destroyed transport";
    }
    pp::fabric::testing::fail_opening_at(-1);

    // A transport opened afterwards attaches the pool and moves a message.
    auto o = options(GetParam());
    auto a = pp::make_libfabric_transport(o);
    o.attach_rma_pool = false;
    auto b = pp::make_libfabric_transport(o);
    EXPECT_NE(courier::rma::attached_registrar(), nullptr);
    std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
    a->set_peers(addrs, 0);
    b->set_peers(addrs, 1);
    std::vector<double> got;
    b->set_receive_handler([&](std::uint32_t, cs::message&& m) { cs::load(m, got); });
    std::vector<double> big(100000, 1.5);
    bool sent = false;
    a->send(1, cs::save(big), [&](std::error_code ec) { sent = !ec; });
    ASSERT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return sent && got.size() == big.size(); }, std::chrono::seconds(30)));
    EXPECT_EQ(got, big);
}

TEST(opening, an_unknown_provider_is_a_network_error_naming_it) {
    pp::fabric::testing::fail_opening_at(-1);
    auto o = options("no-such-provider");
    try {
        (void)pp::make_libfabric_transport(o);
        FAIL() << "opened a provider that does not exist";
    } catch (courier::network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("no-such-provider"), std::string::npos) << e.what();
    }
    EXPECT_EQ(courier::rma::attached_registrar(), nullptr);
}

// libfabric 1.17's tcp lists every interface whatever domain the hints name, the host's first
// interface first: a transport asked for "lo" was bound to eth0's address.
TEST(opening, a_tcp_endpoint_listens_on_the_interface_it_was_given) {
    pp::fabric::testing::fail_opening_at(-1);
    auto o = options("tcp;ofi_rxm");
    o.interface = "lo";
    pp::fabric::endpoint e(o);
    e.enable(false, "");
    auto const name = e.name();
    ASSERT_GE(name.size(), sizeof(sockaddr_in));
    sockaddr_in a{};
    std::memcpy(&a, name.data(), sizeof a);
    EXPECT_EQ(a.sin_family, AF_INET);
    EXPECT_EQ(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
}

TEST(opening, an_interface_the_provider_does_not_offer_is_a_network_error_naming_it) {
    pp::fabric::testing::fail_opening_at(-1);
    auto o = options("tcp;ofi_rxm");
    o.interface = "courier-none0";
    try {
        (void)pp::make_libfabric_transport(o);
        FAIL() << "opened a tcp endpoint on an interface that does not exist";
    } catch (courier::network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("network interface 'courier-none0'"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(courier::rma::attached_registrar(), nullptr);
}

TEST(opening, a_peer_that_opened_another_provider_is_refused_naming_both) {
    // "tcp" opens net or tcp;ofi_rxm (tcp_provider()); both take socket addresses but do not
    // speak to each other, so a locality whose peer says it opened the other fails at once.
    pp::fabric::testing::fail_opening_at(-1);
    auto o = options("tcp;ofi_rxm");
    o.attach_rma_pool = false;
    o.interface = "lo";
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    std::string why;
    auto other = [](pp::fabric::address_parts& parts) {
        EXPECT_EQ(parts.core, "tcp");
        parts.core = "net";
    };
    try {
        if (!open_two_altered(o, a, b, other, got, why)) {
            GTEST_SKIP() << "provider tcp;ofi_rxm unavailable here: " << why;
        }
        ADD_FAILURE() << "a peer that opened net was taken";
    } catch (courier::network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("locality 0 opened provider 'net', this one 'tcp'"),
                  std::string::npos)
            << e.what();
    }
    // Unaltered, the same two connect.
    std::unique_ptr<pp::transport> c, d;
    auto same = [](pp::fabric::address_parts&) {};
    ASSERT_TRUE(open_two_altered(o, c, d, same, got, why)) << why;
    cs::serialize_buffer<char> buf(1000);
    for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = static_cast<char>('a' + i % 26);
    }
    send_one_checked(*c, *d, got, buf);
}

INSTANTIATE_TEST_SUITE_P(providers, opening, ::testing::Values("tcp;ofi_rxm", "shm", "net"),
                         [](auto const& p) {
                             return p.param == "tcp;ofi_rxm" ? std::string("tcp") : p.param;
                         });

} // namespace

namespace {
TEST(make_transport, opens_the_named_parcelport_and_rejects_unknown_names) {
    pp::fabric::testing::fail_opening_at(-1);
    pp::transport_options o;
    o.provider = "tcp;ofi_rxm";
    try {
        EXPECT_EQ(pp::make_transport(o)->provider_name().rfind("tcp", 0), 0u);
    } catch (courier::network_error const& e) {
        GTEST_SKIP() << "tcp unavailable here: " << e.what();
    }
    o.parcelport = "carrier-pigeon";
    try {
        (void)pp::make_transport(o);
        FAIL() << "opened an unknown parcelport";
    } catch (std::invalid_argument const& e) {
        EXPECT_NE(std::string(e.what()).find("carrier-pigeon"), std::string::npos) << e.what();
    }
}

TEST(make_transport, refuses_shm_alone_when_peers_are_on_other_hosts) {
    pp::fabric::testing::fail_opening_at(-1);
    pp::transport_options o;
    o.provider = "shm";
    o.peers_on_other_hosts = true;
    try {
        (void)pp::make_transport(o);
        FAIL() << "opened shm for a job across hosts";
    } catch (courier::network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("other hosts"), std::string::npos) << e.what();
    }
}
} // namespace

TEST(opening, tcp_opens_net_whether_a_doorbell_or_the_wait_fd_wakes_it) {
    // make_transport resolves "tcp" (tcp_provider()): net wherever offered, waking idle workers
    // through the tcp doorbell or through its completion queue's wait fd (a wait set:
    // endpoint::may_sleep), so two workers per locality get it too.
    pp::fabric::testing::fail_opening_at(-1);
    std::string const chosen = pp::tcp_provider();
    if (chosen != "net") {
        GTEST_SKIP() << "libfabric offers no net provider here: tcp opens " << chosen;
    }
    for (bool bell : {true, false}) {
        auto o = options("tcp");
        o.attach_rma_pool = false;
        o.interface = "lo";
        o.tcp_doorbell = bell;
        auto t = pp::make_transport(o);
        EXPECT_EQ(pp::fabric::split_address(t->address(), 0).core, "net") << "doorbell " << bell;
        EXPECT_GE(t->wait_fd(), 0) << "doorbell " << bell;
    }
}
