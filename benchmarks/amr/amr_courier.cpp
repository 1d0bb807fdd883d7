// SPDX-License-Identifier: BSL-1.0
// The AMR mini-app on Courier: every subgrid is a component, placed along the Morton curve;
// a subgrid sends its ghost faces (and, next to a coarser leaf, its face fluxes) to its
// neighbours' ids as serialize_buffer arguments of actions, and a step is a task per subgrid
// that waits only for its own messages. The global time step is an all_reduce whose result the
// next step's tasks wait for while the ghost faces are already travelling. Every few steps the
// localities exchange refinement flags, derive the same new tree, and move the subgrids so
// that each locality holds a contiguous, equal piece of the curve.
//
//   courier-run -n 4 build/bin/amr_courier --courier:spmd=1 --max-level=2 --t-end=0.02 --check
//
// Options: options.hpp. Runs in SPMD mode (--courier:spmd=1). Checkpoints are Courier
// checkpoint files holding the octree as a pointer structure (checkpoint.hpp).
#include "checkpoint.hpp"
#include "options.hpp"
#include "results.hpp"

#include <courier/courier.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

struct subgrid;

namespace {

using buffer = courier::serialize_buffer<double>;

buffer to_buffer(std::vector<double> v) {
    auto owner = std::make_shared<std::vector<double>>(std::move(v));
    return buffer(std::shared_ptr<void const>(owner), owner->data(), owner->size());
}

/// The messages of one kind a subgrid receives, by step: take(step) suspends the calling task
/// until all `expected` have arrived. Messages of the next step may arrive while this one runs.
class mailbox {
public:
    /// Set before any neighbour can send under a new tree (install() does it before the ids
    /// of the new tree are exchanged).
    void expect(int count) {
        std::lock_guard lock(mutex_);
        expected_ = std::size_t(count);
    }

    void put(std::uint64_t step, std::uint32_t slot, buffer data) {
        std::lock_guard lock(mutex_);
        auto& e = pending_[step];
        if (e.pieces.size() == expected_) {
            throw std::runtime_error("amr: more messages for a step than its plan has");
        }
        e.pieces.emplace_back(slot, std::move(data));
        if (e.pieces.size() == expected_) {
            e.complete.set_value();
        }
    }

    std::vector<std::pair<std::uint32_t, buffer>> take(std::uint64_t step) {
        courier::future<void> ready;
        {
            std::lock_guard lock(mutex_);
            if (expected_ == 0) {
                return {};
            }
            ready = pending_[step].complete.get_future();
        }
        ready.get();
        std::lock_guard lock(mutex_);
        auto pieces = std::move(pending_[step].pieces);
        pending_.erase(step);
        return pieces;
    }

private:
    struct entry {
        std::vector<std::pair<std::uint32_t, buffer>> pieces;
        courier::promise<void> complete;
    };
    std::mutex mutex_;
    std::size_t expected_ = 0;
    std::map<std::uint64_t, entry> pending_;
};

/// This locality's view of the run: the whole tree, who owns which leaf, every leaf's id, and
/// the leaves held here.
struct domain {
    amr::run_options opt;
    std::uint32_t here = 0, localities = 1;
    amr::tree tree;
    std::vector<int> owner;
    std::vector<courier::id_type> ids;
    amr::step_plan plan;
    std::unordered_map<std::uint64_t, subgrid*> local;
    std::mutex local_mutex;

    // Regrid pieces that arrived for this locality, by new leaf.
    std::mutex pieces_mutex;
    std::map<std::uint64_t, std::vector<std::pair<int, buffer>>> pieces;
    std::size_t pieces_arrived = 0, pieces_expected = 0;
    std::unique_ptr<courier::promise<void>> pieces_complete;
};

domain* the_domain = nullptr;

} // namespace

/// One subgrid: its cells with ghosts, its face fluxes, and its messages.
struct subgrid : courier::component_base<subgrid> {
    subgrid() = default;
    subgrid(std::uint64_t key_bits, std::vector<double> cells) : k{key_bits}, u(std::move(cells)) {
        fluxes.resize(amr::layout(the_domain->opt.s.n).flux_values());
        std::lock_guard lock(the_domain->local_mutex);
        the_domain->local[k.bits] = this;
    }
    ~subgrid() = default; // install() drops it from domain::local before the last id goes
    subgrid(subgrid const&) = delete;
    subgrid& operator=(subgrid const&) = delete;

