// SPDX-License-Identifier: BSL-1.0
// How a collective's value is written into a cell of a shared-memory inbox, and read back
// (courier/runtime/collectives.hpp; the inboxes are the runtime's collective_rings). Flat
// values go as raw bytes, large vectors of numbers by address, the rest serialized.
#pragma once

#include <courier/serialization.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace courier::collectives::detail {

/// Reads `count` pieces of process `pid`'s memory into this one's (process_vm_readv); throws
/// network_error if it cannot read them all.
struct ring_piece {
    void* local;
    std::uint64_t remote;
    std::size_t bytes;
};
void ring_read_pieces(std::int32_t pid, ring_piece const* pieces, std::size_t count);

/// The bytes of a value in an inbox cell. Flat values (arithmetic values, enums, and vectors
/// of flat values) are written as they are, a vector as its element count (4 bytes), a tag
/// (1 byte) and its elements, or, for a vector of arithmetic values too large for the cell
/// when the receiver can read the sender's memory, tag 1 and the address of its elements,
/// which the receiver copies straight into its own vector (one copy, as MPI's CMA path);
/// anything else as a serialized message without zero copy (all in its index).
template <class T>
struct ring_flat : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T>> {};
template <class U, class A>
struct ring_flat<std::vector<U, A>> : std::bool_constant<ring_flat<U>::value> {};
template <class A>
struct ring_flat<std::vector<bool, A>> : std::false_type {};
template <>
struct ring_flat<bool> : std::false_type {}; // not every byte is a bool: serialized

inline constexpr std::size_t ring_payload_limit = 992; // collective_rings::payload_capacity
/// Vectors named by address: at least this many bytes, at most ring_max_by_address.
inline constexpr std::size_t ring_by_address_min = 512;
inline constexpr std::size_t ring_max_by_address = std::size_t{256} << 20;

struct ring_writer {
    std::byte* at;
    std::byte* end;
    std::size_t by_address = 0; // bytes named by address so far (at most ring_max_by_address)
    bool put(void const* p, std::size_t n) noexcept {
        if (static_cast<std::size_t>(end - at) < n) {
            return false;
        }
        if (n != 0) {
            std::memcpy(at, p, n);
        }
        at += n;
        return true;
    }
};
struct ring_reader {
    std::span<std::byte const> rest;
    std::vector<ring_piece>* pieces = nullptr; // where vectors named by address go
    std::size_t by_address = 0;                // their bytes so far (at most ring_max_by_address)
    void get(void* p, std::size_t n) {
        if (rest.size() < n) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory ends early");
        }
        if (n != 0) {
            std::memcpy(p, rest.data(), n);
        }
        rest = rest.subspan(n);
    }
};

template <class T>
bool ring_encode(T const& v, ring_writer& w, bool by_address = false) noexcept;

/// What comes before a vector's elements: their count (4 bytes) and its tag (1 byte: 0 inline,
/// 1 by address).
inline bool ring_put_head(ring_writer& w, std::size_t count, std::uint8_t tag) noexcept {
    auto const n = static_cast<std::uint32_t>(count);
    return w.put(&n, sizeof n) && w.put(&tag, 1);
}

/// `at(0)`, ..., `at(count - 1)` (each a T const&) written as ring_encode writes a vector of
/// them with its elements inline (tag 0): a vector's elements one by one, or values that are
/// not in one vector (all_gather's own value and those it received) as if they were.
template <class At>
bool ring_encode_each(std::size_t count, At const& at, ring_writer& w, bool by_address) noexcept {
    if (count > ring_payload_limit || !ring_put_head(w, count, 0)) {
        return false;
    }
    for (std::size_t i = 0; i < count; ++i) {
        if (!ring_encode(at(i), w, by_address)) {
            return false;
        }
    }
    return true;
}

/// `by_address`: vectors of arithmetic values of at least ring_by_address_min bytes are named
/// by address (set by the caller only when the receiver can read this process's memory and
/// the value stays alive until it has).
template <class T>
bool ring_encode(T const& v, ring_writer& w, bool by_address) noexcept {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        return w.put(&v, sizeof v);
    } else { // a vector
        using U = typename T::value_type;
        std::size_t const bytes = v.size() * sizeof(U);
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (by_address && bytes >= ring_by_address_min &&
                bytes <= ring_max_by_address - w.by_address) {
                w.by_address += bytes;
                auto const at = reinterpret_cast<std::uintptr_t>(v.data());
                std::uint64_t const addr = at;
                return ring_put_head(w, v.size(), 1) && w.put(&addr, sizeof addr);
            }
        }
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            return v.size() <= ring_payload_limit && ring_put_head(w, v.size(), 0) &&
                   w.put(v.data(), bytes);
        } else {
            return ring_encode_each(
                v.size(), [&](std::size_t i) -> U const& { return v[i]; }, w, by_address);
        }
    }
}

template <class T>
void ring_decode_into(T& v, ring_reader& r) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        r.get(&v, sizeof v);
    } else {
        std::uint32_t n = 0;
        std::uint8_t tag = 0;
        r.get(&n, sizeof n);
        r.get(&tag, 1);
        using U = typename T::value_type;
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (tag == 1) {
                std::uint64_t addr = 0;
                r.get(&addr, sizeof addr);
                std::size_t const bytes = std::size_t{n} * sizeof(U);
                r.by_address += bytes;
                if (r.pieces == nullptr || bytes > ring_max_by_address ||
                    r.by_address > ring_max_by_address) {
                    throw serialization::serialization_error(
                        "courier: a collective message in shared memory names " +
                        std::to_string(bytes) + " bytes by address");
                }
                v.resize(n);
                r.pieces->push_back(ring_piece{v.data(), addr, bytes});
                return;
            }
        }
        if (tag != 0) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory has a bad tag");
        }
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (r.rest.size() / sizeof(U) < n) {
                throw serialization::serialization_error(
                    "courier: a collective message in shared memory ends early");
            }
            v.resize(n);
            r.get(v.data(), std::size_t{n} * sizeof(U));
        } else {
            if (r.rest.size() < n) { // every element takes at least a byte
                throw serialization::serialization_error(
                    "courier: a collective message in shared memory ends early");
            }
            v.resize(n);
            for (auto& e : v) {
                ring_decode_into(e, r);
            }
        }
    }
}

serialization::options ring_serialization_options() noexcept;

/// `pid`: the sender's process, whose memory holds the vectors named by address (0: none may
/// be).
template <class T>
T ring_decode(std::span<std::byte const> payload, std::int32_t pid = 0) {
    T v{};
    if constexpr (ring_flat<T>::value) {
        std::vector<ring_piece> pieces;
        ring_reader r{payload, pid != 0 ? &pieces : nullptr};
        ring_decode_into(v, r);
        if (!r.rest.empty()) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory has " +
                std::to_string(r.rest.size()) + " bytes too many");
        }
        if (!pieces.empty()) {
            ring_read_pieces(pid, pieces.data(), pieces.size());
        }
    } else {
        serialization::message m = serialization::message::from_bytes(payload);
        serialization::load(m, v);
    }
    return v;
}

} // namespace courier::collectives::detail
