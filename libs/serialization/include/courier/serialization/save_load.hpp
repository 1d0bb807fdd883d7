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

template <class... Args>
void load(message const& m, Args&&... values) {
    input_archive ar(m);
    (ar.load(std::forward<Args>(values)), ...);
    ar.finish();
}

} // namespace courier::serialization
