// SPDX-License-Identifier: BSL-1.0
#include "topology.hpp"

#include "log.hpp"

#include <hwloc.h>

namespace courier::detail {

void* load_topology() {
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0) {
        return nullptr;
    }
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return nullptr;
    }
    return t;
}

void free_topology(void* topology) noexcept {
    if (topology != nullptr) {
        hwloc_topology_destroy(static_cast<hwloc_topology_t>(topology));
    }
}

namespace {
hwloc_obj_type_t unit_type(hwloc_topology_t t) {
    return hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}
} // namespace

std::size_t available_cores(void* topology) noexcept {
    auto t = static_cast<hwloc_topology_t>(topology);
    if (t == nullptr) {
        return 1;
    }
    int n = hwloc_get_nbobjs_by_type(t, unit_type(t));
    return n > 0 ? static_cast<std::size_t>(n) : 1;
}

void bind_current_thread(void* topology, std::size_t index) noexcept {
    auto t = static_cast<hwloc_topology_t>(topology);
    if (t == nullptr) {
        return;
    }
    std::size_t n = available_cores(topology);
    hwloc_obj_t core = hwloc_get_obj_by_type(t, unit_type(t), static_cast<unsigned>(index % n));
    if (core == nullptr || hwloc_set_cpubind(t, core->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
        log(log_level::warn, "could not pin worker {} to core {}", index, index % n);
    }
}

} // namespace courier::detail
