// SPDX-License-Identifier: BSL-1.0
// The distributed half of init/finalize: transport, bootstrap, parcels, shutdown.
#pragma once

#include "options.hpp"

#include <courier/parcelport/transport.hpp>
#include <courier/serialization/chunk.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace courier::detail {

class scheduler;

/// The transport's options from the --courier: options (throws config_error for a bad
/// value). `workers`: the locality's worker threads (tcp_doorbell's auto depends on them).
/// init() calls it in every run, so that a bad value is an error without courier-run too.
struct placement;
/// The provider whose defaults "auto" thresholds take: the one named, or for "auto" shm on one
/// host and the network provider across hosts.
std::string threshold_provider(config const& cfg, placement const* where);
/// The zero-copy threshold of the parcels: --courier:zero_copy_threshold, whose "auto" is
/// parcelport::default_zero_copy_threshold() of threshold_provider() and --courier:push_max.
std::size_t zero_copy_threshold_from(config const& cfg, placement const* where);
/// The transport's options; throws config_error for values that cannot work (no interface
/// reaching other hosts).
parcelport::transport_options transport_options_from(config const& cfg, std::size_t workers,
                                                     placement const* where);
/// The options the runtime writes parcels with (--courier:zero_copy_threshold,
/// --courier:deep_array_threshold), set by init(). They are the runtime's own, not the process
/// defaults: serialization::save() without options keeps the documented ones (a 4 KiB
/// threshold) whatever the parcels use.
serialization::options parcel_options() noexcept;
void set_parcel_options(serialization::options const& o) noexcept;
/// Joins the job if started by courier-run (returns true), else runs as a lone locality.
/// Throws std::runtime_error (with the provider's words) if the network cannot be set up.
class bootstrap;
/// Joins the job `boot` describes; false (nothing started) for a one-locality job.
/// --courier:peer_timeout and on_peer_failure; throws config_error for bad values.
void liveness_options_from(config const& cfg, std::chrono::milliseconds& timeout,
                           bool& exit_on_failure);
bool distributed_start(config const& cfg, scheduler& s, std::unique_ptr<bootstrap> boot);
/// Locality 0, after courier_main returned and this locality is quiescent: waits until no
/// parcel is in flight anywhere, then tells every other locality to exit.
void distributed_shutdown_all();
/// Other localities: blocks until locality 0 says exit (or the job fails).
void distributed_wait_for_exit();
/// Waits for the last sends to leave and unhooks the transport from the scheduler.
void distributed_stop();
/// Closes the transport (after the workers stopped).
void distributed_close();
/// A peer failed and on_peer_failure=exit: the locality's status must not be 0.
bool distributed_failed();
/// Destroys every component of this locality (at shutdown).
void clear_components();
/// Requests (with replies) still waiting on this locality.
std::size_t pending_requests();
/// Whether the calling thread sees a locality's state (a distributed run's, or an
/// in_process_job worker's) rather than the default one of a process outside any job.
bool in_a_locality_state() noexcept;
/// A posted action (no reply wanted) threw: logged with where it ran and who sent it, and
/// counted (init.cpp): with --courier:posted_errors=fail this locality's status is then 1.
void report_posted_action_failure(char const* action, std::uint32_t source, std::string const& type,
                                  std::string const& what) noexcept;

} // namespace courier::detail
