// SPDX-License-Identifier: BSL-1.0
// The loopback endpoint of one rank: an inbox that senders fill, messages held back by delay
// and reorder faults, the send completions it owes its own senders, and an eventfd that says
// "progress() has work" (loopback.hpp gives the contract).
#pragma once

#include "hub_state.hpp"

#include <courier/parcelport/loopback.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace courier::parcelport::detail {

/// A message on its way: its own copy of the bytes, and who waits for its delivery.
struct parcel {
    std::uint32_t source = 0;
    std::uint64_t source_incarnation = 0; ///< which endpoint of the source rank sent it
    std::uint64_t token = 0;              ///< the sender's job token
    serialization::message msg;
    /// inject_batch(): the parcels of a coalesced message instead of msg, for the batch handler
    std::vector<std::vector<std::byte>> batch;
    transport::sent_handler on_sent; ///< empty for a duplicate's second copy
    /// delayed / held: when it may (delay) or must (reorder) go to the inbox.
    std::chrono::steady_clock::time_point due{};
    bool held = false; ///< reorder: also goes right behind the next parcel queued here
};

class loopback_endpoint final : public transport {
public:
    using clock = std::chrono::steady_clock;

    /// Throws std::system_error when no eventfd can be made. enrol() it afterwards.
    loopback_endpoint(std::shared_ptr<loopback_hub> owner, loopback_hub_state& hub,
                      std::uint32_t rank);
    ~loopback_endpoint() override;
    loopback_endpoint(loopback_endpoint const&) = delete;
    loopback_endpoint& operator=(loopback_endpoint const&) = delete;

    std::vector<std::byte> address() const override;
    void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                   std::uint32_t my_rank) override;
    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_batch_handler(batch_handler h) override { on_batch_ = std::move(h); }
    void set_job_token(std::uint64_t token) override {
        token_.store(token, std::memory_order_relaxed);
    }
    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override;
    bool progress() override;
    std::string debug_state() const override;
    int wait_fd() const override { return event_fd_; }
    wait_coverage wait_fd_coverage() const override {
        return delayed_count_.load(std::memory_order_relaxed) != 0 ? wait_coverage::partial
                                                                   : wait_coverage::complete;
    }
    bool can_sleep() override;
    statistics stats() const override;
    std::string provider_name() const override { return "loopback"; }

    std::uint64_t incarnation() const noexcept { return incarnation_; }
    std::uint64_t token() const noexcept { return token_.load(std::memory_order_relaxed); }
    /// Through the hub's registry: a parcel for this endpoint, or the completion of a send
    /// this endpoint made.
    void accept(parcel&& p);
    void complete(sent_handler h, std::error_code ec);

private:
    using completion = std::pair<sent_handler, std::error_code>;

    void signal() noexcept;
    void enqueue_locked(parcel&& p);
    template <class Pred>
    bool release_locked(Pred pred);
    void release_due_locked(clock::time_point now);
    /// Hands `p` to the endpoint of `dest`; without one, its on_sent gets an error.
    void route(std::uint32_t dest, parcel&& p);
    void deliver(parcel&& p);
    /// Runs `h(ec)` at the next progress() of the endpoint that sent the parcel, if it lives.
    void post_completion(parcel& p, std::error_code ec);

    std::shared_ptr<loopback_hub> const owner_; // keeps hub_ alive
    loopback_hub_state& hub_;
    std::uint32_t const rank_;
    std::uint64_t const incarnation_;
    int event_fd_ = -1;
    std::atomic<bool> signalled_{false}; // event_fd_ written since progress() last read it
    std::atomic<std::uint64_t> token_{0};
    receive_handler on_receive_;
    batch_handler on_batch_;

    mutable std::mutex mutex_; // inbox_, delayed_, completions_
    std::deque<parcel> inbox_;
    std::vector<parcel> delayed_; // delayed or held, in the order they came
    std::deque<completion> completions_;
    std::atomic<std::size_t> delayed_count_{0};

    std::mutex poll_mutex_; // one poller at a time; it alone touches ready_ and finished_
    std::deque<parcel> ready_;
    std::deque<completion> finished_;
    std::atomic<std::size_t> ready_count_{0}; // ready_ + finished_ + one in a handler

    std::atomic<std::uint64_t> messages_sent_{0};
    std::atomic<std::uint64_t> messages_received_{0};
    std::atomic<std::uint64_t> bytes_copied_{0};
    std::atomic<std::uint64_t> pool_buffers_{0};
    std::atomic<std::uint64_t> refused_{0}; // parcels of another job token
};

} // namespace courier::parcelport::detail
