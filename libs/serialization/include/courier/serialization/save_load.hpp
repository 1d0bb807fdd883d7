// SPDX-License-Identifier: BSL-1.0
// save() / load(): the entry points for in-memory archives.
//
//   message m = save(x, y, z);          // zero copy at or above default_options() threshold
//   load(m, x2, y2, z2);                // throws serialization_error on bad input
//
// load() requires every byte and chunk to be consumed. On error, the destination values are
// valid but unspecified (each is destroyed or reassigned normally); nothing leaks.
#pragma once

#include <courier/serialization/input_archive.hpp>
#include <courier/serialization/message.hpp>
#include <courier/serialization/output_archive.hpp>

#include <utility>

namespace courier::serialization {

/// Serializes `values` into `m`, reusing its buffer capacity.
template <class... Args>
void save_into(message& m, options const& o, Args const&... values) {
    output_archive ar(m, o);
    (ar.save(values), ...);
    ar.finish();
}

template <class... Args>
message save(options const& o, Args const&... values) {
    message m;
    save_into(m, o, values...);
    return m;
}

template <class... Args>
message save(Args const&... values) {
    return save(default_options(), values...);
}

/// Loads `values` in order. On failure (serialization_error, or anything a loader throws),
/// what deep-copy wrappers allocated is freed and their pointers reset (deep_copy.hpp).
template <class... Args>
void load_with_limits(message const& m, load_limits const& limits, Args&&... values);

template <class... Args>
void load(message const& m, Args&&... values) {
    load_with_limits(m, load_limits{}, std::forward<Args>(values)...);
}

/// load() with explicit limits against hostile input (input_archive.hpp, deep_copy.hpp).
template <class... Args>
void load_with_limits(message const& m, load_limits const& limits, Args&&... values) {
    input_archive ar(m, limits);
    try {
        ((ar.set_top_level(&values, sizeof(values)), ar.load(std::forward<Args>(values))), ...);
        ar.finish();
    } catch (...) {
        ar.rollback();
        throw;
    }
}

} // namespace courier::serialization
