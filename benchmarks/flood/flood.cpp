// SPDX-License-Identifier: BSL-1.0
// A flood of remote calls from locality 0 to locality 1: COUNT posts (or asyncs whose futures
// are all held) of a SIZE-byte std::vector<char>, to an action that takes about WORK_NS. The
// receiver times each tenth of the calls as they run; both sides report their peak RSS.
//   courier-run -n 2 flood [--count=N] [--size=BYTES] [--mode=post|async] [--work-ns=2000]
//       [--ordered=1: post_ordered / async_ordered]
//       [--courier:parcels_in_flight=0 for the unbounded baseline]
// One line of key=value pairs: mode size count flow (window, or off) seconds rate (calls/s
// from the first start to the last, on the receiver) best_phase_rate best_receiving_phase_rate
// (the best tenth that ended before the last call had arrived; 0: none did) worst_phase_rate
// sender_rss_mib receiver_rss_mib waits (requests that waited for the window), then a line
// phase_rates= with each tenth's rate.
// benchmarks/flood/run.sh runs it bounded and unbounded, interleaved.
#include <courier/courier.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr int phases = 10;

struct receiver_state {
    std::atomic<std::uint64_t> ran{0};
    std::uint64_t count = 0;
    std::int64_t work_ns = 0;
    clock_type::time_point start;
    std::vector<clock_type::time_point> phase_end = std::vector<clock_type::time_point>(phases);
    // Messages this locality had received when each tenth ended, and when the run began. The
    // count includes the sender's heartbeats (one per peer_timeout/10): a tenth is taken for
    // one that received nothing when at most those few calls had still to arrive.
    std::vector<std::uint64_t> phase_received = std::vector<std::uint64_t>(phases);
    std::uint64_t received_at_start = 0;
    std::atomic<std::uint64_t> checksum{0};
};
receiver_state g_receiver;

double peak_rss_mib() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0; // ru_maxrss is in KiB on Linux
}

void prepare(std::uint64_t count, std::int64_t work_ns) {
    g_receiver.count = count;
    g_receiver.work_ns = work_ns;
    g_receiver.ran = 0;
    g_receiver.received_at_start = courier::get_parcelport_statistics().messages_received;
    g_receiver.start = clock_type::now();
}
COURIER_PLAIN_ACTION(prepare, prepare_action);

void consume(std::vector<char> const& v) {
    auto until = clock_type::now() + std::chrono::nanoseconds(g_receiver.work_ns);
    std::uint64_t sum = 0;
    for (char c : v) {
        sum += static_cast<unsigned char>(c);
    }
    while (clock_type::now() < until) {
    }
    g_receiver.checksum.fetch_add(sum, std::memory_order_relaxed);
    auto n = g_receiver.ran.fetch_add(1, std::memory_order_acq_rel) + 1;
    std::uint64_t per_phase = std::max<std::uint64_t>(1, g_receiver.count / phases);
    if (n % per_phase == 0 && n / per_phase <= phases) {
        g_receiver.phase_end[n / per_phase - 1] = clock_type::now();
        g_receiver.phase_received[n / per_phase - 1] =
            courier::get_parcelport_statistics().messages_received;
    }
}
COURIER_PLAIN_ACTION(consume, consume_action);

struct report {
    double seconds = 0, best = 0, worst = 0, rss = 0;
    /// The best tenth among those that ended before the last call had arrived here: the
    /// receiver both receiving and running. A tenth after that only runs calls received
    /// earlier (an unbounded run's queue draining once everything arrived).
    double best_while_receiving = 0;
    std::uint64_t checksum = 0;
    std::vector<double> phase_rates; // calls/s of each tenth, in order
    template <class Archive>
    void serialize(Archive& ar) {
        ar& seconds& best& worst& best_while_receiving& rss& checksum& phase_rates;
    }
};

