// SPDX-License-Identifier: BSL-1.0
// The logging facility: levels filter, the prefix names where a line came from.
#include <courier/common/log.hpp>

#include <gtest/gtest.h>

#include <chrono>
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
    auto const lines = courier::logging::lines_written();
    testing::internal::CaptureStderr();
    courier::logging::error("lost {} parcels", 3);
    courier::logging::info("not shown");
    std::string out = testing::internal::GetCapturedStderr();
    courier::logging::set_prefix_provider(nullptr);
    EXPECT_EQ(out, "courier [error L3 w1]: lost 3 parcels\n");
    EXPECT_EQ(courier::logging::lines_written() - lines, 1u) << "the line written, not the other";
}

TEST(log, a_rate_limit_bounds_a_flood_and_says_so) {
    courier::logging::set_level(courier::logging::level::warn);
    courier::logging::rate_limit limit(3, std::chrono::hours(1));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 1000; ++i) {
        courier::logging::error_limited(limit, "bad message {}", i);
    }
    std::string flood = testing::internal::GetCapturedStderr();
    EXPECT_EQ(flood, "courier [error]: bad message 0\n"
                     "courier [error]: bad message 1\n"
                     "courier [error]: bad message 2 (more like this are suppressed for 3600 s)\n");
}

TEST(log, a_rate_limit_opens_again_after_its_period_and_counts_what_it_suppressed) {
    using namespace std::chrono_literals;
    courier::logging::rate_limit limit(2, 100ms);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(limit.admit(t0).write);
    auto second = limit.admit(t0 + 1ms);
    EXPECT_TRUE(second.write);
    EXPECT_TRUE(second.last);
    for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(limit.admit(t0 + 50ms).write);
    }
    auto later = limit.admit(t0 + 100ms);
    EXPECT_TRUE(later.write);
    EXPECT_FALSE(later.last);
    EXPECT_EQ(later.suppressed, 5U);
    EXPECT_EQ(limit.admit(t0 + 101ms).suppressed, 0U);
}
