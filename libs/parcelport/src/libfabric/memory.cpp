// SPDX-License-Identifier: BSL-1.0
// Registrations and receive buffers of the libfabric transport (memory.hpp).
#include "memory.hpp"

namespace courier::parcelport::fabric {

memory::memory(endpoint& ep, counters& c, transport_options const& o)
    : ep_(ep), counters_(c), mr_virt_(ep.mr_virt_addr()) {
    auto core = ep.core();
    // Providers that read through virtual addresses when the access happens (no pinned pages):
    // a cached registration of memory freed and mapped again still reads the new contents.
    va_based_ = tcp_sockets(core) || core == "shm" || core == "sockets" || core == "udp";
    opening_step("registration cache");
    cache_ = std::make_unique<rma::registration_cache>(*this, o.registration_cache_entries,
                                                       o.registration_cache_bytes);
    if (o.attach_rma_pool) {
        opening_step("rma::attach");
        pool_attached_ = rma::attach(*this);
    }
}

memory::~memory() {
    cache_.reset();
    if (pool_attached_) {
        rma::detach(*this);
    }
}

rma::registration memory::register_memory(void* base, std::size_t bytes) {
    std::uint64_t access = FI_REMOTE_READ | FI_READ;
    if (ep_.mr_local()) {
        access |= FI_SEND | FI_RECV;
    }
    fid_mr* mr = ep_.register_memory(base, bytes, access);
    return {fi_mr_key(mr), fi_mr_desc(mr), mr};
}

fid_mr* memory::register_local(void const* p, std::size_t n, std::uint64_t access) {
    fid_mr* mr = ep_.register_memory(p, n, access);
    ++counters_.registrations;
    return mr;
}

std::pair<std::uint64_t, std::uint64_t>
memory::remote_access(void const* p, std::size_t n,
                      std::vector<rma::registration_cache::lease>& leases) {
    auto at = reinterpret_cast<std::uint64_t>(p);
    if (pool_attached_) {
        if (auto r = rma::find(p, n); r && r->registrar == this) {
            ++counters_.pool_chunks_sent;
            return {mr_virt_ ? at : at - reinterpret_cast<std::uint64_t>(r->base), r->reg.key};
        }
    }
    auto l = cache_->acquire(p, n);
    ++(l.hit() ? counters_.registration_cache_hits : counters_.registration_cache_misses);
    leases.push_back(l);
    return {mr_virt_ ? at : at - l.start(), l.reg().key};
}

void memory::release(std::vector<rma::registration_cache::lease>& leases) noexcept {
    for (auto& l : leases) {
        cache_->release(l);
    }
    leases.clear();
}

void* memory::pool_desc(void const* p, std::size_t n) const noexcept {
    if (auto r = rma::find(p, n); r && r->registrar == this) {
        return r->reg.desc;
    }
    return nullptr;
}

std::shared_ptr<std::byte[]> memory::receive_buffer(std::size_t n, bool rma_chunk,
                                                    std::uint64_t align_like) {
    bool in_rma_pool = false, reused = false;
    // A descriptor's address is the sender's only where the provider uses virtual addresses
    // (shm); elsewhere it is an offset into a registration, which says nothing of alignment.
    auto b =
        chunk_destination(*buffers_, n, rma_chunk, in_rma_pool, reused, mr_virt_ ? align_like : 0);
    counters_.pool_receive_buffers += in_rma_pool;
    counters_.receive_buffers_reused += reused;
    return b;
}

} // namespace courier::parcelport::fabric
