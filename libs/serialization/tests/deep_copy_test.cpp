// SPDX-License-Identifier: BSL-1.0
// Deep copy: trees with payload arrays, rings, complete and random graphs, DAGs of shared_ptr,
// nullptr roots, self-loops, in all three modes, in memory and through checkpoint files; and
// corrupted archives of each structure, which must fail cleanly: no crash, no leak (LSan in the
// ASan build), the caller's pointer null.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

namespace cs = courier::serialization;
using cs::array;
using cs::deep_mode;
using cs::shared;

namespace {

// ---- structures -----------------------------------------------------------------------------

struct tree_node {
    double* payload = nullptr;
    std::size_t n = 0;
    tree_node* left = nullptr;
    tree_node* right = nullptr;
    ~tree_node() { delete[] payload; } // owns its array, not its children
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& array(payload, n) & shared(left) & shared(right);
    }
};

tree_node* make_tree(int depth, std::size_t payload, int& counter) {
    if (depth == 0) {
        return nullptr;
    }
    auto* t = new tree_node;
    t->n = payload;
    t->payload = new double[payload];
    for (std::size_t i = 0; i < payload; ++i) {
        t->payload[i] = counter * 1000.0 + double(i);
    }
    ++counter;
    t->left = make_tree(depth - 1, payload, counter);
    t->right = make_tree(depth - 1, payload, counter);
    return t;
}

struct graph_node {
    int id = 0;
    std::vector<graph_node*> out;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id& shared(out);
    }
};

/// Nodes reachable from `root` (any raw graph of graph_node / tree_node / ring_node).
template <class N, class Next>
std::vector<N*> reachable(N* root, Next next) {
    std::vector<N*> order;
    std::set<N*> seen;
    std::vector<N*> stack;
    if (root != nullptr) {
        stack.push_back(root);
    }
    while (!stack.empty()) {
        N* n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) {
            continue;
        }
        order.push_back(n);
        next(n, [&](N* m) {
            if (m != nullptr) {
                stack.push_back(m);
            }
        });
    }
    return order;
}

auto tree_next = [](tree_node* n, auto push) {
    push(n->right);
    push(n->left);
};
auto graph_next = [](graph_node* n, auto push) {
    for (auto it = n->out.rbegin(); it != n->out.rend(); ++it) {
        push(*it);
    }
};

template <class N, class Next>
void free_graph(N* root, Next next) {
    for (N* n : reachable(root, next)) {
        delete n;
    }
}

/// The copy has the same shape: a bijection between nodes that maps edges to edges
/// (iterative: rings are long).
bool same_graph(graph_node* a, graph_node* b) {
    std::map<graph_node*, graph_node*> map;
    std::vector<std::pair<graph_node*, graph_node*>> todo{{a, b}};
    while (!todo.empty()) {
        auto [x, y] = todo.back();
        todo.pop_back();
        if ((x == nullptr) != (y == nullptr)) {
            return false;
        }
        if (x == nullptr) {
            continue;
        }
        auto [it, fresh] = map.try_emplace(x, y);
        if (!fresh) {
            if (it->second != y) {
                return false;
            }
            continue;
        }
        if (x == y || x->id != y->id || x->out.size() != y->out.size()) {
            return false;
        }
        for (std::size_t i = 0; i < x->out.size(); ++i) {
            todo.emplace_back(x->out[i], y->out[i]);
        }
    }
    std::set<graph_node*> images;
    for (auto& [k, v] : map) {
        images.insert(v);
    }
    return images.size() == map.size();
}

bool same_tree(tree_node* a, tree_node* b) {
    if ((a == nullptr) != (b == nullptr)) {
        return false;
    }
    if (a == nullptr) {
        return true;
    }
    return a != b && a->n == b->n && a->payload != b->payload &&
           std::equal(a->payload, a->payload + a->n, b->payload) && same_tree(a->left, b->left) &&
           same_tree(a->right, b->right);
}

