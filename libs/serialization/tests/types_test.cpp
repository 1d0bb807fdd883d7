// SPDX-License-Identifier: BSL-1.0
// Every supported standard type round-trips, with zero copy on and off.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace cs = courier::serialization;

namespace {

enum class color : std::uint16_t { red = 1, green = 2, blue = 300 };
enum plain_enum { pe_a, pe_b = 70000 };

class types : public ::testing::TestWithParam<cs::options> {
protected:
    template <class T>
    T round_trip(T const& v) {
        auto m = cs::save(GetParam(), v);
        T out{};
        cs::load(m, out);
        return out;
    }
    template <class T>
    void check(T const& v) {
        EXPECT_EQ(round_trip(v), v);
    }
};

} // namespace

TEST_P(types, arithmetic_at_native_width) {
    check(true);
    check(false);
    check('c');
    check(static_cast<signed char>(-5));
    check(static_cast<unsigned char>(250));
    check(static_cast<char8_t>(u8'x'));
    check(u'\u2603');
    check(U'\U0001F600');
    check(L'w');
    check(std::numeric_limits<short>::min());
    check(std::numeric_limits<unsigned short>::max());
    check(std::numeric_limits<int>::min());
    check(std::numeric_limits<unsigned>::max());
    check(std::numeric_limits<long>::min());
    check(std::numeric_limits<unsigned long long>::max());
    check(std::numeric_limits<std::int64_t>::min());
    check(3.25f);
    check(-1e300);
    check(std::numeric_limits<long double>::max());
    check(std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<double>::quiet_NaN())));
    EXPECT_EQ(cs::save(std::int16_t{1}).index_size(), 8u + 2);
    EXPECT_EQ(cs::save(std::int64_t{1}).index_size(), 8u + 8);
}

TEST_P(types, enums_and_bytes) {
    check(color::blue);
    check(pe_b);
    check(std::byte{0xab});
}

TEST_P(types, strings) {
    check(std::string());
    check(std::string("a"));
    check(std::string(127, 'x'));
    check(std::string(128, 'y'));
    check(std::string(100000, 'z')); // large: a pointer chunk when zero copy is on
    check(std::string("embedded\0nul", 12));
    check(std::u16string(u"\u00e9t\u00e9"));
    check(std::wstring(5000, L'w'));
}

TEST_P(types, vectors) {
    check(std::vector<int>{});
    check(std::vector<int>{1, 2, 3});
    check(std::vector<double>(100000, 1.5));
    check(std::vector<std::string>{"a", "", std::string(5000, 'q')});
    check(std::vector<std::vector<int>>{{1}, {}, {2, 3}});
    check(std::vector<bool>{});
    check(std::vector<bool>{true});
    check(std::vector<bool>{true, false, true, true, false, false, true, false, true});
    std::vector<bool> many(1001);
    for (std::size_t i = 0; i < many.size(); ++i) {
        many[i] = i % 3 == 0;
    }
    check(many);
    check(std::vector<color>{color::red, color::blue});
}

TEST_P(types, sequences_and_associative_containers) {
    check(std::array<int, 4>{1, 2, 3, 4});
    check(std::array<std::string, 2>{"x", "y"});
    check(std::deque<int>{5, 6, 7});
    check(std::list<std::string>{"l", "m"});
    check(std::forward_list<int>{3, 2, 1});
    check(std::map<std::string, int>{{"a", 1}, {"b", 2}});
    check(std::map<std::string, double>{{"/parcels/count/sent", 12}, {"/threads/idle-rate", 0.25}});
    check(std::multimap<int, int>{{1, 1}, {1, 2}, {0, 3}});
    check(std::set<int>{9, 8, 7});
    check(std::multiset<int>{1, 1, 2});
    check(std::unordered_map<int, std::string>{{1, "one"}, {2, "two"}});
    check(std::unordered_multimap<int, int>{{1, 1}, {1, 1}});
    check(std::unordered_set<std::string>{"p", "q"});
    check(std::unordered_multiset<int>{4, 4, 4});
}

TEST_P(types, utilities) {
    check(std::pair<int, std::string>{1, "p"});
    check(std::tuple<int, double, std::string>{1, 2.0, "t"});
    check(std::tuple<>{});
    check(std::optional<int>{});
    check(std::optional<std::string>{"o"});
    check(std::variant<int, std::string, double>{std::string("v")});
    check(std::variant<int, std::string, double>{2.5});
    check(std::variant<std::monostate, int>{});
    check(std::monostate{});
    check(std::complex<double>{1.5, -2.5});
    check(std::vector<std::complex<float>>(2000, {1.f, 2.f}));
    check(std::bitset<1>{1});
    check(std::bitset<13>{0x1abc});
    check(std::bitset<64>{0xdeadbeefcafef00dull});
    check(std::chrono::nanoseconds{123456789});
    check(std::chrono::duration<double, std::milli>{2.5});
    check(std::chrono::system_clock::time_point{std::chrono::seconds{1700000000}});
    check(std::chrono::steady_clock::now());
}

TEST_P(types, c_arrays) {
    int a[5] = {1, 2, 3, 4, 5};
    int b[5] = {};
    cs::load(cs::save(GetParam(), a), b);
    EXPECT_TRUE(std::equal(a, a + 5, b));
    std::string s[2] = {"x", "yy"};
    std::string t[2];
    cs::load(cs::save(GetParam(), s), t);
    EXPECT_EQ(t[1], "yy");
    static double big[1024] = {1.0, 2.0};
    static double big2[1024];
    cs::load(cs::save(GetParam(), big), big2);
    EXPECT_EQ(big2[1], 2.0);
}

TEST_P(types, loading_into_non_empty_targets_replaces_contents) {
    std::vector<std::string> v{"old", "old", "old"};
    cs::load(cs::save(GetParam(), std::vector<std::string>{"new"}), v);
    EXPECT_EQ(v, std::vector<std::string>{"new"});
    std::map<int, int> m{{5, 5}};
    cs::load(cs::save(GetParam(), std::map<int, int>{{1, 1}}), m);
    EXPECT_EQ(m, (std::map<int, int>{{1, 1}}));
    std::optional<int> o = 3;
    cs::load(cs::save(GetParam(), std::optional<int>{}), o);
    EXPECT_FALSE(o);
}

INSTANTIATE_TEST_SUITE_P(zero_copy, types,
                         ::testing::Values(cs::options{4096, true}, cs::options{4096, false},
                                           cs::options{1, true}),
                         [](auto const& param_info) {
                             return param_info.param.zero_copy
                                        ? "on_" +
                                              std::to_string(param_info.param.zero_copy_threshold)
                                        : std::string("off");
                         });

namespace courier::serialization {
void PrintTo(options const& o, std::ostream* os) {
    *os << "{threshold " << o.zero_copy_threshold << ", zero_copy " << o.zero_copy << "}";
}
} // namespace courier::serialization
