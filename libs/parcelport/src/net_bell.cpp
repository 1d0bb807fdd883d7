// SPDX-License-Identifier: BSL-1.0
#include "net_bell.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>

namespace courier::parcelport::detail {

namespace {

[[noreturn]] void fail(int e, std::string const& what) {
    throw std::system_error(e, std::generic_category(), "courier network doorbell: " + what);
}

/// The first IPv4 address of `interface`, else its first IPv6 address (port 0).
bool interface_address(std::string const& interface, sockaddr_storage& out, socklen_t& len) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        return false;
    }
    bool found = false;
    for (int family : {AF_INET, AF_INET6}) {
        for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
            if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family ||
                interface != i->ifa_name) {
                continue;
            }
            // A link-local address needs a scope that a name cannot carry to other hosts.
            if (family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(
                    &reinterpret_cast<sockaddr_in6 const*>(i->ifa_addr)->sin6_addr)) {
                continue;
            }
            len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
            std::memcpy(&out, i->ifa_addr, len);
            found = true;
        }
    }
    ::freeifaddrs(list);
    return found;
}

std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace

bool parse_net_bell_name(std::string const& name, sockaddr_storage& addr, socklen_t& len) {
    std::string_view s = name;
    if (!s.starts_with("udp:")) {
        return false;
    }
    s.remove_prefix(4);
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        return false;
    }
    std::string_view host = s.substr(0, colon), port_text = s.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
        return false;
    }
    addr = {};
    if (host.front() == '[') {
        if (host.size() < 3 || host.back() != ']') {
            return false;
        }
        std::string h(host.substr(1, host.size() - 2));
        auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<std::uint16_t>(port));
        len = sizeof(sockaddr_in6);
        return ::inet_pton(AF_INET6, h.c_str(), &a->sin6_addr) == 1;
    }
    std::string h(host);
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof(sockaddr_in);
    return ::inet_pton(AF_INET, h.c_str(), &a->sin_addr) == 1;
}

net_bell::net_bell(std::string const& interface, std::chrono::nanoseconds quiet)
    : quiet_ns_(quiet.count()) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (interface.empty() || !interface_address(interface, addr, len)) {
        fail(EADDRNOTAVAIL, "interface '" + interface + "' has no IP address");
    }
    int const fd = ::socket(addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fail(errno, "socket");
    }
    struct closer {
        int fd;
        ~closer() {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    } owner{fd};
    if (::bind(fd, reinterpret_cast<sockaddr const*>(&addr), len) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        fail(errno, "bind on interface '" + interface + "'");
    }
    char host[INET6_ADDRSTRLEN] = {};
    unsigned port = 0;
    if (addr.ss_family == AF_INET) {
        auto const* a = reinterpret_cast<sockaddr_in const*>(&addr);
        ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
        name_ = std::string("udp:") + host + ":" + std::to_string(port);
    } else {
        auto const* a = reinterpret_cast<sockaddr_in6 const*>(&addr);
        ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
        name_ = std::string("udp:[") + host + "]:" + std::to_string(port);
    }
    fd_ = fd;
    owner.fd = -1;
}

net_bell::~net_bell() {
    ::close(fd_);
}

std::size_t net_bell::connect(std::vector<std::string> const& names, std::uint32_t self) {
    peers_ = std::make_unique<peer[]>(names.size());
    peer_count_ = names.size();
    std::size_t missing = 0;
    for (std::size_t r = 0; r < names.size(); ++r) {
        if (r == self) {
            continue; // this bell: never rung
        }
        if (!parse_net_bell_name(names[r], peers_[r].addr, peers_[r].len)) {
            peers_[r].len = 0;
            ++missing;
        }
    }
    return missing;
}

void net_bell::heard() noexcept {
    heard_ns_.store(now_ns(), std::memory_order_relaxed);
}

bool net_bell::awake() const noexcept {
    std::int64_t const now = now_ns();
    if (now - heard_ns_.load(std::memory_order_relaxed) < 4 * quiet_ns_) {
        return true;
    }
    // A pushed message announced and not landed yet: its bytes may still be on the wire.
    return pushes_noticed_.load(std::memory_order_relaxed) >
               pushes_landed_.load(std::memory_order_relaxed) &&
           now - push_event_ns_.load(std::memory_order_relaxed) <
               std::chrono::nanoseconds(push_patience).count();
}

bool net_bell::arm() noexcept {
    char drop[16];
    bool any = false;
    std::int64_t notices = 0;
    for (ssize_t n; (n = ::recv(fd_, drop, sizeof drop, MSG_DONTWAIT)) > 0;) {
        any = true;
        notices += n == 1 && drop[0] == push_notice;
    }
    std::int64_t const now = now_ns();
    if (notices != 0) {
        pushes_noticed_.fetch_add(notices, std::memory_order_relaxed);
        push_event_ns_.store(now, std::memory_order_relaxed);
    }
    // After push_patience with neither a notice nor a landing the counts are set level: a
    // notice whose push never came (a peer gone) or a landing whose notice never came (lost,
    // or a peer that does not notify) is forgotten. Not sooner: a pushed message may land
    // before its notice is read (the notice is a datagram beside the message's stream), and
    // the notice then only catches up. A compare-exchange: a landing counted meanwhile stays.
    std::int64_t const noticed = pushes_noticed_.load(std::memory_order_relaxed);
    std::int64_t landed = pushes_landed_.load(std::memory_order_relaxed);
    if (landed != noticed && now - push_event_ns_.load(std::memory_order_relaxed) >=
                                 std::chrono::nanoseconds(push_patience).count()) {
        pushes_landed_.compare_exchange_strong(landed, noticed, std::memory_order_relaxed);
    }
    if (any) {
        heard(); // its message may follow
    }
    return any;
}

bool net_bell::notify_push(std::uint32_t rank) noexcept {
    if (rank >= peer_count_ || peers_[rank].len == 0) {
        return false;
    }
    peer& p = peers_[rank];
    std::int64_t const now = now_ns();
    p.posted_ns.store(now, std::memory_order_relaxed);
    return send(p, push_notice, now);
}

bool net_bell::send(peer& p, char byte, std::int64_t now) noexcept {
    p.rung_ns.store(now, std::memory_order_relaxed);
    return ::sendto(fd_, &byte, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr const*>(&p.addr),
                    p.len) == 1;
}

void net_bell::push_landed() noexcept {
    pushes_landed_.fetch_add(1, std::memory_order_relaxed);
    push_event_ns_.store(now_ns(), std::memory_order_relaxed);
}

bool net_bell::ring(std::uint32_t rank, bool posted) noexcept {
    if (rank >= peer_count_ || peers_[rank].len == 0) {
        return false;
    }
    peer& p = peers_[rank];
    std::int64_t const now = now_ns();
    // Plain loads and stores: two threads posting at once may both ring (one datagram more),
    // never neither (each rings unless it sees the other's post, stored after that post).
    bool const quiet = now - p.posted_ns.load(std::memory_order_relaxed) >= quiet_ns_;
    if (posted) {
        p.posted_ns.store(now, std::memory_order_relaxed);
    } else if (now - p.rung_ns.load(std::memory_order_relaxed) < quiet_ns_) {
        return false; // a deferred post retried on every pass: one ring per quiet time
    }
    if (!quiet) {
        return false;
    }
    return send(p, 1, now);
}

} // namespace courier::parcelport::detail
