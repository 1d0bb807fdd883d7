// SPDX-License-Identifier: BSL-1.0
// A received parcel's parts, as both transports (libfabric's RMA reads, MPI's receives) take
// them: its descriptors checked against its header, the chunk list they describe, where each
// pointer or rma chunk lands (receive_buffer_pool, or the rma pool), and the message assembled
// once every chunk has landed.
#pragma once

#include "wire.hpp"

#include <courier/serialization/message.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace courier::parcelport {

/// Receive buffers for received pointer chunks, reused by power-of-two size class (4 KiB ... 1
/// GiB). A fresh large buffer costs a page fault per 4 KiB on first touch (and glibc returns large
/// blocks to the kernel on free), more than the copy itself at megabytes; a reused one is
/// mapped already. The buffers go to the user inside the message (a serialize_buffer adopts
/// them); their deleter returns them here, also after the transport is gone. At most `limit`
/// bytes are kept. Thread safety: get() and the deleters may run on any thread.
///
/// Alignment: a buffer of a size class starts at the offset within a cache line that the
/// caller asks for, that of the sender's copy of the chunk, rounded down to a multiple of
/// alignof(std::max_align_t) (so every buffer keeps operator new's alignment). The kernel
/// copies a read (process_vm_readv, libfabric shm's CMA) with `rep movsb`, which took 1.055x
/// as long from offset 16 into 0 and 1.128x from 0 into 16 at 4 MiB (benchmarks/RESULTS.md,
/// "Landing alignment and read steps"); a user's large std::vector starts 16 bytes into a
/// page, a buffer of operator new wherever the heap puts it. Each class buffer has a cache
/// line of slack for that (counted in `limit`), and is itself cache-line aligned.
class receive_buffer_pool : public std::enable_shared_from_this<receive_buffer_pool> {
public:
    static constexpr unsigned min_shift = 12, max_shift = 30;
    static constexpr std::size_t line = 64; ///< the alignment unit (a cache line)
    explicit receive_buffer_pool(std::size_t limit) : limit_(limit) {}
    ~receive_buffer_pool();
    receive_buffer_pool(receive_buffer_pool const&) = delete;
    receive_buffer_pool& operator=(receive_buffer_pool const&) = delete;

    /// A buffer of at least `n` bytes; `reused` says whether it came from the pool. One of a
    /// size class (4 KiB <= n <= 1 GiB) starts at an address congruent modulo `line` to
    /// `align_like` (the sender's address of the chunk; 0: cache-line aligned) rounded down to
    /// a multiple of alignof(std::max_align_t); a smaller one where operator new puts it, a
    /// larger one page-aligned (big_alloc: mapped for it alone, unmapped in steps). Class
    /// buffers of 64 MiB and more are big_alloc's too.
    std::shared_ptr<std::byte[]> get(std::size_t n, bool& reused, std::uint64_t align_like = 0);

private:
    void put(std::byte* p, unsigned shift) noexcept;

    std::mutex mutex_;
    std::size_t limit_;
    std::size_t cached_ = 0;
    std::array<std::vector<std::byte*>, max_shift - min_shift + 1> free_;
};

/// Where a received pointer or rma chunk of `n` bytes lands: an rma chunk in rma pool memory
/// (a received rma_vector adopts it; `in_rma_pool` set) while the pool has room, else (and
/// every pointer chunk) a buffer of `pool` (`reused` set when it came from the pool). Over the
/// rma pool's limit the bytes still arrive; a loader that needs pool memory reports the limit.
/// `align_like`: the sender's address of the chunk (receive_buffer_pool::get); rma pool memory
/// is cache-line aligned on both sides already.
std::shared_ptr<std::byte[]> chunk_destination(receive_buffer_pool& pool, std::size_t n,
                                               bool rma_chunk, bool& in_rma_pool, bool& reused,
                                               std::uint64_t align_like = 0);

/// Checks a parcel's descriptors against its header before anything is allocated for it: `ds`
/// holds h.chunk_count descriptors in stream order, then the index buffer's when the index is
/// not inline; sizes of at most wire::max_chunk_bytes, together within this machine's memory;
/// known chunk types; index chunks that add up to the index. Returns the bytes to receive apart
/// from the inline index (every pointer and rma chunk, and a non-inline index); 0: the inline
/// index is the whole parcel. Throws serialization_error naming the problem.
std::uint64_t check_descriptors(wire::header const& h, std::span<wire::descriptor const> ds,
                                bool index_inline);

