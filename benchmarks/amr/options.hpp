// SPDX-License-Identifier: BSL-1.0
// The command line of both drivers (identical, so the same problem runs on both):
//   --n=8 --base=2 --max-level=2      cells per subgrid edge, level-0 subgrids per axis, levels
//   --steps=N --t-end=T               stop after N steps or at time T, whichever comes first
//   --regrid-every=4 --refine-above=0.1 --coarsen-below=0.03   the gradient criterion
//   --cfl=0.8                         on the sum over axes of (|v| + c) dt / dx
//   --dump=FILE                       the final state (amr_compare, plot_slice.py)
//   --problem=sedov|kh                a Sedov-Taylor blast (default) or a Kelvin-Helmholtz layer
//   --kh-shear=1                      the velocity jump across the layer's interfaces
//   --check                           conservation, and the Sedov shock radius or the growth
//                                     of the Kelvin-Helmholtz instability
//   --checkpoint=FILE --checkpoint-at=N   (Courier) write the state after step N
//   --restart=FILE                    (Courier) start from a checkpoint
// Arguments starting with --courier: belong to the runtime.
#pragma once

#include "euler.hpp"

#include <vector>

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace amr {

struct run_options {
    shape s;
    physics ph;
    std::size_t steps = std::numeric_limits<std::size_t>::max();
    double t_end = 0.02;
    std::size_t regrid_every = 4;
    double refine_above = 0.1, coarsen_below = 0.03;
    std::string dump, checkpoint, restart;
    std::size_t checkpoint_at = 0;
    bool check = false;
};

inline run_options parse_options(int argc, char** argv) {
    run_options o;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.starts_with("--courier:") || a.starts_with("--courier-")) {
            continue;
        }
        auto eq = a.find('=');
        std::string_view name = a.substr(0, eq);
        std::string value(eq == std::string_view::npos ? "" : a.substr(eq + 1));
        auto number = [&] {
            char* end = nullptr;
            double v = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0') {
                throw std::invalid_argument("amr: " + std::string(name) + " needs a number");
            }
            return v;
        };
        if (name == "--n") {
            o.s.n = int(number());
        } else if (name == "--base") {
            o.s.base = int(number());
        } else if (name == "--max-level") {
            o.s.max_level = int(number());
        } else if (name == "--steps") {
            o.steps = std::size_t(number());
        } else if (name == "--t-end") {
            o.t_end = number();
        } else if (name == "--regrid-every") {
            o.regrid_every = std::max<std::size_t>(1, std::size_t(number()));
        } else if (name == "--refine-above") {
            o.refine_above = number();
        } else if (name == "--coarsen-below") {
            o.coarsen_below = number();
        } else if (name == "--cfl") {
            o.ph.cfl = number();
        } else if (name == "--dump") {
            o.dump = value;
        } else if (name == "--problem") {
            if (value == "sedov") {
                o.ph.kind = problem::sedov;
            } else if (value == "kh") {
                o.ph.kind = problem::kelvin_helmholtz;
            } else {
                throw std::invalid_argument("amr: --problem is sedov or kh, not '" + value + "'");
            }
        } else if (name == "--kh-shear") {
            o.ph.kh_shear = number();
        } else if (name == "--check") {
            o.check = true;
        } else if (name == "--checkpoint") {
            o.checkpoint = value;
        } else if (name == "--checkpoint-at") {
            o.checkpoint_at = std::size_t(number());
        } else if (name == "--restart") {
            o.restart = value;
        } else {
            throw std::invalid_argument("amr: unknown argument " + std::string(a));
        }
    }
    o.s.check();
    o.ph.r0 = 3.5 * cell_size(o.s, o.s.max_level);
    return o;
}

/// Refinement flags of a subgrid from its indicator.
inline std::int8_t flag_of(run_options const& o, double indicator_value) {
    return indicator_value > o.refine_above    ? std::int8_t(refine)
           : indicator_value < o.coarsen_below ? std::int8_t(coarsen)
                                               : std::int8_t(keep);
}

/// Subgrid k in the initial state (ghosts zero).
inline std::vector<double> initial_subgrid(run_options const& o, key k) {
    std::vector<double> u(layout(o.s.n).values(), 0.0);
    initial_state(o.ph, o.s, k, u);
    return u;
}

/// The initial tree: the base grid refined where the criterion finds the initial state
/// steep, pass by pass up to the deepest level. `rank` of `parts` flags its share of the leaves
/// (partition()); all_flags(mine) returns every rank's flags in rank order.
template <class AllFlags>
tree initial_tree(run_options const& o, int parts, int rank, AllFlags all_flags) {
    tree t = tree::base_grid(o.s);
    for (int pass = 0; pass <= o.s.max_level; ++pass) {
        auto [first, last] = my_range(t.size(), parts, rank);
        std::vector<std::int8_t> mine;
        for (std::size_t j = first; j < last; ++j) {
            auto u = initial_subgrid(o, t.leaves()[j]);
            mine.push_back(flag_of(o, indicator(o.ph, o.s, u)));
        }
        std::vector<std::int8_t> flags = all_flags(std::move(mine));
        for (auto& f : flags) {
            f = f == coarsen ? std::int8_t(keep) : f; // nothing to coarsen yet
        }
        tree next = regrid(t, flags);
        bool same = next.leaves() == t.leaves();
        t = std::move(next);
        if (same) {
            break;
        }
    }
    return t;
}

} // namespace amr
