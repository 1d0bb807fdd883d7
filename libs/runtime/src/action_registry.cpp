// SPDX-License-Identifier: BSL-1.0
// The registry of actions by wire id: registration at static initialization, lock-free lookup
// for every incoming request (wire_id_table.hpp).
#include "locality_state.hpp"
#include "log.hpp"
#include "wire_id_table.hpp"

#include <courier/runtime/actions.hpp>

#include <cstdlib>
#include <string_view>

namespace courier::detail {

namespace {

using action_registry = wire_id_table<action_entry>;

action_registry& actions() {
    static action_registry r;
    return r;
}

} // namespace

action_entry find_action(std::uint64_t id) noexcept {
    action_entry const* e = actions().find(id);
    return e != nullptr ? *e : action_entry{};
}

bool register_action(std::uint64_t id, char const* name, action_invoker invoke, flat_invoker flat) {
    if (id == 0) {
        log(log_level::error, "action '{}' hashes to the reserved id 0; rename it", name);
        std::abort();
    }
    action_entry const* there = nullptr;
    switch (actions().add(id, action_entry{name, invoke, flat}, &there)) {
    case action_registry::added::added:
        break;
    case action_registry::added::present:
        if (std::string_view(there->name) != name) {
            log(log_level::error, "action ids of '{}' and '{}' collide; rename one", there->name,
                name);
            std::abort();
        }
        break; // the same action registered again (another translation unit)
    case action_registry::added::full:
        log(log_level::error, "more than {} actions registered (adding '{}')",
            action_registry::max_entries, name);
        std::abort();
    }
    return true;
}

char const* registered_action_name(std::uint64_t id) noexcept {
    return find_action(id).name;
}

} // namespace courier::detail
