// SPDX-License-Identifier: BSL-1.0
// The shm doorbell: a ring reaches only an armed bell, once per arming; bells of other
// endpoints are found by name; what a bell creates in /dev/shm goes with it. And through the
// transport: a send to a shm endpoint whose workers are about to sleep makes its wait fd
// readable, and a tcp endpoint that cannot open a peer's bell does not wait on its own.
// The network doorbell (between hosts): rings by time, names that parse and names that do not,
// and through the transport: a tcp endpoint with peers on other hosts waits on it instead of
// the completion queue's fd, and a peer's post makes it readable.
#include "../src/doorbell.hpp"
#include "../src/libfabric/context.hpp"
#include "../src/net_bell.hpp"
#include "endpoint_pair.hpp"

#include <gtest/gtest.h>

#include <thread>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

/// Gives a (rank 0) and b (rank 1) each other's addresses.
void introduce(pp::transport& a, pp::transport& b) {
    std::vector<std::vector<std::byte>> addrs = {a.address(), b.address()};
    a.set_peers(addrs, 0);
    b.set_peers(addrs, 1);
}

/// open_two(), then introduce(); false (and why) if the provider cannot be opened here.
bool open_introduced(pp::transport_options const& o, std::unique_ptr<pp::transport>& a,
                     std::unique_ptr<pp::transport>& b, std::string& why) {
    if (!open_two(o, a, b, why)) {
        return false;
    }
    introduce(*a, *b);
    return true;
}

pp::transport_options shm_options() {
    pp::transport_options o;
    o.provider = "shm";
    return o;
}

/// A transport as pump_all() progresses it, remembering whether any pass reported work.
struct work_seen {
    pp::transport& t;
    bool worked = false;
    void progress() { worked = t.progress() || worked; }
};

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

