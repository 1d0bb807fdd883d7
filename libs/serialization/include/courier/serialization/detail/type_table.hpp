// SPDX-License-Identifier: BSL-1.0
// Class information for checkpoint files: which user types a file holds and the class version
// each was written at, recorded once per file (Boost-style) instead of before every object.
// A type that was written unversioned (version 0) can then gain a version and still read its
// old files: the reader takes the written version from the table. Messages between identical
// binaries do not carry a table; they keep the inline version of versioned types.
//
// Encoding (little-endian): u32 entry count, then per entry u32 version, u32 name length and the
// name's bytes. Names are the types' typeid names (Itanium mangled names: the same in every
// build of one program and across GCC and Clang).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace courier::serialization::detail {

/// A small number per type, handed out on first use: archives index per-type state by it.
std::size_t next_type_slot() noexcept;
template <class T>
std::size_t type_slot() noexcept {
    static std::size_t const slot = next_type_slot();
    return slot;
}

class type_table {
public:
    /// Adds a type; false if a type of that name is already in the table.
    bool add(std::string_view name, unsigned version) {
        return versions_.emplace(std::string(name), version).second;
    }
    /// The version recorded for `name`, if the table holds it.
    std::optional<unsigned> find(std::string_view name) const {
        auto it = versions_.find(name);
        return it == versions_.end() ? std::nullopt : std::optional<unsigned>(it->second);
    }
    std::size_t size() const noexcept { return versions_.size(); }

    std::vector<std::byte> encode() const;
    /// Throws serialization_error naming the problem (truncated, duplicate or empty names,
    /// absurd counts, trailing bytes).
    static type_table decode(std::span<std::byte const> bytes);

private:
    std::map<std::string, unsigned, std::less<>> versions_; // by name: a deterministic encoding
};

/// The writer's side: records each type the first time an object of it is written.
class type_recorder {
public:
    void record(std::size_t slot, char const* name, unsigned version) {
        if (slot < seen_.size() && seen_[slot]) [[likely]] {
            return;
        }
        record_slow(slot, name, version);
    }
    type_table const& table() const noexcept { return table_; }

private:
    std::vector<bool> seen_;
    type_table table_;
    void record_slow(std::size_t slot, char const* name, unsigned version);
};

/// The reader's side: the written version of each type, looked up by name once per type.
class type_resolver {
public:
    explicit type_resolver(type_table const& t) : table_(t) {}
    /// Empty when the file holds no type of that name.
    std::optional<unsigned> version(std::size_t slot, char const* name) {
        if (slot < cache_.size() && cache_[slot]) [[likely]] {
            return cache_[slot];
        }
        return resolve(slot, name);
    }

private:
    type_table const& table_;
    std::vector<std::optional<unsigned>> cache_; // by type_slot; empty = not looked up yet
    std::optional<unsigned> resolve(std::size_t slot, char const* name);
};

} // namespace courier::serialization::detail
