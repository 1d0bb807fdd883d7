// SPDX-License-Identifier: BSL-1.0
// Writing eager messages (wire.hpp): a parcel's header, chunk descriptors and inline index
// data, a coalesced message's records, a split message's part headers. The libfabric sender and
// coalescer and the MPI transport's header messages and batches write with these; the wire
// fuzzer's corpus generator writes its seeds with them.
#pragma once

#include "wire.hpp"

#include <courier/serialization/message.hpp>

#include <bit>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace courier::parcelport {

/// The shape of message `m`'s eager message for receive buffers of `recv_size` bytes: the
/// header and descriptors (`fixed` bytes), then the index data when it fits (`inline_index`);
/// with too many chunks to describe inline, the descriptor list goes into a table the receiver
/// reads (`remote_table`). Throws std::length_error for more than wire::max_chunks chunks.
struct eager_layout {
    std::size_t fixed = 0;
    bool remote_table = false;
    bool inline_index = false;
    std::size_t eager_size = 0; // fixed, plus the index data when inline
    std::size_t table_size = 0; // bytes of the remote descriptor table (0: none)
    /// Nothing for the receiver to read: no chunk outside the index, the index inline.
    bool eager_only = false;
};

inline eager_layout layout_eager(serialization::message const& m, std::size_t recv_size) {
    auto chunks = m.chunks();
    if (chunks.size() > wire::max_chunks) {
        throw std::length_error("courier: a message of " + std::to_string(chunks.size()) +
                                " chunks is more than the protocol carries (" +
                                std::to_string(wire::max_chunks) + ")");
    }
    eager_layout l;
    l.fixed = sizeof(wire::header) + chunks.size() * sizeof(wire::descriptor);
    l.remote_table = l.fixed + sizeof(wire::descriptor) > recv_size;
    if (l.remote_table) {
        l.fixed = sizeof(wire::header) + sizeof(wire::descriptor);
    }
    l.inline_index = l.fixed + m.data().size() <= recv_size;
    if (!l.inline_index && !l.remote_table) {
        l.fixed += sizeof(wire::descriptor);
    }
    l.eager_size = l.fixed + (l.inline_index ? m.data().size() : 0);
    if (l.remote_table) {
        l.table_size = (chunks.size() + (l.inline_index ? 0 : 1)) * sizeof(wire::descriptor);
    }
    l.eager_only = l.inline_index && !l.remote_table;
    for (auto const& c : chunks) {
        l.eager_only = l.eager_only && (c.type == serialization::chunk_type::index || c.size == 0);
    }
    return l;
}

/// Writes message `m`'s eager message, laid out as `l`, into `eager` (l.eager_size bytes) and
/// its remote descriptor table, if any, into `table` (l.table_size bytes): `h` (kind parcel,
/// token, source, send id) with its flags, chunk count and index size set here, one descriptor
/// per chunk, then the index data when it fits (else one more descriptor for it).
/// `expose(address, size)` returns the {address, key} pair under which the receiver reads that
/// memory (it may throw; the outputs are then unspecified; never called when l.eager_only).
/// Returns true if the receiver reads anything (it then answers with DONE). With `copy_index`
/// false, an inline index is left out (`eager` then holds l.fixed bytes): the caller sends the
/// index data from the message itself right behind them (the same bytes on the wire).
template <class Expose>
bool write_eager_into(serialization::message const& m, wire::header h, eager_layout const& l,
                      Expose&& expose, std::byte* eager, std::byte* table, bool copy_index = true) {
    auto data = m.data();
    std::byte* desc_out = l.remote_table ? table : eager + sizeof(wire::header);
    auto put = [&](std::uint8_t type, std::uint64_t size,
                   std::pair<std::uint64_t, std::uint64_t> where) {
        wire::write_descriptor(desc_out, type, size, where.first, where.second);
        desc_out += sizeof(wire::descriptor);
    };
    bool reads = false;
    for (auto const& c : m.chunks()) {
        std::pair<std::uint64_t, std::uint64_t> where{0, 0};
        if (c.type != serialization::chunk_type::index && c.size != 0) {
            // The receiver reads the chunk in place: nothing is copied.
            where = expose(c.address, c.size);
            reads = true;
        }
        put(static_cast<std::uint8_t>(c.type), c.size, where);
    }
    if (!l.inline_index) {
        put(wire::index_buffer_type, data.size(), expose(data.data(), data.size()));
        reads = true;
    }
    if (l.remote_table) {
        auto const where = expose(table, l.table_size);
        wire::write_descriptor(eager + sizeof(wire::header), wire::descriptor_table_type,
                               l.table_size, where.first, where.second);
        reads = true;
    }
    h.kind = wire::parcel;
    h.flags = static_cast<std::uint8_t>((l.inline_index ? wire::index_inline : 0) |
                                        (l.remote_table ? wire::descriptors_remote : 0));
    h.chunk_count = static_cast<std::uint32_t>(m.chunks().size());
    h.index_size = data.size();
    wire::write_header(eager, h);
    if (copy_index && l.inline_index && !data.empty()) {
        std::memcpy(eager + l.fixed, data.data(), data.size());
    }
    return reads;
}

