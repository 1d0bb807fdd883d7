// SPDX-License-Identifier: BSL-1.0
// The main job: several localities on this machine over libfabric.
//   build/bin/courier-run -n 2 build/bin/courier_demo [--courier:provider=shm]
// A hello from each locality, remote actions with large zero-copy arguments (and what the
// transport did with them), and a short OSU-style bandwidth and latency table.
#include <courier/courier.hpp>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <unistd.h>

std::string hello() {
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    return "hello from locality " + std::to_string(courier::get_locality_id()) + " of " +
           std::to_string(courier::get_num_localities()) + " (pid " + std::to_string(::getpid()) +
           ", " + std::to_string(courier::get_os_thread_count()) + " worker threads)";
}
COURIER_PLAIN_ACTION(hello, hello_action);

double scale_sum(std::vector<double> const& v, double factor) {
    return std::accumulate(v.begin(), v.end(), 0.0) * factor;
}
COURIER_PLAIN_ACTION(scale_sum, scale_sum_action);

std::size_t receive_buffer(courier::serialize_buffer<char> const& b) {
    return b.size();
}
COURIER_PLAIN_ACTION(receive_buffer, receive_buffer_action);

int courier_main(int, char**) {
    using clock = std::chrono::steady_clock;
    auto all = courier::find_all_localities();
    for (auto const& loc : all) {
        std::printf("%s\n", courier::async<hello_action>(loc).get().c_str());
    }
    if (all.size() < 2) {
        std::printf("(run with courier-run -n 2 or more to see remote actions)\n");
        return courier::finalize();
    }
    auto there = all[1];

    std::vector<double> field(8 << 20, 0.5); // 64 MiB: travels as a pointer chunk, by RMA read
    auto before = courier::get_parcelport_statistics();
    auto t0 = clock::now();
    double sum = courier::async<scale_sum_action>(there, std::move(field), 2.0).get();
    double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    auto after = courier::get_parcelport_statistics();
    std::printf("\nscale_sum of a 64 MiB vector<double> on locality 1: %.0f in %.1f ms\n", sum, ms);
    std::printf(
        "  eager bytes sent %llu, index bytes copied on send %llu (payload: 0), rendezvous sends "
        "%llu\n",
        static_cast<unsigned long long>(after.eager_bytes_sent - before.eager_bytes_sent),
        static_cast<unsigned long long>(after.bytes_copied_on_send - before.bytes_copied_on_send),
        static_cast<unsigned long long>(after.rendezvous_sends - before.rendezvous_sends));

    std::printf("\nOSU-style, locality 0 -> 1 (%s), serialize_buffer<char> in reference mode:\n",
                courier::get_config_entry("provider").value_or("?").c_str());
    std::printf("  %10s %14s %14s\n", "bytes", "latency us", "bandwidth MB/s");
    std::vector<char> raw(4 << 20, 'x');
    for (std::size_t size : {std::size_t{8}, std::size_t{1024}, std::size_t{16384},
                             std::size_t{262144}, std::size_t{1} << 20, std::size_t{4} << 20}) {
        courier::serialize_buffer<char> buf(raw.data(), size,
                                            courier::serialize_buffer<char>::reference);
        int const iterations = size >= (1 << 20) ? 20 : 200;
        auto l0 = clock::now();
        for (int i = 0; i < iterations; ++i) {
            courier::async<receive_buffer_action>(there, buf).get();
        }
        double lat =
            std::chrono::duration<double, std::micro>(clock::now() - l0).count() / iterations / 2;
        constexpr int window = 64;
        int const rounds = size >= (1 << 20) ? 2 : 10;
        auto b0 = clock::now();
        for (int r = 0; r < rounds; ++r) {
            std::vector<courier::future<std::size_t>> fs;
            for (int w = 0; w < window; ++w) {
                fs.push_back(courier::async<receive_buffer_action>(there, buf));
            }
            courier::wait_all(fs);
        }
        double secs = std::chrono::duration<double>(clock::now() - b0).count();
        std::printf("  %10zu %14.1f %14.1f\n", size, lat,
                    double(size) * window * rounds / secs / 1e6);
    }
    return courier::finalize();
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
