// SPDX-License-Identifier: BSL-1.0
#include "routed_transport.hpp"

#include <courier/parcelport/error.hpp>

#include <fmt/format.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace courier::parcelport::routed {

namespace {
constexpr std::byte magic{0xc7};

void put16(std::vector<std::byte>& out, std::size_t n) {
    out.push_back(static_cast<std::byte>(n & 0xff));
    out.push_back(static_cast<std::byte>(n >> 8));
}
void put_bytes(std::vector<std::byte>& out, void const* p, std::size_t n) {
    auto const* b = static_cast<std::byte const*>(p);
    out.insert(out.end(), b, b + n);
}

struct reader {
    std::vector<std::byte> const& in;
    std::uint32_t rank;
    std::size_t at = 0;
    [[noreturn]] void bad() const {
        throw network_error("courier: malformed address of locality " + std::to_string(rank));
    }
    std::size_t u8() {
        if (at + 1 > in.size()) {
            bad();
        }
        return std::to_integer<std::size_t>(in[at++]);
    }
    std::size_t u16() { return u8() | u8() << 8; }
    std::vector<std::byte> bytes(std::size_t n) {
        if (n > in.size() - at) {
            bad();
        }
        std::vector<std::byte> v(in.begin() + static_cast<std::ptrdiff_t>(at),
                                 in.begin() + static_cast<std::ptrdiff_t>(at + n));
        at += n;
        return v;
    }
    std::string text(std::size_t n) {
        auto v = bytes(n);
        return {reinterpret_cast<char const*>(v.data()), v.size()};
    }
};
} // namespace

std::vector<std::byte> encode(address_parts const& a) {
    std::vector<std::byte> out{magic, static_cast<std::byte>(a.rails.size())};
    put16(out, a.host.size());
    put_bytes(out, a.host.data(), a.host.size());
    for (auto const& [name, addr] : a.rails) {
        out.push_back(static_cast<std::byte>(name.size()));
        put_bytes(out, name.data(), name.size());
        put16(out, addr.size());
        put_bytes(out, addr.data(), addr.size());
    }
    return out;
}

address_parts decode(std::vector<std::byte> const& bytes, std::uint32_t rank) {
    reader r{bytes, rank};
    if (bytes.empty() || bytes[0] != magic) {
        throw network_error(fmt::format(
            "courier: locality {} does not route by host (did every locality get the same "
            "--courier:provider?)",
            rank));
    }
    r.at = 1;
    address_parts a;
    std::size_t rails = r.u8();
    a.host = r.text(r.u16());
    for (std::size_t i = 0; i < rails; ++i) {
        std::string name = r.text(r.u8());
        a.rails.emplace_back(std::move(name), r.bytes(r.u16()));
    }
    if (r.at != bytes.size() || a.host.empty()) {
        r.bad();
    }
    return a;
}

routed_transport::routed_transport(std::string host, std::vector<std::unique_ptr<transport>> rails,
                                   bool local_rail)
    : host_(std::move(host)), rails_(std::move(rails)), local_rail_(local_rail) {
    if (rails_.empty() || rails_.size() > 2 || (local_rail_ && rails_.size() != 2)) {
        throw std::invalid_argument("routed_transport: one network rail, optionally a local one");
    }
    gather_wait_fds();
}

void routed_transport::gather_wait_fds() {
    if (epoll_fd_ >= 0) {
        ::close(epoll_fd_);
    }
    coverage_ = wait_coverage::complete;
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
        throw network_error(std::string("courier: epoll_create1: ") + std::strerror(errno));
    }
    for (auto& r : rails_) {
        coverage_ = std::max(coverage_, r->wait_fd_coverage());
        int fd = r->wait_fd();
        epoll_event ev{};
        ev.events = EPOLLIN;
        if (fd < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
            // A rail without an fd: the caller must poll (wait_fd() == -1 says so).
            ::close(epoll_fd_);
            epoll_fd_ = -1;
            break;
        }
    }
}

routed_transport::~routed_transport() {
    if (epoll_fd_ >= 0) {
        ::close(epoll_fd_);
    }
}

std::vector<std::byte> routed_transport::address() const {
    address_parts a;
    a.host = host_;
    for (auto const& r : rails_) {
        a.rails.emplace_back(r->provider_name(), r->address());
    }
    return encode(a);
}

void routed_transport::set_peers(std::vector<std::vector<std::byte>> const& addresses,
                                 std::uint32_t my_rank) {
    std::vector<std::vector<std::vector<std::byte>>> per_rail(
        rails_.size(), std::vector<std::vector<std::byte>>(addresses.size()));
    route_.assign(addresses.size(), 0);
    local_.assign(addresses.size(), false);
    std::size_t network = rails_.size() - 1;
    for (std::uint32_t i = 0; i < addresses.size(); ++i) {
        address_parts a = decode(addresses[i], i);
        bool local = a.host == host_;
        local_[i] = local;
        if (local && i != my_rank && !local_rail_) {
            throw network_error(fmt::format("courier: locality {} reports this host ({}) but this "
                                            "locality was told it has no peers here",
                                            i, host_));
        }
        std::size_t rail = local && local_rail_ ? 0 : network;
        if (i == my_rank) {
            for (std::size_t k = 0; k < rails_.size(); ++k) {
                per_rail[k][i] = rails_[k]->address();
            }
            continue;
        }
        std::string const want = rails_[rail]->provider_name();
        bool found = false;
        for (auto& [name, addr] : a.rails) {
            if (name == want) {
                per_rail[rail][i] = std::move(addr);
                found = true;
                break;
            }
        }
        if (!found) {
            throw network_error(fmt::format("courier: locality {} on host {} has no {} endpoint "
                                            "(this locality on {} needs one to reach it)",
                                            i, a.host, want, host_));
        }
        route_[i] = static_cast<std::uint8_t>(rail);
    }
    for (std::size_t k = 0; k < rails_.size(); ++k) {
        rails_[k]->set_peers(per_rail[k], my_rank);
    }
    // A rail's fd may change with its peers (a doorbell some peer cannot ring: it polls then).
    gather_wait_fds();
}