/// The chunk list of a parcel whose descriptors passed check_descriptors: index chunks at their
/// offsets, every non-empty pointer and rma chunk at a buffer from `land(size, rma_chunk,
/// sender_address)` (returning std::shared_ptr<std::byte[]>; the address is the descriptor's,
/// for the landing buffer's alignment), kept in `owners` (parallel to `chunks`, null for
/// the rest; left empty when nothing lands, so that a parcel whose inline index is all of it
/// allocates no owner list).
template <class Land>
void received_chunks(wire::header const& h, std::span<wire::descriptor const> ds, Land&& land,
                     std::vector<serialization::serialization_chunk>& chunks,
                     std::vector<std::shared_ptr<std::byte[]>>& owners) {
    using serialization::chunk_type;
    chunks.reserve(h.chunk_count);
    owners.clear();
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
        auto const& d = ds[i];
        auto type = static_cast<chunk_type>(d.type);
        if (type == chunk_type::index) {
            chunks.push_back({type, d.size, offset, nullptr, 0});
            offset += d.size;
            continue;
        }
        std::byte const* at = nullptr;
        if (d.size != 0) {
            owners.resize(h.chunk_count);
            owners[i] = land(static_cast<std::size_t>(d.size), type == chunk_type::rma, d.address);
            at = owners[i].get();
        }
        chunks.push_back({type, d.size, 0, at, 0});
    }
}

/// Bytes of the pointer and rma chunks in `chunks`.
std::uint64_t chunk_bytes(std::span<serialization::serialization_chunk const> chunks) noexcept;

/// The reason for a parcel refused because its `bytes` of chunks are over `limit`; "over the
/// limit" if not even the reason can be allocated.
std::string over_receive_limit(std::uint64_t bytes, std::size_t limit) noexcept;

/// The reason for a parcel refused because `bytes` of its `what` ("chunks", "index") could not
/// be allocated; "no memory" if not even the reason can.
std::string no_memory_to_receive(std::uint64_t bytes, char const* what = "chunks") noexcept;

/// received_chunks(), unless the parcel is refused: when its pointer and rma chunks are over
/// `limit` (transport_options::max_parcel_bytes; 0: none) or a landing buffer cannot be had
/// (std::bad_alloc), no chunk lands (buffers taken already are given back), every pointer and
/// rma chunk is listed without an address, and `why` says why (for assemble_received, which
/// marks the message: message::set_refused); else `why` is left empty. The transport still
/// takes the parcel's bytes off the wire (into nothing, or a scratch buffer) and answers its
/// sender as for any parcel, so that the call fails with an error on the receiving side
/// instead of hanging on the sending one.
template <class Land>
void received_chunks_or_refused(wire::header const& h, std::span<wire::descriptor const> ds,
                                Land&& land, std::size_t limit,
                                std::vector<serialization::serialization_chunk>& chunks,
                                std::vector<std::shared_ptr<std::byte[]>>& owners,
                                std::string& why) {
    auto nothing = [](std::size_t, bool, std::uint64_t) { return std::shared_ptr<std::byte[]>(); };
    why.clear();
    if (limit != 0) {
        std::uint64_t bytes = 0; // from the descriptors: nothing is built twice
        for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
            bytes += ds[i].type != static_cast<std::uint8_t>(serialization::chunk_type::index)
                         ? ds[i].size
                         : 0;
        }
        if (bytes > limit) {
            why = over_receive_limit(bytes, limit);
            received_chunks(h, ds, nothing, chunks, owners);
            return;
        }
    }
    try {
        received_chunks(h, ds, land, chunks, owners);
    } catch (std::bad_alloc const&) {
        chunks.clear();
        owners.clear(); // gives back what landed; both keep their capacity
        received_chunks(h, ds, nothing, chunks, owners);
        why = no_memory_to_receive(chunk_bytes(chunks));
    }
}

/// A received message whose chunks have landed: the chunk list validated and each landing
/// buffer made the owner of its chunk; `refused` not empty: its chunks without an address were
/// not received, for that reason (message::set_refused). nullopt (with one rate-limited log
/// line naming `source`) when the parts do not make a valid message.
std::optional<serialization::message>
assemble_received(serialization::message&& m,
                  std::vector<serialization::serialization_chunk>&& chunks,
                  std::vector<std::shared_ptr<std::byte[]>>& owners, std::uint32_t source,
                  std::string const& refused = {});

} // namespace courier::parcelport
