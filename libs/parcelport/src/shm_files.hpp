// SPDX-License-Identifier: BSL-1.0
// shm_files: the named shared-memory objects this process created (/dev/shm/NAME of an shm
// endpoint's region and /dev/shm/NAME-bell of a doorbell), so that they go when the process
// ends without closing its transports: remove_shared_memory_files() (transport.hpp) for a
// process that ends itself with std::_Exit, and a handler for the signals that end a process
// by default (SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM; SIGABRT, SIGBUS, SIGSEGV), which
// removes them and then hands the signal to whatever handled it before (libfabric's shm
// removes its regions the same way, but knows nothing of the doorbells). SIGKILL cannot be
// caught: what a killed process leaves stays until its launcher or a peer removes it.
//
// Thread safety: own/forget may run on any thread; the removal is async-signal-safe (unlink()
// of names kept in fixed slots). A name that does not fit a slot is not kept (it is then
// removed only by its owner's destructor).
#pragma once

#include <courier/parcelport/transport.hpp>

namespace courier::parcelport::detail {

/// Records /dev/shm/`name` as this process's until forget_shared_memory_file(name); the first
/// call installs the signal handlers (declared in transport.hpp for the runtime's own files).
using parcelport::forget_shared_memory_file;
using parcelport::own_shared_memory_file;

} // namespace courier::parcelport::detail
