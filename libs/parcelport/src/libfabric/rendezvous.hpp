// SPDX-License-Identifier: BSL-1.0
// The receiving side of a rendezvous: the read budget that admits parcels (read_budget.cpp),
// landing buffers, the RMA reads of a parcel's chunks (and of its descriptor table), and the
// parcel's delivery and DONE once they complete (rendezvous.cpp).
#pragma once

#include "context.hpp"
#include "memory.hpp"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace courier::parcelport::fabric {

class sender;
struct incoming;

struct read_op : op {
    incoming* in;
    explicit read_op(incoming* i) : op(kind::read), in(i) {}
};

/// One RMA read of the current phase.
struct read_piece {
    std::byte* local;
    std::size_t size;
    std::uint64_t remote;
    std::uint64_t key;
    void* desc;
};

/// A parcel whose chunks are being read.
struct incoming {
    std::uint32_t source = 0;
    std::uint64_t send_id = 0;
    serialization::message msg; // its index buffer is filled in place (copied or read)
    std::vector<serialization::serialization_chunk> chunks;
    std::vector<std::shared_ptr<std::byte[]>> owners; // parallel to chunks (null for index)
    std::vector<fid_mr*> mrs;
    std::deque<read_op> reads;      // reads[i] is the context of pieces[i]
    std::vector<read_piece> pieces; // posted in order by post_reads()
    std::size_t next_piece = 0;     // the first not posted yet (-FI_EAGAIN)
    std::size_t outstanding = 0;
    std::size_t rma_bytes = 0; // counted against the read budget until finished (or stalled)
    std::chrono::steady_clock::time_point started; // when the current phase's reads began
    bool failed = false;
    // Phase one of a parcel whose descriptors are remote: reading the table.
    bool table_phase = false;
    wire::header h{};
    std::vector<std::byte> table;        // read from the sender
    std::vector<std::byte> inline_index; // kept from the eager message for phase two
};

/// Bytes a parcel's rendezvous will read (pointer/rma chunks and a non-inline index), from its
/// descriptors; 0 if none or if the message is malformed (the rendezvous then rejects it).
std::size_t rendezvous_bytes(wire::header const& h, std::byte const* p, std::size_t len);
/// Bytes a read descriptor table announces to read (phase two of descriptors_remote).
std::size_t descriptor_payload(std::vector<std::byte> const& table, std::uint32_t chunk_count);

/// Thread safety: admit from the poller; on_completion from the poller; busy() and
/// debug_state() from any thread.
class rendezvous {
public:
    rendezvous(transport_parts const& parts, memory& mem, sender& s,
               transport::receive_handler& on_receive, transport_options const& o,
               std::size_t max_read, std::size_t recv_size);
    ~rendezvous();
    rendezvous(rendezvous const&) = delete;
    rendezvous& operator=(rendezvous const&) = delete;

    /// Starts the reads of a parcel that has `rma_bytes` to read now, or defers it while the
    /// reads in flight use up the read budget: that bounds the receiver's memory under a flood
    /// of large messages and keeps the pooled landing buffers few and cache-warm. Throws
    /// serialization_error for a malformed parcel.
    void admit(wire::header const& h, std::byte const* p, std::size_t len, std::size_t rma_bytes);
    /// Admits the waiting parcels that the budget now allows (progress, first); true if any.
    bool admit_deferred();
    void on_completion(read_op* r, bool failed);
    /// Returns the read budget of parcels whose reads outlived the stall timeout (every few
    /// passes). Their buffers stay until the reads complete, if ever: nothing is freed under a
    /// read the provider may still do.
    void release_stalled();
    /// Reads under way or parcels waiting for the budget.
    bool busy() const;
    std::string debug_state() const;

private:
    /// Sets up the reads of an admitted parcel (of its descriptor table first, if remote).
    void start(wire::header const& h, std::byte const* p, std::size_t len, std::size_t rma_bytes);
    void begin_reads(wire::header const& h, std::vector<wire::descriptor> const& ds,
                     bool index_inline, std::byte const* inline_index, std::size_t rma_bytes);
    void start_reads(std::unique_ptr<incoming> in, std::vector<wire::descriptor> const& ds,
                     bool index_inline);
    /// Posts the reads of `in` not posted yet, in order; stops at the first that fails
    /// (returning its code, -FI_EAGAIN when the provider's queue is full).
    long post_reads(incoming* in);
    /// Phase two of a parcel whose descriptor table was read (wire::descriptors_remote).
    void continue_after_table(std::unique_ptr<incoming> in);
    void finish(incoming* in);
    /// Gives back read budget; parcels waiting for it are admitted by the next progress pass
    /// (admit_deferred), not here: by then the worker has run the tasks of the parcels just
    /// delivered, their landing buffers went back to the pool, and the next read lands in one
    /// that is still in cache.
    void release_budget(std::size_t bytes);

    transport_parts parts_;
    memory& memory_;
    sender& sender_;
    transport::receive_handler& on_receive_;
    transport_options const& opts_;
    std::size_t max_read_, recv_size_;
    mutable std::mutex mutex_; // incoming_, deferred_, reading_bytes_
    std::unordered_map<incoming*, std::unique_ptr<incoming>> incoming_;
    /// Rendezvous parcels waiting for the read budget: their eager messages, copied.
    struct deferred_parcel {
        wire::header h;
        std::vector<std::byte> eager;
        std::size_t rma_bytes;
    };
    std::deque<deferred_parcel> deferred_;
    std::size_t reading_bytes_ = 0;
    std::atomic<bool> admit_pending_{false}; // budget was released with parcels waiting
};

} // namespace courier::parcelport::fabric
