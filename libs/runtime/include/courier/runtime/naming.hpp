// SPDX-License-Identifier: BSL-1.0
// Symbolic names for global ids, as HPX's register_with_basename / find_from_basename.
//
//   courier::register_with_basename("stepper", stepper_id).get();      // as this locality
//   courier::id_type left = courier::find_from_basename("stepper", rank - 1).get();
//
// A name is (base, sequence number), stored on the locality its hash picks, so names spread
// over the job and a lookup costs one round trip. A registration holds a counted reference:
// the component lives at least until the name is unregistered. find_from_basename waits until
// some locality registers the name (its future becomes ready then; no worker waits), so
// localities need not agree on who starts first. A lookup of a name whose component lives on
// a failed locality fails with network_error, as does any call to a failed name server.
// A lookup that nobody ever answers keeps the job from ending, like an unfulfilled promise.
#pragma once

#include <courier/runtime/actions.hpp>

#include <cstddef>
#include <string>

namespace courier {

/// Registers `id` under (base, sequence_nr); false if that name is already taken.
future<bool> register_with_basename(std::string base, id_type id,
                                    std::size_t sequence_nr = get_locality_id());
/// The id registered under (base, sequence_nr), once it is.
future<id_type> find_from_basename(std::string base, std::size_t sequence_nr);
/// Removes the name; yields the id it named (an invalid id_type if there was none).
future<id_type> unregister_with_basename(std::string base,
                                         std::size_t sequence_nr = get_locality_id());

} // namespace courier
