// SPDX-License-Identifier: BSL-1.0
// Components: objects that live on one locality and are named by a global id, kept alive by
// distributed reference counting (credits split between copies of an id and returned when a
// copy dies).
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"

#include <courier/runtime/components.hpp>
#include <courier/runtime/init.hpp>

#include <mutex>
#include <unordered_map>

namespace courier::detail {
void component_incref(std::uint64_t lsb, std::uint64_t credits);
void component_decref(std::uint64_t lsb, std::uint64_t credits);
} // namespace courier::detail

COURIER_PLAIN_ACTION(courier::detail::component_incref, courier_component_incref_action);
COURIER_PLAIN_ACTION(courier::detail::component_decref, courier_component_decref_action);

namespace courier::detail {

namespace {
constexpr std::uint64_t initial_credits = std::uint64_t{1} << 48;

} // namespace

id_type register_component(std::shared_ptr<void> obj, std::type_info const& type) {
    std::uint64_t lsb = here().components.next.fetch_add(1);
    {
        std::lock_guard lk(here().components.mutex);
        here().components.entries.emplace(
            lsb, component_table::entry{std::move(obj), &type, initial_credits});
        here().components.open.store(true);
    }
    std::uint64_t msb = locality_msb(get_locality_id()) | component_bit;
    return id_type{msb, lsb, std::make_shared<gid_ref>(msb, lsb, initial_credits)};
}

id_type new_reference(id_type const& id) {
    {
        std::lock_guard lk(here().components.mutex);
        auto it = here().components.entries.find(id.lsb);
        if (it == here().components.entries.end()) {
            return id_type{id.msb, id.lsb, nullptr};
        }
        it->second.outstanding += initial_credits;
    }
    return id_type{id.msb, id.lsb, std::make_shared<gid_ref>(id.msb, id.lsb, initial_credits)};
}

void component_incref(std::uint64_t lsb, std::uint64_t credits) {
    std::lock_guard lk(here().components.mutex);
    auto it = here().components.entries.find(lsb);
    if (it == here().components.entries.end()) {
        throw std::invalid_argument("no component " + std::to_string(lsb) + " on locality " +
                                    std::to_string(get_locality_id()) + " to add credits to");
    }
    it->second.outstanding += credits;
}

void component_decref(std::uint64_t lsb, std::uint64_t credits) {
    std::shared_ptr<void> dying; // destroyed outside the lock (its destructor may do anything)
    {
        std::lock_guard lk(here().components.mutex);
        auto it = here().components.entries.find(lsb);
        if (it == here().components.entries.end()) {
            if (here().components.open.load()) {
                log(log_level::error, "credits returned for unknown component {}", lsb);
            }
            return;
        }
        if (credits >= it->second.outstanding) {
            if (credits > it->second.outstanding) {
                log(log_level::error, "component {}: {} credits returned, {} outstanding", lsb,
                    credits, it->second.outstanding);
            }
            dying = std::move(it->second.obj);
            here().components.entries.erase(it);
        } else {
            it->second.outstanding -= credits;
        }
    }
}

gid_ref::~gid_ref() {
    std::uint64_t c = credits.load();
    if (c == 0 || !here().components.open.load() || !runtime_running()) {
        return; // after shutdown every component is gone anyway
    }
    try {
        std::uint32_t owner = owner_of(msb);
        if (owner == get_locality_id()) {
            component_decref(lsb, c);
        } else if (owner < get_num_localities()) {
            post<courier_component_decref_action>(find_all_localities()[owner], lsb, c);
        }
    } catch (std::exception const& e) {
        log(log_level::warn, "could not return {} credits of component {}: {}", c, lsb, e.what());
    }
}

std::uint64_t gid_ref::split() {
    std::uint64_t c = credits.load();
    for (;;) {
        if (c >= 2) {
            if (credits.compare_exchange_weak(c, c - c / 2)) {
                return c / 2;
            }
            continue;
        }
        // One credit left (it keeps the component alive meanwhile): ask its locality for more.
        std::uint32_t owner = owner_of(msb);
        if (owner == get_locality_id()) {
            component_incref(lsb, initial_credits);
        } else {
            async<courier_component_incref_action>(find_all_localities()[owner], lsb,
                                                   initial_credits)
                .get();
        }
        c = credits.fetch_add(initial_credits) + initial_credits;
    }
}

std::shared_ptr<void> find_component(std::uint64_t lsb, std::type_info const& type) {
    std::lock_guard lk(here().components.mutex);
    auto it = here().components.entries.find(lsb);
    if (it == here().components.entries.end()) {
        throw std::invalid_argument("no component " + std::to_string(lsb) + " on locality " +
                                    std::to_string(get_locality_id()));
    }
    if (*it->second.type != type) {
        throw std::invalid_argument("component " + std::to_string(lsb) + " is a " +
                                    serialization::detail::demangle(it->second.type->name()) +
                                    ", not a " + serialization::detail::demangle(type.name()));
    }
    return it->second.obj;
}

void clear_components(locality_state& st) {
    std::unordered_map<std::uint64_t, component_table::entry> all;
    {
        std::lock_guard lk(st.components.mutex);
        st.components.open.store(false);
        all.swap(st.components.entries);
    }
    // destroyed here, outside the lock
}

void clear_components() {
    clear_components(here());
}

} // namespace courier::detail

namespace courier {
std::size_t get_component_count() {
    std::lock_guard lk(detail::here().components.mutex);
    return detail::here().components.entries.size();
}
} // namespace courier
