// SPDX-License-Identifier: BSL-1.0
// Opening the libfabric objects (fabric.hpp), error conversion and the failure-injection seam.
#include "fabric.hpp"

#include "../shm_files.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace courier::parcelport::fabric {

network_error error_of(std::string_view what, long rc) {
    return network_error("libfabric: " + std::string(what) + ": " +
                         library::strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) +
                         ")");
}

namespace {
std::atomic<int> g_fail_at{-1};
std::atomic<int> g_steps{0};
} // namespace

void opening_step(char const* what) {
    int step = g_steps.fetch_add(1, std::memory_order_relaxed);
    if (step == g_fail_at.load(std::memory_order_relaxed)) {
        throw network_error(std::string("libfabric: ") + what + ": injected failure (step " +
                            std::to_string(step) + ")");
    }
}

namespace testing {
void fail_opening_at(int step) noexcept {
    g_steps.store(0, std::memory_order_relaxed);
    g_fail_at.store(step, std::memory_order_relaxed);
}
int opening_steps() noexcept {
    return g_steps.load(std::memory_order_relaxed);
}
} // namespace testing

std::string_view core_provider(std::string_view provider) noexcept {
    return provider.substr(0, provider.find(';'));
}

namespace {

/// The entry of `list` for the network interface `name` (an IPv4 one first), alone. libfabric
/// 1.17's tcp and sockets providers list every interface's domain whatever domain the hints
/// name, the host's first interface first: taking the first entry bound a transport asked for
/// "lo" to eth0's address, and would bind one asked for a cluster's fast network to whichever
/// interface the host lists first.
info_ptr on_interface(info_ptr list, std::string const& name, std::string const& provider) {
    fi_info const* chosen = nullptr;
    for (fi_info const* i = list.get(); i != nullptr; i = i->next) {
        if (i->domain_attr == nullptr || i->domain_attr->name == nullptr ||
            name != i->domain_attr->name) {
            continue;
        }
        if (chosen == nullptr ||
            (chosen->addr_format != FI_SOCKADDR_IN && i->addr_format == FI_SOCKADDR_IN)) {
            chosen = i;
        }
    }
    if (chosen == nullptr) {
        throw network_error("libfabric: provider '" + provider +
                            "' offers nothing on the network interface '" + name + "'");
    }
    if (chosen == list.get() && chosen->next == nullptr) {
        return list;
    }
    info_ptr one(library::dupinfo(chosen));
    if (!one) {
        throw network_error("libfabric: fi_dupinfo: out of memory");
    }
    return one;
}

} // namespace

endpoint::endpoint(transport_options const& o) {
    opening_step("fi_getinfo");
    info_ptr hints(library::allocinfo());
    if (!hints) {
        throw network_error("libfabric: fi_allocinfo: out of memory");
    }
    hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(o.provider.c_str());
    auto core = core_provider(o.provider);
    if (core == "net" && o.push_max != 0) {
        hints->caps |= FI_TAGGED; // pushed parcels (pushed.hpp); net offers it
    }
    if ((tcp_sockets(core) || core == "sockets") && !o.interface.empty()) {
        hints->domain_attr->name = strdup(o.interface.c_str());
    }
    fi_info* info = nullptr;
    int rc = library::getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &info);
    info_.reset(info);
    if (rc != 0 || !info_) {
        throw error_of("no provider '" + o.provider + "' with FI_EP_RDM, FI_MSG and FI_RMA", rc);
    }
    if (hints->domain_attr->name != nullptr) {
        info_ = on_interface(std::move(info_), o.interface, o.provider);
    }
    auto mode = info_->domain_attr->mr_mode;
    mr_local_ = (mode & FI_MR_LOCAL) != 0;
    mr_virt_ = (mode & FI_MR_VIRT_ADDR) != 0;
    mr_prov_key_ = (mode & FI_MR_PROV_KEY) != 0;
    opening_step("fi_fabric");
    check("fi_fabric", library::open_fabric(info_->fabric_attr, fabric_.out(), nullptr));
    opening_step("fi_domain");
    check("fi_domain", fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr));
    opening_step("fi_av_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check("fi_av_open", fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr));
}

