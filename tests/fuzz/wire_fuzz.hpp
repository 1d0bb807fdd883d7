// SPDX-License-Identifier: BSL-1.0
// What the wire fuzzer (wire_fuzz.cpp) and its corpus generator (wire_corpus.cpp) share: the
// in-process job they run, the actions it offers, and how an input holds several messages.
//
// An input is a sequence of received messages, each a 2-byte little-endian length and that
// many bytes (the last one cut short if the input ends first). Each is what one receive of a
// locality's libfabric endpoint would hold: at most recv_size bytes (a provider truncates a
// longer one with an error completion; the fuzzer cuts it).
#pragma once

#include <courier/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace courier::fuzz {

inline constexpr std::uint32_t localities = 2;
/// The in-process job's job token (in_process_job sets 1).
inline constexpr std::uint64_t job_token = 1;
/// The receive buffer size of the tcp provider's defaults: header, 8 KiB eager threshold, 32
/// descriptors.
inline constexpr std::size_t recv_size = 48 + 8192 + 32 * 32;

inline void append_framed(std::vector<std::byte>& input, std::span<std::byte const> message) {
    auto n = static_cast<std::uint16_t>(message.size());
    input.push_back(static_cast<std::byte>(n & 0xff));
    input.push_back(static_cast<std::byte>(n >> 8));
    input.insert(input.end(), message.begin(), message.begin() + n);
}

inline std::uint32_t add(std::uint32_t a, std::uint32_t b) {
    return a + b; // any arguments the fuzzer makes: no overflow
}
inline std::size_t total_length(std::vector<std::string> const& words) {
    std::size_t n = 0;
    for (auto const& w : words) {
        n += w.size();
    }
    return n;
}
inline double sum_of(std::vector<double> const& v) {
    return std::accumulate(v.begin(), v.end(), 0.0);
}
inline int thrower(std::uint32_t x) {
    throw std::invalid_argument("bad argument " + std::to_string(x));
}

} // namespace courier::fuzz

COURIER_PLAIN_ACTION(courier::fuzz::add, fuzz_add_action);
COURIER_PLAIN_ACTION(courier::fuzz::total_length, fuzz_total_length_action);
COURIER_PLAIN_ACTION(courier::fuzz::sum_of, fuzz_sum_of_action);
COURIER_PLAIN_ACTION(courier::fuzz::thrower, fuzz_thrower_action);
