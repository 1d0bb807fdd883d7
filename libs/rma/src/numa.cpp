// SPDX-License-Identifier: BSL-1.0
#include "numa.hpp"

#include <hwloc.h>
#include <sys/mman.h>

#include <mutex>

namespace courier::rma {

namespace {

struct topology {
    hwloc_topology_t t = nullptr;
    unsigned nodes = 1;
    topology() {
        if (hwloc_topology_init(&t) != 0) {
            t = nullptr;
            return;
        }
        if (hwloc_topology_load(t) != 0) {
            hwloc_topology_destroy(t);
            t = nullptr;
            return;
        }
        int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
        nodes = n > 0 ? static_cast<unsigned>(n) : 1;
    }
};

topology& topo() {
    static topology* t = new topology; // lives as long as the pool it serves
    return *t;
}

} // namespace

unsigned numa_node_count() {
    return topo().nodes;
}

unsigned numa_node_of_current_thread() {
    auto& tp = topo();
    if (tp.t == nullptr || tp.nodes == 1) {
        return 0;
    }
    hwloc_cpuset_t cpus = hwloc_bitmap_alloc();
    unsigned node = 0;
    if (hwloc_get_last_cpu_location(tp.t, cpus, HWLOC_CPUBIND_THREAD) == 0) {
        for (unsigned i = 0; i < tp.nodes; ++i) {
            hwloc_obj_t o = hwloc_get_obj_by_type(tp.t, HWLOC_OBJ_NUMANODE, i);
            if (o != nullptr && hwloc_bitmap_intersects(o->cpuset, cpus)) {
                node = i;
                break;
            }
        }
    }
    hwloc_bitmap_free(cpus);
    return node;
}

void* numa_alloc(std::size_t bytes, int node) {
    auto& tp = topo();
    if (node >= 0 && tp.t != nullptr && tp.nodes > 1) {
        hwloc_obj_t o =
            hwloc_get_obj_by_type(tp.t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node));
        if (o != nullptr) {
            void* p = hwloc_alloc_membind(tp.t, bytes, o->nodeset, HWLOC_MEMBIND_BIND,
                                          HWLOC_MEMBIND_BYNODESET);
            if (p != nullptr) {
                return p;
            }
        }
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void numa_free(void* p, std::size_t bytes) noexcept {
    // hwloc_alloc_membind uses mmap too (hwloc_free is munmap on Linux).
    ::munmap(p, bytes);
}

void numa_bind(void* p, std::size_t bytes, int node) noexcept {
    auto& tp = topo();
    if (node < 0 || tp.t == nullptr || tp.nodes <= 1) {
        return;
    }
    hwloc_obj_t o = hwloc_get_obj_by_type(tp.t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node));
    if (o != nullptr) {
        (void)hwloc_set_area_membind(tp.t, p, bytes, o->nodeset, HWLOC_MEMBIND_BIND,
                                     HWLOC_MEMBIND_BYNODESET);
    }
}

int numa_node_of(void const* p) {
    auto& tp = topo();
    if (tp.t == nullptr) {
        return -1;
    }
    hwloc_nodeset_t set = hwloc_bitmap_alloc();
    int node = -1;
    if (hwloc_get_area_memlocation(tp.t, p, 1, set, HWLOC_MEMBIND_BYNODESET) == 0) {
        int first = hwloc_bitmap_first(set);
        // Translate the OS index to the logical one used by the pool.
        for (unsigned i = 0; i < tp.nodes && first >= 0; ++i) {
            hwloc_obj_t o = hwloc_get_obj_by_type(tp.t, HWLOC_OBJ_NUMANODE, i);
            if (o != nullptr && static_cast<int>(o->os_index) == first) {
                node = static_cast<int>(i);
                break;
            }
        }
    }
    hwloc_bitmap_free(set);
    return node;
}

} // namespace courier::rma
