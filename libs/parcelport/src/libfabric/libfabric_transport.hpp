// SPDX-License-Identifier: BSL-1.0
// The libfabric transport: one FI_EP_RDM endpoint, one completion queue, pre-posted receives,
// and the objects that do the work, each in its own file:
//   fabric.cpp            the libfabric objects and their opening (RAII owners)
//   context.cpp           peers, statistics, the -FI_EAGAIN backlog
//   memory.cpp            registrations and the receive buffer pool
//   sender.cpp            eager messages, descriptors, split messages, send completion, DONE
//   coalescer.cpp         batches of small parcels per destination
//   receiver.cpp          posted receives, messages by kind, eager-only parcels
//   fragments.cpp         joining split messages
//   read_budget.cpp       admitting rendezvous parcels within the read budget
//   rendezvous.cpp        the RMA reads (fi_read) and delivery after them
//   completion_queue.cpp  progress(): the completion queue, dispatched to the objects above
// Protocol: libs/parcelport/README.md; wire format: ../wire.hpp.
#pragma once

#include "coalescer.hpp"
#include "context.hpp"
#include "direct_read.hpp"
#include "fabric.hpp"
#include "memory.hpp"
#include "outbox.hpp"
#include "poll_pacer.hpp"
#include "receiver.hpp"
#include "rendezvous.hpp"
#include "sender.hpp"

#include <courier/common/spinlock.hpp>
#include <courier/parcelport/transport.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace courier::parcelport::fabric {

/// The poll lock: one poller at a time. try_lock is one atomic exchange and unlock a plain
/// store: one locked instruction per progress pass, where a std::mutex takes one to lock and
/// one to unlock. lock() is for the sleep checks, which wait for a poller to finish: it spins
/// briefly, then sleeps in steps of 20 us (no hand-over: a poller may take the lock again
/// first, as with a mutex).
class poll_lock {
public:
    bool try_lock() noexcept {
        return !held_.load(std::memory_order_relaxed) &&
               !held_.exchange(true, std::memory_order_acquire);
    }
    void lock() noexcept {
        for (int i = 0; !try_lock(); ++i) {
            if (i < 64) {
                courier::detail::cpu_relax();
            } else if (i < 128) {
                std::this_thread::yield();
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
        }
    }
    void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> held_{false};
};

class libfabric_transport final : public transport {
public:
    /// Opens the transport; throws network_error (closing whatever was opened) on failure.
    explicit libfabric_transport(transport_options const& o);
    ~libfabric_transport() override;

    std::vector<std::byte> address() const override;
    void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                   std::uint32_t my_rank) override;
    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_batch_handler(batch_handler h) override { on_batch_ = std::move(h); }
    void set_job_token(std::uint64_t token) override { peers_.set_token(token); }
    void set_activity_handler(activity_handler h) override {
        peers_.set_activity_handler(std::move(h));
    }
    void set_read_handler(read_handler h) override { peers_.set_read_handler(std::move(h)); }
    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override {
        pacer_.kick();
        sender_->send(dest, std::move(m), std::move(on_sent), false);
    }
    bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                        sent_handler on_sent) override {
        pacer_.kick();
        return sender_->send(dest, std::move(m), std::move(on_sent), opts_.coalescing);
    }
    bool send_counted(std::uint32_t dest, serialization::message&& m, std::uint64_t tag) override {
        require_counted_handler();
        pacer_.kick();
        return sender_->send_counted(dest, std::move(m), tag, opts_.coalescing);
    }
    /// On tcp (socket_core_): the coalescer opens a batch to `dest` (coalescer::open_for).
    void gather(std::uint32_t dest) noexcept override;
    void send_gathered(std::uint32_t dest) noexcept override;
    bool batches_now(std::uint32_t dest, std::size_t n) const override {
        return opts_.coalescing && sender_->batches_now(dest, n);
    }
    bool takes_streams(std::uint32_t dest, std::size_t n) const override {
        return opts_.coalescing && sender_->takes_streams(dest, n);
    }
    std::size_t stream_limit(std::uint32_t dest) const noexcept override {
        return opts_.coalescing ? sender_->stream_limit(dest) : 0;
    }
    stream_sent send_stream(std::uint32_t dest, std::size_t n, stream_writer write, void const* ctx,
                            sent_handler* on_sent, std::uint64_t tag) override {
        require_counted_handler();
        if (!opts_.coalescing) {
            return stream_sent::refused;
        }
        stream_sent const r = sender_->send_stream(dest, n, write, ctx, on_sent, tag);
        if (r != stream_sent::refused) {
            pacer_.kick();
        }
        return r;
    }
    /// Quiet (sender::send_quiet): it rings no doorbell and does not kick the pacer, and a pass
    /// that finds only such messages arriving or ending returns false, calls no net_bell
    /// heard() and lets can_sleep() sleep: a liveness beat neither wakes an idle locality nor
    /// keeps it polling. The peer reads it at its next pass (its liveness thread's tick, or a
    /// worker's bounded sleep).
    void send_control(std::uint32_t dest, serialization::message&& m,
                      sent_handler on_sent) override {
        sender_->send_quiet(dest, std::move(m), std::move(on_sent));
    }
    bool progress() override;
    std::string debug_state() const override;
    int wait_fd() const override {
        if (bell_wait_ && (bell_ || net_bell_)) {
            return bell_ ? bell_->fd() : net_bell_->fd();
        }
        return endpoint_->wait_fd();
    }
    /// A bell misses a ring only on faults (net_bell.hpp, doorbell.hpp), unless some peer
    /// could not open it; the completion queue's fd misses nothing.
    wait_coverage wait_fd_coverage() const override {
        if (!(bell_wait_ && (bell_ || net_bell_))) {
            return wait_coverage::complete;
        }
        return bell_partial_ ? wait_coverage::partial : wait_coverage::rare_misses;
    }
    bool can_sleep() override;
    statistics stats() const override;
    std::string provider_name() const override { return endpoint_->provider(); }
    /// Lets go of the peer's mapped pool segment (direct_reader::release).
    void peer_failed(std::uint32_t rank) noexcept override;

    /// The receive path, for tests that feed it bytes directly.
    receiver& receive_path() noexcept { return *receiver_; }

