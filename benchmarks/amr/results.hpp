// SPDX-License-Identifier: BSL-1.0
// What a run reports, shared by the Courier and the MPI drivers: the conserved totals, the
// Sedov shock radius against the exact one, and the dump file (every leaf's interior in Morton
// order, the input of amr_compare and plot_slice.py).
//
// Dump format (little endian): "AMRDUMP1", u64 step, f64 time, i32 n, i32 base, i32 max_level,
// i32 problem (0 Sedov-Taylor, 1 Kelvin-Helmholtz), u64 leaves, then per leaf u64 key and n^3 * 5
// f64 (variable by variable).
#pragma once

#include "options.hpp"
#include "pieces.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace amr {

/// One leaf's interior, the unit that is gathered, dumped and checkpointed.
struct leaf_record {
    std::uint64_t key = 0;
    std::vector<double> cells; // interior(), n^3 * nvar
};

struct totals {
    double mass = 0, momentum[3] = {0, 0, 0}, energy = 0;
    double momentum_scale = 0; ///< sum of |rho v| dV over all axes: what round-off is relative to
    double transverse = 0;     ///< kinetic energy in v_y, (rho v_y)^2 / (2 rho) dV
};

/// A sum that keeps the bits a plain one drops (Neumaier): the totals add 10^5 or more values
/// of very different sizes, and the check is on round-off.
class exact_sum {
public:
    void add(double x) {
        double t = sum_ + x;
        correction_ += std::abs(sum_) >= std::abs(x) ? (sum_ - t) + x : (x - t) + sum_;
        sum_ = t;
    }
    double value() const { return sum_ + correction_; }

private:
    double sum_ = 0, correction_ = 0;
};

inline totals conserved_totals(shape const& s, std::vector<leaf_record> const& leaves) {
    exact_sum mass, momentum[3], energy, scale, transverse;
    std::size_t const cells = std::size_t(s.n) * s.n * s.n;
    for (auto const& r : leaves) {
        double h = cell_size(s, key{r.key}.level()), dv = h * h * h;
        for (std::size_t i = 0; i < cells; ++i) {
            mass.add(r.cells[i] * dv);
            for (int d = 0; d < 3; ++d) {
                momentum[d].add(r.cells[(1 + d) * cells + i] * dv);
                scale.add(std::abs(r.cells[(1 + d) * cells + i]) * dv);
            }
            energy.add(r.cells[4 * cells + i] * dv);
            double my = r.cells[2 * cells + i];
            transverse.add(0.5 * my * my / r.cells[i] * dv);
        }
    }
    totals t;
    t.transverse = transverse.value();
    t.mass = mass.value();
    t.energy = energy.value();
    t.momentum_scale = scale.value();
    for (int d = 0; d < 3; ++d) {
        t.momentum[d] = momentum[d].value();
    }
    return t;
}

/// The shock radius: shells of the finest cell's width around the centre and their mean
/// density; the shock is where that profile falls fastest beyond its peak (the middle of the
/// smeared jump), placed between the two shells that fall most by a parabola through the
/// three largest drops.
inline double measured_shock_radius(shape const& s, std::vector<leaf_record> const& leaves) {
    double width = cell_size(s, s.max_level);
    std::map<long, std::pair<double, double>> shells; // bin -> (mass, volume)
    int const n = s.n;
    for (auto const& r : leaves) {
        key k{r.key};
        double h = cell_size(s, k.level()), dv = h * h * h;
        for (int c2 = 0; c2 < n; ++c2) {
            for (int c1 = 0; c1 < n; ++c1) {
                for (int c0 = 0; c0 < n; ++c0) {
                    double x = (double(k.coord(0) * n + c0) + 0.5) * h - 0.5;
                    double y = (double(k.coord(1) * n + c1) + 0.5) * h - 0.5;
                    double z = (double(k.coord(2) * n + c2) + 0.5) * h - 0.5;
                    long bin = long(std::sqrt(x * x + y * y + z * z) / width);
                    auto& shell = shells[bin];
                    shell.first += r.cells[(std::size_t(c2) * n + c1) * n + c0] * dv;
                    shell.second += dv;
                }
            }
        }
    }
    std::vector<double> rho;
    for (long b = 0; shells.contains(b); ++b) {
        rho.push_back(shells[b].first / shells[b].second);
    }
    std::size_t peak = std::size_t(std::max_element(rho.begin(), rho.end()) - rho.begin());
    std::size_t steepest = peak; // the drop from shell i to i + 1 is largest at i = steepest
    for (std::size_t i = peak; i + 1 < rho.size(); ++i) {
        if (rho[i] - rho[i + 1] > rho[steepest] - rho[steepest + 1]) {
            steepest = i;
        }
    }
    if (steepest + 1 >= rho.size()) {
        return (double(steepest) + 0.5) * width;
    }
    auto drop = [&](std::size_t i) {
        return i + 1 < rho.size() && i >= peak ? rho[i] - rho[i + 1] : 0.0;
    };
    double a = drop(steepest - 1), b = drop(steepest), c = drop(steepest + 1);
    double offset = a - 2 * b + c < 0 ? 0.5 * (a - c) / (a - 2 * b + c) : 0.0;
    return (double(steepest) + 1.0 + offset) * width; // drops sit between shell centres
}

