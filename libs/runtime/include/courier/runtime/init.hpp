// SPDX-License-Identifier: BSL-1.0
// Startup, shutdown, options and the progress hook.
//
//   int courier_main(int argc, char** argv) { ...; return courier::finalize(); }
//   int main(int argc, char** argv) { return courier::init(courier_main, argc, argv); }
//
// init() parses and removes the --courier:NAME=VALUE options (each also read from the
// environment as COURIER_NAME; unknown --courier: options are an error; --courier:help lists
// them all), starts the workers, runs courier_main as a Courier task, and returns once it has
// returned and every task has finished. Its result is courier_main's, or non-zero if an
// exception escaped courier_main or a posted task, or if courier_main did not call finalize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace courier {

int init(std::function<int(int, char**)> courier_main, int argc, char** argv);
/// Called once by courier_main to request shutdown once all work is done. Returns 0.
int finalize();
/// Worker threads on this locality.
std::size_t get_os_thread_count();

/// The value of a --courier: option as the runtime resolved it (command line, environment,
/// default), or nullopt for an unknown name.
std::optional<std::string> get_config_entry(std::string const& name);

/// A background function the scheduler calls when a worker has no task and regularly between
/// tasks (the parcelport polls its completion queues here). It returns true when it produced
/// work. `wait_fd`, if >= 0, is a file descriptor that becomes readable when the hook has
/// something to do: sleeping workers wait on it, so network events wake them.
/// Register while the runtime runs; hooks run concurrently on several workers.
/// `can_sleep`, if given, is asked right before a worker blocks on `wait_fd`: false keeps the
/// worker polling (the hook has work, or its fd would not be signalled; libfabric's fi_trywait).
std::size_t register_progress_hook(std::function<bool()> poll, int wait_fd = -1,
                                   std::function<bool()> can_sleep = nullptr);
void unregister_progress_hook(std::size_t id);
/// Wakes one sleeping worker (for hooks that learned of work by other means).
void notify_work() noexcept;

} // namespace courier
