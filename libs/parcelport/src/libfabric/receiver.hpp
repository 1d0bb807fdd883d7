// SPDX-License-Identifier: BSL-1.0
// The receive path: the pre-posted receive buffers, each completed receive handed to the
// eager_reader (which takes the message apart), and what the reader finds done: a DONE to the
// sender, an eager-only parcel to the receive handler, one with chunks to read to the
// rendezvous.
#pragma once

#include "eager_reader.hpp"
#include "pushed.hpp"

#include <courier/common/log.hpp>

#include <memory>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

class sender;
class rendezvous;
class memory;

/// Thread safety: on_completion and housekeeping from the poller only.
class receiver : private message_sink {
public:
    receiver(transport_parts const& parts, memory& mem, sender& s, rendezvous& rv,
             transport::receive_handler& on_receive, transport::batch_handler& on_batch,
             transport_options const& o, std::size_t recv_size);
    ~receiver();
    receiver(receiver const&) = delete;
    receiver& operator=(receiver const&) = delete;

    /// Posts `n` receive buffers (opening the transport).
    void post_buffers(std::size_t n);
    /// A receive completed with `len` bytes in `r`'s buffer.
    void on_completion(recv_op* r, std::size_t len);
    /// A message of `len` bytes at `p` read from `source`'s message ring (valid during the
    /// call): handled as a received message, if its header names `source`.
    void on_ring_message(std::uint32_t source, std::byte const* p, std::size_t len);
    /// Every few passes: drops split messages whose other part has not come in time, and posts
    /// again the receives (plain and pushed) whose post was refused for good.
    void housekeeping() {
        reader_.drop_stale();
        rearm(recvs_, &receiver::repost, "a receive buffer");
        rearm(pushes_, &receiver::repost_push, "a receive of pushed parcels");
    }
    /// Posts `r` again; one the provider refuses for good (now or when retried) is posted
    /// again by housekeeping, so that the receives never run out.
    void repost(recv_op* r);
    std::size_t buffer_size() const noexcept { return recv_size_; }
    /// Posts push_classes::per_class receives for each of `c`'s classes (opening the
    /// transport; pushed.hpp).
    void post_push_buffers(push_classes c);
    /// A pushed parcel of `len` bytes arrived in `r`'s buffer: `r` is posted again with a
    /// fresh buffer, then the parcel delivered from the one it arrived in (its chunks are
    /// slices of it). A malformed one is dropped and logged.
    void on_pushed(push_op* r, std::size_t len);
    /// Posts `r` (with the buffer it has) again.
    void repost_push(push_op* r);

private:
    bool header_ok(wire::header const& h) const override;
    void done(std::uint64_t id) override;
    void eager_parcel(std::uint32_t source, serialization::message&& m) override;
    bool eager_batch(std::uint32_t source,
                     std::span<std::span<std::byte const> const> parcels) override;
    void rendezvous_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                           std::size_t rma_bytes) override;
    void release(recv_op* r) override;
    void quiet_parcel() override { ++parts_.tally.quiet; }
    /// Posts receive `r` (a recv_op or push_op) by `post` through the backlog; one the provider
    /// refuses for good, now (which throws) or when retried, is marked not `postable` for
    /// rearm().
    template <class Op, class Post>
    void post_receive(Op* r, Post&& post, char const* what) {
        try {
            parts_.posts.post_or_defer(
                std::forward<Post>(post), what,
                {[](void* op, std::uint64_t, long) { static_cast<Op*>(op)->postable = false; }, r,
                 0});
        } catch (...) {
            r->postable = false;
            throw;
        }
    }
    /// Posts again each of `ops` that is not `postable`, by `post`; one refused again waits
    /// for the next housekeeping.
    template <class Op>
    void rearm(std::vector<std::unique_ptr<Op>>& ops, void (receiver::*post)(Op*),
               char const* what) {
        for (auto& r : ops) {
            if (!r->postable) {
                r->postable = true;
                try {
                    (this->*post)(r.get());
                } catch (std::exception const& e) {
                    static logging::rate_limit limit;
                    logging::error_limited(limit, "could not post {}: {}", what, e.what());
                }
            }
        }
    }
    /// Takes apart and delivers the pushed parcel in `buf`; throws serialization_error for a
    /// malformed one. `refused` (not empty): delivered with its chunks refused for that reason.
    void deliver_pushed(std::shared_ptr<std::byte[]> const& buf, std::size_t len,
                        std::string refused);

    transport_parts parts_;
    memory& memory_;
    sender& sender_;
    rendezvous& rendezvous_;
    transport::receive_handler& on_receive_;
    transport::batch_handler& on_batch_;
    std::size_t recv_size_;
    std::vector<std::unique_ptr<recv_op>> recvs_;
    std::vector<std::unique_ptr<push_op>> pushes_;
    std::vector<wire::descriptor> push_ds_;                 // a pushed parcel's, reused
    std::vector<std::shared_ptr<std::byte[]>> push_owners_; // its chunks' owners, reused
    std::size_t max_parcel_bytes_;
    eager_reader reader_;
};

} // namespace courier::parcelport::fabric