/// A control message (send_control: a liveness beat) from a to b, whose wait fd is `fd`: it
/// rings no doorbell and waits in b until b progresses, and a pass that finds only it (b's), or
/// only its send's end (a's), reports no work and keeps no side awake. A parcel sent the same
/// way rings b and is work. a and b are introduced; b's receive handler is set here.
void check_control_is_quiet(pp::transport& a, pp::transport& b, int fd) {
    using namespace std::chrono_literals;
    int at_b = 0;
    b.set_receive_handler([&](std::uint32_t, courier::serialization::message&&) { ++at_b; });
    // First contact (shm's, rxm's connection) through a parcel; then both sides quiet.
    bool sent = false;
    a.send(1, courier::serialization::save(1), [&](std::error_code) { sent = true; });
    ASSERT_TRUE(pp::test::pump_both(
        a, b, [&] { return sent && at_b == 1; }, 30s));
    ASSERT_TRUE(pp::test::pump_all([&] { return b.can_sleep(); }, 5s, a));
    while (a.progress()) {
    }
    auto const rings = a.stats().doorbell_rings;

    bool control_sent = false;
    a.send_control(1, courier::serialization::save(2),
                   [&](std::error_code ec) { control_sent = !ec; });
    work_seen at_a{a};
    EXPECT_TRUE(pp::test::pump_all([&] { return control_sent; }, 30s, at_a));
    EXPECT_FALSE(at_a.worked); // its send's end alone is no work
    EXPECT_EQ(a.stats().doorbell_rings, rings);
    EXPECT_FALSE(readable(fd, 20)); // nothing rang b
    work_seen quiet_b{b};
    EXPECT_TRUE(pp::test::pump_all([&] { return at_b == 2; }, 30s, quiet_b)); // delivered
    EXPECT_FALSE(quiet_b.worked);                                             // but no work
    EXPECT_TRUE(b.can_sleep()); // and nothing to stay awake for (the network bell's heard())

    ::usleep(2'000); // past the network bell's quiet time since a's last parcel
    a.send(1, courier::serialization::save(3), nullptr);
    bool rang = false;
    for (int i = 0; i < 5000 && !rang; ++i) {
        a.progress();
        rang = readable(fd, 1);
    }
    EXPECT_TRUE(rang);
    EXPECT_GT(a.stats().doorbell_rings, rings);
    work_seen parcel_b{b};
    EXPECT_TRUE(pp::test::pump_all([&] { return at_b == 3; }, 30s, parcel_b));
    EXPECT_TRUE(parcel_b.worked);

    // A control message whose chunk b reads goes as any send: it rings b, and b's pass that
    // takes it (and starts the read) is work, or b could sleep with the read unfinished.
    ASSERT_TRUE(pp::test::pump_all([&] { return b.can_sleep(); }, 5s, a));
    courier::serialization::serialize_buffer<char> big(std::size_t{1} << 20);
    std::fill(big.data(), big.data() + big.size(), 'x');
    auto const rendezvous = a.stats().rendezvous_sends;
    auto const rings_before = a.stats().doorbell_rings;
    bool big_sent = false;
    a.send_control(1, courier::serialization::save(big),
                   [&](std::error_code ec) { big_sent = !ec; });
    EXPECT_EQ(a.stats().rendezvous_sends, rendezvous + 1);
    EXPECT_GT(a.stats().doorbell_rings, rings_before); // its announcement woke b
    work_seen big_b{b};
    EXPECT_TRUE(pp::test::pump_all([&] { return at_b == 4 && big_sent; }, 30s, a, big_b));
    EXPECT_TRUE(big_b.worked);
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

// A peer's word in /dev/shm without its socket (hosts that share /dev/shm but not a network
// namespace: containers, the project's namespace cluster) is no bell: every ring would be lost,
// so it is counted missing and never rung.
TEST(doorbell, a_word_without_a_reachable_socket_is_counted_missing) {
    std::string na = unique_name("w");
    std::string other = unique_name("wordonly");
    std::string path = "/" + other + "-bell";
    int fd = ::shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    ::close(fd);
    {
        pp::detail::doorbell a(na);
        EXPECT_EQ(a.connect({na, other}), 1u);
        EXPECT_FALSE(a.ring(1));
    }
    ::shm_unlink(path.c_str());
}

TEST(doorbell, two_bells_of_one_name_cannot_coexist) {
    std::string n = unique_name("d");
    pp::detail::doorbell a(n);
    EXPECT_THROW(pp::detail::doorbell b(n), std::system_error);
}

// A send the provider refused for now (-FI_EAGAIN: the peer's queue is full until it
// progresses) waits in the sender's backlog; the peer is rung, but nothing rings the sender
// when it may retry, so the sender must not sleep on its bell while its backlog holds
// anything. Sends to a peer that never progresses fill its queue.
TEST(doorbell, a_shm_endpoint_with_a_deferred_send_does_not_sleep) {
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(shm_options(), a, b, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    int sent = 0, n = 0;
    auto deferred = [&] { return a->debug_state().find("backlog 0,") == std::string::npos; };
    while (n < 20000 && !deferred()) {
        a->send(1, courier::serialization::save(n), [&](std::error_code) { ++sent; });
        ++n;
        a->progress();
    }
    ASSERT_TRUE(deferred()) << n << " sends to a peer that does not progress were all taken: "
                            << a->debug_state();
    EXPECT_FALSE(a->can_sleep()) << a->debug_state();
    int got = 0;
    b->set_receive_handler([&](std::uint32_t, courier::serialization::message&&) { ++got; });
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return got == n && sent == n; }, std::chrono::seconds(30)));
    EXPECT_EQ(got, n);
    EXPECT_EQ(sent, n);
}

