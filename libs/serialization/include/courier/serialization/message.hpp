// SPDX-License-Identifier: BSL-1.0
// message: a serialized archive = an index buffer plus its chunk list (HPX paper, Figure 2).
//
// Ownership: the message owns its index buffer. Pointer chunks reference memory it does not own:
// on the sending side the caller's objects, which must outlive the message (the runtime keeps
// action arguments alive until the send completes); objects passed by reference count (such as
// serialize_buffer) are kept alive by the message itself (keep_alive()). On the receiving side a
// chunk may carry an owner (chunk_owner()), which loaders such as serialize_buffer may share to
// adopt the bytes without copying; so may the index buffer of a large received eager parcel
// (index_owner()), for blocks of at least half of it.
//
// Index buffer layout: an 8-byte header, then the index data.
//   byte 0-1  'C' 'R'                 magic
//   byte 2    format version (1)
//   byte 3    flags: bit 0 = written by a big-endian host; other bits must be 0
//   byte 4-7  zero-copy threshold, u32 little-endian; 0xffffffff = zero copy off
// Thread safety: none; a message is used by one thread at a time.
#pragma once

#include <courier/serialization/chunk.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace courier::serialization {

class output_archive;
class input_archive;
namespace detail {
class type_table;
}

inline constexpr std::size_t message_header_size = 8;
inline constexpr std::uint8_t message_format_version = 1;
inline constexpr std::uint32_t threshold_zero_copy_off = 0xffffffffu;

class message {
public:
    message() noexcept = default;
    message(message&& other) noexcept;
    message& operator=(message&& other) noexcept;
    message(message const&) = delete;
    message& operator=(message const&) = delete;
    ~message();

    /// The index buffer (header included).
    std::span<std::byte const> data() const noexcept { return {buffer_, size_}; }
    /// The chunk list. A message of one chunk holds it inline: like an iterator, the span is
    /// valid until the message is changed, moved or destroyed.
    std::span<serialization_chunk const> chunks() const noexcept {
        if (one_chunk_) {
            return {&single_, 1};
        }
        return chunks_;
    }
    std::size_t index_size() const noexcept { return size_; }
    /// Bytes of the whole logical stream: index buffer plus every pointer and rma chunk.
    std::size_t total_size() const noexcept;
    /// Number of pointer and rma chunks.
    std::size_t external_chunk_count() const noexcept;
    std::size_t capacity() const noexcept { return capacity_; }
    /// Bytes moved by buffer growth while writing (0 when the buffer was large enough).
    std::size_t growth_copied_bytes() const noexcept { return growth_copied_; }

    /// Moves the index into a buffer of exactly its size when it fills at most half of its
    /// capacity, so that a message waiting in a queue costs what it carries (a small index goes
    /// to a block of the small-object pool: no malloc). Offsets (index chunks) stay valid;
    /// pointers into the old buffer do not. Throws std::bad_alloc.
    void shrink_to_fit();
    /// Empties the message but keeps the buffer's capacity for reuse.
    void clear() noexcept;
    void reserve(std::size_t bytes);

    /// Keeps `ref` alive as long as this message (sender side: reference-counted payloads).
    void keep_alive(std::shared_ptr<void const> ref);
    /// Receiver side: the memory of chunk `i` is owned by `owner`; loaders may share it.
    void set_chunk_owner(std::size_t i, std::shared_ptr<void const> owner);
    std::shared_ptr<void const> const& chunk_owner(std::size_t i) const noexcept;

    /// Builds a message from received parts: copies `data` as the index buffer and takes the
    /// chunk list as is. Throws serialization_error unless validate() passes.
    static message from_parts(std::span<std::byte const> data,
                              std::vector<serialization_chunk> chunks);
    /// Receiver side, without the copy from_parts makes: a message with an uninitialized
    /// index buffer of `index_size` bytes (header included) for the network to fill in place
    /// (index_buffer()), then complete_parts() with the chunk list, which validates.
    static message with_index_buffer(std::size_t index_size);
    std::byte* index_buffer() noexcept {
        checked_ = false; // the caller may change what check() read
        return buffer_;
    }
    void complete_parts(std::vector<serialization_chunk> chunks);
    /// Receiver side, before complete_parts(): the pointer and rma chunks that have no address
    /// were not received (the receiver had no memory for them, or they were over its limit),
    /// and the owner of each (set_chunk_owner(), after complete_parts()) is a std::string const
    /// saying why. Such a message passes validate(); reading one of those chunks throws
    /// serialization_error with the reason, so that a call whose arguments could not be
    /// received fails with it (an error reply) and a reply whose result could not fails its
    /// future. (A flag, not a member holding the reason: every message moved on the parcel
    /// path would carry it.)
    void set_refused() noexcept {
        checked_ = false;
        refused_ = true;
    }
    bool refused() const noexcept { return refused_; }
    /// Checkpoints: the class information of the file this message was read from (the written
    /// version of each type; detail/type_table.hpp). Null for messages, which carry versions
    /// inline, and for files written without one.
    std::shared_ptr<detail::type_table const> const& type_table() const noexcept { return types_; }
    void set_type_table(std::shared_ptr<detail::type_table const> t) noexcept {
        holds_refs_ = holds_refs_ || t != nullptr;
        types_ = std::move(t);
    }

