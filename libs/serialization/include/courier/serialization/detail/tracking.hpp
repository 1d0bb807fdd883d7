// SPDX-License-Identifier: BSL-1.0
// Object identity within one message: the sender numbers each tracked object the first time it
// is written; later references write the number. The receiver keeps the objects it built in the
// same order. Nothing but those numbers goes on the wire.
#pragma once

#include <courier/serialization/detail/pointer_map.hpp>

#include <cstdint>
#include <memory>
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

class load_tracking {
public:
    struct object {
        void* address;                  // the most-derived object
        std::type_info const* type;     // its dynamic type
        polymorphic_entry const* entry; // its registry entry (polymorphic types only)
        std::shared_ptr<void> owner;    // set for objects owned by shared_ptr
    };
    std::uint64_t add(object o) {
        objects_.push_back(std::move(o));
        return objects_.size() - 1;
    }
    std::size_t size() const noexcept { return objects_.size(); }
    object const& operator[](std::size_t i) const { return objects_[i]; }

private:
    std::vector<object> objects_;
};

} // namespace courier::serialization::detail
