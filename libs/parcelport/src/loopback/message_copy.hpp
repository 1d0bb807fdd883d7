// SPDX-License-Identifier: BSL-1.0
// What a loopback send makes of a message: a copy that owns every byte (index data and each
// non-empty pointer or rma chunk), as a receiver of the libfabric transport gets it.
#pragma once

#include <courier/rma/pool.hpp>
#include <courier/serialization/message.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace courier::parcelport::detail {

/// A message whose bytes are all its own, and what making it took.
struct owned_copy {
    serialization::message msg;
    std::uint64_t bytes = 0;        ///< bytes copied
    std::uint64_t pool_buffers = 0; ///< rma chunks copied into rma pool memory
};

inline std::shared_ptr<std::byte[]> chunk_buffer(std::size_t n, bool rma_chunk, owned_copy& out) {
    if (rma_chunk) {
        try {
            auto b = rma::allocate_shared(n);
            ++out.pool_buffers;
            return b;
        } catch (rma::pool_exhausted const&) {
            // Over the pool's limit: plain memory; a loader that needs pool memory copies.
        }
    }
    return std::shared_ptr<std::byte[]>(new std::byte[n]);
}

/// Copies the index data and every non-empty external chunk of `m`, as a receiver of the
/// libfabric transport gets them: each external chunk in a buffer that is its owner, rma keys
/// cleared. Throws serialization_error when the copy does not validate.
inline owned_copy copy_message(serialization::message const& m) {
    owned_copy out;
    auto data = m.data();
    out.msg = serialization::message::with_index_buffer(data.size());
    if (!data.empty()) {
        std::memcpy(out.msg.index_buffer(), data.data(), data.size());
    }
    out.bytes = data.size();
    auto chunks = serialization::message::chunk_list();
    chunks.assign(m.chunks().begin(), m.chunks().end());
    std::vector<std::shared_ptr<void const>> owners;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        auto& c = chunks[i];
        if (c.type == serialization::chunk_type::index || c.size == 0 || c.address == nullptr) {
            continue; // complete_parts() rejects a non-empty chunk without an address
        }
        auto buf = chunk_buffer(c.size, c.type == serialization::chunk_type::rma, out);
        std::memcpy(buf.get(), c.address, c.size);
        out.bytes += c.size;
        c.address = buf.get();
        c.rkey = 0;
        owners.resize(chunks.size());
        owners[i] = std::move(buf);
    }
    out.msg.complete_parts(std::move(chunks));
    for (std::size_t i = 0; i < owners.size(); ++i) {
        if (owners[i]) {
            out.msg.set_chunk_owner(i, std::move(owners[i]));
        }
    }
    return out;
}

} // namespace courier::parcelport::detail
