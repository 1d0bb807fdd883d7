// SPDX-License-Identifier: BSL-1.0
// A loopback hub's shared state: its identity, its fault rules, and the registry of live
// endpoints by rank through which parcels and send completions reach their endpoint.
#pragma once

#include "fault_rules.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace courier::parcelport::detail {

class loopback_endpoint;

class loopback_hub_state {
public:
    explicit loopback_hub_state(loopback_options const& o)
        : id_(next_id()), rules_(o.localities, o.seed), ranks_(o.localities, nullptr) {}

    std::uint32_t localities() const noexcept { return static_cast<std::uint32_t>(ranks_.size()); }
    /// Process-unique: the addresses of two hubs never compare equal.
    std::uint64_t id() const noexcept { return id_; }
    fault_rules& rules() noexcept { return rules_; }

    /// Makes `ep` the endpoint of `rank`. Throws std::logic_error if the rank has one.
    void enrol(std::uint32_t rank, loopback_endpoint* ep) {
        std::unique_lock g(registry_mutex_);
        if (ranks_[rank] != nullptr) {
            throw std::logic_error("loopback: rank " + std::to_string(rank) +
                                   " of this hub has a live endpoint already");
        }
        ranks_[rank] = ep;
    }
    /// Once this returns, nothing reaches the rank's endpoint through the hub any more.
    void withdraw(std::uint32_t rank) noexcept {
        std::unique_lock g(registry_mutex_);
        ranks_[rank] = nullptr;
    }
    /// Calls f(endpoint) if `rank` has one, under a shared lock that keeps the endpoint from
    /// being withdrawn (and destroyed) meanwhile; returns whether it did. `f` must not come
    /// back into the registry.
    template <class F>
    bool with_endpoint(std::uint32_t rank, F&& f) {
        std::shared_lock g(registry_mutex_);
        loopback_endpoint* ep = ranks_[rank];
        if (ep == nullptr) {
            return false;
        }
        f(*ep);
        return true;
    }

private:
    static std::uint64_t next_id() noexcept {
        static std::atomic<std::uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
    }

    std::uint64_t const id_;
    fault_rules rules_;
    std::shared_mutex registry_mutex_;
    std::vector<loopback_endpoint*> ranks_; // nullptr: no live endpoint
};

} // namespace courier::parcelport::detail
