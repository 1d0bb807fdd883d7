// SPDX-License-Identifier: BSL-1.0
// The octree of subgrids, shared by the Courier and the MPI drivers: keys, the space-filling
// curve, face neighbours, regridding with 2:1 balance, the partition along the curve, and the
// plans derived from a tree (which subgrid sends which ghost and flux pieces to which, and
// where the data of a new tree's subgrids comes from).
//
// The domain is the periodic unit cube. Level 0 holds base^3 subgrids; a subgrid at level l
// covers 1/(base 2^l) of each axis. Only leaves hold data. Every locality (rank) holds the
// whole tree (keys only, a few bytes per subgrid) and derives the same plans from it, so a
// regrid needs one exchange of refinement flags and no negotiation.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace amr {

/// A subgrid's place: level (6 bits) and integer coordinates at that level (19 bits each).
struct key {
    std::uint64_t bits = 0;

    static key make(int level, std::int64_t x, std::int64_t y, std::int64_t z) {
        return {std::uint64_t(level) << 57 | std::uint64_t(x) << 38 | std::uint64_t(y) << 19 |
                std::uint64_t(z)};
    }
    int level() const { return int(bits >> 57); }
    std::int64_t coord(int axis) const {
        int shift = axis == 0 ? 38 : axis == 1 ? 19 : 0;
        return std::int64_t(bits >> shift & ((1u << 19) - 1));
    }
    key parent() const { return make(level() - 1, coord(0) / 2, coord(1) / 2, coord(2) / 2); }
    /// Child c: bit 0 of c is the x half, bit 1 the y half, bit 2 the z half.
    key child(int c) const {
        return make(level() + 1, 2 * coord(0) + (c & 1), 2 * coord(1) + (c >> 1 & 1),
                    2 * coord(2) + (c >> 2 & 1));
    }
    int child_index() const {
        return int(coord(0) & 1) | int(coord(1) & 1) << 1 | int(coord(2) & 1) << 2;
    }
    friend bool operator==(key a, key b) { return a.bits == b.bits; }
};

struct key_hash {
    std::size_t operator()(key k) const noexcept { return std::hash<std::uint64_t>{}(k.bits); }
};

/// Faces: 2 * axis + side, side 0 the low face, 1 the high one.
inline int opposite(int face) {
    return face ^ 1;
}

/// The tree's shape parameters.
struct shape {
    int n = 8;         ///< cells per subgrid edge (even)
    int base = 2;      ///< subgrids per axis at level 0 (a power of two)
    int max_level = 2; ///< deepest level

    std::int64_t extent(int level) const { return std::int64_t(base) << level; }
    void check() const {
        if (n < 4 || n % 2 != 0 || n > 64) {
            throw std::invalid_argument("amr: --n must be even, 4..64");
        }
        if (base < 1 || (base & (base - 1)) != 0 || base > 64) {
            throw std::invalid_argument("amr: --base must be a power of two, 1..64");
        }
        if (max_level < 0 || extent(max_level) > (1 << 18)) {
            throw std::invalid_argument("amr: --max-level out of range");
        }
    }
};

/// The position of k's lower corner on the Morton curve at the deepest level.
inline std::uint64_t morton(key k, shape const& s) {
    std::uint64_t code = 0;
    int shift = s.max_level - k.level();
    for (int axis = 0; axis < 3; ++axis) {
        std::uint64_t c = std::uint64_t(k.coord(axis)) << shift;
        for (int b = 0; b < 19; ++b) {
            code |= (c >> b & 1) << (3 * b + (2 - axis));
        }
    }
    return code;
}

/// What lies across a face of a leaf: a leaf of the same level, one coarser leaf, or the four
/// finer leaves that touch the face (the 2:1 balance rules out anything else).
struct across {
    enum kind_t { same, coarser, finer } kind = same;
    std::vector<key> leaves;
};

/// The leaves of an octree, in Morton order.
class tree {
public:
    tree() = default;
    tree(shape s, std::vector<key> leaves) : shape_(s), leaves_(std::move(leaves)) { index(); }

    /// Level 0 only.
    static tree base_grid(shape s) {
        std::vector<key> leaves;
        for (int x = 0; x < s.base; ++x) {
            for (int y = 0; y < s.base; ++y) {
                for (int z = 0; z < s.base; ++z) {
                    leaves.push_back(key::make(0, x, y, z));
                }
            }
        }
        return tree(s, std::move(leaves));
    }

