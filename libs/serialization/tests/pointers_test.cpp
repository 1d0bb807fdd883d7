// SPDX-License-Identifier: BSL-1.0
// unique_ptr, shared_ptr tracking (aliasing within one message), polymorphic pointers.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

namespace cs = courier::serialization;

namespace shapes {

struct shape {
    virtual ~shape() = default;
    virtual double area() const = 0;
    std::string label;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& label;
    }
};

struct circle : shape {
    double r = 0;
    double area() const override { return 3.0 * r * r; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<shape>(*this) & r;
    }
};

struct rect : shape {
    double w = 0, h = 0;
    double area() const override { return w * h; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<shape>(*this) & w& h;
    }
};

// Two levels: square -> rect -> shape.
struct square : rect {
    int tag = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<rect>(*this) & tag;
    }
};

// Registered, but not a shape.
struct unrelated {
    virtual ~unrelated() = default;
    int x = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& x;
    }
};

// A second base at a non-zero offset: the upcast must adjust the pointer.
struct named {
    virtual ~named() = default;
    std::string name;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& name;
    }
};
struct labelled_circle : circle, named {
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<circle>(*this) & cs::base_object<named>(*this);
    }
};

// Never registered.
struct triangle : shape {
    double area() const override { return 0; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<shape>(*this);
    }
};

COURIER_SERIALIZATION_REGISTER_CLASS(circle);
COURIER_SERIALIZATION_REGISTER_CLASS(rect);
COURIER_SERIALIZATION_REGISTER_CLASS(square);
COURIER_SERIALIZATION_REGISTER_CLASS(unrelated);
COURIER_SERIALIZATION_REGISTER_CLASS(labelled_circle);

} // namespace shapes

struct node {
    int value = 0;
    std::shared_ptr<node> next;
    std::shared_ptr<node> other;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& value& next& other;
    }
};

TEST(unique_ptr, null_and_value_round_trip) {
    std::unique_ptr<int> a, b = std::make_unique<int>(42);
    std::unique_ptr<int> a2 = std::make_unique<int>(1), b2;
    cs::load(cs::save(a, b), a2, b2);
    EXPECT_EQ(a2, nullptr);
    ASSERT_NE(b2, nullptr);
    EXPECT_EQ(*b2, 42);
}

TEST(polymorphic, unique_ptr_to_base_restores_dynamic_type) {
    std::vector<std::unique_ptr<shapes::shape>> in;
    auto c = std::make_unique<shapes::circle>();
    c->r = 2;
    c->label = "c";
    in.push_back(std::move(c));
    auto s = std::make_unique<shapes::square>();
    s->w = 3;
    s->h = 4;
    s->tag = 9;
    s->label = "sq";
    in.push_back(std::move(s));
    in.push_back(nullptr);
    std::vector<std::unique_ptr<shapes::shape>> out;
    cs::load(cs::save(in), out);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0]->area(), 12.0);
    EXPECT_EQ(out[0]->label, "c");
    auto* sq = dynamic_cast<shapes::square*>(out[1].get());
    ASSERT_NE(sq, nullptr);
    EXPECT_EQ(sq->tag, 9);
    EXPECT_EQ(sq->area(), 12.0);
    EXPECT_EQ(sq->label, "sq");
    EXPECT_EQ(out[2], nullptr);
}

TEST(polymorphic, upcast_adjusts_pointer_for_second_base) {
    auto lc = std::make_unique<shapes::labelled_circle>();
    lc->r = 1;
    lc->name = "second";
    std::unique_ptr<shapes::named> as_named(lc.release());
    std::unique_ptr<shapes::named> out;
    cs::load(cs::save(as_named), out);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->name, "second");
    auto* back = dynamic_cast<shapes::labelled_circle*>(out.get());
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->r, 1.0);
}

TEST(polymorphic, type_ids_are_name_hashes) {
    auto const* e = cs::detail::find_polymorphic(typeid(shapes::circle));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->id, cs::detail::fnv1a64("circle"));
    EXPECT_EQ(cs::detail::find_polymorphic(cs::detail::fnv1a64("circle")), e);
}

TEST(polymorphic, saving_an_unregistered_type_is_an_error) {
    std::unique_ptr<shapes::shape> t = std::make_unique<shapes::triangle>();
    try {
        (void)cs::save(t);
        FAIL() << "expected serialization_error";
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("shapes::triangle"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("COURIER_SERIALIZATION_REGISTER_CLASS"),
                  std::string::npos);
    }
}

