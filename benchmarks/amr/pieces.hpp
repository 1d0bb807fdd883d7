// SPDX-License-Identifier: BSL-1.0
// What travels between subgrids, shared by the Courier and the MPI drivers: ghost pieces (the
// cells of a neighbour that fill a face's two ghost layers: copied from a leaf of the same level,
// injected from a coarser one, averaged from a finer one), flux pieces (a finer leaf's face
// fluxes summed onto the coarser leaf's faces), and the pieces of a regrid (a whole interior, a
// prolonged child, a restricted octant). A sender packs with pack_*(), the receiver unpacks with
// unpack_*() given the same (dst, face, src): both walk the same cells in the same order, so a
// piece carries values only.
#pragma once

#include "euler.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace amr {

namespace detail {

inline std::int64_t wrap(std::int64_t i, std::int64_t period) {
    return ((i % period) + period) % period;
}

/// Visits the ghost cells of `dst` across `face` that `src` holds, in a fixed order:
/// visit(dst cell index, src cell index of the lowest corner, cells per axis in src (1 or 2)).
template <class Visit>
void for_each_ghost(shape const& s, key dst, int face, key src, Visit visit) {
    layout L(s.n);
    int const n = s.n, axis = face / 2;
    int const level = dst.level(), delta = src.level() - level; // -1, 0 or 1
    std::int64_t const period = s.extent(level) * n;
    int lo[3] = {ghost, ghost, ghost}, hi[3] = {n + ghost, n + ghost, n + ghost};
    lo[axis] = face % 2 == 0 ? 0 : n + ghost;
    hi[axis] = lo[axis] + ghost;
    for (int c2 = lo[2]; c2 < hi[2]; ++c2) {
        for (int c1 = lo[1]; c1 < hi[1]; ++c1) {
            for (int c0 = lo[0]; c0 < hi[0]; ++c0) {
                int c[3] = {c0, c1, c2}, from[3];
                bool covered = true;
                for (int a = 0; a < 3; ++a) {
                    std::int64_t g = wrap(dst.coord(a) * n + c[a] - ghost, period);
                    std::int64_t at = delta == 0 ? g : delta < 0 ? g / 2 : 2 * g;
                    std::int64_t local = at - src.coord(a) * n;
                    covered = covered && local >= 0 && local < n;
                    from[a] = int(local) + ghost;
                }
                if (covered) {
                    visit(L.at(c), L.at(from), delta > 0 ? 2 : 1);
                }
            }
        }
    }
}

/// Visits the faces of coarse `dst` on `face` that fine `src` covers:
/// visit(dst face offset without variable, src face offsets of the four fine faces).
template <class Visit>
void for_each_flux_face(shape const& s, key dst, int face, key src, Visit visit) {
    layout L(s.n);
    int const n = s.n, axis = face / 2;
    int const a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
    int const f = face % 2 == 0 ? 0 : n;
    int const g = face % 2 == 0 ? n : 0; // the same plane seen from the fine side
    for (int t2 = 0; t2 < n; ++t2) {
        for (int t1 = 0; t1 < n; ++t1) {
            std::int64_t l1 = 2 * (dst.coord(a1) * n + t1) - src.coord(a1) * n;
            std::int64_t l2 = 2 * (dst.coord(a2) * n + t2) - src.coord(a2) * n;
            if (l1 < 0 || l1 >= n || l2 < 0 || l2 >= n) {
                continue;
            }
            int i1 = int(l1), i2 = int(l2);
            std::size_t fine[4] = {L.face(axis, 0, g, i1, i2), L.face(axis, 0, g, i1 + 1, i2),
                                   L.face(axis, 0, g, i1, i2 + 1),
                                   L.face(axis, 0, g, i1 + 1, i2 + 1)};
            visit(L.face(axis, 0, f, t1, t2), fine);
        }
    }
}

} // namespace detail

/// Number of values of a ghost piece from `src` to `dst` (what the receiver expects): a leaf
/// of the same or a coarser level covers dst's whole face (2 layers of n^2 cells), a finer one
/// a quarter of it.
inline std::size_t ghost_piece_size(shape const& s, key dst, key src) {
    std::size_t face_cells = std::size_t(2) * s.n * s.n;
    return nvar * (src.level() > dst.level() ? face_cells / 4 : face_cells);
}

/// Number of values of a flux piece: a finer leaf covers a quarter of the coarse face's n^2.
inline std::size_t flux_piece_size(shape const& s) {
    return std::size_t(nvar) * s.n * s.n / 4;
}

