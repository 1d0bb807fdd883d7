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
// Mapped reads: a peer whose rma pool is a shared segment (rma::share_with_host()) adds it to
// its identity ("@FD:BASE:SIZE:WORD"). connect() maps it read-only through /proc/PID/fd/FD and
// checks its header (the word, its base and size). A chunk that lies wholly in it (rma_vector,
// rma_object, any pool memory) is then copied with memcpy instead of the system call, which
// costs several copies' time (cma_vs_mapped). A peer that failed the identity check is mapped
// too (Yama's ptrace_scope=1 forbids process_vm_readv between siblings, not opening
// /proc/PID/fd): a parcel of its is read here when all its chunks lie in the segment, else
// with fi_read. The segment must be sealed against shrinking (a shrink under the mapping would
// turn copies into SIGBUS). A peer whose segment cannot be mapped is read with process_vm_readv
// (logged at debug level); this process's own segment is used where it is. A mapping holds the
// peer's pages (the segment's file lives on in it after the peer has ended), so release(), when
// the runtime declares the peer failed, replaces it by zero pages, once no read() is copying
// from it, and stops reading that peer by any means (its pid may be reused).
//
// Thread safety: connect() once, before any read (and any send, whose sender asks mapped());
// read() and release() from any thread.
#pragma once

#include <courier/rma/pool.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace courier::parcelport::fabric {

class direct_reader {
public:
    /// This process's part of a locality's address: "PID:ADDRESS:VALUE" (hexadecimal) of its
    /// identity word, the same for every transport of the process.
    static std::string identity();
    /// The suffix of identity() that offers this process's rma pool segment `seg` (what
    /// rma::share_with_host() returned) to peers: "@FD:BASE:SIZE:WORD"; empty for nullopt.
    static std::string pool_identity(std::optional<rma::shared_segment> const& seg);

    direct_reader() = default;
    ~direct_reader();
    direct_reader(direct_reader const&) = delete;
    direct_reader& operator=(direct_reader const&) = delete;

    /// Reads back each peer's identity word (identities[i] of locality i; empty: it offers
    /// none) and enables direct reads from those whose word matches, and maps the pool segment
    /// of those that offer one (identity() + pool_identity()). Returns how many offered an
    /// identity and failed the check; a segment that cannot be mapped is not a failure.
    std::size_t connect(std::vector<std::string> const& identities);

    /// Reads [remote, remote + size) of locality `rank`'s memory into `local`. false when that
    /// peer is not read directly or the read failed (nothing is promised about `local` then):
    /// the caller reads it with fi_read. A peer that the system may not read (EPERM, ESRCH) is
    /// not tried again.
    bool read(std::uint32_t rank, std::byte* local, std::uint64_t remote,
              std::size_t size) noexcept;

    /// Locality `rank` has failed: its segment's pages are let go (the range is left mapped to
    /// zero pages, so a stale address reads zeros rather than faulting) once the read()s
    /// copying from it have returned, and nothing of it is read any more (read() returns false,
    /// mapped() and enabled() answer false). Returns the bytes of the mapping let go (0: none,
    /// or released before).
    std::size_t release(std::uint32_t rank) noexcept;

    /// Whether locality `rank` is read directly (tests).
    bool enabled(std::uint32_t rank) const noexcept {
        return rank < pids_.size() && pids_[rank].load(std::memory_order_relaxed) > 0;
    }
    /// Whether locality `rank`'s pool segment is mapped (the sender does not stage chunks in
    /// its own segment for such a peer, which maps it too). A peer that failed the identity
    /// check may still be mapped: then only chunks that covers() are read (by the caller's
    /// choice: read() of anything else fails).
    bool mapped(std::uint32_t rank) const noexcept {
        return rank < maps_.size() && maps_[rank].at != nullptr &&
               !guards_[rank].released.load(std::memory_order_relaxed);
    }
    /// Whether [remote, remote + size) of locality `rank` lies wholly in its mapped segment.
    bool covers(std::uint32_t rank, std::uint64_t remote, std::size_t size) const noexcept {
        return mapped(rank) && within(maps_[rank].base, maps_[rank].size, remote, size);
    }
    /// Whether [at, at + size) lies wholly in [base, base + extent) (no overflow).
    static bool within(std::uint64_t base, std::size_t extent, std::uint64_t at,
                       std::size_t size) noexcept {
        return at >= base && size <= extent && at - base <= extent - size;
    }
    /// Bytes read() copied out of mapped segments.
    std::uint64_t mapped_bytes() const noexcept {
        return mapped_bytes_.load(std::memory_order_relaxed);
    }

private:
    struct mapping {
        std::byte const* at = nullptr; // this process's mapping of the peer's segment
        std::uint64_t base = 0;        // the segment's address in the peer
        std::size_t size = 0;
        bool owned = false; // mapped by connect() (not this process's own segment)
    };
    /// read()s copying from a peer's mapping now, and whether release() took it: a reader
    /// counts itself in, then looks at `released`; release() raises it, then waits for the
    /// count to fall to 0 (both sequentially consistent: one of them sees the other).
    struct guard {
        std::atomic<int> readers{0};
        std::atomic<bool> released{false};
    };
    void map_segment(std::uint32_t rank, int pid, std::string const& offer);
    void unmap_all() noexcept;

    std::vector<std::atomic<int>> pids_; // by locality; 0: read with fi_read
    std::vector<mapping> maps_;          // by locality
    std::vector<guard> guards_;          // by locality
    std::atomic<std::uint64_t> mapped_bytes_{0};
};

} // namespace courier::parcelport::fabric
