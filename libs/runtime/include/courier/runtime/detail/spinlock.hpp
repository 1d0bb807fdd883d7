// SPDX-License-Identifier: BSL-1.0
// The runtime's spinlock is the one the parcelport uses too (libs/common).
#pragma once

#include <courier/common/spinlock.hpp>
