// SPDX-License-Identifier: BSL-1.0
// The numerics of one subgrid, shared by the Courier and the MPI drivers: 3D compressible
// Euler equations (ideal gas), finite volumes, MUSCL-Hancock with minmod slopes of the conserved
// variables and a half-step predictor along each face normal, HLLC fluxes; the problems are a
// Sedov-Taylor blast wave and a Kelvin-Helmholtz shear layer. A subgrid holds n^3 cells and two
// ghost layers on each face (m = n + 4 cells per axis); only face ghosts are used: the flux through
// a face depends on the two cells on each side of it along its normal, so both subgrids that share
// a face compute the same flux from the same values, bit for bit.
//
// Layout: u[v * m^3 + (k * m + j) * m + i], variables rho, rho*vx, rho*vy, rho*vz, E; faces
// flux[((axis * 5 + v) * (n + 1) + f) * n^2 + t2 * n + t1], t1 and t2 along the other two axes
// in increasing order. Every function here is deterministic: the same inputs give the same
// bits in every process, which is what makes the drivers agree with each other.
#pragma once

#include "octree.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

namespace amr {

constexpr int nvar = 5;
constexpr int ghost = 2;

/// The problems: a Sedov-Taylor blast wave (energy e0 deposited in a sphere of radius r0 around
/// the centre of a gas at rest of density rho0 and pressure p0), or a Kelvin-Helmholtz shear
/// layer (kh_*: a band |y - 1/2| < 1/5 of density 2 moving at +kh_shear/2 along x in gas of
/// density 1 moving at -kh_shear/2, pressure 2.5, both interfaces tanh-smoothed over kh_width and
/// seeded with v_y = kh_amplitude sin(4 pi x) in Gaussians of width kh_sigma around them).
enum class problem { sedov, kelvin_helmholtz };

struct physics {
    problem kind = problem::sedov;
    double gamma = 1.4;
    double rho0 = 1.0, p0 = 1e-5, e0 = 1.0;
    double r0 = 0.0;  ///< set from the finest cell: 3.5 of them
    double cfl = 0.8; ///< on the sum over axes of (|v| + c) dt / dx
    double kh_pressure = 2.5, kh_width = 0.025, kh_amplitude = 0.01, kh_sigma = 0.05;
    double kh_shear = 1.0; ///< the velocity jump across each interface

