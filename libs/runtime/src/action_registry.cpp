// SPDX-License-Identifier: BSL-1.0
// The registry of actions by wire id: registration at static initialization, lock-free lookup
// for every incoming request.
#include "locality_state.hpp"
#include "log.hpp"

#include <courier/runtime/actions.hpp>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace courier::detail {

namespace {

/// Registered actions by wire id: an insert-only open-addressing table. Every incoming request
/// looks its action up here, from any worker, without a lock (a shared lock was two atomic
/// read-modify-writes on one cache line that all workers share); registrations, at static
/// initialization or later (a loaded plugin), take a mutex among themselves and publish an
/// entry by storing its id last.
class action_registry {
public:
    using entry = action_entry;
    /// The action with this id, or {nullptr, nullptr}.
    entry find(std::uint64_t id) const noexcept {
        if (id == 0) {
            return {};
        }
        for (std::size_t i = home(id);; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_acquire);
            if (at == id) {
                return {slots_[i].name, slots_[i].invoke};
            }
            if (at == 0) {
                return {};
            }
        }
    }
    /// Adds an action; an id already taken by another name is fatal (rename one of them).
    void add(std::uint64_t id, char const* name, action_invoker invoke) {
        std::lock_guard lk(mutex_);
        if (id == 0) {
            log(log_level::error, "action '{}' hashes to the reserved id 0; rename it", name);
            std::abort();
        }
        if (count_ + 1 > max_actions) {
            log(log_level::error, "more than {} actions registered (adding '{}')", max_actions,
                name);
            std::abort();
        }
        std::size_t i = home(id);
        for (;; i = (i + 1) & mask) {
            std::uint64_t at = slots_[i].id.load(std::memory_order_relaxed);
            if (at == id) {
                if (std::string_view(slots_[i].name) != name) {
                    log(log_level::error, "action ids of '{}' and '{}' collide; rename one",
                        slots_[i].name, name);
                    std::abort();
                }
                return; // the same action registered again (another translation unit)
            }
            if (at == 0) {
                break;
            }
        }
        slots_[i].name = name;
        slots_[i].invoke = invoke;
        slots_[i].id.store(id, std::memory_order_release);
        ++count_;
    }

private:
    static constexpr std::size_t capacity = 4096; // a power of two
    static constexpr std::size_t mask = capacity - 1;
    static constexpr std::size_t max_actions = capacity * 3 / 4; // keeps probes short
    struct slot {
        std::atomic<std::uint64_t> id{0};
        char const* name = nullptr;
        action_invoker invoke = nullptr;
    };
    static std::size_t home(std::uint64_t id) noexcept {
        return static_cast<std::size_t>((id * 0x9e3779b97f4a7c15ull) >> 52) & mask;
    }
    std::array<slot, capacity> slots_{};
    std::size_t count_ = 0;
    std::mutex mutex_;
};

action_registry& actions() {
    static action_registry r;
    return r;
}

} // namespace

action_entry find_action(std::uint64_t id) noexcept {
    return actions().find(id);
}

bool register_action(std::uint64_t id, char const* name, action_invoker invoke) {
    actions().add(id, name, invoke);
    return true;
}

char const* registered_action_name(std::uint64_t id) noexcept {
    return actions().find(id).name;
}

} // namespace courier::detail
