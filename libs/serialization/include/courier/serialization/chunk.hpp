// SPDX-License-Identifier: BSL-1.0
// Chunks and archive options (HPX paper, section 3.1, Figure 2; section 3.4, Figure 4).
//
// A serialized message is a stream of chunks:
//  - index chunks: bytes that live in the message's own buffer (message::data());
//  - pointer chunks: a block of the caller's memory referenced, not copied (zero copy);
//  - rma chunks: a block of registered memory, with the registration key the network needs.
// The chunk list is in stream order: reading the chunks one after another yields the logical
// byte stream. Pointer and rma chunks never alias the message buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace courier::serialization {

enum class chunk_type : std::uint8_t { index = 0, pointer = 1, rma = 2 };

struct serialization_chunk {
    chunk_type type = chunk_type::index;
    std::size_t size = 0;   ///< bytes
    std::size_t offset = 0; ///< index chunks: where their bytes start in message::data()
    std::byte const* address = nullptr; ///< pointer and rma chunks: the memory they reference
    std::uint64_t rkey = 0;             ///< rma chunks: the registration key (0 otherwise)
};

/// Per-archive options. A contiguous bitwise block of at least `zero_copy_threshold` bytes
/// becomes a pointer (or rma) chunk when `zero_copy` is on; otherwise it is copied into the
/// index buffer. The threshold used is recorded in the message header, so the reader never
/// has to be told.
/// How the sender recognises objects it has written already (shared_ptr, shared()): MEL's
/// pluggable map. pointer_map: open addressing specialized for pointers (the default);
/// std_unordered_map: the standard node-based map (a baseline).
enum class pointer_tracking : std::uint8_t { pointer_map, std_unordered_map };

struct options {
    std::size_t zero_copy_threshold = 4096;
    bool zero_copy = true;
    pointer_tracking tracking = pointer_tracking::pointer_map;
    /// Deep copy's array() blocks: at or above this many bytes an array is its own pointer
    /// chunk, below it is packed (0: the zero-copy threshold). Decided per array and recorded
    /// in the stream, so readers need not know it. Ignored when zero_copy is off.
    std::size_t deep_array_threshold = 0;
};

/// The process-wide default used by save() without explicit options: options{} (a 4 KiB
/// threshold, as API.md documents) unless the program sets another. The runtime does not
/// change it: its parcels take `--courier:zero_copy_threshold` on their own. Thread-safe;
/// changing it does not affect archives already being written.
options default_options() noexcept;
void set_default_options(options const& o) noexcept;

} // namespace courier::serialization
