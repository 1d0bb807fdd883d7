// SPDX-License-Identifier: BSL-1.0
// What rma_vector and rma_object share on the wire: a block of pool memory goes as an rma chunk
// carrying the pool's key (or inline below the threshold), and comes back as pool memory,
// adopting the received buffer when it lies in the pool, else copied once into the pool.
#pragma once

#include <courier/rma/pool.hpp>
#include <courier/serialization/input_archive.hpp>
#include <courier/serialization/output_archive.hpp>

#include <cstdint>
#include <cstring>
#include <memory>

namespace courier::rma::detail {

/// `bytes` at `p` in pool memory, kept alive by `owner` until the message is sent.
inline void save_pool_block(serialization::output_archive& ar, void const* p, std::size_t bytes,
                            std::shared_ptr<void const> owner) {
    if (ar.is_zero_copy(bytes)) {
        ar.keep_alive(std::move(owner));
        auto r = find(p, bytes);
        ar.save_rma_block(p, bytes, r && r->registrar != nullptr ? r->reg.key : 0);
    } else if (bytes != 0) {
        ar.save_bytes(p, bytes);
    }
}

/// The next block of `bytes`, as pool memory aligned to `alignment`: the received buffer
/// itself when the message owns it and it lies in the pool (adopted), else a copy. Null for 0.
inline std::shared_ptr<std::byte[]> load_pool_block(serialization::input_archive& ar,
                                                    std::size_t bytes, std::size_t alignment) {
    auto blk = ar.take_block(bytes);
    if (bytes == 0) {
        return nullptr;
    }
    bool aligned = reinterpret_cast<std::uintptr_t>(blk.data) % alignment == 0;
    if (blk.owner != nullptr && *blk.owner && aligned && contains(blk.data, bytes)) {
        count_load(true, 0);
        return std::shared_ptr<std::byte[]>(std::const_pointer_cast<void>(*blk.owner),
                                            const_cast<std::byte*>(blk.data));
    }
    auto fresh = allocate_shared(bytes, alignment < 16 ? 16 : alignment);
    std::memcpy(fresh.get(), blk.data, bytes);
    if (blk.type != serialization::chunk_type::index) {
        count_load(false, bytes);
    }
    return fresh;
}

} // namespace courier::rma::detail