/// Waits until every call ran, then reports the phases.
report finish() {
    while (g_receiver.ran.load(std::memory_order_acquire) < g_receiver.count) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    report r;
    auto& p = g_receiver.phase_end;
    double per_phase = static_cast<double>(g_receiver.count / phases);
    auto prev = g_receiver.start;
    r.best = 0;
    r.worst = 1e300;
    for (std::size_t i = 0; i < p.size(); ++i) {
        auto t = p[i];
        double s = std::chrono::duration<double>(t - prev).count();
        double rate = s > 0 ? per_phase / s : 0;
        r.best = std::max(r.best, rate);
        if (g_receiver.phase_received[i] - g_receiver.received_at_start < g_receiver.count) {
            r.best_while_receiving = std::max(r.best_while_receiving, rate);
        }
        r.phase_rates.push_back(rate);
        r.worst = std::min(r.worst, rate);
        prev = t;
    }
    r.seconds = std::chrono::duration<double>(p.back() - g_receiver.start).count();
    r.rss = peak_rss_mib();
    r.checksum = g_receiver.checksum.load();
    return r;
}
COURIER_PLAIN_ACTION(finish, finish_action);

std::string arg(int argc, char** argv, std::string_view name, std::string def) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.size() > name.size() + 3 && a.substr(0, 2) == "--" &&
            a.substr(2, name.size()) == name && a[name.size() + 2] == '=') {
            return std::string(a.substr(name.size() + 3));
        }
    }
    return def;
}

int courier_main(int argc, char** argv) {
    auto count = std::stoull(arg(argc, argv, "count", "1000000"));
    auto size = std::stoull(arg(argc, argv, "size", "1024"));
    auto work_ns = std::stoll(arg(argc, argv, "work-ns", "2000"));
    auto mode = arg(argc, argv, "mode", "post");
    bool ordered = arg(argc, argv, "ordered", "0") == "1";
    if (courier::get_num_localities() < 2 || (mode != "post" && mode != "async") || count < 10) {
        std::fprintf(stderr, "usage: courier-run -n 2 flood [--count=N>=10] [--size=BYTES] "
                             "[--mode=post|async] [--work-ns=NS]\n");
        return courier::finalize(), 2;
    }
    auto there = courier::find_all_localities()[1];
    courier::async<prepare_action>(there, count, work_ns).get();
    std::vector<char> payload(size);
    for (std::size_t i = 0; i < size; ++i) {
        payload[i] = static_cast<char>(i * 7 + 1);
    }
    std::uint64_t expected = 0;
    for (char c : payload) {
        expected += static_cast<unsigned char>(c);
    }
    if (mode == "post") {
        for (std::uint64_t i = 0; i < count; ++i) {
            if (ordered) {
                courier::post_ordered<consume_action>(there, payload);
            } else {
                courier::post<consume_action>(there, payload);
            }
        }
    } else {
        std::vector<courier::future<void>> held;
        held.reserve(count);
        for (std::uint64_t i = 0; i < count; ++i) {
            held.push_back(ordered ? courier::async_ordered<consume_action>(there, payload)
                                   : courier::async<consume_action>(there, payload));
        }
        for (auto& f : held) {
            f.get();
        }
    }
    report r = courier::async<finish_action>(there).get();
    auto flow = courier::get_flow_statistics();
    std::string window = flow.window_parcels == 0
                             ? std::string("off")
                             : std::to_string(flow.window_parcels) + "/" +
                                   std::to_string(flow.window_bytes >> 10) + "KiB";
    std::printf("mode=%s%s size=%llu count=%llu flow=%s seconds=%.3f rate=%.0f "
                "best_phase_rate=%.0f best_receiving_phase_rate=%.0f worst_phase_rate=%.0f "
                "sender_rss_mib=%.1f "
                "receiver_rss_mib=%.1f waits=%llu checksum_ok=%d\n",
                mode.c_str(), ordered ? "_ordered" : "", static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(count), window.c_str(), r.seconds,
                static_cast<double>(count) / r.seconds, r.best, r.best_while_receiving, r.worst,
                peak_rss_mib(), r.rss, static_cast<unsigned long long>(flow.waits),
                r.checksum == expected * count);
    // The rate of each tenth, on a line of its own (run.sh reads the line above).
    std::printf("phase_rates=");
    for (std::size_t i = 0; i < r.phase_rates.size(); ++i) {
        std::printf("%s%.0f", i == 0 ? "" : ",", r.phase_rates[i]);
    }
    std::printf("\n");
    std::fflush(stdout);
    int rc = r.checksum == expected * count ? 0 : 1;
    courier::finalize();
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
