// SPDX-License-Identifier: BSL-1.0
// direct_reader: a shm receiver reads a peer's chunk itself, with process_vm_readv, instead of
// asking libfabric's shm for it with fi_read.
//
// libfabric 1.17's shm performs an RMA read within fi_read, by the same system call, while it
// holds the *peer's* region lock (smr_generic_rma). The peer's own progress takes that lock
// (smr_progress_cmd, smr_progress_resp), so a locality stalls for as long as a peer reads from
// it: ~0.3 ms for a 4 MiB chunk. Two localities that send each other large parcels then take
// turns instead of copying at once, and bidirectional bandwidth is one direction's (osu_bibw
// 4 MiB 7.2 against osu_bw 6.8 GB/s). The same system call made here holds no lock of the
// peer's.
//
// A peer is read directly only once it has shown that it is the process its address names:
// the address carries its pid and the address and value of a random word in its memory, which
// connect() reads back. A peer in another pid namespace, or a pid that is not the peer's, fails
// that check and is read with fi_read, as is any peer when the system call is not permitted
// (ptrace restrictions: EPERM).
//
// Every chunk that is not copied out of an outbox is read directly from a peer that passed
// the check: since a progress pass lands at most the read budget (rendezvous.hpp), direct
// reads beat fi_read from 32 KiB up, one way and both ways (benchmarks/RESULTS.md).
//
// Thread safety: connect() before any read; read() from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace courier::parcelport::fabric {

class direct_reader {
public:
    /// This process's part of a locality's address: "PID:ADDRESS:VALUE" (hexadecimal) of its
    /// identity word, the same for every transport of the process.
    static std::string identity();

    /// Reads back each peer's identity word (identities[i] of locality i; empty: it offers
    /// none) and enables direct reads from those whose word matches. Returns how many offered
    /// one and failed the check.
    std::size_t connect(std::vector<std::string> const& identities);

    /// Reads [remote, remote + size) of locality `rank`'s memory into `local`. false when that
    /// peer is not read directly or the read failed (nothing is promised about `local` then):
    /// the caller reads it with fi_read. A peer that the system may not read (EPERM, ESRCH) is
    /// not tried again.
    bool read(std::uint32_t rank, std::byte* local, std::uint64_t remote,
              std::size_t size) noexcept;

    /// Whether locality `rank` is read directly (tests).
    bool enabled(std::uint32_t rank) const noexcept {
        return rank < pids_.size() && pids_[rank].load(std::memory_order_relaxed) > 0;
    }

private:
    std::vector<std::atomic<int>> pids_; // by locality; 0: read with fi_read
};

} // namespace courier::parcelport::fabric
