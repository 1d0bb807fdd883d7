// SPDX-License-Identifier: BSL-1.0
// courier::network_error: the one error type a transport reports. A provider's own codes
// (libfabric's -FI_E*, MPI's error classes) are converted into it once, where the transport
// calls the provider, with the provider's message; nothing above the transport sees them.
#pragma once

#include <stdexcept>
#include <string>

namespace courier {

/// The network failed: a provider call failed, a peer is gone, or the fabric cannot be opened.
/// Futures of remote calls that cannot complete hold it.
class network_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

} // namespace courier