TEST(doorbell, a_control_message_rings_no_bell_and_is_no_work_on_shm) {
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(shm_options(), a, b, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    ASSERT_GE(b->wait_fd(), 0);
    check_control_is_quiet(*a, *b, b->wait_fd());
}

TEST(doorbell, a_send_to_a_shm_endpoint_about_to_sleep_makes_its_wait_fd_readable) {
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(shm_options(), a, b, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    int got = 0;
    b->set_receive_handler([&](std::uint32_t, courier::serialization::message&&) { ++got; });
    ASSERT_GE(b->wait_fd(), 0);
    EXPECT_EQ(b->wait_fd_coverage(),
              pp::wait_coverage::rare_misses); // a bounded sleep, a safety net
    ASSERT_TRUE(b->can_sleep()); // nothing pending: b's workers may sleep (bell armed)
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
    pp::transport_options o = shm_options();
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
    EXPECT_EQ(a->wait_fd_coverage(), pp::wait_coverage::complete);
    EXPECT_GE(b->wait_fd(), 0);
    EXPECT_EQ(b->wait_fd_coverage(), pp::wait_coverage::rare_misses);
    int at_a = 0, at_b = 0;
    a->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_a; });
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    a->send(1, cs::save(std::string("to b")), nullptr);
    b->send(0, cs::save(std::string("to a")), nullptr);
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_a == 1 && at_b == 1; }, std::chrono::seconds(30)));
}

// shm with a peer whose bell cannot be opened: as for tcp above, this side takes it that the
// peer cannot open its bell either (another host, as far as it can tell), so its bell's
// coverage is partial (the scheduler keeps its sleeps short). The peer, which opened every
// bell, reports rare_misses: it cannot tell that this side failed, and such a one-sided failure
// (file descriptors, memory) is a fault its safety-net sleep covers. Messages flow both ways.
TEST(transport_shm_doorbell, a_peer_that_cannot_ring_makes_the_coverage_partial) {
    pp::transport_options o;
    o.provider = "shm";
    o.job_token = 42;
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_two(o, a, b, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    auto addr_a = a->address(), addr_b = b->address();
    fab::address_parts parts = fab::split_address(addr_b, 1);
    ASSERT_FALSE(parts.bell.empty());
    parts.bell.back() = parts.bell.back() == 'x' ? 'y' : 'x';
    a->set_peers({addr_a, fab::join_address(parts)}, 0); // a cannot open b's bell
    b->set_peers({addr_a, addr_b}, 1);
    EXPECT_GE(a->wait_fd(), 0);
    EXPECT_EQ(a->wait_fd_coverage(), pp::wait_coverage::partial);
    EXPECT_GE(b->wait_fd(), 0);
    EXPECT_EQ(b->wait_fd_coverage(), pp::wait_coverage::rare_misses);
    int at_a = 0, at_b = 0;
    a->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_a; });
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    a->send(1, cs::save(std::string("to b")), nullptr);
    b->send(0, cs::save(std::string("to a")), nullptr);
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_a == 1 && at_b == 1; }, std::chrono::seconds(30)));
}