    shape const& geometry() const { return shape_; }
    std::vector<key> const& leaves() const { return leaves_; }
    std::size_t size() const { return leaves_.size(); }
    int deepest() const { return deepest_; }
    bool is_leaf(key k) const { return position_.contains(k); }
    /// The index of leaf k in Morton order; throws if k is not a leaf.
    std::size_t position(key k) const {
        auto it = position_.find(k);
        if (it == position_.end()) {
            throw std::logic_error("amr: not a leaf of the tree");
        }
        return it->second;
    }

    /// The key of the same level across `face`, wrapped around the periodic domain.
    key neighbour(key k, int face) const {
        int axis = face / 2;
        std::int64_t ext = shape_.extent(k.level());
        std::int64_t c[3] = {k.coord(0), k.coord(1), k.coord(2)};
        c[axis] = (c[axis] + (face % 2 == 0 ? -1 : 1) + ext) % ext;
        return key::make(k.level(), c[0], c[1], c[2]);
    }

    across what_is_across(key k, int face) const {
        key nb = neighbour(k, face);
        if (is_leaf(nb)) {
            return {across::same, {nb}};
        }
        if (nb.level() > 0 && is_leaf(nb.parent())) {
            return {across::coarser, {nb.parent()}};
        }
        across a{across::finer, {}};
        int axis = face / 2, bit = 1 - face % 2; // the half of nb that touches k
        for (int c = 0; c < 8; ++c) {
            if ((c >> axis & 1) == bit) {
                key child = nb.child(c);
                if (!is_leaf(child)) {
                    throw std::logic_error("amr: the tree is not 2:1 balanced");
                }
                a.leaves.push_back(child);
            }
        }
        return a;
    }

private:
    void index() {
        std::sort(leaves_.begin(), leaves_.end(),
                  [this](key a, key b) { return morton(a, shape_) < morton(b, shape_); });
        position_.clear();
        position_.reserve(leaves_.size());
        deepest_ = 0;
        for (std::size_t i = 0; i < leaves_.size(); ++i) {
            position_.emplace(leaves_[i], i);
            deepest_ = std::max(deepest_, leaves_[i].level());
        }
    }

    shape shape_;
    std::vector<key> leaves_;
    std::unordered_map<key, std::size_t, key_hash> position_;
    int deepest_ = 0;
};

/// Refinement flags, one per leaf in Morton order.
enum flag : std::int8_t { coarsen = -1, keep = 0, refine = 1 };

/// The tree after refining and coarsening as `flags` ask, within the level limits, with one
/// layer of refined neighbours around each refined leaf (a shock must not outrun the fine
/// region between regrids) and 2:1 balance across faces. Deterministic: every process that
/// calls it with the same tree and flags gets the same tree.
inline tree regrid(tree const& old, std::vector<std::int8_t> const& flags) {
    shape const& s = old.geometry();
    auto const& leaves = old.leaves();
    std::unordered_set<key, key_hash> refined;
    auto refine_leaf = [&](key k) { return k.level() < s.max_level && refined.insert(k).second; };
    // The leaf that holds the same-level region across a face (itself or a coarser leaf), or
    // nothing when that region is finer.
    auto holder = [&](key k, int face) -> std::pair<bool, key> {
        across a = old.what_is_across(k, face);
        return {a.kind != across::finer, a.leaves.front()};
    };
    for (std::size_t i = 0; i < leaves.size(); ++i) {
        if (flags[i] == refine && refine_leaf(leaves[i])) {
            for (int f = 0; f < 6; ++f) {
                auto [found, nb] = holder(leaves[i], f);
                if (found && nb.level() <= leaves[i].level()) {
                    refine_leaf(nb);
                }
            }
        }
    }
    // 2:1: the children of a refined leaf must not face a leaf two levels coarser.
    std::vector<key> work(refined.begin(), refined.end());
    while (!work.empty()) {
        key k = work.back();
        work.pop_back();
        for (int f = 0; f < 6; ++f) {
            auto [found, nb] = holder(k, f);
            if (found && nb.level() < k.level() && refine_leaf(nb)) {
                work.push_back(nb);
            }
        }
    }
    // Coarsening: all eight children are leaves flagged coarsen, none refined, and the parent
    // would face nothing finer than the children's level.
    std::unordered_set<key, key_hash> merged; // parents whose children merge
    for (std::size_t i = 0; i < leaves.size(); ++i) {
        key k = leaves[i];
        if (k.level() == 0 || k.child_index() != 0 || merged.contains(k.parent())) {
            continue;
        }
        key p = k.parent();
        bool ok = true;
        for (int c = 0; c < 8 && ok; ++c) {
            key sib = p.child(c);
            ok = old.is_leaf(sib) && flags[old.position(sib)] == coarsen && !refined.contains(sib);
        }
        for (int f = 0; f < 6 && ok; ++f) {
            key nb = old.neighbour(p, f);
            if (old.is_leaf(nb) || (nb.level() > 0 && old.is_leaf(nb.parent()))) {
                continue; // at p's level or coarser; refined, at most k's level
            }
            int axis = f / 2, bit = 1 - f % 2;
            for (int c = 0; c < 8 && ok; ++c) {
                if ((c >> axis & 1) == bit) {
                    key q = nb.child(c); // level of k
                    ok = old.is_leaf(q) && !refined.contains(q);
                }
            }
        }
        if (ok) {
            merged.insert(p);
        }
    }
    std::vector<key> next;
    next.reserve(leaves.size() + 7 * refined.size());
    for (key k : leaves) {
        if (refined.contains(k)) {
            for (int c = 0; c < 8; ++c) {
                next.push_back(k.child(c));
            }
        } else if (k.level() > 0 && merged.contains(k.parent())) {
            if (k.child_index() == 0) {
                next.push_back(k.parent());
            }
        } else {
            next.push_back(k);
        }
    }
    return tree(s, std::move(next));
}