inline void write_dump(std::string const& path, shape const& s, problem kind, std::uint64_t step,
                       double time, std::vector<leaf_record> const& leaves) {
    std::ofstream out(path, std::ios::binary);
    auto put = [&](auto const& v) { out.write(reinterpret_cast<char const*>(&v), sizeof v); };
    out.write("AMRDUMP1", 8);
    put(step);
    put(time);
    std::int32_t shape_fields[4] = {s.n, s.base, s.max_level,
                                    kind == problem::kelvin_helmholtz ? 1 : 0};
    put(shape_fields);
    put(std::uint64_t(leaves.size()));
    for (auto const& r : leaves) {
        put(r.key);
        out.write(reinterpret_cast<char const*>(r.cells.data()),
                  std::streamsize(r.cells.size() * sizeof(double)));
    }
    if (!out) {
        throw std::runtime_error("amr: cannot write " + path);
    }
}

struct dump {
    shape s;
    std::uint64_t step = 0;
    double time = 0;
    std::vector<leaf_record> leaves;
};

inline dump read_dump(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    auto get = [&](auto& v) {
        if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) {
            throw std::runtime_error("amr: " + path + " is truncated");
        }
    };
    char magic[8];
    get(magic);
    if (std::memcmp(magic, "AMRDUMP1", 8) != 0) {
        throw std::runtime_error("amr: " + path + " is not a dump");
    }
    dump d;
    get(d.step);
    get(d.time);
    std::int32_t shape_fields[4];
    get(shape_fields);
    d.s = {shape_fields[0], shape_fields[1], shape_fields[2]};
    d.s.check();
    std::uint64_t count = 0;
    get(count);
    if (count > (std::uint64_t(1) << 24)) {
        throw std::runtime_error("amr: " + path + " claims " + std::to_string(count) + " leaves");
    }
    std::size_t values = std::size_t(d.s.n) * d.s.n * d.s.n * nvar;
    for (std::uint64_t i = 0; i < count; ++i) {
        leaf_record r;
        get(r.key);
        r.cells.resize(values);
        if (!in.read(reinterpret_cast<char*>(r.cells.data()),
                     std::streamsize(values * sizeof(double)))) {
            throw std::runtime_error("amr: " + path + " is truncated");
        }
        d.leaves.push_back(std::move(r));
    }
    return d;
}

/// What a driver prints at the end of a run.
struct run_summary {
    char const* driver = "";
    int localities = 1, levels = 0;
    std::size_t subgrids = 0, cells = 0, steps = 0, grids_processed = 0;
    double seconds = 0, time = 0;
    std::uint64_t messages = 0, bytes = 0, zero_copy_bytes = 0;
    /// Locality 0's wall time in the time step's reduction (waiting for the slowest locality
    /// included) and in regrids.
    double reduce_seconds = 0, regrid_seconds = 0;
};

inline void print_summary(run_summary const& r) {
    std::printf(
        "amr %s: localities %d levels %d subgrids %zu cells %zu steps %zu t %.6g "
        "seconds %.4f grids/s %.1f cells/s %.4g parcels %llu bytes %llu "
        "zero-copy-bytes %llu reduce-seconds %.4f regrid-seconds %.4f\n",
        r.driver, r.localities, r.levels, r.subgrids, r.cells, r.steps, r.time, r.seconds,
        double(r.grids_processed) / r.seconds,
        double(r.grids_processed) * double(r.cells) / double(r.subgrids) / r.seconds,
        static_cast<unsigned long long>(r.messages), static_cast<unsigned long long>(r.bytes),
        static_cast<unsigned long long>(r.zero_copy_bytes), r.reduce_seconds, r.regrid_seconds);
}