    void ghost(std::uint64_t step, std::uint32_t slot, buffer data) {
        ghosts.put(step, slot, std::move(data));
    }
    void flux(std::uint64_t step, std::uint32_t slot, buffer data) {
        flux_in.put(step, slot, std::move(data));
    }
    COURIER_COMPONENT_ACTION(subgrid, ghost, ghost_action);
    COURIER_COMPONENT_ACTION(subgrid, flux, flux_action);

    /// Sends this subgrid's ghost pieces of step n to its neighbours.
    void send_ghosts(std::uint64_t n) {
        domain& d = *the_domain;
        for (amr::link const& l : out_ghosts) {
            amr::key dst = d.tree.leaves()[l.dst];
            buffer piece(amr::ghost_piece_size(d.opt.s, dst, k));
            amr::pack_ghost(d.opt.s, dst, l.face, k, u, piece.data());
            deliver<ghost_action>(l, n, std::move(piece), &subgrid::ghost);
        }
    }

    /// One step: ghosts in, fluxes, flux corrections out and in, update, ghosts of the next
    /// step out. Returns the rate for the next time step.
    double step(std::uint64_t n, double dt, bool send_next) {
        domain& d = *the_domain;
        auto const& s = d.opt.s;
        for (auto& [slot, data] : ghosts.take(n)) {
            amr::link const& l = in_ghosts.at(slot);
            if (!amr::unpack_ghost(s, k, l.face, d.tree.leaves()[l.src], u, data)) {
                throw std::runtime_error("amr: a ghost piece of the wrong length");
            }
        }
        amr::compute_fluxes(d.opt.ph, s, k, u, dt, fluxes);
        for (amr::link const& l : out_fluxes) {
            buffer piece(amr::flux_piece_size(s));
            amr::pack_flux(s, d.tree.leaves()[l.dst], l.face, k, fluxes, piece.data());
            deliver<flux_action>(l, n, std::move(piece), &subgrid::flux);
        }
        for (auto& [slot, data] : flux_in.take(n)) {
            amr::link const& l = in_fluxes.at(slot);
            if (!amr::unpack_flux(s, k, l.face, d.tree.leaves()[l.src], fluxes, data)) {
                throw std::runtime_error("amr: a flux piece of the wrong length");
            }
        }
        double rate = amr::update(d.opt.ph, s, k, u, fluxes, dt);
        if (send_next) {
            send_ghosts(n + 1);
        }
        return rate;
    }

    amr::key k;
    std::vector<double> u, fluxes;
    std::vector<amr::link> in_ghosts, out_ghosts, in_fluxes, out_fluxes;
    mailbox ghosts, flux_in;

private:
    /// To a subgrid of this locality directly, to another locality's through its id (the
    /// piece is packed into its message buffer: one allocation, from the buffer pool).
    template <class Action>
    void deliver(amr::link const& l, std::uint64_t n, buffer piece,
                 void (subgrid::*local_call)(std::uint64_t, std::uint32_t, buffer)) {
        domain& d = *the_domain;
        if (std::uint32_t(d.owner[l.dst]) == d.here) {
            subgrid* target = d.local.at(d.tree.leaves()[l.dst].bits);
            (target->*local_call)(n, std::uint32_t(l.slot), std::move(piece));
        } else {
            courier::post<Action>(d.ids[l.dst], n, std::uint32_t(l.slot), std::move(piece));
        }
    }
};
COURIER_REGISTER_COMPONENT(subgrid);

