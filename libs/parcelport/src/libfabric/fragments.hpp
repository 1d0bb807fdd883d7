// SPDX-License-Identifier: BSL-1.0
// Joining split messages (wire::fragment): a message of a little more than shm's inject size
// comes as two parts, in either order, with other messages between them.
#pragma once

#include "context.hpp"

#include <chrono>
#include <memory>
#include <vector>

namespace courier::parcelport::fabric {

/// A posted receive buffer (receiver.cpp posts them; the wire fuzzer makes its own).
struct recv_op : op {
    std::unique_ptr<std::byte[]> buf;
    fid_mr* mr = nullptr; // FI_MR_LOCAL providers
    /// False while its post was refused for good: receiver::housekeeping posts it again.
    bool postable = true;
    recv_op() : op(kind::recv) {}
};

class eager_reader;

/// The most split messages waiting for their other part; beyond it the oldest is dropped (a
/// peer that sends first parts and never the second cannot hold many receive buffers). One that
/// waits longer than transport_options::read_stall_timeout is dropped too (its sender died
/// between the parts).
constexpr std::size_t max_fragment_waits = 16;

/// Thread safety: the poller's only.
class fragment_joiner {
public:
    fragment_joiner(eager_reader& r, std::chrono::milliseconds stall_timeout)
        : reader_(r), stall_timeout_(stall_timeout) {}
    /// A part (header `h` checked) in `r`'s buffer of `len` bytes. Returns true if `r` holds a
    /// part 0 and stays until its message is whole (or dropped); false: the caller re-posts it.
    /// A whole message goes to eager_reader::handle_message.
    bool add(recv_op* r, wire::header const& h, std::size_t len);
    /// Drops the messages whose other part has not come within the stall timeout, re-posting
    /// the receive buffers they held.
    void drop_stale();

private:
    /// A split message of which one part has come. Part 0 stays in its receive buffer (the
    /// other part, the smaller, is copied in behind it); a part 1 that comes first is copied.
    struct waiting {
        std::uint32_t source = 0;
        std::uint64_t id = 0;
        std::uint64_t total = 0;
        recv_op* head = nullptr;
        std::size_t head_len = 0; // the message bytes in head (after its fragment header)
        std::vector<std::byte> tail;
        std::chrono::steady_clock::time_point since; // when the first part came
    };
    /// Logs why `w` is dropped and re-posts the receive buffer it holds, if any (the caller
    /// erases it).
    void drop(waiting const& w, std::string const& why);

    eager_reader& reader_;
    std::chrono::milliseconds stall_timeout_;
    std::vector<waiting> waits_;
};

} // namespace courier::parcelport::fabric