/// Prints the checks of a run and whether they pass: mass and energy conserved to 1e-12
/// relative, momentum to 1e-12 of its scale; for the blast, in a run long enough that its
/// initial radius no longer matters (the shock at five times it or more), the shock radius
/// within 5 % of the exact one; for the shear layer, in a run from t = 0 to t >= 1.2, the
/// kinetic energy in v_y at least 1.25 times its start. The seed is no eigenmode: more than half
/// of its energy leaves as sound at first, and the unstable mode grows from there. At 32^3 it
/// is 0.45 times the start at t = 0.2, 0.70 at 0.8, 1.49 at 1.2 and 2.31 at 1.6; without shear
/// (--kh-shear=0) it stays at 0.39-0.40. `from_start`: the run began at t = 0 (not from a
/// checkpoint). Returns whether all passed.
inline bool print_checks(shape const& s, physics const& ph, totals const& start,
                         std::vector<leaf_record> const& leaves, double time,
                         bool from_start = true) {
    totals end = conserved_totals(s, leaves);
    double dm3[3];
    for (int d = 0; d < 3; ++d) {
        dm3[d] = end.momentum[d] - start.momentum[d];
    }
    double dp = std::sqrt(dm3[0] * dm3[0] + dm3[1] * dm3[1] + dm3[2] * dm3[2]);
    double dm = std::abs(end.mass - start.mass) / start.mass;
    double de = std::abs(end.energy - start.energy) / start.energy;
    double relative_momentum = end.momentum_scale > 0 ? dp / end.momentum_scale : dp;
    bool conserved = dm < 1e-12 && de < 1e-12 && relative_momentum < 1e-12;
    std::printf("amr check: mass %.17g relative change %.3g; energy %.17g relative change %.3g; "
                "momentum %.3g, %.3g of the momentum scale %.3g: conservation %s\n",
                end.mass, dm, end.energy, de, dp, relative_momentum, end.momentum_scale,
                conserved ? "ok" : "FAILED");
    if (ph.kind == problem::kelvin_helmholtz) {
        bool growth_ok = true;
        if (from_start && time >= 1.2 && start.transverse > 0) {
            double ratio = end.transverse / start.transverse;
            growth_ok = ratio >= 1.25;
            std::printf("amr check: v_y kinetic energy %.4g -> %.4g at t = %.3g, %.3f times its "
                        "start (at least 1.25: the instability grows): %s\n",
                        start.transverse, end.transverse, time, ratio, growth_ok ? "ok" : "FAILED");
        }
        return conserved && growth_ok;
    }
    bool radius_ok = true;
    // The exact radius for the energy the grid holds above the ambient gas's (the deposit is
    // sampled onto cells, so it differs from e0 by a fraction of a percent).
    physics deposited = ph;
    deposited.e0 = end.energy - ph.p0 / (ph.gamma - 1.0);
    double exact = deposited.shock_radius(time);
    if (time > 0 && exact >= 5 * ph.r0) {
        double measured = measured_shock_radius(s, leaves);
        double error = std::abs(measured - exact) / exact;
        radius_ok = error <= 0.05;
        std::printf("amr check: shock radius %.5f exact %.5f relative error %.4f: within 5 %% "
                    "%s\n",
                    measured, exact, error, radius_ok ? "ok" : "FAILED");
    }
    return conserved && radius_ok;
}

/// What locality (rank) 0 does at the end of a run: the summary line (subgrids and cells from
/// the final tree `t`), the checks if asked (a failed one makes the result 1), the dump if
/// asked. `all` holds every leaf in Morton order.
inline int finish_run(run_summary r, run_options const& o, tree const& t, totals const& start,
                      std::vector<leaf_record> const& all, std::uint64_t step) {
    r.subgrids = t.size();
    r.cells = t.size() * std::size_t(o.s.n) * o.s.n * o.s.n;
    print_summary(r);
    int rc = o.check && !print_checks(o.s, o.ph, start, all, r.time, o.restart.empty()) ? 1 : 0;
    if (!o.dump.empty()) {
        write_dump(o.dump, o.s, o.ph.kind, step, r.time, all);
    }
    return rc;
}

} // namespace amr
