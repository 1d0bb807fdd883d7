// SPDX-License-Identifier: BSL-1.0
// Choosing the network: the provider "auto" uses between hosts, the interface that reaches the
// peers, and make_transport's routing of provider "auto" (routed/routed_transport.hpp). Also the
// thread's short-progress mark (transport.hpp).
#include "libfabric/fabric.hpp"
#include "routed/routed_transport.hpp"

#include <courier/parcelport/error.hpp>
#include <courier/parcelport/transport.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace courier::parcelport {

namespace {
thread_local bool t_short_progress_only = false;
} // namespace

void set_short_progress_only(bool on) noexcept {
    t_short_progress_only = on;
}

bool short_progress_only() noexcept {
    return t_short_progress_only;
}

namespace {

bool offered(char const* provider) {
    try {
        fabric::info_ptr hints(fabric::library::allocinfo());
        if (!hints) {
            return false;
        }
        hints->ep_attr->type = FI_EP_RDM;
        hints->caps = FI_MSG | FI_RMA;
        hints->fabric_attr->prov_name = strdup(provider);
        fi_info* info = nullptr;
        int rc =
            fabric::library::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints.get(), &info);
        fabric::info_ptr const answer(info);
        return rc == 0;
    } catch (network_error const&) {
        return false; // no libfabric: the transport that needs it will say so when it opens
    }
}

/// offered(provider), after prepare_libfabric with `as` for the provider and the default
/// thresholds unless the runtime prepared already: the probe loads rxm, which reads its
/// settings only then.
bool offered_as(char const* provider, char const* as) {
    transport_options defaults;
    defaults.provider = as;
    defaults.eager_threshold = 0; // the provider's default
    prepare_libfabric(defaults);
    return offered(provider);
}

/// The first interface with an IPv4 address for which `pick` is true; empty if none.
template <class Pick>
std::string first_ipv4_interface(Pick pick) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        return {};
    }
    std::string name;
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && pick(*i)) {
            name = i->ifa_name;
            break;
        }
    }
    ::freeifaddrs(list);
    return name;
}

/// The interface whose IPv4 address is `a`; empty if none.
std::string interface_with(in_addr a) {
    return first_ipv4_interface([&](ifaddrs const& i) {
        return reinterpret_cast<sockaddr_in const*>(i.ifa_addr)->sin_addr.s_addr == a.s_addr;
    });
}

/// The source address the kernel would use toward `address`: a UDP socket's connect() only
/// looks the route up, it sends nothing.
std::string interface_routing_to(std::string const& address) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9); // any port: nothing is sent
    if (::inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1) {
        return {};
    }
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return {};
    }
    sockaddr_in from{};
    socklen_t len = sizeof from;
    std::string name;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len) == 0) {
        name = interface_with(from.sin_addr);
    }
    ::close(fd);
    return name;
}

std::string default_route_interface() {
    std::ifstream routes("/proc/net/route");
    std::string line;
    std::getline(routes, line); // header
    while (std::getline(routes, line)) {
        std::istringstream f(line);
        std::string iface, dest;
        if (f >> iface >> dest && dest == "00000000") {
            return iface;
        }
    }
    return {};
}

std::string first_network_interface() {
    return first_ipv4_interface([](ifaddrs const& i) {
        return (i.ifa_flags & IFF_UP) != 0 && (i.ifa_flags & IFF_LOOPBACK) == 0;
    });
}

} // namespace

std::string network_provider() {
    // Probed once per process: the runtime asks for its defaults and make_transport to open it.
    static std::string const chosen = [] {
        for (char const* p : {"verbs", "efa", "cxi"}) {
            // "auto": not known yet, that is what the probe finds out.
            if (offered_as(p, "auto")) {
                return std::string(std::strcmp(p, "verbs") == 0 ? "verbs;ofi_rxm" : p);
            }
        }
        return std::string("tcp");
    }();
    return chosen;
}

std::string tcp_provider() {
    static bool const net = offered_as("net", "tcp");
    return net ? "net" : "tcp;ofi_rxm";
}

std::string network_interface_toward(std::string const& address) {
    std::string name;
    if (!address.empty()) {
        name = interface_routing_to(address);
    }
    if (name.empty()) {
        name = default_route_interface();
    }
    if (name.empty()) {
        name = first_network_interface();
    }
    return name;
}

std::unique_ptr<transport> make_transport(transport_options const& o) {
    if (o.parcelport == "mpi") {
        return make_mpi_transport(o);
    }
    if (o.parcelport != "libfabric") {
        throw std::invalid_argument("courier: no parcelport '" + o.parcelport +
                                    "' (there are: libfabric, mpi)");
    }
    if (o.provider == "shm" && o.peers_on_other_hosts) {
        throw network_error("courier: --courier:provider=shm cannot reach localities on "
                            "other hosts");
    }
    // Only the network rail beside a shm rail is paced (poll_pacer.hpp): a lone rail's every
    // pass is for it, and shm's queue costs no system call to read.
    transport_options unpaced = o;
    unpaced.quiet_poll_us = 0;
    if (o.provider != "auto") {
        if (o.provider == "tcp") {
            unpaced.provider = tcp_provider();
        }
        return make_libfabric_transport(unpaced);
    }
    transport_options local = unpaced;
    local.provider = "shm";
    if (!o.peers_on_other_hosts) {
        return make_libfabric_transport(local);
    }
    // The network rail opens first: it gets the rma pool's registrations (rma::attach takes
    // the first), which matter more on a NIC than to shm's copies.
    transport_options net = o.peers_on_this_host ? o : unpaced;
    net.provider = network_provider();
    net.tcp_doorbell = false; // its peers are on other hosts: no doorbell reaches them
    if (net.provider == "tcp") {
        net.provider = tcp_provider();
    }
    std::vector<std::unique_ptr<transport>> rails;
    rails.push_back(make_libfabric_transport(net));
    if (o.peers_on_this_host) {
        rails.insert(rails.begin(), make_libfabric_transport(local));
    }
    return std::make_unique<routed::routed_transport>(o.host, std::move(rails),
                                                      o.peers_on_this_host);
}

} // namespace courier::parcelport
