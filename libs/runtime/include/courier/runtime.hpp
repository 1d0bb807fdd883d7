// SPDX-License-Identifier: BSL-1.0
// Courier runtime: lightweight threads, futures, synchronization, startup. See libs/runtime.
#pragma once

#include <courier/runtime/actions.hpp>
#include <courier/runtime/async.hpp>
#include <courier/runtime/channel.hpp>
#include <courier/runtime/collectives.hpp>
#include <courier/runtime/components.hpp>
#include <courier/runtime/counters.hpp>
#include <courier/runtime/future.hpp>
#include <courier/runtime/init.hpp>
#include <courier/runtime/naming.hpp>
#include <courier/runtime/sync.hpp>
#include <courier/runtime/this_thread.hpp>
#include <courier/runtime/when.hpp>
