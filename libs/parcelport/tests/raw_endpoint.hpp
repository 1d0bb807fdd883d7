// SPDX-License-Identifier: BSL-1.0
// Test helper: a foreign libfabric endpoint that sends raw bytes, exactly as given, to a
// transport's endpoint (the tests forge malformed and hostile messages with it). It lives in
// the tests, not in the transport: a real peer of the transport, over the same provider.
#pragma once

#include "../src/libfabric/fabric.hpp"

#include <rdma/fi_tagged.h>

#include <atomic>
#include <deque>
#include <string>
#include <unistd.h>
#include <vector>

namespace courier::parcelport::test {

class raw_endpoint {
public:
    explicit raw_endpoint(transport_options const& o) : ep_(o) {
        static std::atomic<unsigned> counter{0};
        ep_.enable(false,
                   "courier-raw-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    }
    ~raw_endpoint() { ep_.close_endpoint(); }

    /// Addresses a transport by its address() (the provider's, then the doorbell's name and its
    /// length in two bytes).
    void connect(std::vector<std::byte> const& transport_address) {
        auto const& a = transport_address;
        std::size_t bell = std::to_integer<std::size_t>(a[a.size() - 2]) |
                           std::to_integer<std::size_t>(a[a.size() - 1]) << 8;
        std::vector<std::byte> fi(a.begin(), a.end() - 2 - static_cast<std::ptrdiff_t>(bell));
        dest_ = ep_.insert(fi.data(), 0);
    }

    /// Posts `bytes`; false if the provider said -FI_EAGAIN (progress and call again). The
    /// bytes are kept until this endpoint is destroyed.
    bool send(std::vector<std::byte> const& bytes) {
        sent_.push_back({fi_context2{}, bytes});
        auto& m = sent_.back();
        long rc = fi_send(ep_.ep(), m.bytes.data(), m.bytes.size(), nullptr, dest_, &m.ctx);
        if (rc == -FI_EAGAIN) {
            sent_.pop_back();
            return false;
        }
        fabric::check("fi_send", rc);
        return true;
    }
    /// Posts `bytes` as a tagged message with `tag` (a forged pushed parcel); as send().
    bool tsend(std::vector<std::byte> const& bytes, std::uint64_t tag) {
        sent_.push_back({fi_context2{}, bytes});
        auto& m = sent_.back();
        long rc = fi_tsend(ep_.ep(), m.bytes.data(), m.bytes.size(), nullptr, dest_, tag, &m.ctx);
        if (rc == -FI_EAGAIN) {
            sent_.pop_back();
            return false;
        }
        fabric::check("fi_tsend", rc);
        return true;
    }
    /// Reaps this endpoint's completions.
    void progress() {
        fi_cq_msg_entry e[16];
        while (fi_cq_read(ep_.cq(), e, 16) > 0) {
        }
        fi_cq_err_entry err{};
        (void)fi_cq_readerr(ep_.cq(), &err, 0);
    }

private:
    struct message {
        fi_context2 ctx;
        std::vector<std::byte> bytes;
    };
    fabric::endpoint ep_;
    fi_addr_t dest_ = FI_ADDR_NOTAVAIL;
    std::deque<message> sent_;
};

} // namespace courier::parcelport::test
