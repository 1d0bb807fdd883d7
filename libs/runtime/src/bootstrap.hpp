// SPDX-License-Identifier: BSL-1.0
// Peer discovery: every locality learns its rank, the job's size and where it runs, publishes
// its transport address and learns everyone's, plus a job-unique token. Two implementations:
// - courier-run's rendezvous (bootstrap.cpp): a TCP socket on the launcher's host
//   (COURIER_RUN_ENDPOINT, COURIER_RANK, COURIER_SIZE, COURIER_HOST, ...);
// - PMIx (bootstrap_pmix.cpp), under OpenMPI's mpirun or Slurm's srun --mpi=pmix: rank, size
//   and host from the PMIx server; addresses through PMIx_Put/Commit/Fence/Get.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace courier::detail {

/// What the launcher tells a running locality.
struct launcher_notice {
    /// closed: close() was called; lost: the launcher went away while the job ran.
    enum kind_t { closed, failed, diagnose, lost } kind = closed;
    std::uint32_t rank = 0; // failed: the rank of the failed locality
};

struct bootstrap_result {
    std::uint64_t token = 0;
    std::vector<std::vector<std::byte>> addresses; // by rank
};

/// Where a locality runs, known before the address exchange.
struct placement {
    /// This locality's host, as the launcher names it (two localities share shared memory
    /// exactly when their hosts are equal).
    std::string host;
    std::uint32_t host_count = 1; ///< distinct hosts in the job
    std::uint32_t local_rank = 0; ///< among the localities on this host
    std::uint32_t local_size = 1; ///< localities on this host
    /// An address of the launcher that this host reaches over the network (courier-run's
    /// rendezvous), or empty: the network interface that routes to it is the default one.
    std::string launcher_address;
    /// Names this job among those on the host (its localities' shared-memory names start with
    /// courier-JOB_ID-RANK); empty: each locality picks a unique name of its own.
    std::string job_id;
};

class bootstrap {
public:
    virtual ~bootstrap() = default;
    virtual char const* name() const = 0; ///< "courier-run" or "PMIx"
    virtual std::uint32_t rank() const = 0;
    virtual std::uint32_t size() const = 0;
    virtual placement const& where() const = 0;
    /// Publishes `my_address`; returns every locality's. Throws std::runtime_error naming the
    /// problem (a locality that never arrives ends it within the bootstrap's time limit).
    virtual bootstrap_result exchange(std::vector<std::byte> const& my_address) = 0;
    /// After exchange(): blocks until the launcher says something: a locality failed, the job
    /// overran its time limit (diagnose: log your state), or it went away / was closed.
    virtual launcher_notice wait_for_notice() = 0;
    /// Unblocks wait_for_notice().
    virtual void close() = 0;
    /// Tells the launcher that this locality went through the job's shutdown and exits next
    /// (courier-run takes an exit without it, even with status 0, for a failure of the job).
    virtual void finished() {}
};

/// A random 64-bit number, never 0 (a job's token, a job id), from std::random_device.
std::uint64_t random_token();

/// A launcher that reports nothing while the job runs (PMIx's mpirun and srun, MPI's): it ends
/// the job itself when a process fails, and a locality learns of failed peers from its own
/// liveness checks. wait_for_notice() returns (closed) once close() is called.
class quiet_launcher : public bootstrap {
public:
    launcher_notice wait_for_notice() override;
    void close() override;

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool closed_ = false;
};

/// The bootstrap of the launcher that started this process: courier-run's when its variables
/// are set, PMIx's when a PMIx server's are (PMIX_NAMESPACE), else nullptr (one locality).
/// With the MPI parcelport (`parcelport` "mpi") a PMIx launcher's job bootstraps from MPI
/// itself (make_mpi_bootstrap), and courier-run's is refused. Throws std::runtime_error when
/// the environment names a launcher that cannot be reached.
std::unique_ptr<bootstrap> make_bootstrap_from_environment(std::string const& parcelport,
                                                           bool mpi_thread_multiple);

/// MPI's: MPI_Init_thread (parcelport::hold_mpi), rank and size of MPI_COMM_WORLD, hosts
/// from MPI_Get_processor_name, addresses by MPI_Allgatherv, the token by MPI_Bcast. The MPI
/// session it holds is released (MPI_Finalize, when the last holder goes) with it.
std::unique_ptr<bootstrap> make_mpi_bootstrap(bool mpi_thread_multiple);

/// PMIx's, or nullptr when this build has no PMIx support (then `why` says so).
std::unique_ptr<bootstrap> make_pmix_bootstrap(std::string& why);

/// This process's rank as its launcher's environment gives it before any bootstrap
/// (COURIER_RANK, else PMIX_RANK); nullopt when neither is set (or is not a number).
std::optional<std::uint32_t> rank_from_environment();

/// Under courier-run: tells it that this locality has nothing to run (--courier:help) and
/// will not join the job, so that its exit is no failure. Nothing under another launcher.
void decline_to_join() noexcept;

} // namespace courier::detail