    /// The Sedov-Taylor constant for gamma = 1.4 in three dimensions: R = xi_0 (E t^2/rho)^(1/5)
    /// (E = 0.851 rho R^5 / t^2, Taylor 1950).
    static constexpr double xi0 = 1.0328;
    double shock_radius(double t) const { return xi0 * std::pow(e0 * t * t / rho0, 0.2); }
};

/// Cells of a subgrid including ghosts.
struct layout {
    int n, m;
    explicit layout(int cells) : n(cells), m(cells + 2 * ghost) {}
    std::size_t cells() const { return std::size_t(m) * m * m; }
    std::size_t values() const { return nvar * cells(); }
    std::size_t flux_values() const { return std::size_t(3) * nvar * (n + 1) * n * n; }
    std::size_t interior_values() const { return std::size_t(nvar) * n * n * n; }
    std::size_t at(int i, int j, int k) const { return (std::size_t(k) * m + j) * m + i; }
    std::size_t at(int const (&c)[3]) const { return at(c[0], c[1], c[2]); }
    std::size_t face(int axis, int v, int f, int t1, int t2) const {
        return ((std::size_t(axis) * nvar + v) * (n + 1) + f) * n * n + std::size_t(t2) * n + t1;
    }
};

inline double cell_size(shape const& s, int level) {
    return 1.0 / double(s.extent(level) * s.n);
}

namespace detail {

struct state {
    double q[nvar];
};

inline double pressure(physics const& ph, double const* q) {
    double kinetic = 0.5 * (q[1] * q[1] + q[2] * q[2] + q[3] * q[3]) / q[0];
    return (ph.gamma - 1.0) * (q[4] - kinetic);
}

inline bool physical(physics const& ph, double const* q) {
    return q[0] > 0.0 && pressure(ph, q) > 0.0;
}

inline void flux_of(physics const& ph, double const* q, int axis, double* f) {
    double p = pressure(ph, q), vn = q[1 + axis] / q[0];
    f[0] = q[1 + axis];
    for (int d = 0; d < 3; ++d) {
        f[1 + d] = q[1 + d] * vn;
    }
    f[1 + axis] += p;
    f[4] = (q[4] + p) * vn;
}

inline double minmod(double a, double b) {
    if (a * b <= 0.0) {
        return 0.0;
    }
    return std::abs(a) < std::abs(b) ? a : b;
}

/// HLLC (Toro) flux between left state l and right state r along `axis`.
inline void hllc(physics const& ph, double const* l, double const* r, int axis, double* f) {
    double rl = l[0], rr = r[0];
    double ul = l[1 + axis] / rl, ur = r[1 + axis] / rr;
    double pl = pressure(ph, l), pr = pressure(ph, r);
    double cl = std::sqrt(ph.gamma * pl / rl), cr = std::sqrt(ph.gamma * pr / rr);
    double sl = std::min(ul - cl, ur - cr), sr = std::max(ul + cl, ur + cr);
    if (sl >= 0.0) {
        flux_of(ph, l, axis, f);
        return;
    }
    if (sr <= 0.0) {
        flux_of(ph, r, axis, f);
        return;
    }
    double star =
        (pr - pl + rl * ul * (sl - ul) - rr * ur * (sr - ur)) / (rl * (sl - ul) - rr * (sr - ur));
    bool left = star >= 0.0;
    double const* q = left ? l : r;
    double rho = left ? rl : rr, u = left ? ul : ur, p = left ? pl : pr, s = left ? sl : sr;
    double fk[nvar], qs[nvar];
    flux_of(ph, q, axis, fk);
    double factor = rho * (s - u) / (s - star);
    qs[0] = factor;
    for (int d = 0; d < 3; ++d) {
        qs[1 + d] = factor * (d == axis ? star : q[1 + d] / rho);
    }
    qs[4] = factor * (q[4] / rho + (star - u) * (star + p / (rho * (s - u))));
    for (int v = 0; v < nvar; ++v) {
        f[v] = fk[v] + s * (qs[v] - q[v]);
    }
}

} // namespace detail

namespace detail {
/// The Kelvin-Helmholtz state at (x, y) (uniform along z): rho, rho v_x, rho v_y, E.
inline void kelvin_helmholtz_at(physics const& ph, double x, double y, double (&q)[4]) {
    constexpr double lower = 0.3, upper = 0.7; // the interfaces: off the level-1 subgrid faces
    double band =
        0.5 * (std::tanh((y - lower) / ph.kh_width) - std::tanh((y - upper) / ph.kh_width));
    double rho = 1.0 + band, vx = ph.kh_shear * (band - 0.5);
    double g1 = (y - lower) / ph.kh_sigma, g2 = (y - upper) / ph.kh_sigma;
    double vy = ph.kh_amplitude * std::sin(4.0 * M_PI * x) *
                (std::exp(-0.5 * g1 * g1) + std::exp(-0.5 * g2 * g2));
    q[0] = rho;
    q[1] = rho * vx;
    q[2] = rho * vy;
    q[3] = ph.kh_pressure / (ph.gamma - 1.0) + 0.5 * rho * (vx * vx + vy * vy);
}
} // namespace detail

/// Fills the interior of subgrid k with the initial state: cell averages sampled with 4^3
/// points per cell (the blast) or 4^2 (the layer, uniform along z), so that every level holds
/// the same mass and energy (the blast's deposit).
inline void initial_state(physics const& ph, shape const& s, key k, std::span<double> u) {
    layout L(s.n);
    double h = cell_size(s, k.level());
    if (ph.kind == problem::kelvin_helmholtz) {
        for (int c1 = 0; c1 < s.n; ++c1) {
            for (int c0 = 0; c0 < s.n; ++c0) {
                double lo[2] = {double(k.coord(0) * s.n + c0) * h,
                                double(k.coord(1) * s.n + c1) * h};
                double sum[4] = {0, 0, 0, 0};
                for (int a = 0; a < 4; ++a) {
                    for (int b = 0; b < 4; ++b) {
                        double q[4];
                        detail::kelvin_helmholtz_at(ph, lo[0] + (a + 0.5) * h / 4,
                                                    lo[1] + (b + 0.5) * h / 4, q);
                        for (int v = 0; v < 4; ++v) {
                            sum[v] += q[v];
                        }
                    }
                }
                double const cell[nvar] = {sum[0] / 16.0, sum[1] / 16.0, sum[2] / 16.0, 0.0,
                                           sum[3] / 16.0};
                for (int c2 = 0; c2 < s.n; ++c2) { // the same along z
                    std::size_t i = L.at(c0 + ghost, c1 + ghost, c2 + ghost);
                    for (int v = 0; v < nvar; ++v) {
                        u[v * L.cells() + i] = cell[v];
                    }
                }
            }
        }
        return;
    }
    double volume = 4.0 / 3.0 * M_PI * ph.r0 * ph.r0 * ph.r0;
    double e_ambient = ph.p0 / (ph.gamma - 1.0);
    for (int c2 = 0; c2 < s.n; ++c2) {
        for (int c1 = 0; c1 < s.n; ++c1) {
            for (int c0 = 0; c0 < s.n; ++c0) {
                double lo[3] = {double(k.coord(0) * s.n + c0) * h,
                                double(k.coord(1) * s.n + c1) * h,
                                double(k.coord(2) * s.n + c2) * h};
                int inside = 0;
                for (int a = 0; a < 4; ++a) {
                    for (int b = 0; b < 4; ++b) {
                        for (int c = 0; c < 4; ++c) {
                            double x = lo[0] + (a + 0.5) * h / 4 - 0.5;
                            double y = lo[1] + (b + 0.5) * h / 4 - 0.5;
                            double z = lo[2] + (c + 0.5) * h / 4 - 0.5;
                            inside += x * x + y * y + z * z < ph.r0 * ph.r0 ? 1 : 0;
                        }
                    }
                }
                std::size_t i = L.at(c0 + ghost, c1 + ghost, c2 + ghost);
                u[0 * L.cells() + i] = ph.rho0;
                u[1 * L.cells() + i] = u[2 * L.cells() + i] = u[3 * L.cells() + i] = 0.0;
                u[4 * L.cells() + i] = e_ambient + ph.e0 / volume * double(inside) / 64.0;
            }
        }
    }
}

/// Face fluxes of one step of length dt, from the interior and the ghost cells.
inline void compute_fluxes(physics const& ph, shape const& s, key k, std::span<double const> u,
                           double dt, std::span<double> flux) {
    layout L(s.n);
    int const n = s.n;
    double const half = 0.5 * dt / cell_size(s, k.level());
    auto lo = std::vector<detail::state>(std::size_t(L.m)); // face states per cell
    auto hi = std::vector<detail::state>(std::size_t(L.m));
    for (int axis = 0; axis < 3; ++axis) {
        int a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
        for (int t2 = 0; t2 < n; ++t2) {
            for (int t1 = 0; t1 < n; ++t1) {
                auto index = [&](int c) {
                    int p[3];
                    p[axis] = c;
                    p[a1] = t1 + ghost;
                    p[a2] = t2 + ghost;
                    return L.at(p);
                };
                for (int c = 1; c <= n + 2; ++c) {
                    double q[nvar], ql[nvar], qr[nvar];
                    std::size_t im = index(c - 1), i0 = index(c), ip = index(c + 1);
                    for (int v = 0; v < nvar; ++v) {
                        double const* w = u.data() + v * L.cells();
                        double slope = detail::minmod(w[i0] - w[im], w[ip] - w[i0]);
                        q[v] = w[i0];
                        ql[v] = w[i0] - 0.5 * slope;
                        qr[v] = w[i0] + 0.5 * slope;
                    }
                    bool ok = detail::physical(ph, ql) && detail::physical(ph, qr);
                    if (ok) {
                        double fl[nvar], fr[nvar];
                        detail::flux_of(ph, ql, axis, fl);
                        detail::flux_of(ph, qr, axis, fr);
                        for (int v = 0; v < nvar; ++v) {
                            ql[v] += half * (fl[v] - fr[v]);
                            qr[v] += half * (fl[v] - fr[v]);
                        }
                        ok = detail::physical(ph, ql) && detail::physical(ph, qr);
                    }
                    for (int v = 0; v < nvar; ++v) { // first order where second is not physical
                        lo[std::size_t(c)].q[v] = ok ? ql[v] : q[v];
                        hi[std::size_t(c)].q[v] = ok ? qr[v] : q[v];
                    }
                }
                for (int f = 0; f <= n; ++f) {
                    double fx[nvar];
                    detail::hllc(ph, hi[std::size_t(f + 1)].q, lo[std::size_t(f + 2)].q, axis, fx);
                    for (int v = 0; v < nvar; ++v) {
                        flux[L.face(axis, v, f, t1, t2)] = fx[v];
                    }
                }
            }
        }
    }
}

/// u -= dt/dx (flux differences); returns max over cells of sum over axes (|v| + c) / dx, the
/// rate the next time step must respect. Throws on a non-physical state.
inline double update(physics const& ph, shape const& s, key k, std::span<double> u,
                     std::span<double const> flux, double dt) {
    layout L(s.n);
    int const n = s.n;
    double const h = cell_size(s, k.level()), ratio = dt / h;
    double rate = 0.0;
    for (int c2 = 0; c2 < n; ++c2) {
        for (int c1 = 0; c1 < n; ++c1) {
            for (int c0 = 0; c0 < n; ++c0) {
                int c[3] = {c0, c1, c2};
                std::size_t i = L.at(c0 + ghost, c1 + ghost, c2 + ghost);
                double q[nvar];
                for (int v = 0; v < nvar; ++v) {
                    double d = 0.0;
                    for (int axis = 0; axis < 3; ++axis) {
                        int t1 = c[axis == 0 ? 1 : 0], t2 = c[axis == 2 ? 1 : 2];
                        d += flux[L.face(axis, v, c[axis] + 1, t1, t2)] -
                             flux[L.face(axis, v, c[axis], t1, t2)];
                    }
                    u[v * L.cells() + i] -= ratio * d;
                    q[v] = u[v * L.cells() + i];
                }
                if (!detail::physical(ph, q)) {
                    throw std::runtime_error("amr: a non-physical state (density or pressure "
                                             "not positive): lower the CFL number");
                }
                double cs = std::sqrt(ph.gamma * detail::pressure(ph, q) / q[0]);
                double sum = 3.0 * cs;
                for (int d = 0; d < 3; ++d) {
                    sum += std::abs(q[1 + d] / q[0]);
                }
                rate = std::max(rate, sum / h);
            }
        }
    }
    return rate;
}

/// The rate of update() for a subgrid as it is.
inline double rate_of(physics const& ph, shape const& s, key k, std::span<double const> u) {
    layout L(s.n);
    double h = cell_size(s, k.level()), rate = 0.0;
    for (int c2 = ghost; c2 < s.n + ghost; ++c2) {
        for (int c1 = ghost; c1 < s.n + ghost; ++c1) {
            for (int c0 = ghost; c0 < s.n + ghost; ++c0) {
                double q[nvar];
                for (int v = 0; v < nvar; ++v) {
                    q[v] = u[v * L.cells() + L.at(c0, c1, c2)];
                }
                double sum = 3.0 * std::sqrt(ph.gamma * detail::pressure(ph, q) / q[0]);
                for (int d = 0; d < 3; ++d) {
                    sum += std::abs(q[1 + d] / q[0]);
                }
                rate = std::max(rate, sum / h);
            }
        }
    }
    return rate;
}

/// The refinement indicator: the largest relative jump of density or pressure between two
/// neighbouring interior cells.
inline double indicator(physics const& ph, shape const& s, std::span<double const> u) {
    layout L(s.n);
    std::vector<double> rho(L.cells()), p(L.cells());
    for (std::size_t i = 0; i < L.cells(); ++i) {
        double q[nvar];
        for (int v = 0; v < nvar; ++v) {
            q[v] = u[v * L.cells() + i];
        }
        rho[i] = q[0];
        p[i] = q[0] > 0.0 ? detail::pressure(ph, q) : 0.0;
    }
    std::size_t const stride[3] = {1, std::size_t(L.m), std::size_t(L.m) * L.m};
    double worst = 0.0;
    for (int c2 = ghost; c2 < s.n + ghost; ++c2) {
        for (int c1 = ghost; c1 < s.n + ghost; ++c1) {
            for (int c0 = ghost; c0 < s.n + ghost; ++c0) {
                int c[3] = {c0, c1, c2};
                std::size_t i = L.at(c0, c1, c2);
                for (int axis = 0; axis < 3; ++axis) {
                    if (c[axis] + 1 == s.n + ghost) {
                        continue;
                    }
                    std::size_t j = i + stride[axis];
                    worst = std::max(worst, std::abs(rho[j] - rho[i]) / (rho[j] + rho[i]));
                    worst = std::max(worst, std::abs(p[j] - p[i]) / (p[j] + p[i]));
                }
            }
        }
    }
    return worst;
}

} // namespace amr