namespace {

/// A regrid piece for the new leaf `key_bits` (part: octant, or -1 for a whole subgrid).
void accept_piece(std::uint64_t key_bits, int part, buffer data) {
    domain& d = *the_domain;
    std::lock_guard lock(d.pieces_mutex);
    d.pieces[key_bits].emplace_back(part, std::move(data));
    if (++d.pieces_arrived == d.pieces_expected && d.pieces_complete) {
        d.pieces_complete->set_value();
    }
}
void deliver_piece(std::uint64_t key_bits, int part, buffer data) {
    accept_piece(key_bits, part, std::move(data));
}
COURIER_PLAIN_ACTION(deliver_piece, deliver_piece_action);

double max_of(double a, double b) {
    return a > b ? a : b;
}

std::vector<subgrid*> local_subgrids(domain& d) {
    std::vector<subgrid*> out;
    auto [first, last] = amr::my_range(d.tree.size(), int(d.localities), int(d.here));
    for (std::size_t i = first; i < last; ++i) {
        out.push_back(d.local.at(d.tree.leaves()[i].bits));
    }
    return out;
}

/// Makes `next` the tree: links every local subgrid to its messages.
void wire(domain& d) {
    for (subgrid* g : local_subgrids(d)) {
        g->in_ghosts.clear();
        g->out_ghosts.clear();
        g->in_fluxes.clear();
        g->out_fluxes.clear();
        std::size_t i = d.tree.position(g->k);
        g->in_ghosts.resize(std::size_t(d.plan.ghosts_in[i]));
        g->in_fluxes.resize(std::size_t(d.plan.fluxes_in[i]));
    }
    auto mine = [&](std::size_t leaf) { return std::uint32_t(d.owner[leaf]) == d.here; };
    auto at = [&](std::size_t leaf) { return d.local.at(d.tree.leaves()[leaf].bits); };
    for (amr::link const& l : d.plan.ghosts) {
        if (mine(l.src)) {
            at(l.src)->out_ghosts.push_back(l);
        }
        if (mine(l.dst)) {
            at(l.dst)->in_ghosts[std::size_t(l.slot)] = l;
        }
    }
    for (amr::link const& l : d.plan.fluxes) {
        if (mine(l.src)) {
            at(l.src)->out_fluxes.push_back(l);
        }
        if (mine(l.dst)) {
            at(l.dst)->in_fluxes[std::size_t(l.slot)] = l;
        }
    }
}

/// Creates this locality's subgrids of `next` from `cells` (by leaf position), keeping the
/// subgrids in `kept`, then exchanges every subgrid's id and makes `next` the tree.
void install(domain& d, amr::tree next, std::map<std::size_t, std::vector<double>> cells,
             std::map<std::size_t, courier::id_type> kept) {
    auto owner = amr::partition(next, int(d.localities));
    auto [first, last] = amr::my_range(next.size(), int(d.localities), int(d.here));
    std::vector<courier::future<courier::id_type>> created;
    for (std::size_t j = first; j < last; ++j) {
        if (!kept.contains(j)) {
            created.push_back(courier::new_<subgrid>(courier::find_here(), next.leaves()[j].bits,
                                                     std::move(cells[j])));
        }
    }
    std::vector<courier::id_type> mine;
    auto made = created.begin();
    for (std::size_t j = first; j < last; ++j) {
        mine.push_back(kept.contains(j) ? kept[j] : (made++)->get());
    }
    // Every subgrid here learns its message counts before any neighbour can send under the new
    // tree: no locality sends before it has all ids, which needs ours.
    auto plan = amr::plan_step(next);
    for (std::size_t j = first; j < last; ++j) {
        subgrid* g = d.local.at(next.leaves()[j].bits);
        g->ghosts.expect(plan.ghosts_in[j]);
        g->flux_in.expect(plan.fluxes_in[j]);
    }
    auto all = courier::collectives::all_gather(std::move(mine));
    {
        std::lock_guard lock(d.local_mutex);
        std::unordered_map<std::uint64_t, subgrid*> current;
        for (std::size_t j = first; j < last; ++j) {
            current[next.leaves()[j].bits] = d.local.at(next.leaves()[j].bits);
        }
        d.local = std::move(current);
    }
    d.ids.clear();
    for (auto& part : all) {
        for (auto& id : part) {
            d.ids.push_back(std::move(id));
        }
    }
    d.tree = std::move(next);
    d.owner = std::move(owner);
    d.plan = std::move(plan);
    wire(d);
}

/// Every locality's refinement flags, in locality order (which is Morton order).
std::vector<std::int8_t> all_flags(std::vector<std::int8_t> mine) {
    std::vector<std::int8_t> flags;
    for (auto& part : courier::collectives::all_gather(std::move(mine))) {
        flags.insert(flags.end(), part.begin(), part.end());
    }
    return flags;
}

/// The initial tree, its leaves here in the initial state.
void initial_tree(domain& d) {
    amr::tree t = amr::initial_tree(d.opt, int(d.localities), int(d.here), all_flags);
    auto [first, last] = amr::my_range(t.size(), int(d.localities), int(d.here));
    std::map<std::size_t, std::vector<double>> cells;
    for (std::size_t j = first; j < last; ++j) {
        cells[j] = amr::initial_subgrid(d.opt, t.leaves()[j]);
    }
    install(d, std::move(t), std::move(cells), {});
}

/// Refinement flags from every locality, the new tree, and the moves that rebalance it.
void regrid(domain& d) {
    auto const& o = d.opt;
    auto locals = local_subgrids(d);
    std::vector<std::int8_t> mine;
    for (subgrid* g : locals) {
        mine.push_back(amr::flag_of(o, amr::indicator(o.ph, o.s, g->u)));
    }
    amr::tree next = amr::regrid(d.tree, all_flags(std::move(mine)));
    if (next.leaves() == d.tree.leaves()) {
        return;
    }
    auto next_owner = amr::partition(next, int(d.localities));
    auto transfers = amr::plan_regrid(d.tree, next);
    auto here = [&](int owner) { return std::uint32_t(owner) == d.here; };
    std::map<std::size_t, courier::id_type> kept;
    std::size_t expected = 0;
    for (auto const& t : transfers) {
        bool from_here = here(d.owner[t.from]), to_here = here(next_owner[t.to]);
        if (t.kind == amr::transfer::copy && from_here && to_here) {
            kept[t.to] = d.ids[t.from];
        } else if (to_here) {
            ++expected;
        }
    }
    {
        std::lock_guard lock(d.pieces_mutex);
        d.pieces_expected = expected;
        d.pieces_complete = std::make_unique<courier::promise<void>>();
        if (d.pieces_arrived == expected) {
            d.pieces_complete->set_value();
        }
    }
    auto localities = courier::find_all_localities();
    for (auto const& t : transfers) {
        if (!here(d.owner[t.from]) || kept.contains(t.to)) {
            continue;
        }
        auto const& u = d.local.at(d.tree.leaves()[t.from].bits)->u;
        std::vector<double> piece = t.kind == amr::transfer::copy ? amr::interior(o.s, u)
                                    : t.kind == amr::transfer::prolong
                                        ? amr::prolong(o.s, u, t.octant)
                                        : amr::restrict_to_octant(o.s, u);
        int part = t.kind == amr::transfer::restrict_octant ? t.octant : -1;
        std::uint64_t key_bits = next.leaves()[t.to].bits;
        if (here(next_owner[t.to])) {
            accept_piece(key_bits, part, to_buffer(std::move(piece)));
        } else {
            courier::post<deliver_piece_action>(localities[std::size_t(next_owner[t.to])], key_bits,
                                                part, to_buffer(std::move(piece)));
        }
    }
    d.pieces_complete->get_future().get();
    std::map<std::size_t, std::vector<double>> cells;
    {
        std::lock_guard lock(d.pieces_mutex);
        for (auto& [key_bits, parts] : d.pieces) {
            std::size_t j = next.position(amr::key{key_bits});
            if (parts.size() == 1 && parts.front().first < 0) {
                cells[j] = amr::from_interior(o.s, parts.front().second);
                continue;
            }
            std::vector<double> u(amr::layout(o.s.n).values(), 0.0);
            for (auto& [octant, data] : parts) {
                amr::place_octant(o.s, u, octant, data);
            }
            cells[j] = std::move(u);
        }
        d.pieces.clear();
        d.pieces_arrived = 0;
        d.pieces_expected = 0;
        d.pieces_complete.reset();
    }
    install(d, std::move(next), std::move(cells), std::move(kept));
}

std::vector<amr::leaf_record> local_records(domain& d) {
    std::vector<amr::leaf_record> out;
    for (subgrid* g : local_subgrids(d)) {
        out.push_back({g->k.bits, amr::interior(d.opt.s, g->u)});
    }
    return out;
}

/// Every leaf's record on locality 0 (empty elsewhere), in Morton order.
std::vector<amr::leaf_record> gather_records(domain& d) {
    std::vector<amr::leaf_record> all;
    for (auto& part : courier::collectives::gather(local_records(d), 0)) {
        for (auto& r : part) {
            all.push_back(std::move(r));
        }
    }
    return all;
}

void send_all_ghosts(domain& d, std::uint64_t n) {
    for (subgrid* g : local_subgrids(d)) {
        g->send_ghosts(n);
    }
}

double local_rate(domain& d) {
    double rate = 0.0;
    for (subgrid* g : local_subgrids(d)) {
        rate = std::max(rate, amr::rate_of(d.opt.ph, d.opt.s, g->k, g->u));
    }
    return rate;
}

} // namespace

