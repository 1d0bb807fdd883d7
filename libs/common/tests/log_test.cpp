// SPDX-License-Identifier: BSL-1.0
// The logging facility: levels filter, the prefix names where a line came from.
#include <courier/common/log.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {
std::string where() {
    return "L3 w1";
}
} // namespace

TEST(log, parses_the_four_levels_and_rejects_others) {
    courier::logging::level l{};
    EXPECT_TRUE(courier::logging::parse_level("debug", l));
    EXPECT_EQ(l, courier::logging::level::debug);
    EXPECT_TRUE(courier::logging::parse_level("error", l));
    EXPECT_EQ(l, courier::logging::level::error);
    EXPECT_FALSE(courier::logging::parse_level("verbose", l));
    EXPECT_FALSE(courier::logging::parse_level("", l));
}

TEST(log, writes_lines_at_or_below_the_level_with_the_prefix) {
    courier::logging::set_level(courier::logging::level::warn);
    courier::logging::set_prefix_provider(&where);
    testing::internal::CaptureStderr();
    courier::logging::error("lost {} parcels", 3);
    courier::logging::info("not shown");
    std::string out = testing::internal::GetCapturedStderr();
    courier::logging::set_prefix_provider(nullptr);
    EXPECT_EQ(out, "courier [error L3 w1]: lost 3 parcels\n");
}
