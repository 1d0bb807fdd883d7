// SPDX-License-Identifier: BSL-1.0
// Memory for the libfabric transport: registrations (the rma pool's, the registration cache's,
// and one-off ones for FI_MR_LOCAL providers) and the receive buffer pool that RMA reads land
// in. Why two pools (the rma pool and receive_buffer_pool): libs/parcelport/README.md.
#pragma once

#include "../received_parts.hpp"
#include "context.hpp"

#include <courier/rma/pool.hpp>
#include <courier/rma/registration_cache.hpp>

#include <array>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

using parcelport::receive_buffer_pool;

/// Registrations of one endpoint's domain, as the rma pool and the registration cache see them.
class memory final : public rma::memory_registrar {
public:
    /// Attaches the rma pool if `attach_pool` (detached again when destroyed, also when a later
    /// step of opening the transport fails).
    memory(endpoint& ep, counters& c, transport_options const& o);
    ~memory() override;
    memory(memory const&) = delete;
    memory& operator=(memory const&) = delete;

    // rma::memory_registrar
    rma::registration register_memory(void* base, std::size_t bytes) override;
    void deregister_memory(rma::registration const& r) noexcept override {
        fi_close(&static_cast<fid_mr*>(r.handle)->fid);
    }
    bool resolves_addresses_at_access() const noexcept override { return va_based_; }
    char const* name() const noexcept override { return "libfabric"; }

    /// A one-off registration (FI_MR_LOCAL providers' local buffers), counted in the statistics.
    fid_mr* register_local(void const* p, std::size_t n, std::uint64_t access);
    /// The remote address and key of [p, p + n) for a peer's fi_read: the rma pool's
    /// registration when it is pool memory registered here (nothing to do), else one from the
    /// registration cache, whose lease goes to `leases` (released by release()).
    std::pair<std::uint64_t, std::uint64_t>
    remote_access(void const* p, std::size_t n,
                  std::vector<rma::registration_cache::lease>& leases);
    void release(std::vector<rma::registration_cache::lease>& leases) noexcept;
    /// The local descriptor of [p, p + n) if it is pool memory registered here, else nullptr.
    void* pool_desc(void const* p, std::size_t n) const noexcept;
    /// A destination for an RMA-read chunk: rma chunks go to pool memory (which a received
    /// rma_vector adopts), the rest to the receive buffer pool, at the offset within a cache
    /// line of `align_like` (the sender's address of the chunk: receive_buffer_pool::get).
    std::shared_ptr<std::byte[]> receive_buffer(std::size_t n, bool rma_chunk,
                                                std::uint64_t align_like = 0);

private:
    endpoint& ep_;
    counters& counters_;
    bool va_based_ = false;
    bool mr_virt_ = false;
    bool pool_attached_ = false;
    std::unique_ptr<rma::registration_cache> cache_;
    std::shared_ptr<receive_buffer_pool> buffers_ =
        std::make_shared<receive_buffer_pool>(std::size_t{256} << 20);
};

} // namespace courier::parcelport::fabric
