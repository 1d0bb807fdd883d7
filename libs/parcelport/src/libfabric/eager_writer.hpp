// SPDX-License-Identifier: BSL-1.0
// Writing eager messages (wire.hpp): a parcel's header, chunk descriptors and inline index
// data, a coalesced message's records, a split message's part headers. The sender and the
// coalescer write with these; the wire fuzzer's corpus generator writes its seeds with them.
#pragma once

#include "../wire.hpp"

#include <courier/serialization/message.hpp>

#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace courier::parcelport::fabric {

/// Writes message `m`'s eager message into `eager`, for receive buffers of `recv_size` bytes:
/// `h` (kind parcel, token, source, send id) with its flags, chunk count and index size set
/// here, one descriptor per chunk, then the index data when it fits (else one more
/// descriptor for it); with too many chunks to describe inline, the descriptor list goes into
/// `table` (flag descriptors_remote). `expose(address, size)` returns the {address, key} pair
/// under which the receiver reads that memory (it may throw; the outputs are then unspecified).
/// Returns true if the receiver reads anything (it then answers with DONE). Throws
/// std::length_error for more than wire::max_chunks chunks.
template <class Expose>
bool write_eager(serialization::message const& m, wire::header h, std::size_t recv_size,
                 Expose&& expose, std::vector<std::byte>& eager, std::vector<std::byte>& table) {
    auto data = m.data();
    auto chunks = m.chunks();
    if (chunks.size() > wire::max_chunks) {
        throw std::length_error("courier: a message of " + std::to_string(chunks.size()) +
                                " chunks is more than the protocol carries (" +
                                std::to_string(wire::max_chunks) + ")");
    }
    std::size_t fixed = sizeof(wire::header) + chunks.size() * sizeof(wire::descriptor);
    bool const remote_table = fixed + sizeof(wire::descriptor) > recv_size;
    if (remote_table) {
        // Too many chunks to describe inline: the list goes in a table the receiver reads.
        fixed = sizeof(wire::header) + sizeof(wire::descriptor);
    }
    bool const inline_index = fixed + data.size() <= recv_size;
    if (!inline_index && !remote_table) {
        fixed += sizeof(wire::descriptor);
    }
    eager.resize(fixed + (inline_index ? data.size() : 0));
    if (remote_table) {
        table.resize((chunks.size() + (inline_index ? 0 : 1)) * sizeof(wire::descriptor));
    }
    std::byte* desc_out = remote_table ? table.data() : eager.data() + sizeof(wire::header);
    auto put = [&](wire::descriptor const& d) {
        std::memcpy(desc_out, &d, sizeof d);
        desc_out += sizeof d;
    };
    bool reads = false;
    for (auto const& c : chunks) {
        wire::descriptor d{};
        d.type = static_cast<std::uint8_t>(c.type);
        d.size = c.size;
        if (c.type != serialization::chunk_type::index && c.size != 0) {
            // The receiver reads the chunk in place: nothing is copied.
            std::tie(d.address, d.key) = expose(c.address, c.size);
            reads = true;
        }
        put(d);
    }
    if (!inline_index) {
        wire::descriptor d{};
        d.type = wire::index_buffer_type;
        d.size = data.size();
        std::tie(d.address, d.key) = expose(data.data(), data.size());
        put(d);
        reads = true;
    }
    if (remote_table) {
        wire::descriptor d{};
        d.type = wire::descriptor_table_type;
        d.size = table.size();
        std::tie(d.address, d.key) = expose(table.data(), table.size());
        std::memcpy(eager.data() + sizeof(wire::header), &d, sizeof d);
        reads = true;
    }
    h.kind = wire::parcel;
    h.flags = static_cast<std::uint8_t>((inline_index ? wire::index_inline : 0) |
                                        (remote_table ? wire::descriptors_remote : 0));
    h.chunk_count = static_cast<std::uint32_t>(chunks.size());
    h.index_size = data.size();
    std::memcpy(eager.data(), &h, sizeof h);
    if (inline_index && !data.empty()) {
        std::memcpy(eager.data() + fixed, data.data(), data.size());
    }
    return reads;
}

/// Appends a parcel's eager message to a coalesced message as one record (its length, 4 zero
/// bytes, the message, zero padding).
inline void append_record(std::vector<std::byte>& batch, std::span<std::byte const> eager) {
    std::size_t at = batch.size();
    batch.resize(at + wire::record_size(eager.size())); // zero-filled: prefix half, padding
    auto len = static_cast<std::uint32_t>(eager.size());
    std::memcpy(batch.data() + at, &len, sizeof len);
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

} // namespace courier::parcelport::fabric
