// SPDX-License-Identifier: BSL-1.0
// The umbrella header: everything Courier offers: serialization, registered memory and the
// runtime (local tasks, remote actions, components, collectives).
#pragma once

#include <courier/rma.hpp>
#include <courier/runtime.hpp>
#include <courier/serialization.hpp>
