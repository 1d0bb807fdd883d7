// SPDX-License-Identifier: BSL-1.0
// net_bell: wake-ups across hosts for a network rail whose completion queue has no wait object.
// rxm over tcp signals a queue's wait fd through nested epoll sets on every message: across
// hosts that cost ~1.4 us of each one-way trip (benchmarks/RESULTS.md, Across hosts). Without
// it an idle worker has nothing to sleep on; this bell gives it a datagram socket instead, bound
// to the address of the network interface the endpoint uses, that peers on other hosts send a
// byte to.
//
// Peers cannot see whether this side sleeps (the shm doorbell's shared word), so a sender rings
// by time: after posting something for a peer when nothing had been posted for it for `quiet`
// before (a post the provider deferred rings too, at most once per `quiet`, and does not count
// as posted). The receiving side stays awake for four times `quiet` after anything arrives or
// a ring comes (heard(), awake(): its transport tells the bell what it received), so a
// message posted within `quiet` of the previous one to the same peer finds it awake unless it
// arrives that much later than the previous one (a retransmitted segment) or the datagram is
// lost. A first contact, whose bytes wait for rxm's connection, is a deferred post: it rings
// again on each retry. Those misses are faults: the transport's wait_fd_coverage() is
// rare_misses, and the scheduler's safety-net sleep (10 ms after work, up to 100 ms) covers
// them.
//
// A pushed message (libfabric/pushed.hpp) streams in with no completion until its last byte,
// and one slower on the wire than the awake time would find the receiver asleep. Its sender
// rings for each (notify_push, whatever the time), with a datagram that says so; a side that
// took such a notice stays awake until as many pushed messages have landed (push_landed), or
// until push_patience passes with neither (a peer gone); after such a time the counts are set
// level (a notice lost leaves the pushes until then to the awake time and the scheduler's
// safety-net sleep).
//
// Names: "udp:ADDRESS:PORT" ("udp:[ADDRESS]:PORT" for IPv6), carried in the transport's address
// like the shm doorbell's name. Thread safety: ring(), notify_push(), push_landed(), arm()
// and awake() may run on any thread; connect() at set-up, before any ring().
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace courier::parcelport::detail {

class net_bell {
public:
    /// A bell on the first address of network interface `interface` (IPv4 before IPv6, no
    /// link-local IPv6), rung by peers after `quiet` of silence towards this side. Throws
    /// std::system_error when the interface has no such address or the socket cannot be made.
    net_bell(std::string const& interface, std::chrono::nanoseconds quiet);
    ~net_bell();
    net_bell(net_bell const&) = delete;
    net_bell& operator=(net_bell const&) = delete;

    /// The name peers ring this bell by.
    std::string const& name() const noexcept { return name_; }
    /// Readable when a peer rang.
    int fd() const noexcept { return fd_; }
    /// The peers' bells by name, indexed by rank (empty, or not a net bell's name: that rank
    /// has none and is never rung; `self` is skipped). Returns how many ranks other than `self`
    /// have none.
    std::size_t connect(std::vector<std::string> const& names, std::uint32_t self);

    /// Something arrived for this side: it stays awake for four times `quiet` after it (see
    /// above).
    void heard() noexcept;
    /// Whether something arrived, or a ring came, in the last four times `quiet`, or a push
    /// notice was taken whose pushed message has not landed (within push_patience).
    bool awake() const noexcept;
    /// Before sleeping: drops the rings that came while awake (the caller then looks for work
    /// once more before it sleeps); a ring dropped counts as heard(). True if there was one.
    bool arm() noexcept;
    /// After posting something `rank` will receive (`posted`), or after the provider deferred
    /// such a post (-FI_EAGAIN: !`posted`): rings it when nothing was posted for it in the
    /// last `quiet` (a deferred post rings at most once per `quiet` and is not counted as
    /// posted). True if a datagram was sent.
    bool ring(std::uint32_t rank, bool posted) noexcept;
    /// After posting a pushed message `rank` will receive: rings it with a push notice, whatever
    /// the time (counted as posted). True if a datagram was sent.
    bool notify_push(std::uint32_t rank) noexcept;
    /// A pushed message from a peer on another host (one that notifies) landed here.
    void push_landed() noexcept;
    /// How long a side that took more push notices than pushed messages landed stays awake
    /// with neither coming: 4 MiB (push_max's largest) at 0.7 Gb/s.
    static constexpr std::chrono::milliseconds push_patience{50};
    /// The byte a push notice carries (a plain ring carries 1).
    static constexpr char push_notice = 2;

private:
    /// One cache line per peer for the times every posting thread updates.
    struct alignas(64) peer {
        static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::min() / 2;
        sockaddr_storage addr{};
        socklen_t len = 0;
        /// When something was last posted for this peer, and when it was last rung (steady
        /// clock, ns); `never` at first.
        std::atomic<std::int64_t> posted_ns{never}, rung_ns{never};
    };

    /// Sends `p` a datagram of one `byte` (a ring: 1, or push_notice), rung at `now`.
    bool send(peer& p, char byte, std::int64_t now) noexcept;

    std::int64_t quiet_ns_;
    std::atomic<std::int64_t> heard_ns_{peer::never}; // heard() (steady clock, ns)
    // Push notices taken by arm(), pushed messages landed, and when either last happened.
    std::atomic<std::int64_t> pushes_noticed_{0}, pushes_landed_{0};
    std::atomic<std::int64_t> push_event_ns_{peer::never};
    int fd_ = -1;
    std::string name_;
    std::unique_ptr<peer[]> peers_;
    std::size_t peer_count_ = 0;
};

/// Parses a net bell's name into a socket address; false if `name` is not one.
bool parse_net_bell_name(std::string const& name, sockaddr_storage& addr, socklen_t& len);

} // namespace courier::parcelport::detail
