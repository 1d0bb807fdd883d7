// SPDX-License-Identifier: BSL-1.0
// The action registry: wire ids are unique per name; a collision or the reserved id 0 stops
// the program with a message instead of running the wrong function. (Lookups of registered
// and unknown ids across real localities are tested in tests/distributed.)
#include <courier/runtime.hpp>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

void invoke_nothing(courier::serialization::input_archive&,
                    courier::serialization::output_archive*) {}

TEST(action_registry, registering_the_same_action_again_is_harmless) {
    EXPECT_TRUE(
        courier::detail::register_action(0x1234'5678'9abc'def1, "test_action_a", &invoke_nothing));
    EXPECT_TRUE(
        courier::detail::register_action(0x1234'5678'9abc'def1, "test_action_a", &invoke_nothing));
}

TEST(action_registry, an_id_taken_by_another_name_is_fatal) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            courier::detail::register_action(0x0fed'cba9'8765'4321, "test_action_b",
                                             &invoke_nothing);
            courier::detail::register_action(0x0fed'cba9'8765'4321, "test_action_c",
                                             &invoke_nothing);
        },
        "action ids of 'test_action_b' and 'test_action_c' collide");
}

TEST(action_registry, the_reserved_id_zero_is_fatal) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(courier::detail::register_action(0, "test_action_zero", &invoke_nothing),
                 "reserved id 0");
}

TEST(action_registry, two_thousand_actions_are_all_found_and_others_are_not) {
    // At half the table's capacity many ids share home slots: lookups must probe past them.
    static std::vector<std::string> names; // registered names must outlive the registry
    std::mt19937_64 rng(7);
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < 2000; ++i) {
        ids.push_back(rng() | 1);
        names.push_back("probe_" + std::to_string(i));
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        courier::detail::register_action(ids[i], names[i].c_str(), &invoke_nothing);
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        char const* found = courier::detail::registered_action_name(ids[i]);
        ASSERT_NE(found, nullptr) << i;
        EXPECT_EQ(found, names[i]);
    }
    for (int i = 0; i < 2000; ++i) {
        EXPECT_EQ(courier::detail::registered_action_name(rng() & ~std::uint64_t{1}), nullptr);
    }
    EXPECT_EQ(courier::detail::registered_action_name(0), nullptr);
}

} // namespace
