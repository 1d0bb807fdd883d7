// SPDX-License-Identifier: BSL-1.0
// CRC-32C (Castagnoli), used for checkpoint file checksums. Incremental: pass the previous
// value as `crc` (0 to start).
#pragma once

#include <cstddef>
#include <cstdint>

namespace courier::serialization::detail {

std::uint32_t crc32c(std::uint32_t crc, void const* data, std::size_t n) noexcept;
/// The same, always through the portable tables (the reference the hardware path is tested
/// against).
std::uint32_t crc32c_portable_only(std::uint32_t crc, void const* data, std::size_t n) noexcept;

} // namespace courier::serialization::detail
