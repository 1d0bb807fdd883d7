// SPDX-License-Identifier: BSL-1.0
// The libfabric objects of one transport: fi_info, fabric, domain, address vector, completion
// queue and endpoint, each held by an owner that closes it (fi_close, fi_freeinfo), so that an
// error half-way through opening closes what was opened, in reverse order, and leaks nothing.
// Also: the one function that turns a libfabric return code into courier::network_error, and
// the opening steps' failure-injection seam that the tests use.
#pragma once

#include "library.hpp"

#include <courier/parcelport/error.hpp>
#include <courier/parcelport/transport.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace courier::parcelport::fabric {

/// "libfabric: WHAT: <fi_strerror> (rc)" as a network_error.
network_error error_of(std::string_view what, long rc);
inline void check(char const* what, long rc) {
    if (rc != 0) {
        throw error_of(what, rc);
    }
}

/// Owns one libfabric object and fi_closes it when destroyed or reset.
template <class Fid>
class fid_owner {
public:
    fid_owner() = default;
    explicit fid_owner(Fid* f) noexcept : f_(f) {}
    fid_owner(fid_owner&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
    fid_owner& operator=(fid_owner&& o) noexcept {
        reset(std::exchange(o.f_, nullptr));
        return *this;
    }
    fid_owner(fid_owner const&) = delete;
    fid_owner& operator=(fid_owner const&) = delete;
    ~fid_owner() { reset(); }
    void reset(Fid* f = nullptr) noexcept {
        if (f_ != nullptr) {
            fi_close(&f_->fid);
        }
        f_ = f;
    }
    Fid* get() const noexcept { return f_; }
    /// For the open call's out-parameter.
    Fid** out() noexcept {
        reset();
        return &f_;
    }

private:
    Fid* f_ = nullptr;
};

struct info_deleter {
    void operator()(fi_info* i) const noexcept { library::freeinfo(i); }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

/// Marks one step of opening a transport; throws the injected failure when the tests asked
/// for one at this step (fail_opening_at).
void opening_step(char const* what);

namespace testing {
/// Makes the `step`-th opening step (counted from 0 across the process) fail with a
/// network_error; -1: none. Returns nothing; opening_steps() tells how many steps ran.
void fail_opening_at(int step) noexcept;
int opening_steps() noexcept;
} // namespace testing

/// "tcp" of "tcp;ofi_rxm": the core provider, which behaviour and defaults depend on.
std::string_view core_provider(std::string_view provider) noexcept;

/// Whether `core` moves messages over TCP sockets: "tcp" (under ofi_rxm) or "net" (libfabric's
/// socket provider with FI_EP_RDM of its own). Both get the tcp defaults, doorbells and batching
/// rules, which depend on the sockets underneath, not on the provider's code.
constexpr bool tcp_sockets(std::string_view core) noexcept {
    return core == "tcp" || core == "net";
}

/// fi_info, fabric, domain and address vector, then (enable()) completion queue and endpoint.
/// Destroyed in reverse order. Thread safety: as libfabric's FI_THREAD_SAFE domain.
class endpoint {
public:
    /// Picks the provider (FI_EP_RDM with FI_MSG and FI_RMA) and opens fabric, domain and
    /// address vector.
    explicit endpoint(transport_options const& o);
    ~endpoint() { close_endpoint(); }
    endpoint(endpoint const&) = delete;
    endpoint& operator=(endpoint const&) = delete;
    /// Opens the completion queue (with a wait fd if `wait_fd` and the provider has one) and the
    /// endpoint, named `shm_name` on shm, and enables it. net's queue waits through a wait set
    /// of its own (may_sleep()).
    void enable(bool wait_fd, std::string const& shm_name);
    /// Whether a thread may now block on wait_fd(): nothing is in the completion queue and the
    /// fd will turn readable when something arrives. Call with no other thread reading the
    /// queue. Most providers answer through fi_trywait. libfabric 1.17's net has a trywait that
    /// does nothing: the queue's signal, written once at the first completion, stays set, so
    /// the fd stays readable and a sleeper keeps waking (idle workers spun at ~0.6 s of CPU a
    /// second). Its queue is bound to a wait set instead, and fi_wait(set, 0) clears the signal
    /// before it checks the queue and the sockets.
    bool may_sleep() const noexcept;
    /// Closes the endpoint first, so that no operation runs while its buffers are freed.
    void close_endpoint() noexcept;

    fid_ep* ep() const noexcept { return ep_.get(); }
    fid_cq* cq() const noexcept { return cq_.get(); }
    fid_fabric* fabric() const noexcept { return fabric_.get(); }
    std::string provider() const { return info_->fabric_attr->prov_name; }
    std::string_view core() const noexcept { return core_provider(info_->fabric_attr->prov_name); }
    bool shm() const noexcept { return core() == "shm"; }
    std::size_t inject_size() const noexcept { return info_->tx_attr->inject_size; }
    std::size_t iov_limit() const noexcept { return info_->tx_attr->iov_limit; }
    /// Tagged sends and receives (asked for on net only: pushed parcels, pushed.hpp).
    bool tagged() const noexcept { return (info_->caps & FI_TAGGED) != 0; }
    std::size_t max_msg_size() const noexcept { return info_->ep_attr->max_msg_size; }
    bool mr_local() const noexcept { return mr_local_; }
    bool mr_virt_addr() const noexcept { return mr_virt_; }
    int wait_fd() const noexcept { return wait_fd_; }

    /// This endpoint's provider address.
    std::vector<std::byte> name() const;
    /// Inserts a peer's provider address into the address vector.
    fi_addr_t insert(std::byte const* address, std::uint32_t rank);
    /// fi_mr_reg with a provider key or one of ours; throws network_error.
    fid_mr* register_memory(void const* p, std::size_t n, std::uint64_t access);

private:
    info_ptr info_;
    fid_owner<fid_fabric> fabric_;
    fid_owner<fid_domain> domain_;
    fid_owner<fid_av> av_;
    fid_owner<fid_wait> wait_set_; // net's (may_sleep)
    fid_owner<fid_cq> cq_;
    fid_owner<fid_ep> ep_;
    std::string shm_name_; // /dev/shm/NAME of the enabled shm endpoint (shm_files.hpp)
    int wait_fd_ = -1;
    bool mr_local_ = false, mr_virt_ = false, mr_prov_key_ = false;
    std::atomic<std::uint64_t> next_key_{1};
};

} // namespace courier::parcelport::fabric
