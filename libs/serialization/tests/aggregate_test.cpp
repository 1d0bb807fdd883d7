// SPDX-License-Identifier: BSL-1.0
// Aggregates with no user code: member by member, bitwise when they have no padding, a user's
// own serialize() still wins.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <array>
#include <complex>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace cs = courier::serialization;

namespace app {

enum class phase : std::uint8_t { solid, liquid, gas };

struct vec3 {
    double x, y, z;
    bool operator==(vec3 const&) const = default;
};

struct material {
    std::string name;
    phase state = phase::solid;
    std::map<int, double> table;
    bool operator==(material const&) const = default;
};

struct cell {
    vec3 centre;
    std::array<double, 5> u;
    material mat;
    std::optional<std::variant<int, std::string>> tag;
    std::vector<vec3> corners;
    std::unique_ptr<material> override_mat;
    bool operator==(cell const& o) const {
        return centre == o.centre && u == o.u && mat == o.mat && tag == o.tag &&
               corners == o.corners &&
               (override_mat ? o.override_mat && *override_mat == *o.override_mat
                             : !o.override_mat);
    }
};

struct padded { // 7 bytes of padding after c: member by member, not memcpy
    char c;
    double d;
    bool operator==(padded const&) const = default;
};

struct particle { // no padding: bitwise
    std::array<double, 3> pos, vel, force;
    double mass;
};

struct versioned_aggregate {
    static constexpr unsigned courier_serialization_version = 2;
    int a;
    std::string b;
};

struct own_code { // an aggregate with its own serialize: only `kept` travels
    int kept = 0;
    int dropped = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& kept;
    }
};

struct empty {};

struct stencil { // C arrays of every kind of element, beside members that take no braces
    int order = 0;
    double weights[2][3];
    std::string labels[3];
    std::complex<double> shifts[2];
    std::shared_ptr<vec3> origin;
    phase phases[2];
    vec3 corners[2];
    empty marker;
    std::uint16_t tail = 0;
};

struct block { // no padding: bitwise, C arrays included
    double u[4][4];
    std::int64_t id;
};

struct tagged_value { // 7 bytes of padding after tag: member by member
    char tag[1];
    double value;
};

struct wide {
    int f00, f01, f02, f03, f04, f05, f06, f07, f08, f09, f10, f11, f12, f13, f14, f15, f16, f17,
        f18, f19, f20, f21, f22, f23, f24, f25, f26, f27, f28, f29, f30, f31, f32, f33, f34, f35,
        f36, f37, f38, f39;
    std::string last;
};

} // namespace app

TEST(aggregate, nested_with_standard_members_round_trips_with_no_user_code) {
    app::cell a{{1, 2, 3},
                {0.5, 1.5, 2.5, 3.5, 4.5},
                {"water", app::phase::liquid, {{1, 0.25}, {7, 3.0}}},
                std::variant<int, std::string>("tagged"),
                {{0, 0, 0}, {1, 1, 1}},
                std::make_unique<app::material>(app::material{"ice", app::phase::solid, {}})};
    auto m = cs::save(a);
    app::cell b{};
    cs::load(m, b);
    EXPECT_TRUE(a == b);
}

TEST(aggregate, c_array_members_round_trip_with_no_user_code) {
    static_assert(cs::detail::count_fields<app::stencil>() == 9);
    app::stencil a{};
    a.order = 2;
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 3; ++j) {
            a.weights[i][j] = 10.0 * i + j;
        }
    }
    a.labels[0] = "west";
    a.labels[2] = std::string(100, 'e'); // beyond the small-string buffer
    a.shifts[1] = {0.5, -0.5};
    a.origin = std::make_shared<app::vec3>(app::vec3{1, 2, 3});
    a.phases[0] = app::phase::gas;
    a.phases[1] = app::phase::liquid;
    a.corners[1] = {7, 8, 9};
    a.tail = 65535;
    auto m = cs::save(a);
    app::stencil b{};
    cs::load(m, b);
    EXPECT_EQ(b.order, 2);
    EXPECT_EQ(b.weights[1][2], 12.0);
    EXPECT_EQ(b.weights[0][1], 1.0);
    EXPECT_EQ(b.labels[0], "west");
    EXPECT_EQ(b.labels[1], "");
    EXPECT_EQ(b.labels[2], std::string(100, 'e'));
    EXPECT_EQ(b.shifts[1], (std::complex<double>{0.5, -0.5}));
    ASSERT_TRUE(b.origin);
    EXPECT_EQ(*b.origin, (app::vec3{1, 2, 3}));
    EXPECT_EQ(b.phases[0], app::phase::gas);
    EXPECT_EQ(b.phases[1], app::phase::liquid);
    EXPECT_EQ(b.corners[1], (app::vec3{7, 8, 9}));
    EXPECT_EQ(b.tail, 65535);
}

