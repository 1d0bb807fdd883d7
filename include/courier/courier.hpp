// SPDX-License-Identifier: BSL-1.0
// The umbrella header: everything Courier offers. Today that is the serialization library;
// the runtime, registered memory and the parcelport join as they land.
#pragma once

#include <courier/serialization.hpp>