/// An allocator whose value-less construct() leaves a byte uninitialized: a buffer that is
/// resized and then written in full (an eager message) is not zero-filled first. With
/// std::vector's value-initialization, a 32 KiB eager message on tcp cost a memset of its
/// bytes on every send (6.6 % of the sender's time in posts of 32 KiB).
template <class T>
struct default_init_allocator : std::allocator<T> {
    template <class U>
    struct rebind {
        using other = default_init_allocator<U>;
    };
    default_init_allocator() noexcept = default;
    template <class U>
    default_init_allocator(default_init_allocator<U> const&) noexcept {}
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};
/// Bytes that resize() leaves uninitialized (see default_init_allocator).
using byte_buffer = std::vector<std::byte, default_init_allocator<std::byte>>;

/// Writes message `m`'s eager message into `eager` and, with too many chunks to describe
/// inline, its descriptor list into `table` (flag descriptors_remote), for receive buffers of
/// `recv_size` bytes (see layout_eager and write_eager_into); `Bytes`: a vector of bytes
/// (byte_buffer on the send path). Returns true if the receiver reads
/// anything. Throws std::length_error for more than wire::max_chunks chunks.
template <class Expose, class Bytes>
bool write_eager(serialization::message const& m, wire::header h, std::size_t recv_size,
                 Expose&& expose, Bytes& eager, Bytes& table) {
    eager_layout const l = layout_eager(m, recv_size);
    eager.resize(l.eager_size);
    table.resize(l.table_size);
    return write_eager_into(m, h, l, std::forward<Expose>(expose), eager.data(), table.data());
}

/// Writes the record prefix of a record of `bytes` bytes at `at`: its length and its record
/// flags (0: an eager message; wire::record_compact: a parcel's stream alone). The record's bytes
/// follow it, then zero padding to wire::record_size.
inline void write_record_prefix(std::byte* at, std::size_t bytes, std::uint32_t flags = 0) {
    static_assert(std::endian::native == std::endian::little);
    wire::store_word(at,
                     std::uint64_t{static_cast<std::uint32_t>(bytes)} | std::uint64_t{flags} << 32);
}

/// Appends a parcel's eager message to a coalesced message as one record (its length, 4 zero
/// bytes, the message, zero padding).
inline void append_record(std::vector<std::byte>& batch, std::span<std::byte const> eager) {
    std::size_t at = batch.size();
    batch.resize(at + wire::record_size(eager.size())); // zero-filled: prefix half, padding
    write_record_prefix(batch.data() + at, eager.size());
    std::memcpy(batch.data() + at + wire::record_prefix, eager.data(), eager.size());
}

/// The header of part `part` (0 or 1) of split message `id`, `total` bytes in all, from a
/// header of this locality (token and source set).
inline wire::header split_header(wire::header h, std::uint64_t id, std::uint32_t part,
                                 std::uint64_t total) noexcept {
    h.kind = wire::fragment;
    h.flags = 0;
    h.send_id = id; // unique among the sender's sends in flight
    h.chunk_count = part;
    h.index_size = total;
    return h;
}

} // namespace courier::parcelport