/// The ghost piece `src` sends `dst` for dst's face `face`.
/// Writes its ghost_piece_size() values to `out` (a message buffer: no copy after packing).
inline void pack_ghost(shape const& s, key dst, int face, key src, std::span<double const> u,
                       double* out) {
    layout L(s.n);
    std::size_t const cells = L.cells(), stride[3] = {1, std::size_t(L.m), cells / L.m};
    detail::for_each_ghost(s, dst, face, src, [&](std::size_t, std::size_t from, int width) {
        for (int v = 0; v < nvar; ++v) {
            double const* w = u.data() + v * cells + from;
            if (width == 1) {
                *out++ = *w;
                continue;
            }
            double sum = 0.0;
            for (int d = 0; d < 8; ++d) {
                sum += w[(d & 1) * stride[0] + (d >> 1 & 1) * stride[1] + (d >> 2) * stride[2]];
            }
            *out++ = sum / 8.0;
        }
    });
}

inline std::vector<double> pack_ghost(shape const& s, key dst, int face, key src,
                                      std::span<double const> u) {
    std::vector<double> out(ghost_piece_size(s, dst, src));
    pack_ghost(s, dst, face, src, u, out.data());
    return out;
}

/// Stores a ghost piece; false when it has the wrong length (nothing is written then).
inline bool unpack_ghost(shape const& s, key dst, int face, key src, std::span<double> u,
                         std::span<double const> piece) {
    if (piece.size() != ghost_piece_size(s, dst, src)) {
        return false;
    }
    std::size_t const cells = layout(s.n).cells();
    std::size_t next = 0;
    detail::for_each_ghost(s, dst, face, src, [&](std::size_t to, std::size_t, int) {
        for (int v = 0; v < nvar; ++v) {
            u[v * cells + to] = piece[next++];
        }
    });
    return true;
}

/// The fluxes fine `src` sends coarse `dst` for dst's face `face`: per coarse face, the mean
/// of the four fine fluxes through it.
/// Writes its flux_piece_size() values to `out`.
inline void pack_flux(shape const& s, key dst, int face, key src, std::span<double const> flux,
                      double* out) {
    std::size_t const per_var = std::size_t(s.n + 1) * s.n * s.n;
    detail::for_each_flux_face(s, dst, face, src, [&](std::size_t, std::size_t const* fine) {
        for (int v = 0; v < nvar; ++v) {
            double const* f = flux.data() + v * per_var;
            *out++ = 0.25 * ((f[fine[0]] + f[fine[1]]) + (f[fine[2]] + f[fine[3]]));
        }
    });
}

inline std::vector<double> pack_flux(shape const& s, key dst, int face, key src,
                                     std::span<double const> flux) {
    std::vector<double> out(flux_piece_size(s));
    pack_flux(s, dst, face, src, flux, out.data());
    return out;
}

/// Replaces dst's fluxes on the faces `src` covers; false when the piece has the wrong length.
inline bool unpack_flux(shape const& s, key dst, int face, key src, std::span<double> flux,
                        std::span<double const> piece) {
    std::size_t const per_var = std::size_t(s.n + 1) * s.n * s.n;
    if (piece.size() != flux_piece_size(s)) {
        return false;
    }
    std::size_t next = 0;
    detail::for_each_flux_face(s, dst, face, src, [&](std::size_t to, std::size_t const*) {
        for (int v = 0; v < nvar; ++v) {
            flux[v * per_var + to] = piece[next++];
        }
    });
    return true;
}

/// The n^3 interior cells of a subgrid, variable by variable (the regrid's, the checkpoint's
/// and the dump's unit).
inline std::vector<double> interior(shape const& s, std::span<double const> u) {
    layout L(s.n);
    std::vector<double> out;
    out.reserve(L.interior_values());
    for (int v = 0; v < nvar; ++v) {
        for (int c2 = ghost; c2 < s.n + ghost; ++c2) {
            for (int c1 = ghost; c1 < s.n + ghost; ++c1) {
                for (int c0 = ghost; c0 < s.n + ghost; ++c0) {
                    out.push_back(u[v * L.cells() + L.at(c0, c1, c2)]);
                }
            }
        }
    }
    return out;
}

