// SPDX-License-Identifier: BSL-1.0
// Checkpoints of the AMR mini-app: the octree as a pointer structure (a node per subgrid of
// every level, the leaves holding their cells) written to a Courier checkpoint file in one
// deep copy of its roots, and read back into the leaves in Morton order. A restart needs only
// the file: the tree, the step and the time are in it, and the number of localities may
// differ from the run that wrote it.
#pragma once

#include "results.hpp"

#include <courier/serialization.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace amr {

struct octree_node {
    std::uint64_t key = 0;
    std::vector<double> cells; // a leaf's interior; empty for an inner node
    std::vector<std::unique_ptr<octree_node>> children; // none or eight

    template <class Archive>
    void serialize(Archive& ar, unsigned) {
        ar& key& cells& children;
    }
};

struct checkpoint_file {
    std::uint64_t step = 0;
    double time = 0;
    std::int32_t n = 0, base = 0, max_level = 0;
    std::vector<std::unique_ptr<octree_node>> roots; // the level-0 subgrids, x-major

    template <class Archive>
    void serialize(Archive& ar, unsigned) {
        ar& step& time& n& base& max_level& roots;
    }
};

struct checkpoint_state {
    std::uint64_t step = 0;
    double time = 0;
    std::vector<leaf_record> leaves; // Morton order
};

inline void save_checkpoint(std::string const& path, shape const& s, std::uint64_t step,
                            double time, std::vector<leaf_record> const& leaves) {
    checkpoint_file f;
    f.step = step;
    f.time = time;
    f.n = s.n;
    f.base = s.base;
    f.max_level = s.max_level;
    auto const base = std::size_t(s.base);
    f.roots.resize(base * base * base);
    for (auto const& r : leaves) {
        key k{r.key};
        std::vector<key> path_down; // k and its ancestors up to level 0
        for (key a = k;; a = a.parent()) {
            path_down.push_back(a);
            if (a.level() == 0) {
                break;
            }
        }
        key root = path_down.back();
        auto& slot =
            f.roots[(std::size_t(root.coord(0)) * base + std::size_t(root.coord(1))) * base +
                    std::size_t(root.coord(2))];
        if (!slot) {
            slot = std::make_unique<octree_node>();
            slot->key = root.bits;
        }
        octree_node* node = slot.get();
        for (auto it = path_down.rbegin() + 1; it != path_down.rend(); ++it) {
            if (node->children.empty()) {
                node->children.resize(8);
                for (int c = 0; c < 8; ++c) {
                    node->children[std::size_t(c)] = std::make_unique<octree_node>();
                    node->children[std::size_t(c)]->key = key{node->key}.child(c).bits;
                }
            }
            node = node->children[std::size_t(it->child_index())].get();
        }
        node->cells = r.cells;
    }
    courier::serialization::save_to_file(path, f);
}

/// Reads a checkpoint written for the shape `s`; throws naming what does not fit.
inline checkpoint_state load_checkpoint(std::string const& path, shape const& s) {
    checkpoint_file f;
    courier::serialization::load_from_file(path, f);
    if (f.n != s.n || f.base != s.base || f.max_level != s.max_level) {
        throw std::runtime_error("amr: " + path + " holds --n=" + std::to_string(f.n) +
                                 " --base=" + std::to_string(f.base) + " --max-level=" +
                                 std::to_string(f.max_level) + "; give the same options");
    }
    checkpoint_state st{f.step, f.time, {}};
    std::size_t const values = std::size_t(s.n) * s.n * s.n * nvar;
    std::vector<octree_node const*> stack;
    for (auto const& r : f.roots) {
        if (!r) {
            throw std::runtime_error("amr: " + path + " misses a level-0 subgrid");
        }
        stack.push_back(r.get());
    }
    while (!stack.empty()) {
        octree_node const* node = stack.back();
        stack.pop_back();
        if (node->children.empty()) {
            if (node->cells.size() != values) {
                throw std::runtime_error("amr: " + path + " has a leaf of " +
                                         std::to_string(node->cells.size()) + " values");
            }
            st.leaves.push_back({node->key, node->cells});
            continue;
        }
        if (node->children.size() != 8) {
            throw std::runtime_error("amr: " + path + " has a node with " +
                                     std::to_string(node->children.size()) + " children");
        }
        for (auto const& c : node->children) {
            if (!c || key{c->key}.level() > s.max_level) {
                throw std::runtime_error("amr: " + path + " has a malformed node");
            }
            stack.push_back(c.get());
        }
    }
    tree t(s, [&] {
        std::vector<key> keys;
        for (auto const& r : st.leaves) {
            keys.push_back(key{r.key});
        }
        return keys;
    }());
    std::sort(st.leaves.begin(), st.leaves.end(), [&](auto const& a, auto const& b) {
        return t.position(key{a.key}) < t.position(key{b.key});
    });
    return st;
}

} // namespace amr