int courier_main(int argc, char** argv) {
    domain d;
    d.opt = amr::parse_options(argc, argv);
    d.here = courier::get_locality_id();
    d.localities = courier::get_num_localities();
    the_domain = &d;
    auto const& o = d.opt;
    std::uint64_t n = 0;
    double t = 0.0;
    if (!o.restart.empty()) {
        amr::checkpoint_state state = amr::load_checkpoint(o.restart, o.s);
        n = state.step;
        t = state.time;
        std::vector<amr::key> keys;
        for (auto const& r : state.leaves) {
            keys.push_back(amr::key{r.key});
        }
        amr::tree tree(o.s, std::move(keys));
        auto [first, last] = amr::my_range(tree.size(), int(d.localities), int(d.here));
        std::map<std::size_t, std::vector<double>> cells;
        for (auto const& r : state.leaves) {
            std::size_t j = tree.position(amr::key{r.key});
            if (j >= first && j < last) {
                cells[j] = amr::from_interior(o.s, r.cells);
            }
        }
        install(d, std::move(tree), std::move(cells), {});
    } else {
        initial_tree(d);
    }
    amr::totals start{};
    if (o.check) {
        auto all = gather_records(d);
        start = amr::conserved_totals(o.s, all);
    }
    auto before = courier::get_parcelport_statistics();
    // Bytes sent as pointer or rma chunks (never copied into a message): the runtime's counter.
    // The transport's rendezvous bytes would also count a shm outbox's copies, which on shm
    // carry the index of a large eager message to a busy peer even with zero copy off.
    auto zero_copy_sent = [] {
        return static_cast<std::uint64_t>(
            courier::get_counters(courier::find_here())["/parcels/bytes/zero-copy"]);
    };
    std::uint64_t const zero_copy_before = zero_copy_sent();
    auto clock = std::chrono::steady_clock::now();
    double rate = local_rate(d);
    amr::run_summary r;
    r.driver = "courier";
    r.localities = int(d.localities);
    send_all_ghosts(d, n);
    auto since = [](auto from) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    };
    while (n < o.steps && t < o.t_end) {
        auto reduce_start = std::chrono::steady_clock::now();
        double dt = o.ph.cfl / courier::collectives::all_reduce(rate, max_of);
        r.reduce_seconds += since(reduce_start);
        bool last = n + 1 >= o.steps;
        if (t + dt >= o.t_end) {
            dt = o.t_end - t;
            last = true;
        }
        bool regrid_next = !last && (n + 1) % o.regrid_every == 0;
        std::vector<courier::future<double>> rates;
        for (subgrid* g : local_subgrids(d)) {
            rates.push_back(courier::async(
                [g, n, dt, send = !last && !regrid_next] { return g->step(n, dt, send); }));
        }
        rate = 0.0;
        for (auto& f : rates) {
            rate = std::max(rate, f.get());
        }
        r.grids_processed += d.tree.size();
        r.levels = std::max(r.levels, d.tree.deepest() + 1);
        ++r.steps;
        ++n;
        t += dt;
        if (last) {
            break;
        }
        if (regrid_next) {
            auto regrid_start = std::chrono::steady_clock::now();
            regrid(d);
            rate = local_rate(d);
            send_all_ghosts(d, n);
            r.regrid_seconds += since(regrid_start);
        }
        if (!o.checkpoint.empty() && n == o.checkpoint_at) {
            auto all = gather_records(d);
            if (d.here == 0) {
                amr::save_checkpoint(o.checkpoint, o.s, n, t, all);
                std::printf("amr: checkpoint of step %llu (t %.17g) in %s\n",
                            static_cast<unsigned long long>(n), t, o.checkpoint.c_str());
            }
        }
    }
    r.seconds = since(clock);
    r.time = t;
    auto after = courier::get_parcelport_statistics();
    // Bytes on the wire: eager messages, and what receivers read by RMA or copied out of a
    // sender's shm outbox.
    std::uint64_t read = after.rendezvous_bytes_received() - before.rendezvous_bytes_received();
    std::uint64_t sums[3] = {after.messages_sent - before.messages_sent,
                             after.eager_bytes_sent - before.eager_bytes_sent + read,
                             zero_copy_sent() - zero_copy_before};
    for (auto& v : sums) {
        v = courier::collectives::all_reduce(
            v, [](std::uint64_t a, std::uint64_t b) { return a + b; });
    }
    r.seconds = courier::collectives::all_reduce(r.seconds, max_of);
    r.messages = sums[0];
    r.bytes = sums[1];
    r.zero_copy_bytes = sums[2];
    auto all = gather_records(d);
    int rc = d.here == 0 ? amr::finish_run(r, o, d.tree, start, all, n) : 0;
    courier::collectives::barrier();
    the_domain = nullptr;
    courier::finalize();
    return rc;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
