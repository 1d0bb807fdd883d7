// SPDX-License-Identifier: BSL-1.0
// User types: member, free, split save/load, private members, inheritance, versioning, bitwise.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

namespace cs = courier::serialization;

namespace app {

struct with_member {
    int a = 0;
    std::string b;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& a& b;
    }
    bool operator==(with_member const&) const = default;
};

struct without_version_arg {
    int a = 0;
    template <class A>
    void serialize(A& ar) {
        ar& a;
    }
};

struct with_free {
    double x = 0;
    std::vector<int> y;
};
template <class A>
void serialize(A& ar, with_free& v, unsigned) {
    ar& v.x& v.y;
}

class with_private {
public:
    with_private() = default;
    explicit with_private(int s) : secret_(s) {}
    int secret() const { return secret_; }

private:
    friend class courier::serialization::access;
    int secret_ = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& secret_;
    }
};

// Split: saves a derived quantity, rebuilds the cache on load.
class with_split {
public:
    std::vector<int> values;
    int cached_sum = 0;
    template <class A>
    void save(A& ar, unsigned) const {
        ar& values;
    }
    template <class A>
    void load(A& ar, unsigned) {
        ar& values;
        cached_sum = 0;
        for (int v : values) {
            cached_sum += v;
        }
    }
};

struct base {
    int b = 1;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& b;
    }
};
struct derived : base {
    int d = 2;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<base>(*this) & d;
    }
};

// Version 1 of a record.
struct record_v1 {
    static constexpr unsigned courier_serialization_version = 1;
    int id = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id;
    }
};
// Version 2 of the same record: a new field, read only from version 2 data.
struct record_v2 {
    static constexpr unsigned courier_serialization_version = 2;
    int id = 0;
    std::string note = "default";
    unsigned seen_version = 99;
    template <class A>
    void serialize(A& ar, unsigned version) {
        seen_version = version;
        ar& id;
        if (version >= 2) {
            ar& note;
        }
    }
};

struct point {
    float x, y, z;
};
struct tagged_pod {
    using courier_bitwise_serializable = void;
    std::int32_t a;
    std::int32_t b;
};

} // namespace app

COURIER_IS_BITWISE_SERIALIZABLE(app::point);

struct versioned_by_macro {
    int v = 0;
    unsigned seen = 0;
    template <class A>
    void serialize(A& ar, unsigned version) {
        seen = version;
        ar& v;
    }
};
COURIER_CLASS_VERSION(versioned_by_macro, 3);

TEST(user_types, member_free_and_plain_serialize) {
    app::with_member m{3, "three"}, m2;
    app::with_free f{1.5, {1, 2}}, f2;
    app::without_version_arg w{7}, w2;
    cs::load(cs::save(m, f, w), m2, f2, w2);
    EXPECT_EQ(m2, m);
    EXPECT_EQ(f2.x, 1.5);
    EXPECT_EQ(f2.y, f.y);
    EXPECT_EQ(w2.a, 7);
}

TEST(user_types, private_members_through_access) {
    app::with_private p(41), p2;
    cs::load(cs::save(p), p2);
    EXPECT_EQ(p2.secret(), 41);
}

TEST(user_types, split_save_load) {
    app::with_split s, s2;
    s.values = {1, 2, 3};
    cs::load(cs::save(s), s2);
    EXPECT_EQ(s2.values, s.values);
    EXPECT_EQ(s2.cached_sum, 6);
}

TEST(user_types, base_object) {
    app::derived d, d2;
    d.b = 10;
    d.d = 20;
    d2.b = d2.d = 0;
    cs::load(cs::save(d), d2);
    EXPECT_EQ(d2.b, 10);
    EXPECT_EQ(d2.d, 20);
}

TEST(user_types, version_written_is_version_received) {
    versioned_by_macro v{5, 0}, v2;
    auto m = cs::save(v);
    EXPECT_EQ(m.index_size(), 8u + 1 + 4); // header, version varint, int
    cs::load(m, v2);
    EXPECT_EQ(v2.seen, 3u);
    EXPECT_EQ(v2.v, 5);
}

TEST(user_types, old_version_data_stays_readable) {
    // Data written by the version-1 program, read by the version-2 program: the layouts
    // agree on the prefix (version varint, id), so v1 bytes load as a v2 record.
    app::record_v1 old{17};
    auto m = cs::save(old);
    app::record_v2 now;
    cs::load(m, now);
    EXPECT_EQ(now.id, 17);
    EXPECT_EQ(now.seen_version, 1u);
    EXPECT_EQ(now.note, "default");
    app::record_v2 fresh{18, "new", 0}, fresh2;
    cs::load(cs::save(fresh), fresh2);
    EXPECT_EQ(fresh2.seen_version, 2u);
    EXPECT_EQ(fresh2.note, "new");
}

TEST(user_types, newer_data_than_the_code_is_rejected) {
    app::record_v2 v{1, "x", 0};
    auto m = cs::save(v);
    app::record_v1 old;
    try {
        cs::load(m, old);
        FAIL();
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("version 2"), std::string::npos) << e.what();
    }
}

TEST(user_types, bitwise_types_are_memcpyd_and_zero_copy_in_vectors) {
    static_assert(cs::is_bitwise_serializable_v<app::point>);
    static_assert(cs::is_bitwise_serializable_v<app::tagged_pod>);
    static_assert(!cs::is_bitwise_serializable_v<app::with_member>);
    std::vector<app::point> pts(1000, app::point{1, 2, 3});
    auto m = cs::save(pts, app::tagged_pod{4, 5});
    EXPECT_EQ(m.external_chunk_count(), 1u);
    EXPECT_EQ(m.chunks()[1].address, reinterpret_cast<std::byte const*>(pts.data()));
    std::vector<app::point> out;
    app::tagged_pod t{};
    cs::load(m, out, t);
    ASSERT_EQ(out.size(), 1000u);
    EXPECT_EQ(out[999].z, 3.0f);
    EXPECT_EQ(t.b, 5);
}

TEST(user_types, nested_user_types_in_containers) {
    std::map<std::string, std::vector<app::with_member>> m{{"k", {{1, "a"}, {2, "b"}}}};
    decltype(m) m2;
    cs::load(cs::save(m), m2);
    EXPECT_EQ(m2, m);
}