graph_node* make_ring(int n) {
    std::vector<graph_node*> nodes(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        nodes[static_cast<std::size_t>(i)] = new graph_node{i, {}};
    }
    for (int i = 0; i < n; ++i) {
        nodes[static_cast<std::size_t>(i)]->out.push_back(
            nodes[static_cast<std::size_t>((i + 1) % n)]);
    }
    return nodes[0];
}

graph_node* make_complete(int n, bool self_loops) {
    std::vector<graph_node*> nodes(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        nodes[static_cast<std::size_t>(i)] = new graph_node{i, {}};
    }
    for (auto* a : nodes) {
        for (auto* b : nodes) {
            if (a != b || self_loops) {
                a->out.push_back(b);
            }
        }
    }
    return nodes[0];
}

graph_node* make_random(int n, int edges_per_node, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<graph_node*> nodes(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        nodes[static_cast<std::size_t>(i)] = new graph_node{i, {}};
    }
    for (auto* a : nodes) {
        for (int e = 0; e < edges_per_node; ++e) {
            a->out.push_back(nodes[rng() % nodes.size()]);
        }
    }
    // Make everything reachable from node 0.
    for (std::size_t i = 0; i + 1 < nodes.size(); ++i) {
        nodes[i]->out.push_back(nodes[i + 1]);
    }
    return nodes[0];
}

struct dag_node {
    int v = 0;
    std::vector<std::shared_ptr<dag_node>> kids;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& v& kids;
    }
};

struct throws_on_save {
    template <class A>
    void serialize(A&, unsigned) {
        if constexpr (A::is_saving) {
            throw std::runtime_error("boom");
        }
    }
};

struct holder {
    tree_node* root = nullptr;
    int after = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& shared(root) & after;
    }
};

class deep_copy : public ::testing::TestWithParam<deep_mode> {
protected:
    cs::options opts() const { return cs::deep_copy_options(GetParam()); }
};

} // namespace

TEST_P(deep_copy, binary_tree_with_payload_arrays) {
    int counter = 0;
    tree_node* root = make_tree(8, 300, counter); // 255 nodes, 2.4 KB arrays
    auto m = cs::save(opts(), shared(root));
    tree_node* copy = nullptr;
    cs::load(m, shared(copy));
    EXPECT_TRUE(same_tree(root, copy));
    std::size_t external = m.external_chunk_count();
    switch (GetParam()) {
    case deep_mode::buffered:
        EXPECT_EQ(external, 0u);
        break;
    case deep_mode::non_buffered:
    case deep_mode::adaptive: // 2400-byte arrays are above the adaptive threshold
        EXPECT_EQ(external, 255u);
        break;
    }
    free_graph(root, tree_next);
    free_graph(copy, tree_next);
}

TEST_P(deep_copy, small_arrays_are_packed_in_adaptive_mode_only_big_ones_travel_apart) {
    int counter = 0;
    tree_node* small = make_tree(5, 4, counter); // 32-byte arrays
    auto m = cs::save(opts(), shared(small));
    EXPECT_EQ(m.external_chunk_count(), GetParam() == deep_mode::non_buffered ? 31u : 0u);
    tree_node* copy = nullptr;
    cs::load(m, shared(copy));
    EXPECT_TRUE(same_tree(small, copy));
    free_graph(small, tree_next);
    free_graph(copy, tree_next);
}

TEST_P(deep_copy, ring_keeps_its_cycle) {
    graph_node* ring = make_ring(1000);
    auto m = cs::save(opts(), shared(ring));
    graph_node* copy = nullptr;
    cs::load(m, shared(copy));
    ASSERT_NE(copy, nullptr);
    EXPECT_TRUE(same_graph(ring, copy));
    graph_node* p = copy;
    for (int i = 0; i < 1000; ++i) {
        p = p->out[0];
    }
    EXPECT_EQ(p, copy) << "1000 steps around the copied ring lead back to its root";
    free_graph(ring, graph_next);
    free_graph(copy, graph_next);
}

