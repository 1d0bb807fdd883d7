// SPDX-License-Identifier: BSL-1.0
// MPI for Courier: the process's MPI session (shared by the MPI parcelport and the MPI
// bootstrap) and the few collective calls the bootstrap makes over MPI_COMM_WORLD. Everything
// here throws network_error when this build has no MPI (mpi_available() is false).
#pragma once

#include <courier/parcelport/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace courier::parcelport {

/// Whether this build has the MPI parcelport (CMake found MPI).
bool mpi_available() noexcept;

/// MPI for this process, held while used: the first holder initializes it (MPI_Init_thread
/// asking for MPI_THREAD_MULTIPLE when `thread_multiple`, else MPI_THREAD_SERIALIZED) unless
/// the program did already; the last holder to let go finalizes it, if Courier initialized it.
/// MPI wants both on the thread that will be the process's main thread. Throws network_error
/// when MPI cannot be initialized or lacks the thread level asked for.
std::shared_ptr<void> hold_mpi(bool thread_multiple);

/// The last holder will not call MPI_Finalize: OpenMPI's finalize waits for every process of
/// the job (a fence), so it would block on a peer that stopped. For a process that declared a
/// peer failed; its launcher then takes the missing finalize for the failure it is.
void mpi_skip_finalize() noexcept;

/// MPI_COMM_WORLD as the bootstrap sees it (MPI must be held).
struct mpi_world {
    std::uint32_t rank = 0;
    std::uint32_t size = 1;
    std::vector<std::string> hosts; ///< each rank's processor name (MPI_Get_processor_name)
};
mpi_world mpi_world_info();

/// Every rank's `mine`, by rank (MPI_Allgather of the sizes, then MPI_Allgatherv).
std::vector<std::vector<std::byte>> mpi_allgather(std::vector<std::byte> const& mine);

/// Rank 0's `value` on every rank (MPI_Bcast).
std::uint64_t mpi_broadcast(std::uint64_t value);

} // namespace courier::parcelport