TEST(polymorphic, loading_a_registered_type_unrelated_to_the_base_is_rejected) {
    std::unique_ptr<shapes::unrelated> u = std::make_unique<shapes::unrelated>();
    auto m = cs::save(u);
    std::unique_ptr<shapes::shape> s;
    EXPECT_THROW(cs::load(m, s), cs::serialization_error);
    EXPECT_EQ(s, nullptr);
}

TEST(polymorphic, unknown_type_id_is_rejected) {
    std::unique_ptr<shapes::shape> c = std::make_unique<shapes::circle>();
    auto m = cs::save(c);
    // Patch the 8-byte id after the header and the tag byte.
    std::vector<std::byte> bytes(m.data().begin(), m.data().end());
    bytes[9] ^= std::byte{0x5a};
    auto bad = cs::message::from_bytes(bytes);
    std::unique_ptr<shapes::shape> s;
    try {
        cs::load(bad, s);
        FAIL();
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("unknown polymorphic type id"), std::string::npos)
            << e.what();
    }
}

TEST(shared_ptr, aliasing_is_preserved_within_a_message) {
    auto a = std::make_shared<int>(5);
    auto b = a;
    auto c = std::make_shared<int>(5);
    std::shared_ptr<int> a2, b2, c2;
    cs::load(cs::save(a, b, c), a2, b2, c2);
    EXPECT_EQ(a2, b2);
    EXPECT_NE(a2, c2);
    EXPECT_EQ(*c2, 5);
    EXPECT_EQ(a2.use_count(), 2);
}

TEST(shared_ptr, each_distinct_object_travels_once) {
    auto big = std::make_shared<std::string>(1000, 'b');
    std::vector<std::shared_ptr<std::string>> v(100, big);
    auto m = cs::save(cs::options{4096, false}, v);
    EXPECT_LT(m.index_size(), 1000u + 100 * 2 + 32);
    std::vector<std::shared_ptr<std::string>> out;
    cs::load(m, out);
    ASSERT_EQ(out.size(), 100u);
    for (auto const& p : out) {
        EXPECT_EQ(p, out[0]);
    }
    EXPECT_EQ(*out[0], *big);
}

TEST(shared_ptr, cycles_and_self_loops_survive) {
    auto a = std::make_shared<node>();
    auto b = std::make_shared<node>();
    a->value = 1;
    b->value = 2;
    a->next = b;
    b->next = a;  // ring of two
    a->other = a; // self loop
    std::shared_ptr<node> out;
    cs::load(cs::save(a), out);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->value, 1);
    EXPECT_EQ(out->next->value, 2);
    EXPECT_EQ(out->next->next, out);
    EXPECT_EQ(out->other, out);
    // Break the cycles so the test does not leak under LSan.
    a->next.reset();
    a->other.reset();
    b->next.reset();
    out->next->next.reset();
    out->other.reset();
    out->next.reset();
}

TEST(shared_ptr, polymorphic_base_and_derived_pointers_to_one_object_stay_one_object) {
    auto c = std::make_shared<shapes::circle>();
    c->r = 1.5;
    std::shared_ptr<shapes::shape> as_base = c;
    std::shared_ptr<shapes::shape> base2;
    std::shared_ptr<shapes::circle> derived2;
    cs::load(cs::save(as_base, c), base2, derived2);
    ASSERT_NE(derived2, nullptr);
    EXPECT_EQ(static_cast<shapes::shape*>(derived2.get()), base2.get());
    EXPECT_EQ(derived2->r, 1.5);
}

TEST(shared_ptr, back_reference_beyond_known_objects_is_rejected) {
    std::shared_ptr<int> p = std::make_shared<int>(1);
    auto m = cs::save(p);
    std::vector<std::byte> bytes(m.data().begin(), m.data().end());
    bytes[8] = std::byte{7}; // tag 7 = object #5, none read yet
    std::shared_ptr<int> out;
    EXPECT_THROW(cs::load(cs::message::from_bytes(bytes), out), cs::serialization_error);
}

namespace tree {
// A tree whose children own and whose parents are weak: the usual way to build a cycle of
// shared pointers that still frees itself. An aggregate: no serialization code at all.
struct node {
    int value = 0;
    std::vector<std::shared_ptr<node>> children;
    std::weak_ptr<node> parent;
    std::weak_ptr<node> sibling; // a weak edge across the tree
};
} // namespace tree

