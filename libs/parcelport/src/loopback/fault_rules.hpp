// SPDX-License-Identifier: BSL-1.0
// A loopback hub's fault rules: which message gets which fault, drawn from one seeded
// generator, and how many of each kind were applied. Thread-safe (one mutex).
#pragma once

#include <courier/parcelport/loopback.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace courier::parcelport::detail {

/// What the rules decided for one message.
struct fault_decision {
    fault_kind kind = fault_kind::drop;
    std::chrono::microseconds delay{0};
    std::size_t position = 0; ///< corrupt: the index-buffer byte to change
    std::byte mask{1};        ///< corrupt: what that byte is XORed with (never 0)
};

class fault_rules {
public:
    fault_rules(std::uint32_t localities, std::uint64_t seed)
        : localities_(localities), rng_(seed) {}

    void add(fault_rule const& r) {
        if (!(r.probability >= 0.0 && r.probability <= 1.0)) {
            throw std::invalid_argument("loopback fault rule: probability " +
                                        std::to_string(r.probability) + " is not in [0, 1]");
        }
        if (r.delay.count() < 0) {
            throw std::invalid_argument("loopback fault rule: negative delay");
        }
        for (std::uint32_t rank : {r.source, r.dest}) {
            if (rank != any_rank && rank >= localities_) {
                throw std::invalid_argument("loopback fault rule: rank " + std::to_string(rank) +
                                            " is neither any_rank nor below the hub's " +
                                            std::to_string(localities_) + " localities");
            }
        }
        std::lock_guard g(mutex_);
        rules_.push_back({r, 0, 0});
        rule_count_.store(rules_.size(), std::memory_order_release);
    }

    void clear() {
        std::lock_guard g(mutex_);
        rules_.clear();
        rule_count_.store(0, std::memory_order_release);
    }

    fault_counters counts() const {
        std::lock_guard g(mutex_);
        return counts_;
    }

    /// The fault for a message with `index_size` index bytes (header included) from `source`
    /// to `dest`, if a rule fires; counted as applied.
    std::optional<fault_decision> decide(std::uint32_t source, std::uint32_t dest,
                                         std::size_t index_size) {
        if (rule_count_.load(std::memory_order_acquire) == 0) {
            return std::nullopt; // the usual case takes no lock
        }
        std::lock_guard g(mutex_);
        for (auto& a : rules_) {
            fault_rule const& r = a.rule;
            bool const matches = (r.source == any_rank || r.source == source) &&
                                 (r.dest == any_rank || r.dest == dest) &&
                                 (r.kind != fault_kind::corrupt || index_size > header_size) &&
                                 a.applied < r.max_count &&
                                 (r.next_messages == 0 || a.considered < r.next_messages);
            if (!matches) {
                continue;
            }
            ++a.considered;
            if (r.probability < 1.0 && !(unit_interval() < r.probability)) {
                continue;
            }
            ++a.applied;
            fault_decision d;
            d.kind = r.kind;
            d.delay = r.delay;
            if (r.kind == fault_kind::corrupt) {
                d.position = header_size + rng_() % (index_size - header_size);
                d.mask = static_cast<std::byte>(1 + rng_() % 255);
            }
            count(r.kind);
            return d;
        }
        return std::nullopt;
    }

private:
    // The message header (magic, version, flags) is never corrupted: the receiver could not
    // build a message from it, and a test could not look at the damage.
    static constexpr std::size_t header_size = 8; // serialization::message_header_size

    struct active_rule {
        fault_rule rule;
        std::uint64_t considered = 0;
        std::uint64_t applied = 0;
    };

    /// A uniform double in [0, 1) from 53 bits of one draw: fully specified (unlike the
    /// standard distributions), so a seed gives the same faults with any standard library.
    double unit_interval() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

    void count(fault_kind k) {
        switch (k) {
        case fault_kind::drop:
            ++counts_.drop;
            break;
        case fault_kind::delay:
            ++counts_.delay;
            break;
        case fault_kind::reorder:
            ++counts_.reorder;
            break;
        case fault_kind::duplicate:
            ++counts_.duplicate;
            break;
        case fault_kind::corrupt:
            ++counts_.corrupt;
            break;
        case fault_kind::refuse:
            ++counts_.refuse;
            break;
        }
    }

    std::uint32_t const localities_;
    mutable std::mutex mutex_; // everything below
    std::atomic<std::size_t> rule_count_{0};
    std::vector<active_rule> rules_;
    std::mt19937_64 rng_;
    fault_counters counts_;
};

} // namespace courier::parcelport::detail
