// SPDX-License-Identifier: BSL-1.0
// libfabric's library functions, resolved from libfabric.so.1 when first needed (dlopen), not
// linked: the rest of libfabric's API is inline calls through the objects' operation tables.
//
// Why: loading libfabric costs a process time before it does anything. Debian 12's build links
// the PSM providers, and a constructor of their libinfinipath pins the loading thread to CPU 0
// and calibrates the time-stamp counter against usleep() for 0.1 s, twice: a program that only
// links libfabric.so.1 takes 0.21 s from exec to exit, against ~1 ms without it. The first
// fi_getinfo() then reads /proc/kallsyms to its end, twice (the verbs provider's probe for
// peer memory; 5 MiB). A process that never opens a libfabric transport (one locality, the
// MPI parcelport, unit tests) pays none of this. Loading it on a thread of its own at a
// locality's startup was measured and gained nothing (benchmarks/RESULTS.md, Job startup):
// nothing else in a locality's startup lasts long enough to overlap it.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace courier::parcelport::fabric::library {

/// fi_getinfo, fi_freeinfo, fi_dupinfo (allocinfo: of nullptr), fi_fabric and fi_strerror of
/// the loaded library. The first call loads libfabric.so.1; each throws courier::network_error
/// when it cannot be loaded ("libfabric: cannot load ...: <dlerror>") or lacks one of the five
/// ("libfabric: ... has no fi_getinfo"), the same error on every call.
int getinfo(std::uint32_t version, char const* node, char const* service, std::uint64_t flags,
            fi_info const* hints, fi_info** info);
fi_info* allocinfo();
fi_info* dupinfo(fi_info const* info);
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
/// These two never throw: freeinfo(nullptr) and an unloaded library do nothing, and strerror
/// then names the code only ("libfabric error N").
void freeinfo(fi_info* info) noexcept;
std::string strerror(int error) noexcept;

/// Whether libfabric.so.1 is loaded in this process (tests: a process that opened no libfabric
/// transport has not loaded it).
bool loaded() noexcept;

namespace testing {
/// Loads `soname` instead of libfabric.so.1 (the errors of a library that cannot be loaded or
/// lacks a function);
/// only before the first use in the process. `soname` must outlive the process's use.
void use_library(char const* soname) noexcept;
} // namespace testing

} // namespace courier::parcelport::fabric::library