TEST(weak_ptr, parent_pointers_and_cycles_load_as_weak_pointers_to_the_same_objects) {
    auto root = std::make_shared<tree::node>();
    root->value = 1;
    for (int i = 0; i < 3; ++i) {
        auto c = std::make_shared<tree::node>();
        c->value = 10 + i;
        c->parent = root;
        root->children.push_back(c);
    }
    root->children[0]->sibling = root->children[2];
    root->children[2]->sibling = root->children[0];
    root->parent = root; // a weak self loop

    std::shared_ptr<tree::node> out;
    cs::load(cs::save(root), out);
    ASSERT_EQ(out->children.size(), 3U);
    EXPECT_EQ(out->parent.lock(), out);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(out->children[i]->value, 10 + i);
        EXPECT_EQ(out->children[i]->parent.lock(), out);
    }
    EXPECT_EQ(out->children[0]->sibling.lock(), out->children[2]);
    EXPECT_EQ(out->children[2]->sibling.lock(), out->children[0]);
    // Weak edges own nothing: the loaded tree is freed when its root goes.
    std::weak_ptr<tree::node> watch = out->children[1];
    out.reset();
    EXPECT_TRUE(watch.expired());
}

TEST(weak_ptr, a_weak_pointer_seen_before_its_owner_loads_and_keeps_identity) {
    auto shared = std::make_shared<int>(42);
    std::weak_ptr<int> w = shared;
    std::weak_ptr<int> w2;
    std::shared_ptr<int> s2;
    cs::load(cs::save(w, shared), w2, s2);
    EXPECT_EQ(*s2, 42);
    EXPECT_EQ(w2.lock(), s2);
}

TEST(weak_ptr, expired_or_unowned_in_the_message_loads_expired) {
    std::weak_ptr<int> expired;
    {
        auto gone = std::make_shared<int>(1);
        expired = gone;
    }
    auto outside = std::make_shared<int>(7); // owned outside the message only
    std::weak_ptr<int> only_weak = outside;
    std::weak_ptr<int> a, b;
    auto m = cs::save(expired, only_weak);
    cs::load(m, a, b);
    EXPECT_TRUE(a.expired());
    EXPECT_TRUE(b.expired()); // nothing in the message owns it
}

namespace ring {
struct cnode {
    static inline int live = 0;
    std::shared_ptr<cnode> next;
    int value = 0;
    cnode() { ++live; }
    cnode(cnode const&) = delete;
    cnode& operator=(cnode&& o) noexcept { // what a failed load uses to empty the node
        next = std::move(o.next);
        value = o.value;
        return *this;
    }
    ~cnode() { --live; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& next& value;
    }
};
} // namespace ring

namespace ring {
/// A ring of two Nodes (a.next = b, b.next = a) seen as Base. On the wire: a's tag, b's tag,
/// the back reference to a, b.value, a.value. With a.value cut off, the cycle exists when the
/// load fails: every node must be freed all the same.
template <class Base, class Node>
void truncated_ring_load_frees_the_ring() {
    std::shared_ptr<Base> a = std::make_shared<Node>();
    a->next = std::make_shared<Node>();
    a->next->next = a;
    auto m = cs::save(a);
    a->next->next.reset();
    a.reset();
    ASSERT_EQ(Base::live, 0);
    auto bytes = m.data();
    auto cut = cs::message::from_bytes(bytes.first(bytes.size() - sizeof(int)));
    std::shared_ptr<Base> out;
    EXPECT_THROW(cs::load(cut, out), cs::serialization_error);
    EXPECT_EQ(Base::live, 0);
}
} // namespace ring

TEST(shared_ptr, a_load_that_fails_after_forming_an_ownership_cycle_frees_it) {
    ring::truncated_ring_load_frees_the_ring<ring::cnode, ring::cnode>(); // 2 alive before
}

namespace ring {
struct pbase {
    static inline int live = 0;
    std::shared_ptr<pbase> next;
    pbase() { ++live; }
    pbase(pbase const&) = delete;
    pbase& operator=(pbase&& o) noexcept {
        next = std::move(o.next);
        return *this;
    }
    virtual ~pbase() { --live; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& next;
    }
};
struct pnode : pbase {
    int value = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<pbase>(*this) & value;
    }
};
} // namespace ring
COURIER_SERIALIZATION_REGISTER_CLASS(ring::pnode);

TEST(shared_ptr, a_failed_load_also_frees_a_cycle_of_polymorphic_objects) {
    // 2 alive when only non-polymorphic objects were emptied.
    ring::truncated_ring_load_frees_the_ring<ring::pbase, ring::pnode>();
}
