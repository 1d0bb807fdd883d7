// SPDX-License-Identifier: BSL-1.0
// serialization_error: the one exception type the serialization layer throws on bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace courier::serialization {

/// Thrown for malformed or hostile input (truncation, corruption, absurd sizes, unknown type
/// ids, wrong byte order or format) and for contract violations detected while saving (an
/// unregistered polymorphic type). The message says what was expected and what was found.
/// Loading never leaves a half-written object graph behind the caller's back: see load().
class serialization_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

} // namespace courier::serialization
