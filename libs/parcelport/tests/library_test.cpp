// SPDX-License-Identifier: BSL-1.0
// libfabric is loaded when a libfabric transport first needs it (src/libfabric/library.hpp),
// not by linking: a process that opens none never pays for loading it. This test program
// links no libfabric itself; each test runs in a process of its own (gtest_discover_tests).
#include "../src/libfabric/library.hpp"

#include <courier/parcelport/error.hpp>
#include <courier/parcelport/loopback.hpp>
#include <courier/parcelport/transport.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace pp = courier::parcelport;
namespace library = courier::parcelport::fabric::library;

namespace {

pp::transport_options shm_options() {
    pp::transport_options o;
    o.provider = "shm";
    o.job_token = 7;
    return o;
}

TEST(libfabric_library, is_loaded_by_the_first_libfabric_transport_only) {
    EXPECT_FALSE(library::loaded());
    {
        auto hub = pp::loopback_hub::create({2, 1});
        auto a = pp::make_loopback_transport(hub, 0);
        EXPECT_FALSE(a->address().empty());
    }
    EXPECT_FALSE(library::loaded()) << "a loopback transport loaded libfabric";
    auto t = pp::make_transport(shm_options());
    EXPECT_TRUE(library::loaded());
    EXPECT_EQ(t->provider_name(), "shm");
    EXPECT_EQ(library::strerror(FI_ENOMEM), std::strerror(ENOMEM)); // libfabric's, for errno's
}

TEST(libfabric_library, one_that_cannot_be_loaded_fails_the_transport_with_a_clear_error) {
    library::testing::use_library("libcourier-test-no-such-fabric.so.1");
    for (int attempt = 0; attempt < 2; ++attempt) { // the failure stays: the same error
        try {
            (void)pp::make_transport(shm_options());
            ADD_FAILURE() << "a transport opened without its library";
        } catch (courier::network_error const& e) {
            EXPECT_NE(std::string(e.what()).find(
                          "libfabric: cannot load libcourier-test-no-such-fabric.so.1: "),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_EQ(library::strerror(11), "libfabric error 11");
    library::freeinfo(nullptr); // nothing to free, nothing loaded
    EXPECT_FALSE(library::loaded());
}

TEST(libfabric_library, one_that_lacks_a_function_fails_the_transport_with_a_clear_error) {
    library::testing::use_library("libc.so.6"); // loads, and has no fi_getinfo
    try {
        (void)pp::make_transport(shm_options());
        ADD_FAILURE() << "a transport opened without fi_getinfo";
    } catch (courier::network_error const& e) {
        EXPECT_NE(std::string(e.what()).find("libfabric: libc.so.6 has no fi_getinfo"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(library::loaded());
}

} // namespace
