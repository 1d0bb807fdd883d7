// SPDX-License-Identifier: BSL-1.0
// The layer between osu_fabric and osu_courier: the same latency ping-pong on Courier's
// libfabric transport alone (parcelport::make_libfabric_transport), without the runtime.
// Each round trip serializes a serialize_buffer<char> of `size` bytes into a message, sends
// it, and the peer answers with a message of its own built the same way; both sides
// busy-poll progress(), as osu_fabric does. Splits osu_courier's latency above the native
// provider into what the transport (wire protocol, its completion queue and doorbell as
// transport_options sets them by default, FI_RMA capabilities) costs and what the runtime
// (actions, tasks, futures) costs. Two processes (forked, endpoint
// addresses exchanged over a socketpair), pinned to cores 0 and 1.
// run.sh runs it beside the other three; its "courier/transport" column is then the runtime's
// share of osu_courier's latency.
//   osu_transport [--provider=tcp|shm|PROVIDER] [--max-size=BYTES] [--min-size=BYTES]
//       [--scale=N] [--quick]
// Methodology and output format: osu_common.hpp (latency only).
#include "osu_common.hpp"
#include "osu_pair.hpp"

#include <courier/parcelport/transport.hpp>
#include <courier/serialization.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

namespace cs = courier::serialization;
namespace pp = courier::parcelport;
using clock_type = std::chrono::steady_clock;

/// Both processes run this; rank 0 times and reports.
/// The provider's name in the results: "tcp" for either provider "tcp" opens (net, rxm).
std::string label_of(std::string const& provider) {
    std::string core = provider.substr(0, provider.find(';'));
    return core == "net" ? "tcp" : core;
}

int run(int rank, int sock, std::string const& provider, osu::plan const& plan) {
    osu::pin(rank);
    // The thresholds the runtime uses by default (--courier:*_threshold=auto), so that a size
    // goes eager or by rendezvous here as it does in osu_courier.
    std::size_t threshold = pp::default_eager_threshold(provider);
    pp::transport_options o;
    o.provider = provider;
    o.job_token = 1;
    o.eager_threshold = threshold;
    auto so = cs::default_options();
    so.zero_copy_threshold = threshold;
    std::unique_ptr<pp::transport> t;
    try {
        t = pp::make_libfabric_transport(o);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "osu_transport: %s\n", e.what());
        return 1;
    }
    auto mine = t->address();
    std::vector<std::vector<std::byte>> addrs(2);
    addrs[static_cast<std::size_t>(1 - rank)] = osu::exchange(sock, mine, "osu_transport");
    addrs[static_cast<std::size_t>(rank)] = std::move(mine);
    t->set_peers(addrs, static_cast<std::uint32_t>(rank));
    std::size_t received = 0;
    std::size_t last_size = 0;
    t->set_receive_handler([&](std::uint32_t, cs::message&& m) {
        cs::serialize_buffer<char> b;
        cs::load(m, b);
        last_size = b.size();
        ++received;
    });
    auto peer = static_cast<std::uint32_t>(1 - rank);
    std::vector<char> data(std::max<std::size_t>(plan.max_size(), 1), 'x');
    auto send = [&](std::size_t size) {
        cs::serialize_buffer<char> b(data.data(), size, cs::serialize_buffer<char>::reference);
        t->send(peer, cs::save(so, b), nullptr);
    };
    auto wait_for = [&](std::size_t n) {
        while (received < n) {
            t->progress();
        }
    };
    std::size_t expected = 0;
    for (std::size_t size : plan.sizes) {
        int skip = plan.latency_skip(size), iters = plan.latency_iterations(size);
        clock_type::time_point start;
        for (int i = 0; i < skip + iters; ++i) {
            if (i == skip) {
                start = clock_type::now();
            }
            if (rank == 0) {
                send(size);
                wait_for(++expected);
            } else {
                wait_for(++expected);
                send(size);
            }
            if (last_size != size) {
                std::fprintf(stderr, "osu_transport: got %zu bytes, expected %zu\n", last_size,
                             size);
                return 1;
            }
        }
        if (rank == 0) {
            double us =
                std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
            osu::report("transport", label_of(provider), 1, "latency", size, us / iters / 2);
        }
    }
    // Let the last send complete before the endpoint closes.
    auto until = clock_type::now() + std::chrono::milliseconds(200);
    while (clock_type::now() < until) {
        t->progress();
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> rest;
    osu::plan plan = osu::parse(argc, argv, &rest);
    std::string provider = "tcp";
    for (auto const& a : rest) {
        if (a.rfind("--provider=", 0) == 0) {
            provider = a.substr(11);
        } else {
            std::fprintf(stderr, "osu_transport: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (provider == "tcp") {
        provider = courier::parcelport::tcp_provider(); // as the runtime opens "tcp"
    }
    return osu::run_pair([&](int rank, int sock) { return run(rank, sock, provider, plan); });
}