/// The locality (rank) that owns each leaf: contiguous pieces of the Morton curve of equal
/// length (all subgrids have the same number of cells).
inline std::vector<int> partition(tree const& t, int parts) {
    std::vector<int> owner(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        owner[i] = int(i * std::size_t(parts) / t.size());
    }
    return owner;
}

/// The first and one-past-last leaf of `rank` in a partition.
inline std::pair<std::size_t, std::size_t> my_range(std::size_t leaves, int parts, int rank) {
    auto first = [&](int r) { return (std::size_t(r) * leaves + parts - 1) / std::size_t(parts); };
    return {first(rank), first(rank + 1)};
}

/// One message of a step: leaf `src` sends leaf `dst` the ghost cells (or the face fluxes) of
/// dst's face `face` that src covers. `slot` numbers dst's incoming messages of one kind.
struct link {
    std::size_t src = 0, dst = 0; // leaf positions
    int face = 0;                 // dst's face
    int slot = 0;
};

/// The messages of one step, ordered by (dst, face, src): ghost pieces for every face of every
/// leaf, and face fluxes from each finer leaf to the coarser leaf across its face (the coarse
/// leaf replaces its own flux there by theirs: conservation across levels).
struct step_plan {
    std::vector<link> ghosts, fluxes;
    std::vector<int> ghosts_in, fluxes_in; // per leaf: messages it receives
};

inline step_plan plan_step(tree const& t) {
    step_plan p;
    p.ghosts_in.assign(t.size(), 0);
    p.fluxes_in.assign(t.size(), 0);
    for (std::size_t d = 0; d < t.size(); ++d) {
        for (int f = 0; f < 6; ++f) {
            across a = t.what_is_across(t.leaves()[d], f);
            for (key src : a.leaves) {
                std::size_t s = t.position(src);
                p.ghosts.push_back({s, d, f, p.ghosts_in[d]++});
                if (a.kind == across::finer) {
                    p.fluxes.push_back({s, d, f, p.fluxes_in[d]++});
                }
            }
        }
    }
    return p;
}

/// Where a leaf of the new tree gets its data: a leaf of the old tree (copied or moved), the
/// old parent (prolonged), or the eight old children (each restricted into one octant).
struct transfer {
    enum kind_t { copy, prolong, restrict_octant } kind = copy;
    std::size_t to = 0;   // position in the new tree
    std::size_t from = 0; // position in the old tree
    int octant = 0;       // restrict: which child; prolong: which child of `from` `to` is
};

/// The transfers that build `next` from `old`, ordered by (to, octant).
inline std::vector<transfer> plan_regrid(tree const& old, tree const& next) {
    std::vector<transfer> out;
    out.reserve(next.size());
    for (std::size_t j = 0; j < next.size(); ++j) {
        key k = next.leaves()[j];
        if (old.is_leaf(k)) {
            out.push_back({transfer::copy, j, old.position(k), 0});
        } else if (k.level() > 0 && old.is_leaf(k.parent())) {
            out.push_back({transfer::prolong, j, old.position(k.parent()), k.child_index()});
        } else {
            for (int c = 0; c < 8; ++c) {
                out.push_back({transfer::restrict_octant, j, old.position(k.child(c)), c});
            }
        }
    }
    return out;
}

} // namespace amr
