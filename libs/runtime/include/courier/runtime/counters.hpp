// SPDX-License-Identifier: BSL-1.0
// Performance counters: what a locality has done since its runtime started, by HPX-style name.
//
//   auto c = courier::get_counters(courier::find_all_localities()[1]);
//   double parcels = c["/parcels/count/received"];
//
// Names (libs/runtime/README.md lists them all):
//   /parcels/count/{sent,received}       parcels to and from other localities
//   /parcels/bytes/{sent,received}       their bytes (index + pointer and rma chunks)
//   /parcels/bytes/zero-copy             bytes sent in pointer and rma chunks (read by the peer)
//   /parcels/count/sent-flat             posts of the sent written straight into their batch
//   /parcels/count/received-flat         requests of the received run from their bytes in place
//   /parcels/count/replies-flat          replies whose result was read from their bytes in place
//   /parcels/bytes/rma-read              bytes this locality read from its peers by RMA
//   /threads/count/executed              tasks run to completion
//   /threads/idle-rate                   fraction of the workers' time spent idle, 0 .. 1
//   /rma/pool/..., /flow/..., /parcelport/..., /trace/...  (the statistics structs')
// Counters only grow, except gauges (idle-rate, bytes in use, in flight, windows). A snapshot
// is consistent per counter, not across counters; a locality's own calls to get_counters show
// in its own parcel counts.
//
// Thread safety: callable from any Courier thread, and from other threads while the runtime
// runs. Errors: a locality that has failed makes get_counters throw network_error (and the
// async form's future exceptional); an id that names no locality throws
// std::invalid_argument.
#pragma once

#include <courier/runtime/actions.hpp>
#include <courier/runtime/future.hpp>

#include <map>
#include <string>

namespace courier {

/// The counters of `locality` (this one: read here; another: a remote action, waited for).
std::map<std::string, double> get_counters(id_type const& locality);
/// The same without blocking the calling task.
future<std::map<std::string, double>> get_counters_async(id_type const& locality);

} // namespace courier
