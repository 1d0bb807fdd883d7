// SPDX-License-Identifier: BSL-1.0
// memory_registrar: how a network makes memory accessible to remote reads. Each parcelport
// specializes it (libfabric: fi_mr_reg / fi_close on its domain); the rma pool registers its
// blocks through the registrar attached to it, and a transport without registration uses
// plain_registrar (key 0, nothing to do).
//
// Thread safety: register_memory and deregister_memory may be called from any thread.
// Errors: register_memory throws (std::runtime_error with the network's message); deregistration
// cannot fail from the caller's point of view.
#pragma once

#include <cstddef>
#include <cstdint>

namespace courier::rma {

/// One registered range as the network knows it.
struct registration {
    std::uint64_t key = 0;  ///< what a peer needs to read it (fi_mr_key)
    void* desc = nullptr;   ///< local descriptor for providers that want one (fi_mr_desc)
    void* handle = nullptr; ///< the registrar's own handle (fid_mr*)
};

class memory_registrar {
public:
    virtual ~memory_registrar() = default;
    /// Registers [base, base + bytes) for local and remote reads and writes.
    virtual registration register_memory(void* base, std::size_t bytes) = 0;
    virtual void deregister_memory(registration const& r) noexcept = 0;
    /// Whether the network reads memory through its virtual address at the time of the access
    /// (tcp, shm): then a registration of memory that was freed and mapped again still reads
    /// the new contents, and registrations may be cached by address. False for networks that
    /// pin physical pages (verbs, cxi, efa): caching by address would read stale pages.
    virtual bool resolves_addresses_at_access() const noexcept = 0;
    /// Short name for logs and statistics ("libfabric/tcp;ofi_rxm", "plain").
    virtual char const* name() const noexcept = 0;
};

/// For transports that need no registration: every range gets key 0.
class plain_registrar final : public memory_registrar {
public:
    registration register_memory(void*, std::size_t) override { return {}; }
    void deregister_memory(registration const&) noexcept override {}
    bool resolves_addresses_at_access() const noexcept override { return true; }
    char const* name() const noexcept override { return "plain"; }
};

} // namespace courier::rma
