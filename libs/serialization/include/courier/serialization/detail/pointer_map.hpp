// SPDX-License-Identifier: BSL-1.0
// pointer_map: the sender's object-identity table for tracked pointers, specialized for
// pointer keys (MEL names such a map as its future work): open addressing with linear probing
// in one flat array of {key, value} pairs, a power-of-two capacity kept at most half full, and
// a multiplicative hash of the address without its alignment bits. No node allocation per
// insert (std::unordered_map allocates one per element and chases a pointer per lookup).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace courier::serialization::detail {

class pointer_map {
public:
    /// The value stored for `key`, inserting `value` if absent; `.second` says whether it was.
    std::pair<std::uint64_t, bool> try_emplace(void const* key, std::uint64_t value) {
        if ((size_ + 1) * 2 > slots_.size()) {
            rehash(slots_.empty() ? 64 : slots_.size() * 2);
        }
        std::size_t mask = slots_.size() - 1;
        for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
            slot& s = slots_[i];
            if (s.key == nullptr) {
                s.key = key;
                s.value = value;
                ++size_;
                return {value, true};
            }
            if (s.key == key) {
                return {s.value, false};
            }
        }
    }
    std::size_t size() const noexcept { return size_; }
    void reserve(std::size_t n) {
        std::size_t cap = 64;
        while (cap < n * 2) {
            cap *= 2;
        }
        if (cap > slots_.size()) {
            rehash(cap);
        }
    }

private:
    struct slot {
        void const* key = nullptr;
        std::uint64_t value = 0;
    };
    static std::size_t hash(void const* p) noexcept {
        auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
        return static_cast<std::size_t>(((v >> 3) * 0x9E3779B97F4A7C15ull) >> 20);
    }
    void rehash(std::size_t capacity) {
        std::vector<slot> old(capacity);
        old.swap(slots_);
        std::size_t mask = capacity - 1;
        for (slot const& s : old) {
            if (s.key != nullptr) {
                std::size_t i = hash(s.key) & mask;
                while (slots_[i].key != nullptr) {
                    i = (i + 1) & mask;
                }
                slots_[i] = s;
            }
        }
    }
    std::vector<slot> slots_;
    std::size_t size_ = 0;
};

} // namespace courier::serialization::detail
