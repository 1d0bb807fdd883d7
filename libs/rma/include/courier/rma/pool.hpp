// SPDX-License-Identifier: BSL-1.0
// The pool of registered memory (HPX paper, section 3.4): one per process.
//
// Memory comes in size classes (four per power of two, so a request wastes at most a quarter).
// Small classes (up to 256 KiB) are carved from *blocks* of `pool_options::block_size` bytes,
// each registered once with the attached registrar; larger requests get a page-aligned region
// of their class size, registered on its own and kept for reuse after it is freed. Freed memory
// returns to its class: first to a per-thread cache (no lock, no atomic read-modify-write on the
// hot path beyond the statistics), then in batches to the class's shared list.
//
// Registration: memory is registered with the registrar attached by the active parcelport
// (attach()); memory allocated before attach() is registered at attach() time, and detach()
// deregisters everything (the memory stays valid). Without a registrar, memory is plain.
//
// Limits: the bytes the pool holds (blocks + large regions) never exceed `pool_options::limit`;
// a request that would is refused with rma::pool_exhausted (a std::bad_alloc), after the pool
// has released the free large regions it caches. Nothing aborts.
//
// NUMA: with `numa_local` (default) and several NUMA nodes, each node has its own blocks and
// lists and a thread allocates on the node it runs on (hwloc); on one node it is a no-op.
//
// Thread safety: every function may be called from any thread. deallocate() must get the
// `bytes` and `alignment` that allocate() was given (like sized delete).
#pragma once

#include <courier/rma/registrar.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>

namespace courier::rma {

struct pool_options {
    std::size_t block_size = std::size_t{4} << 20; ///< registered block for small classes
    std::size_t limit = 0;                         ///< bytes held at most; 0: half of RAM
    bool numa_local = true;                        ///< allocate on the caller's NUMA node
    /// share_with_host() may back the pool's new memory with a segment this host's processes
    /// map. false: private memory only (a program whose fork() children use rma memory).
    bool shared = true;
};

struct pool_statistics {
    std::uint64_t bytes_registered = 0; ///< bytes held by the pool (blocks + large regions)
    std::uint64_t bytes_in_use = 0;     ///< bytes handed out (class sizes) and not yet freed
    std::uint64_t peak_bytes_in_use = 0;
    std::uint64_t registrations = 0;   ///< registrations performed (blocks, regions, attach)
    std::uint64_t deregistrations = 0; ///< detach, trim, pressure from the limit
    std::uint64_t allocations = 0;
    std::uint64_t cache_hits = 0;        ///< allocations served by memory freed earlier
    std::uint64_t cache_misses = 0;      ///< allocations that needed fresh memory
    std::uint64_t thread_cache_hits = 0; ///< of the hits, served without a lock
    std::uint64_t refused = 0;           ///< requests refused by the limit
    std::uint64_t adopted_loads = 0;     ///< rma_vector/rma_object loads that adopted a buffer
    std::uint64_t copied_loads = 0;      ///< ... that had to copy (sender-side local loads)
    std::uint64_t bytes_copied_on_load = 0;
    std::uint64_t bytes_shared = 0; ///< of bytes_registered, in the shared segment
    std::size_t limit = 0;
    std::size_t block_size = 0;
    unsigned numa_nodes = 1;
};

/// A request the pool's limit does not allow.
class pool_exhausted : public std::bad_alloc {
public:
    explicit pool_exhausted(std::string what) : what_(std::move(what)) {}
    char const* what() const noexcept override { return what_.c_str(); }

private:
    std::string what_;
};

/// The registered range that contains an address.
struct region_info {
    std::byte* base = nullptr;
    std::size_t size = 0;
    registration reg;                      ///< valid while `registrar` is attached
    memory_registrar* registrar = nullptr; ///< null: not registered (no registrar attached)
    unsigned numa_node = 0;
};

/// Changes the options. block_size and numa_local apply to blocks created afterwards; a lower
/// limit applies to later requests. Throws std::invalid_argument for a block size that is not
/// a power of two between 64 KiB and 1 GiB.
void configure(pool_options const& o);
pool_options current_options();

/// `bytes` bytes aligned to `alignment` (at most 4096) in registered memory. Throws
/// pool_exhausted over the limit, std::invalid_argument for an unsupported alignment.
void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t));
void deallocate(void* p, std::size_t bytes,
                std::size_t alignment = alignof(std::max_align_t)) noexcept;
/// allocate() owned by a shared pointer whose deleter returns the memory.
std::shared_ptr<std::byte[]> allocate_shared(std::size_t bytes,
                                             std::size_t alignment = alignof(std::max_align_t));

/// The pool region holding [p, p + n), if the pool owns it.
std::optional<region_info> find(void const* p, std::size_t n = 1);
bool contains(void const* p, std::size_t n = 1);

/// Registers every block and region with `r` and uses it for new ones. One registrar at a
/// time: returns false (and does nothing) if another is attached.
bool attach(memory_registrar& r);
/// Deregisters everything registered with `r` (if attached); later memory is plain.
void detach(memory_registrar& r) noexcept;
memory_registrar* attached_registrar() noexcept;

/// NUMA nodes of this machine as hwloc sees them (1 if it sees none).
unsigned numa_node_count();
/// The NUMA node (logical index) holding the page at `p`, or -1 if unknown.
int numa_node_of(void const* p);

/// The pool's segment shared with this host's processes: a memfd whose first page is a header
/// {magic, word, base, size} (see libs/rma/src/segment.hpp) and whose other pages back the
/// pool's blocks and regions. Another process of the same user opens /proc/PID/fd/`fd`, maps
/// `size` bytes and finds the pool's byte at address A at offset A - `base`.
struct shared_segment {
    /// The header's first word; the header is four 64-bit words {magic, word, base, size} at
    /// the start of a page that holds nothing else.
    static constexpr std::uint64_t magic = 0x434f555249455253ULL; // "COURIERS"
    static constexpr std::size_t header_bytes = 4096;
    int fd = -1;
    std::byte* base = nullptr;
    std::size_t size = 0;
    std::uint64_t word = 0; ///< random, also in the header: what a reader checks
};

/// From now on, the pool's new blocks and regions come from its shared segment (created at the
/// first call, reserved at the limit but at most 256 GiB and a quarter of RLIMIT_AS, its pages
/// used only as they are touched, sealed at its size), so that a transport can let this host's
/// processes copy rma chunks out of it instead of reading them with a system call. Memory
/// allocated earlier stays private. A fork() child does not share it: fresh private memory
/// takes the segment's place in the child (its rma memory of before the fork reads zeros, as
/// memory registered for RDMA is lost to a child) and its pool allocates private memory. nullopt
/// when pool_options::shared is false, the system refuses (no memfd_create, strict overcommit), or
/// in a fork child of a sharing process: the pool then stays private.
std::optional<shared_segment> share_with_host();

/// Releases the free large regions the pool caches (and their registrations).
void trim() noexcept;
pool_statistics get_pool_statistics();

namespace detail {
void count_load(bool adopted, std::size_t bytes_copied) noexcept;
} // namespace detail

} // namespace courier::rma