void routed_transport::set_receive_handler(receive_handler h) {
    for (auto& r : rails_) {
        r->set_receive_handler(h);
    }
}

void routed_transport::set_batch_handler(batch_handler h) {
    for (auto& r : rails_) {
        r->set_batch_handler(h);
    }
}

void routed_transport::set_counted_handler(counted_handler h) {
    for (auto& r : rails_) {
        r->set_counted_handler(h);
    }
}

void routed_transport::set_counted_failure_handler(counted_failure_handler h) {
    for (auto& r : rails_) {
        r->set_counted_failure_handler(h);
    }
}

void routed_transport::set_activity_handler(activity_handler h) {
    for (auto& r : rails_) {
        r->set_activity_handler(h);
    }
}

void routed_transport::set_read_handler(read_handler h) {
    for (auto& r : rails_) {
        r->set_read_handler(h);
    }
}

void routed_transport::set_job_token(std::uint64_t token) {
    for (auto& r : rails_) {
        r->set_job_token(token);
    }
}

transport& routed_transport::rail_of(std::uint32_t dest) const {
    if (dest >= route_.size()) {
        throw std::out_of_range("courier: send to unknown locality " + std::to_string(dest));
    }
    return *rails_[route_[dest]];
}

void routed_transport::send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) {
    rail_of(dest).send(dest, std::move(m), std::move(on_sent));
}

bool routed_transport::send_coalesced(std::uint32_t dest, serialization::message&& m,
                                      sent_handler on_sent) {
    return rail_of(dest).send_coalesced(dest, std::move(m), std::move(on_sent));
}

bool routed_transport::progress() {
    bool any = false;
    for (auto& r : rails_) {
        any = r->progress() || any;
    }
    return any;
}

bool routed_transport::can_sleep() {
    for (auto& r : rails_) {
        if (!r->can_sleep()) {
            return false;
        }
    }
    return true;
}

std::string routed_transport::debug_state() const {
    std::string s;
    for (auto const& r : rails_) {
        s += fmt::format("{}{}: {}", s.empty() ? "" : "; ", r->provider_name(), r->debug_state());
    }
    return s;
}

std::string routed_transport::provider_name() const {
    std::string s;
    for (auto const& r : rails_) {
        s += (s.empty() ? "" : "+") + r->provider_name();
    }
    return s;
}

std::vector<std::pair<std::string, statistics>> routed_transport::stats_by_provider() const {
    std::vector<std::pair<std::string, statistics>> v;
    for (auto const& r : rails_) {
        v.emplace_back(r->provider_name(), r->stats());
    }
    return v;
}

statistics routed_transport::stats() const {
    statistics sum;
    for (auto const& r : rails_) {
        statistics s = r->stats();
        sum.messages_sent += s.messages_sent;
        sum.messages_received += s.messages_received;
        sum.eager_bytes_sent += s.eager_bytes_sent;
        sum.rma_bytes_read += s.rma_bytes_read;
        sum.rma_reads += s.rma_reads;
        sum.stalled_reads += s.stalled_reads;
        sum.read_retries += s.read_retries;
        sum.rendezvous_sends += s.rendezvous_sends;
        sum.registrations += s.registrations;
        sum.eagain_retries += s.eagain_retries;
        sum.batches_sent += s.batches_sent;
        sum.parcels_in_batches += s.parcels_in_batches;
        sum.lone_batches += s.lone_batches;
        sum.bytes_copied_on_send += s.bytes_copied_on_send;
        sum.receive_buffers_reused += s.receive_buffers_reused;
        sum.deferred_rendezvous += s.deferred_rendezvous;
        sum.refused_parcels += s.refused_parcels;
        sum.pool_chunks_sent += s.pool_chunks_sent;
        sum.registration_cache_hits += s.registration_cache_hits;
        sum.registration_cache_misses += s.registration_cache_misses;
        sum.pool_receive_buffers += s.pool_receive_buffers;
        sum.doorbell_rings += s.doorbell_rings;
        sum.outbox_chunks_sent += s.outbox_chunks_sent;
        sum.outbox_chunks_received += s.outbox_chunks_received;
        sum.outbox_bytes_received += s.outbox_bytes_received;
        sum.direct_reads += s.direct_reads;
        sum.mapped_read_bytes += s.mapped_read_bytes;
        sum.done_messages += s.done_messages;
        sum.pushed_sends += s.pushed_sends;
        sum.pushed_receives += s.pushed_receives;
        sum.pushed_bytes_received += s.pushed_bytes_received;
        sum.completion_queue_reads += s.completion_queue_reads;
        sum.split_sends += s.split_sends;
        sum.ring_messages_sent += s.ring_messages_sent;
        sum.ring_messages_received += s.ring_messages_received;
        sum.ring_refusals += s.ring_refusals;
        sum.ring_lone_writes += s.ring_lone_writes;
    }
    return sum;
}

} // namespace courier::parcelport::routed