TEST_P(deep_copy, complete_graph_with_self_loops_sends_each_node_once) {
    graph_node* g = make_complete(64, true);
    auto m = cs::save(opts(), shared(g));
    graph_node* copy = nullptr;
    cs::load(m, shared(copy));
    EXPECT_TRUE(same_graph(g, copy));
    EXPECT_EQ(reachable(copy, graph_next).size(), 64u);
    EXPECT_EQ(copy->out[0], copy) << "self-loop";
    // Each node once: 64 nodes x (id + count) plus 64 x 64 references of 1-2 bytes.
    EXPECT_LT(m.total_size(), 64u * 64u * 3u + 64u * 16u);
    free_graph(g, graph_next);
    free_graph(copy, graph_next);
}

TEST_P(deep_copy, random_graph) {
    graph_node* g = make_random(2000, 3, 7);
    auto m = cs::save(opts(), shared(g));
    graph_node* copy = nullptr;
    cs::load(m, shared(copy));
    EXPECT_TRUE(same_graph(g, copy));
    free_graph(g, graph_next);
    free_graph(copy, graph_next);
}

TEST_P(deep_copy, dag_of_shared_ptr_keeps_sharing) {
    auto leaf = std::make_shared<dag_node>(dag_node{7, {}});
    auto a = std::make_shared<dag_node>(dag_node{1, {leaf}});
    auto b = std::make_shared<dag_node>(dag_node{2, {leaf, leaf}});
    auto root = std::make_shared<dag_node>(dag_node{0, {a, b}});
    auto m = cs::save(opts(), root);
    std::shared_ptr<dag_node> copy;
    cs::load(m, copy);
    ASSERT_EQ(copy->kids.size(), 2u);
    auto l1 = copy->kids[0]->kids[0];
    EXPECT_EQ(l1, copy->kids[1]->kids[0]);
    EXPECT_EQ(l1, copy->kids[1]->kids[1]);
    EXPECT_NE(l1, leaf);
    EXPECT_EQ(l1->v, 7);
    EXPECT_EQ(l1.use_count(), 4); // three parents and l1
}

TEST_P(deep_copy, nullptr_roots_and_empty_arrays_round_trip) {
    tree_node* none = nullptr;
    double* arr = nullptr;
    std::size_t n = 5;
    double* empty = new double[1];
    std::size_t zero = 0;
    auto m = cs::save(opts(), shared(none), array(arr, n), array(empty, zero));
    tree_node* back = reinterpret_cast<tree_node*>(0x1); // must be overwritten
    double* arr2 = new double[3]; // the load does not free what the pointer held: keep it
    double* keep = arr2;
    std::size_t n2 = 9;
    double* empty2 = nullptr;
    std::size_t zero2 = 3;
    cs::load(m, shared(back), array(arr2, n2), array(empty2, zero2));
    EXPECT_EQ(back, nullptr);
    EXPECT_EQ(arr2, nullptr);
    EXPECT_EQ(n2, 0u);
    EXPECT_NE(empty2, nullptr) << "an empty array is not a null pointer";
    EXPECT_EQ(zero2, 0u);
    delete[] keep;
    delete[] empty;
    delete[] empty2;
}

TEST_P(deep_copy, through_a_checkpoint_file) {
    int counter = 0;
    tree_node* root = make_tree(7, 600, counter);
    graph_node* g = make_random(500, 4, 3);
    auto path = std::filesystem::temp_directory_path() /
                ("courier_deep_copy_test_" + std::to_string(static_cast<int>(GetParam())) + "_" +
                 std::to_string(::getpid()) + ".ckpt");
    auto st = cs::save_to_file(path, opts(), shared(root), shared(g));
    EXPECT_GT(st.file_bytes, 127u * 600u * 8u);
    tree_node* root2 = nullptr;
    graph_node* g2 = nullptr;
    cs::load_from_file(path, shared(root2), shared(g2));
    EXPECT_TRUE(same_tree(root, root2));
    EXPECT_TRUE(same_graph(g, g2));
    std::filesystem::remove(path);
    free_graph(root, tree_next);
    free_graph(root2, tree_next);
    free_graph(g, graph_next);
    free_graph(g2, graph_next);
}

