// SPDX-License-Identifier: BSL-1.0
// The umbrella header: everything Courier offers. Today: serialization and the local task
// runtime; registered memory and the parcelport join as they land.
#pragma once

#include <courier/runtime.hpp>
#include <courier/serialization.hpp>