TEST(aggregate, aggregates_with_c_arrays_are_bitwise_when_unpadded) {
    static_assert(cs::is_bitwise_serializable_v<app::block>);
    static_assert(!cs::is_bitwise_serializable_v<app::tagged_value>);
    std::vector<app::block> blocks(64);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        blocks[i].id = static_cast<std::int64_t>(i);
        blocks[i].u[3][1] = 0.5 * static_cast<double>(i);
    }
    auto m = cs::save(blocks);
    ASSERT_EQ(m.external_chunk_count(), 1U);
    EXPECT_EQ(m.chunks()[1].type, cs::chunk_type::pointer);
    EXPECT_EQ(m.chunks()[1].size, blocks.size() * sizeof(app::block));
    std::vector<app::block> back;
    cs::load(m, back);
    ASSERT_EQ(back.size(), 64U);
    EXPECT_EQ(back[63].id, 63);
    EXPECT_EQ(back[63].u[3][1], 31.5);
    // The padded one travels as its members: 1 + 8 bytes, not sizeof 16.
    auto t = cs::save(app::tagged_value{{'k'}, 4.25});
    EXPECT_EQ(t.index_size(), cs::message_header_size + 9);
    app::tagged_value tv{};
    cs::load(t, tv);
    EXPECT_EQ(tv.tag[0], 'k');
    EXPECT_EQ(tv.value, 4.25);
}

TEST(aggregate, bitwise_when_no_padding_and_members_bitwise) {
    static_assert(cs::is_bitwise_serializable_v<app::vec3>);
    static_assert(cs::is_bitwise_serializable_v<app::particle>);
    static_assert(!cs::is_bitwise_serializable_v<app::padded>);
    static_assert(!cs::is_bitwise_serializable_v<app::material>);
    static_assert(!cs::is_bitwise_serializable_v<app::own_code>);
    static_assert(!cs::is_bitwise_serializable_v<app::empty>);
    // The padded aggregate travels as its members: 1 + 8 bytes, not sizeof 16.
    auto m = cs::save(app::padded{'q', 2.5});
    EXPECT_EQ(m.index_size(), cs::message_header_size + 9);
    app::padded p{};
    cs::load(m, p);
    EXPECT_EQ(p, (app::padded{'q', 2.5}));
}

TEST(aggregate, vectors_of_bitwise_aggregates_travel_as_pointer_chunks) {
    std::vector<app::particle> ps(1000);
    for (std::size_t i = 0; i < ps.size(); ++i) {
        ps[i].mass = static_cast<double>(i);
        ps[i].pos = {1.0 * i, 2.0 * i, 3.0 * i};
    }
    auto m = cs::save(ps);
    ASSERT_EQ(m.external_chunk_count(), 1U);
    auto c = m.chunks()[1];
    EXPECT_EQ(c.type, cs::chunk_type::pointer);
    EXPECT_EQ(c.address, reinterpret_cast<std::byte const*>(ps.data()));
    EXPECT_EQ(c.size, ps.size() * sizeof(app::particle));
    std::vector<app::particle> back;
    cs::load(m, back);
    ASSERT_EQ(back.size(), ps.size());
    EXPECT_EQ(back[999].mass, 999.0);
    EXPECT_EQ(back[7].pos[2], 21.0);
}

TEST(aggregate, a_user_serialize_wins_over_member_by_member) {
    auto m = cs::save(app::own_code{5, 9});
    app::own_code b{};
    cs::load(m, b);
    EXPECT_EQ(b.kept, 5);
    EXPECT_EQ(b.dropped, 0);
}

TEST(aggregate, class_version_of_an_aggregate_is_written_and_checked) {
    auto m = cs::save(app::versioned_aggregate{3, "x"});
    // header, version varint (2), int, string length, 'x'
    EXPECT_EQ(m.index_size(), cs::message_header_size + 1 + sizeof(int) + 1 + 1);
    EXPECT_EQ(static_cast<int>(m.data()[cs::message_header_size]), 2);
    app::versioned_aggregate b{};
    cs::load(m, b);
    EXPECT_EQ(b.a, 3);
    EXPECT_EQ(b.b, "x");
}

TEST(aggregate, empty_and_forty_member_aggregates) {
    app::wide w{};
    w.f00 = 1;
    w.f39 = 40;
    w.last = "end";
    app::empty e;
    auto m = cs::save(e, w);
    app::wide b{};
    cs::load(m, e, b);
    EXPECT_EQ(b.f00, 1);
    EXPECT_EQ(b.f39, 40);
    EXPECT_EQ(b.last, "end");
}

TEST(aggregate, truncated_aggregate_is_a_clear_error) {
    auto m = cs::save(app::material{"steel", app::phase::solid, {{1, 2.0}}});
    auto bytes = m.data();
    auto cut = cs::message::from_bytes(bytes.first(bytes.size() - 3));
    app::material b{};
    EXPECT_THROW(cs::load(cut, b), cs::serialization_error);
}
