// SPDX-License-Identifier: BSL-1.0
// Checkpoints: the same archives, written to a file.
//
// File layout (all header fields little-endian):
//   0   8  magic "COURCKPT"
//   8   4  format version (2; version 1 files, which have no type table, are read too)
//   12  1  byte order of the writer: 1 little, 2 big
//   13  3  zero
//   16  8  body size: bytes after this 48-byte header
//   24  8  segment count
//   32  8  CRC-32C of the body (upper 32 bits zero)
//   40  8  zero
//   body: segments in stream order, each {u8 type (0 index, 1 pointer, 2 rma, 3 type table),
//         7 zero bytes, u64 size} followed by its bytes and zero padding to a multiple of 16, so
//         that every payload starts 16-byte aligned (loaders can then adopt it in place).
//         save_to_file() ends the body with one type table segment (detail/type_table.hpp): the
//         class version of every user type in the file, written once per file instead of before
//         every object. A file without one (write_message_file) has versions inline.
// The layout streams: save_to_file() emits segments as the archive produces them (index data
// every streaming_buffer_size bytes, large blocks straight from where they lie) and patches the
// header at the end, so a checkpoint never needs the whole archive in memory (MEL's point: a
// structure larger than half of memory). By default it writes PATH.tmp and swaps it into PATH's
// place when complete: a failed save leaves any earlier checkpoint intact (checkpoint_options tell
// the other policies: in place, and durable against power loss). Loading checks magic, version,
// byte order, size, checksum and segment structure before any value is read; pointer segments are
// adopted by serialize_buffer without a copy.
#pragma once

#include <courier/serialization/save_load.hpp>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace courier::serialization {

inline constexpr std::size_t file_header_size = 48;
inline constexpr std::uint32_t file_format_version = 2;

/// Writes `m` to `path` (replacing it). Throws serialization_error on I/O failure.
void write_message_file(std::filesystem::path const& path, message const& m);
/// Reads and verifies a checkpoint file. Throws serialization_error naming the problem.
message read_message_file(std::filesystem::path const& path);
/// Parses a checkpoint held in memory (`size` bytes at `bytes`, which the message then shares
/// so pointer segments are referenced in place). Throws serialization_error.
message checkpoint_from_bytes(std::shared_ptr<std::byte[]> bytes, std::size_t size);

/// How a checkpoint replaces the file at its path.
struct checkpoint_options {
    /// true: write PATH.tmp and, once complete, swap it with PATH (renameat2 RENAME_EXCHANGE)
    /// and unlink the old file, or rename it over PATH where there is no earlier file or the
    /// file system cannot exchange. A failed save (or a crash of this process) leaves the
    /// earlier checkpoint intact and readers never see a partial file; memory that a load
    /// adopted from the earlier file keeps its bytes. The exchange avoids ext4's
    /// replace-by-rename flush (auto_da_alloc), which makes a small save an order of magnitude
    /// slower (benchmarks/RESULTS.md). Against power loss use `durable`.
    /// false: write PATH in place (truncating it), as a plain ofstream does; a failed save
    /// leaves a file that fails to load with a clear error (its header is written last). Do not
    /// save in place over a file whose loaded data is still in use: loads map the file.
    bool atomic = true;
    /// true: fdatasync the file before it takes PATH's name, and fsync the directory after,
    /// so the checkpoint survives power loss once save_to_file returns.
    bool durable = false;
};

/// Writes a checkpoint file segment by segment (a chunk_sink for a streaming output_archive).
class checkpoint_writer final : public chunk_sink {
public:
    /// Opens PATH.tmp (or PATH, when not atomic) for writing. Throws serialization_error.
    explicit checkpoint_writer(std::filesystem::path path, checkpoint_options how = {});
    /// Without commit(): removes PATH.tmp (the save failed; in place: leaves PATH, whose header
    /// is still zero, so it fails to load).
    ~checkpoint_writer() override;
    checkpoint_writer(checkpoint_writer const&) = delete;
    checkpoint_writer& operator=(checkpoint_writer const&) = delete;
    void index_segment(std::byte const* p, std::size_t n) override;
    void external_segment(chunk_type t, void const* p, std::size_t n) override;
    bool records_types() const override { return true; }
    void type_table(std::span<std::byte const> encoded) override;
    /// Writes the header and puts PATH.tmp in PATH's place. Throws serialization_error.
    void commit();
    /// Bytes written so far (header included).
    std::uint64_t bytes_written() const noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

/// What save_to_file did.
struct checkpoint_statistics {
    std::uint64_t file_bytes = 0;
    std::size_t buffer_bytes = 0; ///< the index buffer it needed (independent of the data size)
};

/// Streams `values` into the checkpoint file `path` (replacing it as `how` says).
template <class... Args>
checkpoint_statistics save_to_file(std::filesystem::path const& path, checkpoint_options how,
                                   options const& o, Args const&... values) {
    checkpoint_writer w(path, how);
    message scratch;
    {
        output_archive ar(scratch, o, &w);
        (ar.save(values), ...);
        ar.finish();
    }
    w.commit();
    return {w.bytes_written(), scratch.capacity()};
}

template <class... Args>
checkpoint_statistics save_to_file(std::filesystem::path const& path, options const& o,
                                   Args const&... values) {
    return save_to_file(path, checkpoint_options{}, o, values...);
}

template <class... Args>
checkpoint_statistics save_to_file(std::filesystem::path const& path, Args const&... values) {
    return save_to_file(path, default_options(), values...);
}

template <class... Args>
void load_from_file(std::filesystem::path const& path, Args&&... values) {
    load(read_message_file(path), std::forward<Args>(values)...);
}

} // namespace courier::serialization
