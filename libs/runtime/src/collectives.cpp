// SPDX-License-Identifier: BSL-1.0
// The mailbox behind the collectives: a message and its receive meet in a slot keyed by
// (generation, round, source); whichever comes first creates it, the second takes it out.
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"

#include <courier/runtime/collectives.hpp>

#include <fmt/format.h>

namespace courier::collectives::detail {

namespace {

// Messages that came before their receive, at most: a peer can run ahead of this locality
// (a leaf of a gather tree finishes without waiting), but not without bound.
constexpr std::size_t max_early_messages = std::size_t{1} << 20;

courier::detail::collective_table& table() {
    return courier::detail::here().collectives;
}

std::exception_ptr failure(std::uint32_t rank) {
    return std::make_exception_ptr(
        network_error(fmt::format("courier: collective failed: locality {} has failed", rank)));
}

} // namespace

std::shared_ptr<slot_base> match(key const& k, bool arriving,
                                 courier::detail::function_ref<std::shared_ptr<slot_base>()> make) {
    auto& t = table();
    std::unique_lock lk(t.mutex);
    if (t.failed) {
        if (arriving) {
            return nullptr;
        }
        std::uint32_t rank = *t.failed;
        lk.unlock();
        std::shared_ptr<slot_base> fresh = make();
        fresh->fail(failure(rank));
        return fresh;
    }
    auto it = t.slots.find(k);
    if (it == t.slots.end()) {
        if (arriving && t.early >= max_early_messages) {
            lk.unlock();
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "dropped a collective message from locality {} (generation "
                                   "{}): {} messages already wait for their receive",
                                   k.source, k.generation, max_early_messages);
            return nullptr;
        }
        std::shared_ptr<slot_base> fresh = make();
        t.early += arriving ? 1 : 0;
        t.slots.emplace(k, fresh);
        return fresh;
    }
    if (it->second->arrived == arriving) {
        lk.unlock();
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "dropped a duplicate collective message from locality {} "
                               "(generation {}, round {})",
                               k.source, k.generation, k.step);
        if (!arriving) { // two receives of one message: a bug in an algorithm
            throw std::logic_error("courier: a collective message was received twice");
        }
        return nullptr;
    }
    std::shared_ptr<slot_base> s = std::move(it->second);
    t.early -= s->arrived ? 1 : 0;
    t.slots.erase(it);
    return s;
}

std::uint64_t next_generation() {
    auto& t = table();
    {
        std::lock_guard lk(t.mutex);
        if (t.failed) {
            std::rethrow_exception(failure(*t.failed));
        }
    }
    return t.generation.fetch_add(1, std::memory_order_relaxed);
}

id_type locality(std::uint32_t rank) {
    return courier::detail::locality_id(rank);
}

std::exception_ptr type_mismatch(key const& k, std::type_info const& expected,
                                 std::type_info const& got) {
    return std::make_exception_ptr(std::runtime_error(fmt::format(
        "courier: collective generation {} round {} from locality {}: expected a {}, got a {} "
        "(do all localities call the same collectives in the same order?)",
        k.generation, k.step, k.source, serialization::detail::demangle(expected.name()),
        serialization::detail::demangle(got.name()))));
}

} // namespace courier::collectives::detail

namespace courier::detail {

void collectives_peer_failed(locality_state& st, std::uint32_t rank) {
    std::vector<std::shared_ptr<collectives::detail::slot_base>> waiting;
    {
        std::lock_guard lk(st.collectives.mutex);
        if (st.collectives.failed) {
            return;
        }
        st.collectives.failed = rank;
        for (auto& [k, s] : st.collectives.slots) {
            if (!s->arrived) {
                waiting.push_back(std::move(s));
            }
        }
        st.collectives.slots.clear();
        st.collectives.early = 0;
    }
    for (auto& s : waiting) {
        s->fail(collectives::detail::failure(rank));
    }
}

} // namespace courier::detail
