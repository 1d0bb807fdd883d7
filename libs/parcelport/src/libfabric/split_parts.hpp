// SPDX-License-Identifier: BSL-1.0
// split_parts: a message sent as two parts (wire::fragment), each within the provider's inject
// size, which the receiver joins (fragments.hpp). Part 0 carries the message's first
// (inject size - header) bytes, part 1 the rest, each behind its fragment header. A split
// parcel (sender::post_split) and a split batch (coalescer) keep this state and post with it.
// Thread safety: prepare and post by the poster (a retried post by the poller); the
// completions count `left` down from any thread.
#pragma once

#include "../eager_writer.hpp"
#include "context.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <rdma/fi_endpoint.h>

namespace courier::parcelport::fabric {

template <class Op>
struct split_parts {
    /// `args` make the second part's context.
    template <class... Args>
    explicit split_parts(Args&&... args) : op2(std::forward<Args>(args)...) {}

    Op op2;                                // the second part's context
    std::array<wire::header, 2> headers{}; // the parts' fragment headers
    std::uint8_t posted = 0;               // parts posted so far (by the poster)
    std::atomic<std::uint8_t> left{1};     // completions still to come
    std::atomic<bool> failed{false};

    /// Before the first post of an `n`-byte message with id `id` (unique among the sender's
    /// split messages in flight): the headers from `fragment` (a header of kind fragment from
    /// this sender), two completions to come.
    void prepare(wire::header const& fragment, std::uint64_t id, std::size_t n) noexcept {
        for (std::uint32_t i = 0; i < 2; ++i) {
            headers[i] = split_header(fragment, id, i, n);
        }
        posted = 0;
        left.store(2, std::memory_order_release);
    }
    /// Posts the parts of `data` (`n` bytes, part 0 its first `first`) not posted yet, part 0
    /// with context `ctx0`: 0, or the code of the fi_sendv that failed (-FI_EAGAIN: call again).
    /// Once part 1 is posted the message may complete and be reused: the caller touches
    /// nothing of it after a 0.
    long post(fid_ep* ep, fi_addr_t to, std::byte const* data, std::size_t n, std::size_t first,
              void* ctx0) {
        auto part = [&](std::uint32_t i) {
            iovec iov[2] = {
                {&headers[i], sizeof(wire::header)},
                // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): only read
                {const_cast<std::byte*>(data) + (i == 0 ? 0 : first), i == 0 ? first : n - first}};
            return static_cast<long>(
                fi_sendv(ep, iov, nullptr, 2, to, i == 0 ? ctx0 : static_cast<void*>(&op2.ctx)));
        };
        if (posted == 0) {
            long rc = part(0);
            if (rc != 0) {
                return rc;
            }
            posted = 1; // before part 1 is posted: the message may complete after that
        }
        return part(1);
    }
    /// A completion came: true if it was the last (one for a message sent whole, two split).
    bool last_part() noexcept {
        return left.load(std::memory_order_acquire) == 1 ||
               left.fetch_sub(1, std::memory_order_acq_rel) == 1;
    }
};

} // namespace courier::parcelport::fabric