INSTANTIATE_TEST_SUITE_P(modes, deep_copy,
                         ::testing::Values(deep_mode::buffered, deep_mode::non_buffered,
                                           deep_mode::adaptive),
                         [](auto const& param_info) {
                             switch (param_info.param) {
                             case deep_mode::buffered:
                                 return std::string("buffered");
                             case deep_mode::non_buffered:
                                 return std::string("non_buffered");
                             default:
                                 return std::string("adaptive");
                             }
                         });

TEST(deep_copy_file, streams_without_materializing_the_archive) {
    // 2^18 nodes of a buffered ring: 1.5 MB of index data; the writer's buffer stays at 1 MiB.
    graph_node* ring = make_ring(1 << 18);
    auto path = std::filesystem::temp_directory_path() / "courier_deep_stream.ckpt";
    auto st = cs::save_to_file(path, cs::deep_copy_options(deep_mode::buffered), shared(ring));
    EXPECT_GT(st.file_bytes, std::uint64_t{1} << 20);
    EXPECT_LE(st.buffer_bytes, cs::streaming_buffer_size);
    graph_node* back = nullptr;
    cs::load_from_file(path, shared(back));
    EXPECT_TRUE(same_graph(ring, back));
    std::filesystem::remove(path);
    free_graph(ring, graph_next);
    free_graph(back, graph_next);
}

TEST(deep_copy_file, a_failed_save_keeps_the_previous_checkpoint) {
    auto path = std::filesystem::temp_directory_path() / "courier_deep_keep.ckpt";
    cs::save_to_file(path, 42);
    EXPECT_THROW(cs::save_to_file(path, 1, throws_on_save{}), std::runtime_error);
    int v = 0;
    cs::load_from_file(path, v);
    EXPECT_EQ(v, 42);
    EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
    std::filesystem::remove(path);
}

// ---- bad input -----------------------------------------------------------------------------

namespace {
/// Every truncation and a sample of byte flips of `m`'s index data: each load either fails
/// with serialization_error (and leaves the root null, having freed what it built: LSan checks
/// that in the ASan build) or succeeds with some graph, which is freed.
template <class Root, class Free>
void attack(cs::message const& m, Free free_root) {
    auto bytes = std::vector<std::byte>(m.data().begin(), m.data().end());
    std::vector<cs::serialization_chunk> chunks(m.chunks().begin(), m.chunks().end());
    int failures = 0;
    auto try_load = [&](std::vector<std::byte> const& b,
                        std::vector<cs::serialization_chunk> const& c) {
        cs::message bad;
        try {
            bad = cs::message::from_parts(b, c);
        } catch (cs::serialization_error const&) {
            ++failures;
            return;
        }
        Root* root = reinterpret_cast<Root*>(0x1);
        try {
            cs::load(bad, shared(root));
            free_root(root);
        } catch (cs::serialization_error const&) {
            EXPECT_EQ(root, nullptr) << "a failed load left the caller's pointer set";
            ++failures;
        }
    };
    // Truncations (the last index chunk shortened).
    ASSERT_EQ(chunks.back().type, cs::chunk_type::index);
    std::size_t step = std::max<std::size_t>(1, chunks.back().size / 40);
    for (std::size_t cut = 1; cut < chunks.back().size; cut += step) {
        auto b = bytes;
        auto c = chunks;
        b.resize(b.size() - cut);
        c.back().size -= cut;
        try_load(b, c);
    }
    // Flipped bytes.
    std::mt19937 rng(11);
    for (int i = 0; i < 200; ++i) {
        auto b = bytes;
        std::size_t at = cs::message_header_size + rng() % (b.size() - cs::message_header_size);
        b[at] ^= static_cast<std::byte>(1 + rng() % 255);
        try_load(b, chunks);
    }
    EXPECT_GT(failures, 0);
}
} // namespace

