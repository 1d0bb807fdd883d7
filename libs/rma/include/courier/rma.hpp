// SPDX-License-Identifier: BSL-1.0
// Registered memory (libs/rma): the pool, rma_allocator, rma_vector, rma_object, and the
// registration cache the parcelport uses for on-the-fly memory.
#pragma once

#include <courier/rma/pool.hpp>
#include <courier/rma/registrar.hpp>
#include <courier/rma/registration_cache.hpp>
#include <courier/rma/rma_allocator.hpp>
#include <courier/rma/rma_object.hpp>
#include <courier/rma/rma_vector.hpp>

namespace courier::rma {
using courier::rma_allocator;
using courier::rma_object;
using courier::rma_vector;
} // namespace courier::rma
