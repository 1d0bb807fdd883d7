// SPDX-License-Identifier: BSL-1.0
// The bit layout of global ids (id_type): msb = (locality + 1) << 32, plus 1 in the low bit for
// a component; lsb = the component's number on its locality (0 for a locality itself). The one
// place that knows it.
#pragma once

#include <courier/runtime/actions.hpp>

#include <cstdint>

namespace courier::detail {

/// The msb of locality `rank`'s id (and, with component_bit, of its components').
constexpr std::uint64_t locality_msb(std::uint32_t rank) noexcept {
    return (std::uint64_t{rank} + 1) << 32;
}
constexpr std::uint64_t component_bit = 1;
/// The locality an msb names (undefined for an msb that names none: check names_a_locality).
constexpr std::uint32_t owner_of(std::uint64_t msb) noexcept {
    return static_cast<std::uint32_t>((msb >> 32) - 1);
}
/// Whether `msb` names one of `localities` localities.
constexpr bool names_a_locality(std::uint64_t msb, std::uint32_t localities) noexcept {
    return (msb >> 32) != 0 && (msb >> 32) <= localities;
}
inline id_type locality_id(std::uint32_t rank) {
    return id_type{locality_msb(rank), 0};
}

} // namespace courier::detail