namespace {

TEST(net_bell, names_parse_and_others_are_refused) {
    sockaddr_storage a{};
    socklen_t len = 0;
    EXPECT_TRUE(pp::detail::parse_net_bell_name("udp:127.0.0.1:4000", a, len));
    EXPECT_EQ(a.ss_family, AF_INET);
    EXPECT_EQ(len, sizeof(sockaddr_in));
    EXPECT_TRUE(pp::detail::parse_net_bell_name("udp:[::1]:65535", a, len));
    EXPECT_EQ(a.ss_family, AF_INET6);
    for (char const* bad : {"", "udp:", "udp::12", "udp:127.0.0.1", "udp:127.0.0.1:0",
                            "udp:127.0.0.1:65536", "udp:127.0.0.1:12x", "udp:somehost:12",
                            "udp:[::1:12", "udp:[]:12", "courier-1234-0-99", "tcp:127.0.0.1:80"}) {
        EXPECT_FALSE(pp::detail::parse_net_bell_name(bad, a, len)) << bad;
    }
}

TEST(net_bell, a_peer_is_rung_on_the_first_post_and_after_the_quiet_time_only) {
    using namespace std::chrono_literals;
    // a waits an hour between rings (only a first post rings), c never waits.
    pp::detail::net_bell a("lo", 3600s), b("lo", 3600s), c("lo", 0s);
    std::vector<std::string> names = {a.name(), b.name(), c.name()};
    EXPECT_TRUE(a.name().starts_with("udp:127.0.0.1:")) << a.name();
    EXPECT_EQ(a.connect(names, 0), 0u);
    EXPECT_EQ(b.connect(names, 1), 0u);
    EXPECT_EQ(c.connect(names, 2), 0u);
    EXPECT_FALSE(b.arm());        // nothing came
    EXPECT_TRUE(a.ring(1, true)); // nothing posted to b before: it may sleep
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_FALSE(a.ring(1, true)); // posted to b within the quiet time: b is awake
    EXPECT_TRUE(b.arm());          // drops the rings that came while awake
    EXPECT_FALSE(readable(b.fd(), 0));
    EXPECT_TRUE(c.ring(1, true));
    EXPECT_TRUE(c.ring(1, true));
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_FALSE(a.ring(0, true)); // itself, and ranks it does not know
    EXPECT_FALSE(a.ring(3, true));
}

TEST(net_bell, a_deferred_post_rings_once_per_quiet_time_and_its_retry_rings_again) {
    using namespace std::chrono_literals;
    pp::detail::net_bell a("lo", 3600s), b("lo", 3600s);
    std::vector<std::string> names = {a.name(), b.name()};
    a.connect(names, 0);
    b.connect(names, 1);
    EXPECT_TRUE(a.ring(1, false));  // refused for now (-FI_EAGAIN): b may have to progress
    EXPECT_FALSE(a.ring(1, false)); // the backlog retries on every pass: not every time
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_TRUE(b.arm());
    // The post that goes through later is the first one b gets: it rings though a ring went
    // within the quiet time (b may have slept again since).
    EXPECT_TRUE(a.ring(1, true));
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_FALSE(a.ring(1, true));
}

TEST(net_bell, a_peer_without_a_name_is_counted_and_never_rung) {
    using namespace std::chrono_literals;
    pp::detail::net_bell a("lo", 0s);
    EXPECT_EQ(a.connect({a.name(), "", "courier-1234-0-99", "udp:127.0.0.1:0"}, 0), 3u);
    for (std::uint32_t r = 0; r < 4; ++r) {
        EXPECT_FALSE(a.ring(r, true)) << r;
    }
}

TEST(net_bell, a_side_stays_awake_after_it_heard_something_and_a_ring_counts) {
    using namespace std::chrono_literals;
    pp::detail::net_bell a("lo", 3600s), b("lo", 3600s), quick("lo", 0s);
    EXPECT_FALSE(a.awake()); // nothing heard yet
    a.heard();
    EXPECT_TRUE(a.awake()); // for four times its quiet time
    quick.heard();
    EXPECT_FALSE(quick.awake());
    std::vector<std::string> names = {a.name(), b.name()};
    a.connect(names, 0);
    b.connect(names, 1);
    EXPECT_FALSE(b.awake());
    ASSERT_TRUE(a.ring(1, true));
    ASSERT_TRUE(readable(b.fd(), 1000));
    EXPECT_TRUE(b.arm()); // a dropped ring: its message may follow
    EXPECT_TRUE(b.awake());
}

TEST(net_bell, a_push_notice_keeps_a_side_awake_until_its_push_lands) {
    using namespace std::chrono_literals;
    // Quiet times of 0: a side is awake only while a push it took notice of has not landed
    // (no awake time after a ring), and every ring goes.
    pp::detail::net_bell a("lo", 0s), b("lo", 0s);
    std::vector<std::string> names = {a.name(), b.name()};
    a.connect(names, 0);
    b.connect(names, 1);
    auto take = [&](int datagrams) { // waits until b's socket holds them, then arms b
        for (int i = 0; i < 1000 && !readable(b.fd(), 10); ++i) {
        }
        std::this_thread::sleep_for(5ms); // the rest of them in
        EXPECT_TRUE(b.arm()) << datagrams << " datagrams";
    };
    EXPECT_FALSE(b.awake());
    // Two pushed messages posted back to back: two notices.
    EXPECT_TRUE(a.notify_push(1));
    EXPECT_TRUE(a.notify_push(1));
    take(2);
    EXPECT_TRUE(b.awake()) << "two pushes announced, none landed";
    b.push_landed();
    EXPECT_TRUE(b.awake()) << "one push announced and not landed";
    b.push_landed();
    EXPECT_FALSE(b.awake());
    // A push that lands before its notice is read: the notice only catches up.
    b.push_landed();
    EXPECT_FALSE(b.arm());
    EXPECT_TRUE(a.notify_push(1));
    take(1);
    EXPECT_FALSE(b.awake());
    // A plain ring is no notice.
    EXPECT_TRUE(a.ring(1, true));
    take(1);
    EXPECT_FALSE(b.awake());
    // A push that never lands keeps b awake for push_patience, no longer; after that the counts
    // are level and the next notice counts from there.
    EXPECT_TRUE(a.notify_push(1));
    take(1);
    EXPECT_TRUE(b.awake());
    std::this_thread::sleep_for(pp::detail::net_bell::push_patience + 10ms);
    EXPECT_FALSE(b.awake());
    EXPECT_FALSE(b.arm()); // sets the counts level
    EXPECT_TRUE(a.notify_push(1));
    take(1);
    EXPECT_TRUE(b.awake());
    b.push_landed();
    EXPECT_FALSE(b.awake());
    // A landing with no notice (one lost) is forgotten after push_patience with nothing.
    b.push_landed();
    std::this_thread::sleep_for(pp::detail::net_bell::push_patience + 10ms);
    EXPECT_FALSE(b.arm());
    EXPECT_TRUE(a.notify_push(1));
    take(1);
    EXPECT_TRUE(b.awake()) << "a lost notice's landing hid a later push";
    b.push_landed();
    EXPECT_FALSE(b.awake());
    EXPECT_FALSE(a.notify_push(0)); // itself, and ranks it does not know
    EXPECT_FALSE(a.notify_push(2));
}

// Datagrams from anywhere (large, many, not from a peer) only wake the side: the look before a
// sleep drops them all, and the socket is quiet again.
TEST(net_bell, a_flood_of_foreign_datagrams_is_dropped_before_a_sleep) {
    using namespace std::chrono_literals;
    pp::detail::net_bell b("lo", 250us);
    sockaddr_storage to{};
    socklen_t len = 0;
    ASSERT_TRUE(pp::detail::parse_net_bell_name(b.name(), to, len));
    int const s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    std::vector<char> junk(60'000, 'x');
    int sent = 0;
    for (int i = 0; i < 200; ++i) {
        std::size_t const n = i % 2 == 0 ? junk.size() : static_cast<std::size_t>(i);
        sent +=
            ::sendto(s, junk.data(), n, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), len) > 0;
    }
    ::close(s);
    ASSERT_GT(sent, 0);
    EXPECT_TRUE(readable(b.fd(), 1000));
    EXPECT_TRUE(b.arm());
    EXPECT_FALSE(readable(b.fd(), 0));
    EXPECT_FALSE(b.arm());
}

TEST(net_bell, an_interface_without_an_address_is_refused_with_its_name) {
    try {
        pp::detail::net_bell a("nosuchif0", std::chrono::microseconds(250));
        ADD_FAILURE() << "made a bell on a missing interface: " << a.name();
    } catch (std::system_error const& e) {
        EXPECT_NE(std::string(e.what()).find("'nosuchif0'"), std::string::npos) << e.what();
    }
}

/// tcp on lo for a transport told that its peers are on other hosts (no shm doorbell).
pp::transport_options elsewhere_options() {
    pp::transport_options o;
    o.provider = "tcp;ofi_rxm";
    o.job_token = 42;
    o.interface = "lo";
    o.peers_on_other_hosts = true;
    o.tcp_doorbell = false;
    return o;
}

} // namespace

