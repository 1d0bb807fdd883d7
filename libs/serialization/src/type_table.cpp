// SPDX-License-Identifier: BSL-1.0
// Class information for checkpoint files: see detail/type_table.hpp.
#include <courier/serialization/detail/type_table.hpp>
#include <courier/serialization/error.hpp>

#include <atomic>
#include <cstring>

namespace courier::serialization::detail {

namespace {
void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        out.push_back(static_cast<std::byte>(v >> (8 * i)));
    }
}
std::uint32_t get_u32(std::byte const* p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
        v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
    }
    return v;
}
[[noreturn]] void bad_table(std::string const& what) {
    throw serialization_error("type table: " + what);
}
} // namespace

std::size_t next_type_slot() noexcept {
    static std::atomic<std::size_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::byte> type_table::encode() const {
    std::vector<std::byte> out;
    put_u32(out, static_cast<std::uint32_t>(versions_.size()));
    for (auto const& [name, version] : versions_) {
        put_u32(out, version);
        put_u32(out, static_cast<std::uint32_t>(name.size()));
        auto const* p = reinterpret_cast<std::byte const*>(name.data());
        out.insert(out.end(), p, p + name.size());
    }
    return out;
}

type_table type_table::decode(std::span<std::byte const> bytes) {
    if (bytes.size() < 4) {
        bad_table("truncated: " + std::to_string(bytes.size()) + " bytes");
    }
    std::uint32_t count = get_u32(bytes.data());
    std::size_t at = 4;
    if (count > (bytes.size() - at) / 9) { // an entry takes at least 9 bytes
        bad_table(std::to_string(count) + " entries cannot fit in " + std::to_string(bytes.size()) +
                  " bytes");
    }
    type_table t;
    for (std::uint32_t i = 0; i < count; ++i) {
        if (bytes.size() - at < 8) {
            bad_table("entry " + std::to_string(i) + " is truncated");
        }
        std::uint32_t version = get_u32(bytes.data() + at);
        std::uint32_t length = get_u32(bytes.data() + at + 4);
        at += 8;
        if (length == 0 || length > bytes.size() - at) {
            bad_table("entry " + std::to_string(i) + " has a name of " + std::to_string(length) +
                      " bytes with " + std::to_string(bytes.size() - at) + " left");
        }
        std::string_view name(reinterpret_cast<char const*>(bytes.data() + at), length);
        at += length;
        if (!t.add(name, version)) {
            bad_table("type " + std::string(name) + " is listed twice");
        }
    }
    if (at != bytes.size()) {
        bad_table(std::to_string(bytes.size() - at) + " bytes after the last entry");
    }
    return t;
}

void type_recorder::record_slow(std::size_t slot, char const* name, unsigned version) {
    if (slot >= seen_.size()) {
        seen_.resize(slot + 1);
    }
    seen_[slot] = true;
    table_.add(name, version);
}

std::optional<unsigned> type_resolver::resolve(std::size_t slot, char const* name) {
    auto v = table_.find(name);
    if (v) {
        if (slot >= cache_.size()) {
            cache_.resize(slot + 1);
        }
        cache_[slot] = v;
    }
    return v;
}

} // namespace courier::serialization::detail