void endpoint::enable(bool wait_fd, std::string const& shm_name) {
    opening_step("fi_cq_open");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_MSG;
    cq_attr.wait_obj = wait_fd ? FI_WAIT_FD : FI_WAIT_NONE;
    cq_attr.size = 4096;
    if (wait_fd && core() == "net") {
        // may_sleep(): the queue's own wait object cannot be cleared through net's trywait.
        fi_wait_attr wait_attr{};
        wait_attr.wait_obj = FI_WAIT_FD;
        if (fi_wait_open(fabric_.get(), &wait_attr, wait_set_.out()) == 0) {
            cq_attr.wait_obj = FI_WAIT_SET;
            cq_attr.wait_set = wait_set_.get();
        } else {
            wait_set_.reset();
            cq_attr.wait_obj = FI_WAIT_NONE; // idle workers poll in a backoff
        }
    }
    if (fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr) != 0) {
        cq_attr.wait_obj = FI_WAIT_NONE; // a provider without wait objects
        wait_set_.reset();
        check("fi_cq_open", fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr));
    } else if (cq_attr.wait_obj == FI_WAIT_NONE ||
               fi_control(wait_set_.get() != nullptr ? &wait_set_.get()->fid : &cq_.get()->fid,
                          FI_GETWAIT, &wait_fd_) != 0) {
        wait_fd_ = -1;
    }
    opening_step("fi_endpoint");
    check("fi_endpoint", fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr));
    // At once: rxm in libfabric 1.17 crashes closing an endpoint that has no address vector.
    check("fi_ep_bind(av)", fi_ep_bind(ep_.get(), &av_.get()->fid, 0));
    opening_step("fi_ep_bind");
    check("fi_ep_bind(cq)", fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV));
    if (shm()) {
        opening_step("fi_setname");
        std::string name = shm_name;
        check("fi_setname", fi_setname(&ep_.get()->fid, name.data(), name.size() + 1));
    }
    opening_step("fi_enable");
    check("fi_enable", fi_enable(ep_.get()));
    if (shm()) {
        shm_name_ = shm_name;
        detail::own_shared_memory_file(shm_name_);
    }
}

bool endpoint::may_sleep() const noexcept {
    if (wait_set_.get() != nullptr) {
        // 0: something is ready; -FI_ETIMEDOUT: nothing, and the signal was cleared first.
        return fi_wait(wait_set_.get(), 0) == -FI_ETIMEDOUT;
    }
    fid* f = &cq_.get()->fid;
    return fi_trywait(fabric_.get(), &f, 1) == FI_SUCCESS;
}

void endpoint::close_endpoint() noexcept {
    ep_.reset(); // shm removes its region
    if (!shm_name_.empty()) {
        detail::forget_shared_memory_file(shm_name_);
        shm_name_.clear();
    }
}

std::vector<std::byte> endpoint::name() const {
    std::vector<std::byte> a(256);
    std::size_t len = a.size();
    check("fi_getname", fi_getname(&ep_.get()->fid, a.data(), &len));
    a.resize(len);
    return a;
}

fi_addr_t endpoint::insert(std::byte const* address, std::uint32_t rank) {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av_.get(), address, 1, &a, 0, nullptr) != 1) {
        throw network_error("libfabric: fi_av_insert failed for the address of locality " +
                            std::to_string(rank));
    }
    return a;
}

fid_mr* endpoint::register_memory(void const* p, std::size_t n, std::uint64_t access) {
    fid_mr* mr = nullptr;
    std::uint64_t key = mr_prov_key_ ? 0 : next_key_.fetch_add(1);
    check("fi_mr_reg", fi_mr_reg(domain_.get(), p, n, access, 0, key, 0, &mr, nullptr));
    return mr;
}

} // namespace courier::parcelport::fabric