// Peers on other hosts (as this side is told; both run on lo here): the queue gets no wait fd
// and idle workers wait on the network doorbell, whose name travels in the address; a send to
// an idle side makes that fd readable before the side progresses. Asked not to, it is the
// queue's fd as before, and the address carries no bell.
TEST(transport_network_doorbell, a_tcp_side_with_peers_elsewhere_sleeps_on_it_and_a_post_rings_it) {
    pp::transport_options o = elsewhere_options();
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_two(o, a, b, why)) {
        GTEST_SKIP() << "provider tcp unavailable here: " << why;
    }
    auto addr_a = a->address(), addr_b = b->address();
    EXPECT_TRUE(fab::split_address(addr_b, 1).bell.starts_with("udp:127.0.0.1:"));
    a->set_peers({addr_a, addr_b}, 0);
    b->set_peers({addr_a, addr_b}, 1);
    int const fd = b->wait_fd();
    ASSERT_GE(fd, 0);
    EXPECT_EQ(b->wait_fd_coverage(),
              pp::wait_coverage::rare_misses); // a lost datagram: the scheduler's bounded sleep
    int at_b = 0;
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    ASSERT_TRUE(b->can_sleep());
    EXPECT_FALSE(readable(fd, 0));
    a->send(1, cs::save(std::string("wake up")), nullptr);
    bool rang = false;
    for (int i = 0; i < 5000 && !rang; ++i) {
        a->progress();
        rang = readable(fd, 1);
    }
    EXPECT_TRUE(rang);
    EXPECT_GE(a->stats().doorbell_rings, 1u);
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_b == 1; }, std::chrono::seconds(30)));
    EXPECT_FALSE(b->can_sleep());  // its ring is still there: awake for a while after it
    EXPECT_FALSE(readable(fd, 0)); // and dropped
    ::usleep(5'000);
    EXPECT_TRUE(b->can_sleep());

    o.network_doorbell = false;
    std::unique_ptr<pp::transport> c, d;
    std::string why;
    ASSERT_TRUE(open_two(o, c, d, why)) << why;
    auto addr_c = c->address(), addr_d = d->address();
    EXPECT_TRUE(fab::split_address(addr_d, 1).bell.empty());
    c->set_peers({addr_c, addr_d}, 0);
    d->set_peers({addr_c, addr_d}, 1);
    EXPECT_GE(d->wait_fd(), 0); // the completion queue's
    EXPECT_EQ(d->wait_fd_coverage(), pp::wait_coverage::complete);
}

