// SPDX-License-Identifier: BSL-1.0
// Object identity within one message: the sender numbers each tracked object the first time it
// is written; later references write the number. The receiver keeps the objects it built in the
// same order. Nothing but those numbers goes on the wire.
#pragma once

#include <courier/serialization/detail/pointer_map.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

namespace courier::serialization::detail {

struct polymorphic_entry;

class save_tracking {
public:
    explicit save_tracking(bool use_std_map = false) : use_std_(use_std_map) {}
    /// Returns the object's number and whether this is its first appearance.
    std::pair<std::uint64_t, bool> insert(void const* address) {
        if (!use_std_) [[likely]] {
            return fast_.try_emplace(address, fast_.size());
        }
        auto [it, inserted] = std_.try_emplace(address, std_.size());
        return {it->second, inserted};
    }

private:
    bool use_std_;
    pointer_map fast_;
    std::unordered_map<void const*, std::uint64_t> std_;
};

/// The clear function of load_tracking::object for T, or null if T cannot be reset by
/// assignment from a default-constructed T.
template <class T>
constexpr void (*clear_function())(void*) {
    if constexpr (std::is_default_constructible_v<T> && std::is_move_assignable_v<T>) {
        return [](void* p) { *static_cast<T*>(p) = T(); };
    } else {
        return nullptr;
    }
}

class load_tracking {
public:
    struct object {
        void* address;                  // the most-derived object
        std::type_info const* type;     // its dynamic type
        polymorphic_entry const* entry; // its registry entry (polymorphic types only)
        std::shared_ptr<void> owner;    // set for objects owned by shared_ptr
        void (*clear)(void*) = nullptr; // resets the object to a default-constructed one
    };
    std::uint64_t add(object o) {
        objects_.push_back(std::move(o));
        return objects_.size() - 1;
    }
    std::size_t size() const noexcept { return objects_.size(); }
    /// A failed load: empties every shared_ptr-owned object it built, so that ownership cycles
    /// among them (which a hostile or truncated message can form before it fails) are broken and
    /// the objects are freed with the tracking list instead of leaking.
    void clear_owned() noexcept {
        for (auto& o : objects_) {
            if (o.owner && o.clear != nullptr) {
                try {
                    o.clear(o.address);
                } catch (...) { // a default constructor that throws: that object may leak
                }
            }
        }
    }
    object const& operator[](std::size_t i) const { return objects_[i]; }

private:
    std::vector<object> objects_;
};

} // namespace courier::serialization::detail
