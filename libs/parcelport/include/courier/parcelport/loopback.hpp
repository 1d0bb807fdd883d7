// SPDX-License-Identifier: BSL-1.0
// The loopback transport: N endpoints in one process joined by an in-memory hub, with faults.
//
// Defines loopback_hub (one per in-process "job": ranks 0..N-1, the fault rules, their seeded
// random generator and the count of faults applied), fault_rule, and make_loopback_transport(),
// which returns a `transport` (transport.hpp) for one rank of a hub. It stands beside the
// libfabric transport for unit tests: several localities in one process, no network, and
// faults injected on purpose (drop, delay, reorder, duplicate, corrupt, refuse).
//
// Ownership: send() copies the message at once, index data and the bytes of every non-empty
// pointer and rma chunk, into buffers the transport owns, and releases the caller's message
// before it returns: the caller's memory may be reused as soon as send() returns (the contract
// of transport.hpp only promises it after on_sent). A received message owns its bytes: each
// external chunk has an owner (message::chunk_owner) that loaders may adopt; rma chunks are
// received into rma pool memory when the pool has room, as the libfabric transport does.
//
// Delivery: a message waits in its destination's inbox until that endpoint's progress(), which
// hands it to the receive handler on the calling thread; the sender's on_sent then runs from
// the sender's next progress(). Without faults, messages from one thread to one destination
// arrive in the order sent. on_sent gets an error instead when the message is not delivered:
//   std::errc::connection_reset     dropped by a fault rule;
//   std::errc::not_connected        no endpoint for the destination rank when sent;
//   std::errc::connection_aborted   the destination endpoint was destroyed before delivering it;
//   std::errc::permission_denied    the destination's job token differs from the sender's
//                                   (the destination also logs a line to stderr).
// A sender destroyed before its message is delivered never runs that on_sent (it is destroyed).
//
// Faults: each send is checked against the hub's rules in the order they were added; the first
// rule that matches and fires applies, so a message gets at most one fault. Random choices
// (whether a rule fires, which byte is corrupted) come from one generator seeded by
// loopback_options::seed: the same sends in the same order give the same faults. With several
// threads sending, the order in which they reach the generator decides.
//
// Thread safety: a hub's members may be called from any thread at any time. An endpoint's
// send(), send_coalesced(), progress(), can_sleep(), stats() and debug_state() may be called
// concurrently from any threads (one progress() polls at a time, others return false at once);
// set_receive_handler() and set_peers() before the endpoint is used concurrently. A receive
// handler may send, but must not call progress() of the endpoint delivering to it.
//
// Lifetime: endpoints keep their hub alive. Destroying an endpoint with messages in flight
// frees them; their senders' on_sent get std::errc::connection_aborted at the senders' next
// progress(). A rank may get a new endpoint once its previous one is destroyed.
#pragma once

#include <courier/parcelport/transport.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>

namespace courier::parcelport {

namespace detail {
class loopback_hub_state;
}

/// A rank in a fault_rule that matches every rank.
inline constexpr std::uint32_t any_rank = std::numeric_limits<std::uint32_t>::max();

enum class fault_kind : std::uint8_t {
    drop,      ///< not delivered; the sender's on_sent gets std::errc::connection_reset
    delay,     ///< delivered no earlier than fault_rule::delay after send()
    reorder,   ///< held back until the next message to the same destination has been queued
               ///< (then delivered right behind it), or at most fault_rule::delay
    duplicate, ///< delivered twice, as two independent copies; on_sent runs once
    corrupt,   ///< one byte of the index data after the 8-byte message header is XORed with a
               ///< non-zero value (position and value random); messages without such data
               ///< never match a corrupt rule
    refuse,    ///< send() throws courier::network_error (a send the transport refuses
               ///< outright): nothing is queued and on_sent never runs
};

/// Which messages a fault applies to, and how often.
struct fault_rule {
    fault_kind kind = fault_kind::drop;
    std::uint32_t source = any_rank; ///< the sender's rank, or any_rank
    std::uint32_t dest = any_rank;   ///< the destination's rank, or any_rank
    /// Chance that a considered message gets the fault, in [0, 1]. 1 draws no random number.
    double probability = 1.0;
    /// 0: every matching message is considered; K: only the next K matching messages after
    /// add_rule() are (with probability 1, exactly the next K get the fault).
    std::uint64_t next_messages = 0;
    /// The rule applies at most this many times.
    std::uint64_t max_count = std::numeric_limits<std::uint64_t>::max();
    /// delay: how long the message is held; reorder: how long it waits at most for a next one.
    std::chrono::microseconds delay{10000};
};

/// How many times each fault kind has been applied by a hub's rules (a duplicate counts once).
struct fault_counters {
    std::uint64_t drop = 0;
    std::uint64_t delay = 0;
    std::uint64_t reorder = 0;
    std::uint64_t duplicate = 0;
    std::uint64_t corrupt = 0;
    std::uint64_t refuse = 0;