private:
    /// Sends not yet completed, or rendezvous reads under way or waiting for the budget.
    bool transfers_pending() const { return rendezvous_->busy() || sender_->in_flight() != 0; }
    /// Reads the completion queue (while it returns full batches) and dispatches what it
    /// holds, counting its entries in tally_; true if it held anything.
    bool read_completion_queue();
    /// progress() under the poll lock, held by the caller; `read_queue`: read the completion
    /// queue whether or not the pass would (can_sleep()'s look before a sleep). False also
    /// when all it found were quiet messages arriving or ending (send_control).
    bool pass(bool read_queue);
    /// Whether progress() reads the completion queue only while hot (see there): shm with
    /// every peer's ring mapped. Under the poll lock.
    bool gated() const noexcept { return rings_ && rings_->unattached() == 0; }
    /// A successful completion of `o` (`len` bytes received, for a receive), dispatched.
    void on_success(op* o, std::size_t len);
    /// One completion-queue error entry, dispatched.
    void on_error_entry();
    /// Counts an error entry of the operations with `peer` (peers_.size(): an operation the
    /// provider did not name; +1: a receive); true for the first, which alone is logged (a dead
    /// peer fails every operation with it: a large transfer has thousands).
    bool first_error(std::size_t peer);
    /// At close: how many error entries were not logged, one line per peer that had them.
    void log_error_summary();

    transport_options opts_;
    std::unique_ptr<endpoint> endpoint_;
    counters counters_;
    peer_table peers_{counters_};
    std::unique_ptr<detail::doorbell> bell_; // shm, and tcp if asked: peers' posts wake us
    /// Between hosts (transport_options::network_doorbell): peers on other hosts wake us.
    std::unique_ptr<detail::net_bell> net_bell_;
    /// A peer rings the network doorbell when it posts after this long without posting to us;
    /// this side stays awake for four times as long after anything arrived (net_bell.hpp).
    static constexpr std::chrono::microseconds net_bell_quiet{250};
    /// Whether gather/send_gathered act for `dest`: tcp (socket_core_), coalescing, a peer.
    bool gathers(std::uint32_t dest) const noexcept;
    bool socket_core_ = false;  ///< tcp or sockets: a send completes once the kernel has it
    bool bell_wait_ = true;     ///< idle workers wait on a bell (false: some peer cannot ring it)
    bool bell_partial_ = false; ///< some peer could not open the shm bell: it never rings
    backlog backlog_{counters_};
    std::unique_ptr<memory> memory_;
    /// shm: the outbox and its registration (closed before the endpoint's domain).
    std::unique_ptr<outbox> outbox_;
    struct registration_owner {
        fid_mr* mr = nullptr;
        ~registration_owner() {
            if (mr != nullptr) {
                fi_close(&mr->fid);
            }
        }
    } outbox_mr_;
    /// shm: small messages to and from the peers on this host, and the completions of those
    /// sent.
    std::unique_ptr<detail::message_rings> rings_;
    local_completions local_;
    pass_tally tally_; // the current pass's (under the poll lock)
    /// shm: reads of peers' chunks without fi_read (descriptors hold virtual addresses).
    std::unique_ptr<direct_reader> direct_;
    std::optional<rma::shared_segment> shared_pool_; // offered to peers in address()
    receive_handler on_receive_;
    batch_handler on_batch_;
    std::unique_ptr<sender> sender_;
    std::unique_ptr<coalescer> coalescer_;
    std::unique_ptr<rendezvous> rendezvous_;
    std::unique_ptr<receiver> receiver_;
    push_classes push_{};  // the pushed parcels this side posts receives for (pushed.hpp)
    poll_lock poll_mutex_; // the completion queue is polled by one thread at a time
    std::uint64_t progress_calls_ = 0; // by the poller only
    /// shm with rings from every peer: passes left that read the completion queue whatever
    /// happens (progress()); by the poller only.
    static constexpr std::uint32_t hot_passes = 64;
    std::uint32_t cq_hot_ = 0;
    /// Reads of the completion queue while quiet (transport_options::quiet_poll_us).
    poll_pacer pacer_{std::chrono::microseconds(opts_.quiet_poll_us), std::chrono::milliseconds(2)};
    std::vector<std::uint64_t> errors_; // by the poller only: error entries by first_error's peer
};

} // namespace courier::parcelport::fabric
