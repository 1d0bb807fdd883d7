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
// MPI parcelport, unit tests) pays none of this; a locality that will open one starts loading
// it on a thread of its own at startup (load_in_background), beside its other startup work.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace courier::parcelport::fabric::library {

/// fi_getinfo, fi_freeinfo, fi_dupinfo (allocinfo: of nullptr), fi_fabric and fi_strerror of
/// the loaded library. The first call loads libfabric.so.1 and its first fi_getinfo (waiting
/// for load_in_background's thread if it runs); each throws courier::network_error when
/// libfabric.so.1 cannot be loaded or lacks a function ("libfabric: cannot load ...: <dlerror>").
int getinfo(std::uint32_t version, char const* node, char const* service, std::uint64_t flags,
            fi_info const* hints, fi_info** info);
fi_info* allocinfo();
fi_info* dupinfo(fi_info const* info);
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
/// These two never throw: freeinfo(nullptr) and an unloaded library do nothing, and strerror
/// then names the code only ("libfabric error N").
void freeinfo(fi_info* info) noexcept;
std::string strerror(int error) noexcept;

/// Starts loading libfabric.so.1, and its providers by one fi_getinfo, on a thread of its own
/// (once per process; later calls do nothing). The thread is joined by the first use above or
/// at exit. An error while loading is kept for the first use to throw.
void load_in_background();

/// Whether libfabric.so.1 is loaded in this process (tests: a process that opened no libfabric
/// transport has not loaded it).
bool loaded() noexcept;

namespace testing {
/// Loads `soname` instead of libfabric.so.1 (the error of a library that cannot be loaded);
/// only before the first use in the process. `soname` must outlive the process's use.
void use_library(char const* soname) noexcept;
} // namespace testing

} // namespace courier::parcelport::fabric::library
