// SPDX-License-Identifier: BSL-1.0
// receive_buffer_pool: where received pointer chunks land (the libfabric transport's RMA reads,
// the MPI transport's receives), reused by power-of-two size class.
#pragma once

#include <courier/serialization/message.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace courier::parcelport {

/// Receive buffers for received pointer chunks, reused by power-of-two size class (4 KiB ... 1
/// GiB). A fresh large buffer costs a page fault per 4 KiB on first touch (and glibc returns large
/// blocks to the kernel on free), more than the copy itself at megabytes; a reused one is
/// mapped already. The buffers go to the user inside the message (a serialize_buffer adopts
/// them); their deleter returns them here, also after the transport is gone. At most `limit`
/// bytes are kept. Thread safety: get() and the deleters may run on any thread.
class receive_buffer_pool : public std::enable_shared_from_this<receive_buffer_pool> {
public:
    static constexpr unsigned min_shift = 12, max_shift = 30;
    explicit receive_buffer_pool(std::size_t limit) : limit_(limit) {}
    ~receive_buffer_pool();
    receive_buffer_pool(receive_buffer_pool const&) = delete;
    receive_buffer_pool& operator=(receive_buffer_pool const&) = delete;

    /// A buffer of at least `n` bytes; `reused` says whether it came from the pool.
    std::shared_ptr<std::byte[]> get(std::size_t n, bool& reused);

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
std::shared_ptr<std::byte[]> chunk_destination(receive_buffer_pool& pool, std::size_t n,
                                               bool rma_chunk, bool& in_rma_pool, bool& reused);

/// A received message whose chunks have landed: the chunk list validated and each landing
/// buffer made the owner of its chunk. nullopt (with one rate-limited log line naming
/// `source`) when the parts do not make a valid message.
std::optional<serialization::message>
assemble_received(serialization::message&& m,
                  std::vector<serialization::serialization_chunk>&& chunks,
                  std::vector<std::shared_ptr<std::byte[]>>& owners, std::uint32_t source);

} // namespace courier::parcelport