/// A subgrid (ghosts zero) from its interior; throws if the interior has the wrong length.
inline std::vector<double> from_interior(shape const& s, std::span<double const> in) {
    layout L(s.n);
    if (in.size() != L.interior_values()) {
        throw std::runtime_error("amr: a subgrid's data has " + std::to_string(in.size()) +
                                 " values where " + std::to_string(L.interior_values()) +
                                 " were due");
    }
    std::vector<double> u(L.values(), 0.0);
    std::size_t next = 0;
    for (int v = 0; v < nvar; ++v) {
        for (int c2 = ghost; c2 < s.n + ghost; ++c2) {
            for (int c1 = ghost; c1 < s.n + ghost; ++c1) {
                for (int c0 = ghost; c0 < s.n + ghost; ++c0) {
                    u[v * L.cells() + L.at(c0, c1, c2)] = in[next++];
                }
            }
        }
    }
    return u;
}

/// The interior of child `c` of a subgrid: each parent cell gives its eight children its value
/// plus or minus a quarter of its minmod slope along each axis (zero at the subgrid's edge),
/// which keeps the parent's mean.
inline std::vector<double> prolong(shape const& s, std::span<double const> parent, int c) {
    layout L(s.n);
    int const n = s.n, half = n / 2;
    std::size_t const stride[3] = {1, std::size_t(L.m), std::size_t(L.m) * L.m};
    std::vector<double> out;
    out.reserve(L.interior_values());
    int const offset[3] = {(c & 1) * half, (c >> 1 & 1) * half, (c >> 2 & 1) * half};
    for (int v = 0; v < nvar; ++v) {
        double const* w = parent.data() + v * L.cells();
        for (int f2 = 0; f2 < n; ++f2) {
            for (int f1 = 0; f1 < n; ++f1) {
                for (int f0 = 0; f0 < n; ++f0) {
                    int fc[3] = {f0, f1, f2}, pc[3];
                    for (int a = 0; a < 3; ++a) {
                        pc[a] = offset[a] + fc[a] / 2 + ghost;
                    }
                    std::size_t i = L.at(pc);
                    double value = w[i];
                    for (int a = 0; a < 3; ++a) {
                        bool edge = pc[a] == ghost || pc[a] == n + ghost - 1;
                        double slope =
                            edge ? 0.0
                                 : detail::minmod(w[i] - w[i - stride[a]], w[i + stride[a]] - w[i]);
                        value += (fc[a] % 2 == 0 ? -0.25 : 0.25) * slope;
                    }
                    out.push_back(value);
                }
            }
        }
    }
    return out;
}

/// A subgrid's data averaged onto (n/2)^3 cells: its octant of the parent.
inline std::vector<double> restrict_to_octant(shape const& s, std::span<double const> child) {
    layout L(s.n);
    int const half = s.n / 2;
    std::size_t const stride[3] = {1, std::size_t(L.m), std::size_t(L.m) * L.m};
    std::vector<double> out;
    out.reserve(std::size_t(nvar) * half * half * half);
    for (int v = 0; v < nvar; ++v) {
        double const* w = child.data() + v * L.cells();
        for (int c2 = 0; c2 < half; ++c2) {
            for (int c1 = 0; c1 < half; ++c1) {
                for (int c0 = 0; c0 < half; ++c0) {
                    std::size_t i = L.at(2 * c0 + ghost, 2 * c1 + ghost, 2 * c2 + ghost);
                    double sum = 0.0;
                    for (int d = 0; d < 8; ++d) {
                        sum += w[i + (d & 1) * stride[0] + (d >> 1 & 1) * stride[1] +
                                 (d >> 2) * stride[2]];
                    }
                    out.push_back(sum / 8.0);
                }
            }
        }
    }
    return out;
}

/// Stores a restricted octant in a parent subgrid; throws on a wrong length.
inline void place_octant(shape const& s, std::span<double> parent, int octant,
                         std::span<double const> piece) {
    layout L(s.n);
    int const half = s.n / 2;
    if (piece.size() != std::size_t(nvar) * half * half * half) {
        throw std::runtime_error("amr: an octant with " + std::to_string(piece.size()) + " values");
    }
    int const offset[3] = {(octant & 1) * half, (octant >> 1 & 1) * half, (octant >> 2) * half};
    std::size_t next = 0;
    for (int v = 0; v < nvar; ++v) {
        for (int c2 = 0; c2 < half; ++c2) {
            for (int c1 = 0; c1 < half; ++c1) {
                for (int c0 = 0; c0 < half; ++c0) {
                    std::size_t i = L.at(offset[0] + c0 + ghost, offset[1] + c1 + ghost,
                                         offset[2] + c2 + ghost);
                    parent[v * L.cells() + i] = piece[next++];
                }
            }
        }
    }
}

} // namespace amr
