// SPDX-License-Identifier: BSL-1.0
// What rxm reads from the environment only when libfabric loads its providers (at the
// process's first libfabric call) must be set before that call, whichever comes first: the
// runtime's probe for a network provider (network_provider(), a job across hosts) or a
// transport's endpoint. Each test runs in its own process (gtest_discover_tests).
#include <courier/parcelport/transport.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace pp = courier::parcelport;

namespace {
std::string env(char const* name) {
    char const* v = std::getenv(name);
    return v != nullptr ? v : "(unset)";
}
bool rdma_devices_present() {
    std::error_code ec;
    std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
    return !ec && it != std::filesystem::directory_iterator();
}
} // namespace

TEST(prepare_libfabric, the_probe_for_a_network_provider_sets_rxm_first_and_a_user_wins) {
    ::unsetenv("FI_OFI_RXM_EAGER_LIMIT");
    ::unsetenv("FI_OFI_RXM_MSG_TX_SIZE");
    ::setenv("FI_OFI_RXM_MSG_RX_SIZE", "1000", 1); // the user's own
    std::string const provider = pp::network_provider();
    EXPECT_FALSE(provider.empty());
    if (rdma_devices_present()) {
        // rxm may run over verbs here: nothing of ours is set.
        std::printf("RDMA devices on this host: rxm's settings are left alone\n");
        EXPECT_EQ(env("FI_OFI_RXM_EAGER_LIMIT"), "(unset)");
        EXPECT_EQ(env("FI_OFI_RXM_MSG_TX_SIZE"), "(unset)");
        return;
    }
    pp::transport_options defaults;
    // tcp's largest eager message: 96 KiB of index data and a header and descriptor table.
    EXPECT_GT(std::stoul(env("FI_OFI_RXM_EAGER_LIMIT")), pp::default_eager_threshold("tcp"));
    EXPECT_EQ(env("FI_OFI_RXM_MSG_TX_SIZE"), std::to_string(defaults.tcp_send_queue));
    EXPECT_EQ(env("FI_OFI_RXM_MSG_RX_SIZE"), "1000");
}

TEST(prepare_libfabric, the_first_call_decides_and_zero_keeps_rxm_defaults) {
    ::unsetenv("FI_OFI_RXM_EAGER_LIMIT");
    ::unsetenv("FI_OFI_RXM_MSG_TX_SIZE");
    ::unsetenv("FI_OFI_RXM_MSG_RX_SIZE");
    pp::transport_options o;
    o.eager_threshold = 1 << 20;
    o.tcp_send_queue = 0;
    o.tcp_receive_buffers = 512;
    pp::prepare_libfabric(o);
    EXPECT_GT(std::stoul(env("FI_OFI_RXM_EAGER_LIMIT")), std::size_t{1} << 20);
    EXPECT_EQ(env("FI_OFI_RXM_MSG_TX_SIZE"), "(unset)");
    EXPECT_EQ(env("FI_OFI_RXM_MSG_RX_SIZE"), "512");
    (void)pp::network_provider(); // later calls change nothing
    pp::transport_options other;
    pp::prepare_libfabric(other);
    EXPECT_EQ(env("FI_OFI_RXM_MSG_TX_SIZE"), "(unset)");
    EXPECT_EQ(env("FI_OFI_RXM_MSG_RX_SIZE"), "512");
}

TEST(prepare_libfabric, rxm_over_verbs_is_left_alone) {
    // Its eager limit must equal its buffer size there, and its queues are the NIC's.
    ::unsetenv("FI_OFI_RXM_EAGER_LIMIT");
    ::unsetenv("FI_OFI_RXM_MSG_TX_SIZE");
    ::unsetenv("FI_OFI_RXM_MSG_RX_SIZE");
    pp::transport_options o;
    o.provider = "verbs;ofi_rxm";
    pp::prepare_libfabric(o);
    EXPECT_EQ(env("FI_OFI_RXM_EAGER_LIMIT"), "(unset)");
    EXPECT_EQ(env("FI_OFI_RXM_MSG_TX_SIZE"), "(unset)");
    EXPECT_EQ(env("FI_OFI_RXM_MSG_RX_SIZE"), "(unset)");
}
