// SPDX-License-Identifier: BSL-1.0
// routed_transport: one transport over several, one per provider ("rails"), each peer served by
// exactly one of them: shm for the localities on this host, the network provider for the
// others. Its address names this host and carries every rail's address; set_peers() gives each
// rail the addresses of the peers it serves (and empty ones for the rest), so each rail keeps
// its own rank-indexed peer table, posted receives, read budget and counters.
#pragma once

#include <courier/parcelport/transport.hpp>

#include <memory>
#include <string>
#include <vector>

namespace courier::parcelport::routed {

/// The address's parts (exposed for tests).
struct address_parts {
    std::string host;
    std::vector<std::pair<std::string, std::vector<std::byte>>> rails; // provider, address
};
std::vector<std::byte> encode(address_parts const& a);
/// Throws network_error for bytes that are not an address encode() made.
address_parts decode(std::vector<std::byte> const& bytes, std::uint32_t rank);

class routed_transport final : public transport {
public:
    /// `rails[0]` serves peers on this host when `local_rail` is true; the last serves the
    /// others. `host` is this process's host as the launcher names it.
    routed_transport(std::string host, std::vector<std::unique_ptr<transport>> rails,
                     bool local_rail);
    ~routed_transport() override;

    std::vector<std::byte> address() const override;
    void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                   std::uint32_t my_rank) override;
    void set_receive_handler(receive_handler h) override;
    void set_batch_handler(batch_handler h) override;
    void set_job_token(std::uint64_t token) override;
    void set_activity_handler(activity_handler h) override;
    void set_read_handler(read_handler h) override;
    void set_counted_handler(counted_handler h) override;
    void set_counted_failure_handler(counted_failure_handler h) override;
    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override;
    bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                        sent_handler on_sent) override;
    bool send_counted(std::uint32_t dest, serialization::message&& m, std::uint64_t tag) override {
        return rail_of(dest).send_counted(dest, std::move(m), tag);
    }
    void gather(std::uint32_t dest) noexcept override {
        if (dest < route_.size()) {
            rail_of(dest).gather(dest);
        }
    }
    void send_gathered(std::uint32_t dest) noexcept override {
        if (dest < route_.size()) {
            rail_of(dest).send_gathered(dest);
        }
    }
    bool batches_now(std::uint32_t dest, std::size_t n) const override {
        return rail_of(dest).batches_now(dest, n);
    }
    std::size_t stream_limit(std::uint32_t dest) const noexcept override {
        return dest < route_.size() ? rail_of(dest).stream_limit(dest) : 0;
    }
    bool takes_streams(std::uint32_t dest, std::size_t n) const override {
        return rail_of(dest).takes_streams(dest, n);
    }
    stream_sent send_stream(std::uint32_t dest, std::size_t n, stream_writer write, void const* ctx,
                            sent_handler* on_sent, std::uint64_t tag) override {
        return rail_of(dest).send_stream(dest, n, write, ctx, on_sent, tag);
    }
    void send_control(std::uint32_t dest, serialization::message&& m,
                      sent_handler on_sent) override {
        rail_of(dest).send_control(dest, std::move(m), std::move(on_sent));
    }
    bool progress() override;
    std::string debug_state() const override;
    int wait_fd() const override { return epoll_fd_; }
    wait_coverage wait_fd_coverage() const override { return coverage_; }
    bool can_sleep() override;
    statistics stats() const override;
    std::string provider_name() const override;
    std::vector<std::pair<std::string, statistics>> stats_by_provider() const override;
    void peer_failed(std::uint32_t rank) noexcept override {
        for (auto& r : rails_) {
            r->peer_failed(rank);
        }
    }
    bool same_host(std::uint32_t rank) const override {
        return rank < local_.size() && local_[rank];
    }

private:
    transport& rail_of(std::uint32_t dest) const;

    std::string host_;
    std::vector<std::unique_ptr<transport>> rails_;
    bool local_rail_;
    std::vector<std::uint8_t> route_; // by rank: index into rails_
    std::vector<bool> local_;         // by rank: on this host
    int epoll_fd_ = -1;               // every rail's wait fd; -1 if one has none
    /// (Re)builds epoll_fd_ and coverage_ from the rails' wait fds (at construction, and after
    /// set_peers: a rail's fd may change with its peers).
    void gather_wait_fds();
    wait_coverage coverage_ = wait_coverage::complete; // the least complete rail's
};

} // namespace courier::parcelport::routed