// A rail beside shm reads its queue only now and then while quiet (poll_pacer.hpp): the look
// before a sleep reads it anyway, and a ring keeps the side awake for a while. Here the pacer
// reads at most once a second; b has been quiet for longer than its 2 ms, read its queue
// just now, and a message comes: the first look finds the ring, the second (after the time
// a ring keeps it awake) the message, which the pacer would have left for a second.
TEST(transport_network_doorbell, a_paced_side_reads_its_queue_before_it_sleeps) {
    pp::transport_options o = elsewhere_options();
    o.quiet_poll_us = 1'000'000;
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(o, a, b, why)) {
        GTEST_SKIP() << "provider tcp unavailable here: " << why;
    }
    int at_b = 0;
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    a->send(1, cs::save(std::string("connect")), nullptr); // rxm's first contact
    ASSERT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_b == 1; }, std::chrono::seconds(30)));
    for (int i = 0; i < 1000 && a->progress(); ++i) {
    }
    ::usleep(20'000); // b quiet: its pacer reads the queue once per second from now
    b->progress();
    a->send(1, cs::save(std::string("while b is quiet")), nullptr);
    int const fd = b->wait_fd();
    ASSERT_GE(fd, 0);
    bool rang = false;
    for (int i = 0; i < 5000 && !rang; ++i) {
        a->progress();
        rang = readable(fd, 1);
    }
    ASSERT_TRUE(rang);
    ::usleep(20'000);             // the message lies in b's socket now
    EXPECT_FALSE(b->can_sleep()); // a ring came: awake for a while
    EXPECT_EQ(at_b, 1);
    ::usleep(5'000);
    EXPECT_FALSE(b->can_sleep()); // the look reads the queue: the message is there
    EXPECT_EQ(at_b, 2);
}

// A peer whose address has no network doorbell (its own could not be made) can never ring
// this side: its idle workers poll in the scheduler's bounded backoff instead (no wait fd).
// Between hosts, a control message neither rings the network doorbell nor keeps the receiving
// side awake (no heard()): an idle locality's heartbeats cost it no polling.
TEST(transport_network_doorbell, a_control_message_rings_no_bell_and_is_no_work) {
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(elsewhere_options(), a, b, why)) {
        GTEST_SKIP() << "provider tcp unavailable here: " << why;
    }
    ASSERT_GE(b->wait_fd(), 0);
    EXPECT_EQ(b->wait_fd_coverage(), pp::wait_coverage::rare_misses);
    check_control_is_quiet(*a, *b, b->wait_fd());
}

TEST(transport_network_doorbell, a_peer_without_one_leaves_this_side_polling) {
    pp::transport_options o = elsewhere_options();
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_two(o, a, b, why)) {
        GTEST_SKIP() << "provider tcp unavailable here: " << why;
    }
    auto addr_a = a->address(), addr_b = b->address();
    fab::address_parts parts = fab::split_address(addr_b, 1);
    ASSERT_FALSE(parts.bell.empty());
    parts.bell.clear();
    a->set_peers({addr_a, fab::join_address(parts)}, 0);
    b->set_peers({addr_a, addr_b}, 1);
    EXPECT_EQ(a->wait_fd(), -1);
    EXPECT_EQ(a->wait_fd_coverage(), pp::wait_coverage::complete);
    EXPECT_GE(b->wait_fd(), 0);
    int at_a = 0, at_b = 0;
    a->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_a; });
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    a->send(1, cs::save(std::string("to b")), nullptr);
    b->send(0, cs::save(std::string("to a")), nullptr);
    EXPECT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_a == 1 && at_b == 1; }, std::chrono::seconds(30)));
}

