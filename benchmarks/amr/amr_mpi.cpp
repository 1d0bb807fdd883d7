// SPDX-License-Identifier: BSL-1.0
// The AMR mini-app as a plain MPI code would write it: the same numerics, tree, decomposition
// and messages as amr_courier (octree.hpp, euler.hpp, pieces.hpp), with MPI_Isend/MPI_Irecv
// for the ghost faces and the face fluxes, MPI_Allreduce for the time step and
// MPI_Allgatherv for the refinement flags. Each rank steps its subgrids in bulk: post the
// receives, send, wait for all, compute. Messages between two ranks match by their order
// (every rank walks the same global plan), so one tag per kind suffices.
//
//   mpirun -np 4 build/bin/amr_mpi --max-level=2 --t-end=0.02 --check
#include "options.hpp"
#include "results.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>

namespace {

struct block {
    amr::key k;
    std::vector<double> u, fluxes;
};

struct rank_state {
    amr::run_options opt;
    int rank = 0, size = 1;
    amr::tree tree;
    std::vector<int> owner;
    amr::step_plan plan;
    std::map<std::size_t, block> blocks; // by leaf position
    std::uint64_t messages = 0, bytes = 0;
};

void check(int rc, char const* what) {
    if (rc != MPI_SUCCESS) {
        throw std::runtime_error(std::string("amr_mpi: ") + what + " failed");
    }
}

/// Sends and receives the pieces of `links` (tag `tag`), from rank src_of(link) to rank
/// dst_of(link): pack(link) gives a piece to send, expected(link) a received piece's length,
/// and take(link, piece) stores one. Pieces within this rank go straight from pack to take.
template <class Links, class SrcOf, class DstOf, class Pack, class Expected, class Take>
void exchange(rank_state& st, Links const& links, int tag, SrcOf src_of, DstOf dst_of, Pack pack,
              Expected expected, Take take) {
    std::vector<MPI_Request> requests;
    std::vector<std::pair<std::size_t, std::vector<double>>> incoming;
    for (std::size_t i = 0; i < links.size(); ++i) {
        if (dst_of(links[i]) == st.rank && src_of(links[i]) != st.rank) {
            incoming.emplace_back(i, std::vector<double>(expected(links[i])));
        }
    }
    for (auto& [i, piece] : incoming) {
        requests.emplace_back();
        check(MPI_Irecv(piece.data(), int(piece.size()), MPI_DOUBLE, src_of(links[i]), tag,
                        MPI_COMM_WORLD, &requests.back()),
              "MPI_Irecv");
    }
    std::vector<std::vector<double>> outgoing;
    outgoing.reserve(links.size());
    for (auto const& l : links) {
        if (src_of(l) != st.rank) {
            continue;
        }
        if (dst_of(l) == st.rank) {
            take(l, pack(l));
            continue;
        }
        outgoing.push_back(pack(l));
        requests.emplace_back();
        check(MPI_Isend(outgoing.back().data(), int(outgoing.back().size()), MPI_DOUBLE, dst_of(l),
                        tag, MPI_COMM_WORLD, &requests.back()),
              "MPI_Isend");
        ++st.messages;
        st.bytes += outgoing.back().size() * sizeof(double);
    }
    check(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    for (auto& [i, piece] : incoming) {
        take(links[i], piece);
    }
}

double local_rate(rank_state const& st) {
    double rate = 0;
    for (auto const& [i, b] : st.blocks) {
        rate = std::max(rate, amr::rate_of(st.opt.ph, st.opt.s, b.k, b.u));
    }
    return rate;
}

double step(rank_state& st, double dt) {
    auto const& s = st.opt.s;
    auto const& leaves = st.tree.leaves();
    auto src_of = [&](amr::link const& l) { return st.owner[l.src]; };
    auto dst_of = [&](amr::link const& l) { return st.owner[l.dst]; };
    exchange(
        st, st.plan.ghosts, 1, src_of, dst_of,
        [&](amr::link const& l) {
            return amr::pack_ghost(s, leaves[l.dst], l.face, leaves[l.src], st.blocks[l.src].u);
        },
        [&](amr::link const& l) { return amr::ghost_piece_size(s, leaves[l.dst], leaves[l.src]); },
        [&](amr::link const& l, std::vector<double> const& piece) {
            if (!amr::unpack_ghost(s, leaves[l.dst], l.face, leaves[l.src], st.blocks[l.dst].u,
                                   piece)) {
                throw std::runtime_error("amr_mpi: a ghost piece of the wrong length");
            }
        });
    for (auto& [i, b] : st.blocks) {
        amr::compute_fluxes(st.opt.ph, s, b.k, b.u, dt, b.fluxes);
    }
    exchange(
        st, st.plan.fluxes, 2, src_of, dst_of,
        [&](amr::link const& l) {
            return amr::pack_flux(s, leaves[l.dst], l.face, leaves[l.src], st.blocks[l.src].fluxes);
        },
        [&](amr::link const&) { return amr::flux_piece_size(s); },
        [&](amr::link const& l, std::vector<double> const& piece) {
            if (!amr::unpack_flux(s, leaves[l.dst], l.face, leaves[l.src], st.blocks[l.dst].fluxes,
                                  piece)) {
                throw std::runtime_error("amr_mpi: a flux piece of the wrong length");
            }
        });
    double rate = 0;
    for (auto& [i, b] : st.blocks) {
        rate = std::max(rate, amr::update(st.opt.ph, s, b.k, b.u, b.fluxes, dt));
    }
    return rate;
}

std::vector<std::int8_t> all_flags(rank_state& st, std::vector<std::int8_t> const& mine) {
    std::vector<int> counts(std::size_t(st.size)), offsets(std::size_t(st.size));
    int count = int(mine.size());
    check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather");
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
        offsets[r] = total;
        total += counts[r];
    }
    auto all = std::vector<std::int8_t>(std::size_t(total));
    check(MPI_Allgatherv(mine.data(), count, MPI_INT8_T, all.data(), counts.data(), offsets.data(),
                         MPI_INT8_T, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    return all;
}

void install(rank_state& st, amr::tree next, std::map<std::size_t, block> blocks) {
    st.owner = amr::partition(next, st.size);
    st.plan = amr::plan_step(next);
    st.tree = std::move(next);
    st.blocks = std::move(blocks);
}

block make_block(rank_state const& st, amr::key k, std::vector<double> u) {
    return {k, std::move(u), std::vector<double>(amr::layout(st.opt.s.n).flux_values())};
}

void initial_tree(rank_state& st) {
    amr::tree t = amr::initial_tree(st.opt, st.size, st.rank, [&](std::vector<std::int8_t> mine) {
        return all_flags(st, mine);
    });
    auto [first, last] = amr::my_range(t.size(), st.size, st.rank);
    std::map<std::size_t, block> blocks;
    for (std::size_t j = first; j < last; ++j) {
        blocks[j] = make_block(st, t.leaves()[j], amr::initial_subgrid(st.opt, t.leaves()[j]));
    }
    install(st, std::move(t), std::move(blocks));
}

void regrid(rank_state& st) {
    auto const& o = st.opt;
    std::vector<std::int8_t> mine;
    for (auto& [i, b] : st.blocks) {
        mine.push_back(amr::flag_of(o, amr::indicator(o.ph, o.s, b.u)));
    }
    amr::tree next = amr::regrid(st.tree, all_flags(st, mine));
    if (next.leaves() == st.tree.leaves()) {
        return;
    }
    auto next_owner = amr::partition(next, st.size);
    auto transfers = amr::plan_regrid(st.tree, next);
    std::map<std::size_t, block> blocks;
    std::size_t const octant = o.s.n * o.s.n * o.s.n / 8 * amr::nvar;
    exchange(
        st, transfers, 3, [&](amr::transfer const& t) { return st.owner[t.from]; },
        [&](amr::transfer const& t) { return next_owner[t.to]; },
        [&](amr::transfer const& t) {
            auto const& u = st.blocks[t.from].u;
            return t.kind == amr::transfer::copy      ? amr::interior(o.s, u)
                   : t.kind == amr::transfer::prolong ? amr::prolong(o.s, u, t.octant)
                                                      : amr::restrict_to_octant(o.s, u);
        },
        [&](amr::transfer const& t) {
            return t.kind == amr::transfer::restrict_octant ? octant
                                                            : amr::layout(o.s.n).interior_values();
        },
        [&](amr::transfer const& t, std::vector<double> const& piece) {
            auto& b = blocks[t.to];
            if (t.kind != amr::transfer::restrict_octant) {
                b = make_block(st, next.leaves()[t.to], amr::from_interior(o.s, piece));
                return;
            }
            if (b.u.empty()) {
                b = make_block(st, next.leaves()[t.to],
                               std::vector<double>(amr::layout(o.s.n).values(), 0.0));
            }
            amr::place_octant(o.s, b.u, t.octant, piece);
        });
    install(st, std::move(next), std::move(blocks));
}

/// Every leaf's record on rank 0, in Morton order.
std::vector<amr::leaf_record> gather_records(rank_state& st) {
    std::size_t const values = amr::layout(st.opt.s.n).interior_values();
    std::vector<double> mine;
    for (auto& [i, b] : st.blocks) {
        double key_bits;
        std::memcpy(&key_bits, &b.k.bits, sizeof key_bits);
        mine.push_back(key_bits);
        auto in = amr::interior(st.opt.s, b.u);
        mine.insert(mine.end(), in.begin(), in.end());
    }
    int count = int(mine.size());
    std::vector<int> counts(std::size_t(st.size)), offsets(std::size_t(st.size));
    check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD),
          "MPI_Gather");
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
        offsets[r] = total;
        total += counts[r];
    }
    std::vector<double> all(st.rank == 0 ? std::size_t(total) : 0);
    check(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                      MPI_DOUBLE, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<amr::leaf_record> out;
    for (std::size_t at = 0; at < all.size(); at += values + 1) {
        amr::leaf_record r;
        std::memcpy(&r.key, &all[at], sizeof r.key);
        r.cells.assign(all.begin() + std::ptrdiff_t(at + 1),
                       all.begin() + std::ptrdiff_t(at + 1 + values));
        out.push_back(std::move(r));
    }
    return out;
}

int run(int argc, char** argv) {
    rank_state st;
    st.opt = amr::parse_options(argc, argv);
    auto const& o = st.opt;
    if (!o.checkpoint.empty() || !o.restart.empty()) {
        throw std::invalid_argument("amr_mpi: checkpoints are amr_courier's");
    }
    check(MPI_Comm_rank(MPI_COMM_WORLD, &st.rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &st.size), "MPI_Comm_size");
    initial_tree(st);
    amr::totals start{};
    if (o.check) {
        start = amr::conserved_totals(o.s, gather_records(st));
    }
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    auto clock = std::chrono::steady_clock::now();
    std::uint64_t n = 0;
    double t = 0, rate = local_rate(st);
    amr::run_summary r;
    r.driver = "mpi";
    r.localities = st.size;
    auto since = [](auto from) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    };
    while (n < o.steps && t < o.t_end) {
        double global = 0;
        auto reduce_start = std::chrono::steady_clock::now();
        check(MPI_Allreduce(&rate, &global, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
              "MPI_Allreduce");
        r.reduce_seconds += since(reduce_start);
        double dt = o.ph.cfl / global;
        bool last = n + 1 >= o.steps;
        if (t + dt >= o.t_end) {
            dt = o.t_end - t;
            last = true;
        }
        bool regrid_next = !last && (n + 1) % o.regrid_every == 0;
        rate = step(st, dt);
        r.grids_processed += st.tree.size();
        r.levels = std::max(r.levels, st.tree.deepest() + 1);
        ++r.steps;
        ++n;
        t += dt;
        if (last) {
            break;
        }
        if (regrid_next) {
            auto regrid_start = std::chrono::steady_clock::now();
            regrid(st);
            rate = local_rate(st);
            r.regrid_seconds += since(regrid_start);
        }
    }
    double seconds = since(clock);
    std::uint64_t traffic[2] = {st.messages, st.bytes}, sums[2] = {0, 0};
    check(MPI_Reduce(&seconds, &r.seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD),
          "MPI_Reduce");
    check(MPI_Reduce(traffic, sums, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    r.time = t;
    r.messages = sums[0];
    r.bytes = sums[1];
    auto all = gather_records(st);
    int rc = st.rank == 0 ? amr::finish_run(r, o, st.tree, start, all, n) : 0;
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rc = 1;
    try {
        rc = run(argc, argv);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "%s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return rc;
}