TEST(deep_copy_bad_input, corrupted_trees_fail_cleanly) {
    int counter = 0;
    tree_node* root = make_tree(6, 3, counter);
    auto m = cs::save(cs::deep_copy_options(deep_mode::buffered), shared(root));
    attack<tree_node>(m, [](tree_node* r) { free_graph(r, tree_next); });
    free_graph(root, tree_next);
}

TEST(deep_copy_bad_input, corrupted_rings_and_graphs_fail_cleanly) {
    for (graph_node* g : {make_ring(50), make_complete(12, true), make_random(60, 3, 5)}) {
        auto m = cs::save(cs::deep_copy_options(deep_mode::buffered), shared(g));
        attack<graph_node>(m, [](graph_node* r) { free_graph(r, graph_next); });
        free_graph(g, graph_next);
    }
}

TEST(deep_copy_bad_input, absurd_array_length_is_rejected_before_allocating) {
    double* p = nullptr;
    std::size_t n = 0;
    // tag = 2^60 + 1 elements: a varint in a hand-built archive.
    auto m = cs::save(std::uint8_t{0});
    std::vector<std::byte> b(m.data().begin(), m.data().begin() + cs::message_header_size);
    std::uint64_t v = (std::uint64_t{1} << 60) + 1;
    while (v >= 0x80) {
        b.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    b.push_back(static_cast<std::byte>(v));
    auto bad = cs::message::from_bytes(b);
    EXPECT_THROW(cs::load(bad, array(p, n)), cs::serialization_error);
    EXPECT_EQ(p, nullptr);
}

TEST(deep_copy_bad_input, the_node_cap_stops_a_load_and_frees_everything) {
    graph_node* ring = make_ring(1000);
    auto m = cs::save(shared(ring));
    cs::load_limits limits;
    limits.max_deep_allocations = 100;
    graph_node* back = reinterpret_cast<graph_node*>(0x1);
    try {
        cs::load_with_limits(m, limits, shared(back));
        FAIL() << "the cap did not stop the load";
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("max_deep_allocations"), std::string::npos);
    }
    EXPECT_EQ(back, nullptr);
    limits.max_deep_allocations = 1000;
    cs::load_with_limits(m, limits, shared(back)); // exactly enough
    EXPECT_TRUE(same_graph(ring, back));
    free_graph(ring, graph_next);
    free_graph(back, graph_next);
}

TEST(deep_copy_bad_input, a_failure_inside_an_owned_object_does_not_double_free) {
    // The tree's arrays are owned by nodes whose destructors free them: on failure the loader
    // must reset the pointers it assigned before it deletes the nodes.
    int counter = 0;
    holder h{make_tree(5, 8, counter), 1};
    auto m = cs::save(h);
    auto b = std::vector<std::byte>(m.data().begin(), m.data().end());
    std::vector<cs::serialization_chunk> c(m.chunks().begin(), m.chunks().end());
    b.resize(b.size() - 2); // `after` is cut short: the whole tree loaded, then the failure
    c.back().size -= 2;
    auto bad = cs::message::from_parts(b, c);
    holder back;
    EXPECT_THROW(cs::load(bad, back), cs::serialization_error);
    EXPECT_EQ(back.root, nullptr);
    free_graph(h.root, tree_next);
}

TEST(deep_copy_tracking, both_pointer_maps_give_the_same_archive) {
    graph_node* g = make_random(3000, 3, 9);
    cs::options a = cs::deep_copy_options(deep_mode::adaptive);
    cs::options b = a;
    b.tracking = cs::pointer_tracking::std_unordered_map;
    auto ma = cs::save(a, shared(g));
    auto mb = cs::save(b, shared(g));
    ASSERT_EQ(ma.index_size(), mb.index_size());
    EXPECT_EQ(std::memcmp(ma.data().data(), mb.data().data(), ma.index_size()), 0);
    free_graph(g, graph_next);
}