// libfabric 1.17's net answers fi_trywait with "sleep" and never clears its queue's signal:
// after the first completion the queue's fd stays readable, and idle workers woke and polled
// for ever. Its queue waits through a wait set (endpoint::may_sleep): once a side has had
// completions and found nothing more, its fd is quiet; a parcel from the peer makes it
// readable before the side progresses; delivered, the side may sleep again on a quiet fd.
TEST(transport_wait_fd, a_net_side_that_may_sleep_has_a_quiet_fd_until_a_parcel_comes) {
    using namespace std::chrono_literals;
    pp::transport_options o;
    o.provider = "net";
    o.job_token = 42;
    o.interface = "lo";
    o.tcp_doorbell = false; // the queue's own fd, not a bell
    std::unique_ptr<pp::transport> a, b;
    if (std::string why; !open_introduced(o, a, b, why)) {
        GTEST_SKIP() << "provider net unavailable here: " << why;
    }
    int const fd_a = a->wait_fd(), fd_b = b->wait_fd();
    ASSERT_GE(fd_a, 0);
    ASSERT_GE(fd_b, 0);
    int at_a = 0, at_b = 0;
    a->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_a; });
    b->set_receive_handler([&](std::uint32_t, cs::message&&) { ++at_b; });
    // Completions on both sides: sends, receives, the connection's.
    bool sent_a = false, sent_b = false;
    a->send(1, cs::save(std::string("to b")), [&](std::error_code ec) { sent_a = !ec; });
    b->send(0, cs::save(std::string("to a")), [&](std::error_code ec) { sent_b = !ec; });
    ASSERT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return sent_a && sent_b && at_a == 1 && at_b == 1; }, 30s));
    for (auto* t : {a.get(), b.get()}) {
        ASSERT_TRUE(pp::test::pump_all([&] { return t->can_sleep(); }, 5s, *a, *b));
    }
    EXPECT_FALSE(readable(fd_a, 20)) << "a's fd stayed readable with nothing to read";
    EXPECT_FALSE(readable(fd_b, 20)) << "b's fd stayed readable with nothing to read";

    a->send(1, cs::save(std::string("wake up")), nullptr);
    bool woke = false;
    for (int i = 0; i < 5000 && !woke; ++i) {
        a->progress();
        woke = readable(fd_b, 1);
    }
    EXPECT_TRUE(woke) << "a parcel to b left b's fd quiet";
    EXPECT_FALSE(b->can_sleep()); // the parcel is there to read
    ASSERT_TRUE(pp::test::pump_both(
        *a, *b, [&] { return at_b == 2; }, 30s));
    ASSERT_TRUE(pp::test::pump_all([&] { return b->can_sleep(); }, 5s, *a, *b));
    EXPECT_FALSE(readable(fd_b, 20));
}
