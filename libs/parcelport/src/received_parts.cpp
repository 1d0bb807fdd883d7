// SPDX-License-Identifier: BSL-1.0
#include "received_parts.hpp"

#include <courier/common/big_alloc.hpp>
#include <courier/common/log.hpp>
#include <courier/common/small_alloc.hpp>
#include <courier/rma/pool.hpp>
#include <courier/serialization/error.hpp>

#include <string>

namespace courier::parcelport {

namespace {
/// A class buffer of 2^shift bytes and a line of slack: a big one (big_alloc.hpp: freed in
/// steps, page-aligned) from 64 MiB up, else operator new's, line-aligned.
std::byte* new_class_buffer(unsigned shift) {
    std::size_t const n = (std::size_t{1} << shift) + receive_buffer_pool::line;
    if (n >= courier::detail::big_alloc_min) {
        return courier::detail::big_alloc(n);
    }
    return static_cast<std::byte*>(
        ::operator new[](n, std::align_val_t{receive_buffer_pool::line}));
}
void delete_class_buffer(std::byte* p, unsigned shift) noexcept {
    std::size_t const n = (std::size_t{1} << shift) + receive_buffer_pool::line;
    if (n >= courier::detail::big_alloc_min) {
        courier::detail::big_free(p, n);
    } else {
        ::operator delete[](p, std::align_val_t{receive_buffer_pool::line});
    }
}
} // namespace

receive_buffer_pool::~receive_buffer_pool() {
    for (unsigned shift = min_shift; shift <= max_shift; ++shift) {
        for (std::byte* p : free_[shift - min_shift]) {
            delete_class_buffer(p, shift);
        }
    }
}

std::shared_ptr<std::byte[]> receive_buffer_pool::get(std::size_t n, bool& reused,
                                                      std::uint64_t align_like) {
    reused = false;
    unsigned shift = min_shift;
    while (shift <= max_shift && (std::size_t{1} << shift) < n) {
        ++shift;
    }
    if (n < (std::size_t{1} << min_shift)) {
        return std::shared_ptr<std::byte[]>(new std::byte[n == 0 ? 1 : n]);
    }
    if (shift > max_shift) { // over 1 GiB: mapped for it alone, unmapped in steps
        return std::shared_ptr<std::byte[]>(courier::detail::big_alloc(n),
                                            [n](std::byte* q) { courier::detail::big_free(q, n); });
    }
    std::byte* p = nullptr;
    {
        std::lock_guard g(mutex_);
        auto& list = free_[shift - min_shift];
        if (!list.empty()) {
            p = list.back();
            list.pop_back();
            cached_ -= (std::size_t{1} << shift) + line;
            reused = true;
        }
    }
    if (p == nullptr) {
        p = new_class_buffer(shift);
    }
    // At the sender's offset within its line, rounded down to operator new's alignment: a
    // chunk keeps the alignment a loader may expect whatever offset a descriptor names.
    auto const offset =
        static_cast<std::size_t>(align_like % line) & ~(alignof(std::max_align_t) - 1);
    // The control block from the small-object pool: no malloc per received chunk.
    return std::shared_ptr<std::byte[]>(
        p + offset,
        [self = shared_from_this(), shift, offset](std::byte* q) { self->put(q - offset, shift); },
        courier::detail::pool_allocator<std::byte>{});
}

void receive_buffer_pool::put(std::byte* p, unsigned shift) noexcept {
    {
        std::lock_guard g(mutex_);
        if (cached_ + (std::size_t{1} << shift) + line <= limit_) {
            free_[shift - min_shift].push_back(p);
            cached_ += (std::size_t{1} << shift) + line;
            return;
        }
    }
    delete_class_buffer(p, shift);
}

std::uint64_t check_descriptors(wire::header const& h, std::span<wire::descriptor const> ds,
                                bool index_inline) {
    using serialization::chunk_type;
    using serialization::serialization_error;
    if (ds.size() != std::size_t{h.chunk_count} + (index_inline ? 0 : 1) ||
        (!index_inline &&
         (ds.back().type != wire::index_buffer_type || ds.back().size != h.index_size))) {
        throw serialization_error("descriptors do not match the header");
    }
    if (h.index_size > wire::max_chunk_bytes) {
        throw serialization_error("an index of " + std::to_string(h.index_size) +
                                  " bytes is larger than any address space");
    }
    // Each size at most 2^47 (the sums below cannot overflow before they are over the memory).
    std::uint64_t total = 0, to_receive = index_inline ? 0 : h.index_size, offset = 0;
    for (std::size_t i = 0; i < ds.size(); ++i) {
        auto const& d = ds[i];
        if (d.size > wire::max_chunk_bytes) {
            throw serialization_error("a chunk of " + std::to_string(d.size) +
                                      " bytes is larger than any address space");
        }
        total += d.size;
        if (total > wire::machine_memory()) {
            throw serialization_error("a parcel of more than " + std::to_string(total) +
                                      " bytes is larger than this machine's memory (" +
                                      std::to_string(wire::machine_memory()) + " bytes)");
        }
        if (i == h.chunk_count) {
            break; // the index buffer's own descriptor
        }
        if (d.type == static_cast<std::uint8_t>(chunk_type::index)) {
            offset += d.size;
        } else if (d.type == static_cast<std::uint8_t>(chunk_type::pointer) ||
                   d.type == static_cast<std::uint8_t>(chunk_type::rma)) {
            to_receive += d.size;
        } else {
            throw serialization_error("unknown chunk type " + std::to_string(d.type));
        }
    }
    if (offset != h.index_size) {
        throw serialization_error("index chunks do not add up to the index size");
    }
    return to_receive;
}

std::shared_ptr<std::byte[]> chunk_destination(receive_buffer_pool& pool, std::size_t n,
                                               bool rma_chunk, bool& in_rma_pool, bool& reused,
                                               std::uint64_t align_like) {
    in_rma_pool = false;
    reused = false;
    if (rma_chunk) {
        try {
            auto b = rma::allocate_shared(n);
            in_rma_pool = true;
            return b;
        } catch (rma::pool_exhausted const&) {
            // the receive buffer pool below
        }
    }
    return pool.get(n, reused, align_like);
}

std::uint64_t chunk_bytes(std::span<serialization::serialization_chunk const> chunks) noexcept {
    std::uint64_t n = 0;
    for (auto const& c : chunks) {
        n += c.type != serialization::chunk_type::index ? c.size : 0;
    }
    return n;
}

std::string over_receive_limit(std::uint64_t bytes, std::size_t limit) noexcept {
    try {
        return "its " + std::to_string(bytes) +
               " bytes of chunks are over the receiver's limit of " + std::to_string(limit) +
               " bytes (--courier:max_parcel_size)";
    } catch (...) {
        return "over the limit"; // within the string's own storage: cannot throw
    }
}

std::string no_memory_to_receive(std::uint64_t bytes, char const* what) noexcept {
    try {
        return "the receiver had no memory for its " + std::to_string(bytes) + " bytes of " + what +
               " (std::bad_alloc)";
    } catch (...) {
        return "no memory"; // within the string's own storage: cannot throw
    }
}

std::optional<serialization::message>
assemble_received(serialization::message&& m,
                  std::vector<serialization::serialization_chunk>&& chunks,
                  std::vector<std::shared_ptr<std::byte[]>>& owners, std::uint32_t source,
                  std::string const& refused) {
    try {
        if (!refused.empty()) {
            m.set_refused();
        }
        m.complete_parts(std::move(chunks));
    } catch (std::exception const& e) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}", source,
                               e.what());
        return std::nullopt;
    }
    for (std::size_t i = 0; i < owners.size(); ++i) {
        if (owners[i]) {
            m.set_chunk_owner(i, std::move(owners[i]));
        }
    }
    if (!refused.empty()) {
        static logging::rate_limit limit;
        logging::error_limited(limit, "refused a parcel from locality {}: {}", source, refused);
        try {
            // The reason, as the owner of each chunk not received (message::set_refused).
            auto why = std::make_shared<std::string const>(refused);
            auto const list = m.chunks();
            for (std::size_t i = 0; i < list.size(); ++i) {
                if (list[i].type != serialization::chunk_type::index &&
                    list[i].address == nullptr && list[i].size != 0) {
                    m.set_chunk_owner(i, why);
                }
            }
        } catch (std::bad_alloc const&) {
            // Delivered without its reason: loading still fails ("it has no address").
        }
    }
    return std::move(m);
}

} // namespace courier::parcelport
