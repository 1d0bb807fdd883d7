// SPDX-License-Identifier: BSL-1.0
// The routed transport's address: what encode() writes, decode() reads back, and bytes it
// must refuse (another locality's address is input from the network).
#include "../src/routed/routed_transport.hpp"

#include <courier/parcelport/error.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

using courier::network_error;
using courier::parcelport::routed::address_parts;
using courier::parcelport::routed::decode;
using courier::parcelport::routed::encode;

namespace {
std::vector<std::byte> bytes(std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v) {
        out.push_back(static_cast<std::byte>(b));
    }
    return out;
}
} // namespace

TEST(routed_address, round_trips_host_and_every_rail) {
    address_parts a;
    a.host = "node17";
    a.rails.emplace_back("shm", bytes({1, 2, 3}));
    a.rails.emplace_back("tcp;ofi_rxm", std::vector<std::byte>(300, std::byte{7}));
    auto b = decode(encode(a), 4);
    EXPECT_EQ(b.host, "node17");
    ASSERT_EQ(b.rails.size(), 2u);
    EXPECT_EQ(b.rails[0].first, "shm");
    EXPECT_EQ(b.rails[0].second, bytes({1, 2, 3}));
    EXPECT_EQ(b.rails[1].first, "tcp;ofi_rxm");
    EXPECT_EQ(b.rails[1].second.size(), 300u);
}

TEST(routed_address, a_plain_address_names_the_mismatch) {
    // A locality opened with a forced provider publishes its endpoint's bytes alone.
    try {
        decode(bytes({0x01, 0x02, 0x03}), 2);
        FAIL() << "accepted";
    } catch (network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("locality 2 does not route by host"),
                  std::string::npos)
            << e.what();
    }
}

TEST(routed_address, every_truncation_and_trailing_garbage_is_refused) {
    address_parts a;
    a.host = "h";
    a.rails.emplace_back("shm", bytes({9, 9}));
    auto good = encode(a);
    for (std::size_t n = 0; n < good.size(); ++n) {
        std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
        EXPECT_THROW(decode(cut, 1), network_error) << "length " << n;
    }
    auto longer = good;
    longer.push_back(std::byte{0});
    EXPECT_THROW(decode(longer, 1), network_error);
}

TEST(routed_address, lengths_past_the_end_are_refused) {
    // magic, 1 rail, host length 0xffff: the host would run past the end.
    EXPECT_THROW(decode(bytes({0xc7, 1, 0xff, 0xff, 'h'}), 0), network_error);
    // An empty host name cannot be compared.
    EXPECT_THROW(decode(bytes({0xc7, 0, 0, 0}), 0), network_error);
}
