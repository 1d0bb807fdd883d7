// SPDX-License-Identifier: BSL-1.0
// Peer discovery: every locality publishes its transport address and learns everyone's, plus a
// job-unique token. One implementation today: the rendezvous that courier-run runs on a
// loopback TCP socket (COURIER_RUN_ENDPOINT, COURIER_RANK, COURIER_SIZE). PMIx under
// mpirun/srun and a host file are later implementations of the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace courier::detail {

/// What the launcher tells a running locality.
struct launcher_notice {
    enum kind_t { closed, failed, diagnose } kind = closed;
    std::uint32_t rank = 0; // failed: the rank of the failed locality
};

struct bootstrap_result {
    std::uint64_t token = 0;
    std::vector<std::vector<std::byte>> addresses; // by rank
};

class bootstrap {
public:
    virtual ~bootstrap() = default;
    virtual std::uint32_t rank() const = 0;
    virtual std::uint32_t size() const = 0;
    virtual bootstrap_result exchange(std::vector<std::byte> const& my_address) = 0;
    /// After exchange(): blocks until the launcher says something: a locality failed, the job
    /// overran its time limit (diagnose: log your state), or it went away / was closed.
    virtual launcher_notice wait_for_notice() = 0;
    /// Unblocks wait_for_notice().
    virtual void close() = 0;
};

/// The courier-run rendezvous if this process was started by courier-run, else nullptr.
std::unique_ptr<bootstrap> make_bootstrap_from_environment();

} // namespace courier::detail