    std::uint64_t of(fault_kind k) const noexcept;
    std::uint64_t total() const noexcept {
        return drop + delay + reorder + duplicate + corrupt + refuse;
    }
};

struct loopback_options {
    std::uint32_t localities = 2; ///< ranks 0 .. localities-1 (at least 1)
    std::uint64_t seed = 1;       ///< seeds the generator behind every random fault decision
};

/// The in-memory "network" of one in-process job. Thread-safe.
class loopback_hub {
public:
    /// A hub for `o.localities` ranks. Throws std::invalid_argument for 0 localities.
    ///
    ///     auto hub = courier::parcelport::loopback_hub::create({.localities = 3, .seed = 7});
    ///     auto ep0 = courier::parcelport::make_loopback_transport(hub, 0);
    ///     hub->add_rule({.kind = courier::parcelport::fault_kind::drop, .next_messages = 1});
    static std::shared_ptr<loopback_hub> create(loopback_options const& o);
    ~loopback_hub();
    loopback_hub(loopback_hub const&) = delete;
    loopback_hub& operator=(loopback_hub const&) = delete;

    std::uint32_t localities() const noexcept;
    /// Adds a rule that applies to messages sent from now on. Throws std::invalid_argument for
    /// a probability outside [0, 1], a negative delay, or a rank that is neither any_rank nor
    /// below localities().
    void add_rule(fault_rule const& r);
    /// Removes every rule. Messages already delayed or held keep their fault; counts stay.
    void clear_rules();
    fault_counters fault_counts() const;
    /// Hands `m` to the endpoint of `dest` as if rank `source` had sent it, with the
    /// destination's job token, no fault rule and no on_sent: a message from outside the hub
    /// (the wire fuzzer's parcels, decoded from forged bytes). Delivered like any other, at
    /// the destination's progress(). Returns false if `dest` has no live endpoint. Throws
    /// std::out_of_range for a rank not below localities().
    ///
    ///     hub->inject(1, 0, courier::serialization::message::from_bytes(bytes));
    bool inject(std::uint32_t source, std::uint32_t dest, serialization::message&& m);
    /// As inject(), for the small parcels of one coalesced message, each its whole stream:
    /// delivered together to the destination's batch handler if it has one
    /// (transport::set_batch_handler), else one message each (malformed ones logged, dropped).
    bool inject_batch(std::uint32_t source, std::uint32_t dest,
                      std::vector<std::vector<std::byte>> parcels);

private:
    explicit loopback_hub(loopback_options const& o);
    /// Throws std::out_of_range unless both ranks are below localities() (inject's check).
    void check_ranks(std::uint32_t source, std::uint32_t dest) const;
    friend std::unique_ptr<transport> make_loopback_transport(std::shared_ptr<loopback_hub> hub,
                                                              std::uint32_t rank);

    std::unique_ptr<detail::loopback_hub_state> state_;
};

/// The endpoint of `rank` in `hub` (provider_name() "loopback"). Its address() names the hub
/// and the rank; set_peers() accepts exactly the addresses of the hub's ranks, in rank order.
/// The wait fd is an eventfd, readable when a message or a send completion has been queued
/// for this endpoint since its last progress(); a delayed or held message rings nothing when
/// it falls due, so wait_fd_coverage() is partial while one waits here. Throws
/// std::invalid_argument for a null hub, std::out_of_range for a rank not below hub->localities(),
/// std::logic_error when the rank has a live endpoint already, std::system_error when no eventfd
/// can be made. send() throws std::out_of_range for a destination not below localities() and
/// serialization_error for a message that does not validate (nothing is queued then).
std::unique_ptr<transport> make_loopback_transport(std::shared_ptr<loopback_hub> hub,
                                                   std::uint32_t rank);

} // namespace courier::parcelport