    /// A message whose whole stream is `data` (a single index chunk). Validates like from_parts.
    /// An index of at least shareable_index_min bytes goes to a reference-counted block
    /// (index_owner()) that loaders may share: a large block received inline (a serialize_buffer
    /// in an eager parcel) is then adopted, not copied a second time.
    static message from_bytes(std::span<std::byte const> data);
    /// The owner of the index buffer's memory when loaders may share it (from_bytes), else null.
    /// The buffer is then never written in place (like a view's).
    std::shared_ptr<void const> const& index_owner() const noexcept { return index_owner_; }
    /// The smallest index from_bytes puts in a shared block, and the smallest index block a
    /// loader may adopt from it (input_archive::take_block: also at least half of the index, so
    /// that an adopted block keeps at most twice its bytes alive).
    static constexpr std::size_t shareable_index_min = 4096;
    /// Receiver side, for parcels read where they lie: makes this message (empty, or a view
    /// already) what from_bytes(data) would make, without copying `data` and without checking
    /// it (an input archive checks it before reading). The caller keeps `data` alive and
    /// unchanged while the message uses it; the message never writes it (growing it copies
    /// the bytes into a buffer of its own first) and frees nothing of it.
    void view(std::span<std::byte const> data);

    /// Checks the header (magic, format version, byte order, flags) and that the chunk list is
    /// consistent: index chunks tile the index buffer in order, external chunks have an
    /// address when non-empty, no unknown chunk types. Throws serialization_error.
    void validate() const { (void)check(); }
    /// The zero-copy threshold recorded in the header (SIZE_MAX when zero copy was off).
    std::size_t recorded_threshold() const;
    /// Checks the header at the start of `stream` (the index buffer of a message, or the bytes
    /// of a whole one-chunk stream) as validate() does, and returns its zero-copy threshold
    /// (SIZE_MAX when zero copy was off). Throws serialization_error.
    static std::size_t header_threshold(std::span<std::byte const> stream);

    /// The capacity an output archive starts with, and the smallest of the six size classes
    /// (4 to 128 KiB, powers of two) in which buffers are kept for reuse in per-thread caches
    /// (up to 1 MiB per class and thread): a malloc + free of 4 KiB, past glibc's tcache, cost
    /// ~700 instructions per message.
    static constexpr std::size_t pooled_capacity = 4096;

    /// An empty chunk list, with the capacity of one a message freed on this thread if the
    /// thread has one (a per-thread cache like the buffers'): for builders of messages
    /// (from_parts' callers) that would otherwise allocate one per message.
    static std::vector<serialization_chunk> chunk_list();
    /// Gives what this thread's cache holds (buffers and chunk lists of messages freed on it)
    /// to the cache all threads share (what does not fit is freed): for a thread that frees
    /// messages now and then but builds none, such as one that runs a transport's progress
    /// pass on a timer. Its cache would otherwise keep, for good, what the threads that build
    /// messages then miss and allocate again.
    static void return_thread_cache() noexcept;

private:
    friend class output_archive;
    friend class input_archive;

    struct check_result {
        std::size_t threshold;
        std::size_t external_bytes;
    };

    std::byte* buffer_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    std::size_t growth_copied_ = 0;
    bool small_buffer_ = false; // buffer_ is a small-object pool block of capacity_ bytes
    bool borrowed_ = false;     // buffer_ is someone else's bytes (view(), index_owner_)
    bool one_chunk_ = false;    // the chunk list is single_ (below)
    bool refused_ = false;      // set_refused()
    // Some reference below may be set (chunk owners, keep_alive(), the type table): clear()
    // resets them only then, so that a parcel's message, cleared when it is started and when it
    // is given back, pays one test for the references it usually never had.
    bool holds_refs_ = false;
    // check() passed and nothing has changed since (every writer clears it), so that a received
    // parcel, checked where it arrives (from_parts, from_bytes), is not checked again by its
    // input archive.
    mutable bool checked_ = false;
    mutable check_result checked_result_{};
    // The chunk list: a message of one chunk (a small parcel's whole index) holds it inline in
    // single_, with no vector storage to take and give back; two or more are in chunks_. chunks_
    // may keep an empty vector's capacity while one_chunk_ is set.
    serialization_chunk single_{};
    std::vector<serialization_chunk> chunks_;
    // Chunk owners: the first one set inline (a parcel's usual single owner, with no vector
    // storage), then all of them in owners_ (empty, or parallel to chunks_).
    static constexpr std::size_t no_owner = static_cast<std::size_t>(-1);
    std::size_t owner_one_at_ = no_owner;
    std::shared_ptr<void const> owner_one_;
    std::vector<std::shared_ptr<void const>> owners_;
    // keep_alive() references: the usual one or two inline, any further ones in keep_alive_.
    std::shared_ptr<void const> keep_first_, keep_second_;
    std::vector<std::shared_ptr<void const>> keep_alive_;
    std::shared_ptr<detail::type_table const> types_;
    // The shared block buffer_ lies in (from_bytes of a large index; borrowed_ is set).
    std::shared_ptr<void const> index_owner_;

    void grow_to(std::size_t min_capacity); // keeps the first size_ bytes
    void release_buffer() noexcept;         // frees (or caches) buffer_
    void release_chunks() noexcept;         // frees (or caches) chunks_' storage
    /// Appends a chunk. The first is set in place (inline: a parcel's usual single chunk costs
    /// no call); a second moves both to the vector.
    void add_chunk(serialization_chunk const& c) {
        checked_ = false;
        if (!one_chunk_ && chunks_.empty()) {
            single_ = c;
            one_chunk_ = true;
            return;
        }
        add_listed_chunk(c);
    }
    void add_listed_chunk(serialization_chunk const& c);        // add_chunk past the first
    static message copy_index(std::span<std::byte const> data); // from_parts without chunks
    // from_bytes of an index of shareable_index_min bytes or more: a shared block.
    static message shared_index(std::span<std::byte const> data);
    check_result check() const; // validate(), returning what readers need
};

} // namespace courier::serialization
