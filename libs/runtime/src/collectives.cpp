// SPDX-License-Identifier: BSL-1.0
// The bookkeeping behind collectives: per generation, the contributions gathered on the root
// and the promised result on every other locality. Either side may arrive first.
#include "locality_state.hpp"

#include <courier/runtime/collectives.hpp>

#include <map>
#include <mutex>

namespace courier::collectives::detail {

namespace {

using courier::detail::collective_table;

collective_table& table() {
    return courier::detail::here().collectives;
}

collective_table::slot& get(collective_table& t, std::uint64_t gen) {
    auto& s = t.slots[gen];
    if (s.parts.empty()) {
        s.parts.resize(get_num_localities());
    }
    return s;
}

// Root side: contribution `part` of locality `rank` for `gen`. Completes the gather when last.
void arrive(std::uint64_t gen, std::uint32_t rank, bytes part) {
    std::optional<promise<std::vector<bytes>>> done;
    std::vector<bytes> all;
    auto& t = table();
    {
        std::lock_guard g(t.mutex);
        auto& s = get(t, gen);
        if (rank >= s.parts.size() || s.parts[rank]) {
            throw std::invalid_argument("collective generation " + std::to_string(gen) +
                                        ": duplicate or invalid contribution from locality " +
                                        std::to_string(rank));
        }
        s.parts[rank] = std::move(part);
        if (++s.arrived == s.parts.size() && s.all) {
            for (auto& p : s.parts) {
                all.push_back(std::move(*p));
            }
            done = std::move(s.all);
            t.slots.erase(gen);
        }
    }
    if (done) {
        done->set_value(std::move(all));
    }
}

} // namespace
} // namespace courier::collectives::detail

void courier_collective_contribute(std::uint64_t gen, std::uint32_t rank,
                                   courier::collectives::detail::bytes part) {
    courier::collectives::detail::arrive(gen, rank, std::move(part));
}
COURIER_PLAIN_ACTION(courier_collective_contribute, courier_collective_contribute_action);

void courier_collective_result(std::uint64_t gen, courier::collectives::detail::bytes result) {
    using namespace courier::collectives::detail;
    std::optional<courier::promise<bytes>> p;
    auto& t = table();
    {
        std::lock_guard g(t.mutex);
        auto& s = get(t, gen);
        if (s.result) {
            p = std::move(s.result);
            t.slots.erase(gen);
        } else {
            s.early_result = std::move(result);
            return;
        }
    }
    p->set_value(std::move(result));
}
COURIER_PLAIN_ACTION(courier_collective_result, courier_collective_result_action);

namespace courier::collectives::detail {

std::uint64_t next_generation() {
    return table().generation.fetch_add(1);
}

future<std::vector<bytes>> gather_at_root(std::uint64_t gen, bytes mine) {
    future<std::vector<bytes>> f;
    auto& t = table();
    {
        std::lock_guard g(t.mutex);
        auto& s = get(t, gen);
        s.all.emplace();
        f = s.all->get_future();
    }
    arrive(gen, 0, std::move(mine));
    return f;
}

future<bytes> contribute(std::uint64_t gen, bytes mine) {
    auto f = await_result(gen);
    courier::async<courier_collective_contribute_action>(find_all_localities()[0], gen,
                                                         get_locality_id(), std::move(mine))
        .get();
    return f;
}

void publish(std::uint64_t gen, bytes const& result) {
    std::vector<future<void>> fs;
    for (auto const& loc : find_remote_localities()) {
        fs.push_back(courier::async<courier_collective_result_action>(loc, gen, result));
    }
    for (auto& f : fs) {
        f.get();
    }
}

future<bytes> await_result(std::uint64_t gen) {
    auto& t = table();
    std::lock_guard g(t.mutex);
    auto& s = get(t, gen);
    if (s.early_result) {
        auto r = std::move(*s.early_result);
        t.slots.erase(gen);
        return make_ready_future(std::move(r));
    }
    s.result.emplace();
    return s.result->get_future();
}

} // namespace courier::collectives::detail
