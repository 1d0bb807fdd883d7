// SPDX-License-Identifier: BSL-1.0
// Counters and traces across localities, run by ctest through courier-run:
//   courier-run -n N counters_program SCENARIO
//   counters  locality 0 reads every locality's counters before and after traffic it makes
//             (calls, a large argument, tasks) and checks that they show it
//   traffic   the same traffic, unchecked: for --courier:print_counters and --courier:trace,
//             whose output the scripts beside this file check (counters_check.py,
//             trace_check.py)
//   flat      calls and posts of flat arguments to every other locality (across hosts: over
//             both rails) are written as flat streams over libfabric, none over MPI
#include "check.hpp"

#include <courier/courier.hpp>

#include <atomic>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace {

using counters = std::map<std::string, double>;

int echo(int x) {
    return x;
}

/// Suspends once (waits for a task) so that traces show a task in two slices.
double sum_after_a_wait(std::vector<double> const& v) {
    auto f = courier::async([] { return 1.0; });
    return std::accumulate(v.begin(), v.end(), 0.0) + f.get() - 1.0;
}

std::atomic<int> g_noted{0};
void note(int, courier::serialize_buffer<char> const&) {
    g_noted.fetch_add(1);
}
int noted() {
    return g_noted.load();
}

} // namespace

COURIER_PLAIN_ACTION(echo, echo_action);
COURIER_PLAIN_ACTION(note, note_action);
COURIER_PLAIN_ACTION(noted, noted_action);
COURIER_PLAIN_ACTION(sum_after_a_wait, sum_after_a_wait_action);

namespace {

constexpr int calls = 64;
constexpr std::size_t large_elements = 1 << 19; // 4 MiB of doubles: above every zero-copy threshold
constexpr double large_bytes = large_elements * sizeof(double);

/// To every other locality: `calls` calls, a burst of posts, and one large argument.
void make_traffic() {
    std::vector<double> large(large_elements, 0.5);
    for (auto const& l : courier::find_remote_localities()) {
        for (int i = 0; i < calls; ++i) {
            CHECK(courier::async<echo_action>(l, i).get() == i);
        }
        std::vector<courier::future<int>> burst;
        for (int i = 0; i < calls; ++i) {
            burst.push_back(courier::async<echo_action>(l, i));
        }
        for (int i = 0; i < calls; ++i) {
            CHECK(burst[static_cast<std::size_t>(i)].get() == i);
        }
        CHECK(courier::async<sum_after_a_wait_action>(l, large).get() == 0.5 * large_elements);
    }
    // Local tasks too.
    std::vector<courier::future<int>> local;
    for (int i = 0; i < calls; ++i) {
        local.push_back(courier::async([i] { return i; }));
    }
    for (auto& f : local) {
        f.get();
    }
}

double delta(counters const& after, counters const& before, std::string const& name) {
    auto a = after.find(name), b = before.find(name);
    if (a == after.end() || b == before.end()) {
        std::fprintf(stderr, "counter %s missing\n", name.c_str());
        ++courier_test::failures;
        return 0;
    }
    return a->second - b->second;
}

void scenario_counters() {
    auto all = courier::find_all_localities();
    std::vector<counters> before;
    for (auto const& l : all) {
        before.push_back(courier::get_counters(l));
    }
    char const* names[] = {
        "/parcels/count/sent",         "/parcels/count/received",
        "/parcels/bytes/sent",         "/parcels/bytes/received",
        "/parcels/bytes/zero-copy",    "/parcels/count/sent-flat",
        "/parcels/bytes/rma-read",     "/threads/count/executed",
        "/threads/idle-rate",          "/rma/pool/bytes-in-use",
        "/rma/pool/bytes-registered",  "/flow/count/waits",
        "/flow/window/parcels",        "/parcelport/count/messages-sent",
        "/parcelport/count/rma-reads", "/parcels/count/received-flat",
    };
    for (auto const& c : before) {
        for (char const* n : names) {
            CHECK(c.count(n) == 1);
        }
        CHECK(c.at("/threads/idle-rate") >= 0 && c.at("/threads/idle-rate") <= 1);
    }

    make_traffic();

    std::vector<courier::future<counters>> pending;
    for (auto const& l : all) {
        pending.push_back(courier::get_counters_async(l));
    }
    std::vector<counters> after;
    for (auto& f : pending) {
        after.push_back(f.get());
    }
    std::size_t const remotes = all.size() - 1;
    // Locality 0 sent every call and the large arguments (zero copy), and read the replies.
    CHECK(delta(after[0], before[0], "/parcels/count/sent") >= remotes * (2 * calls + 1));
    CHECK(delta(after[0], before[0], "/parcels/count/received") >= remotes * (2 * calls + 1));
    CHECK(delta(after[0], before[0], "/parcels/bytes/zero-copy") >= remotes * large_bytes);
    CHECK(delta(after[0], before[0], "/parcels/bytes/sent") >= remotes * large_bytes);
    CHECK(delta(after[0], before[0], "/threads/count/executed") >= calls);
    // Over libfabric, calls of flat arguments (an int) are written as flat streams
    // (send_call_flat): every echo call. The MPI parcelport, whose batches are built
    // otherwise, takes no stream: none.
    bool const mpi = courier::get_parcelport_statistics_by_provider().at(0).first == "mpi";
    double const flat = delta(after[0], before[0], "/parcels/count/sent-flat");
    CHECK(mpi ? flat == 0 : flat >= remotes * 2 * calls);
    for (std::size_t r = 1; r < all.size(); ++r) {
        auto const& a = after[r];
        auto const& b = before[r];
        CHECK(delta(a, b, "/parcels/count/received") >= 2 * calls + 1);
        CHECK(delta(a, b, "/parcels/count/sent") >= 2 * calls + 1);
        CHECK(delta(a, b, "/parcels/bytes/received") >= large_bytes);
        CHECK(delta(a, b, "/parcels/bytes/rma-read") >= large_bytes);
        CHECK(delta(a, b, "/parcelport/count/rma-reads") >= 1);
        CHECK(delta(a, b, "/threads/count/executed") >= 2 * calls + 1);
        CHECK(a.at("/threads/idle-rate") >= 0 && a.at("/threads/idle-rate") <= 1);
        CHECK(a.at("/runtime/uptime") > 0);
        std::printf("locality %zu: +%.0f parcels received, +%.0f bytes read by RMA, +%.0f tasks, "
                    "idle-rate %.3f\n",
                    r, delta(a, b, "/parcels/count/received"),
                    delta(a, b, "/parcels/bytes/rma-read"), delta(a, b, "/threads/count/executed"),
                    a.at("/threads/idle-rate"));
    }
    // This locality's own, read without an action.
    auto here = courier::get_counters(courier::find_here());
    CHECK(here.count("/parcels/count/sent") == 1 && here.at("/parcels/count/sent") > 0);
}

/// Calls and posts of flat arguments to every other locality: each leaves as a flat stream
/// over libfabric (send_call_flat, send_post_flat), whichever rail serves its destination.
void scenario_flat() {
    bool const mpi = courier::get_parcelport_statistics_by_provider().at(0).first == "mpi";
    auto const remotes = courier::find_remote_localities();
    double const before =
        courier::get_counters(courier::find_here()).at("/parcels/count/sent-flat");
    std::vector<char> bytes(1000, 'x');
    courier::serialize_buffer<char> const payload(bytes.data(), bytes.size(),
                                                  courier::serialize_buffer<char>::reference);
    for (auto const& l : remotes) {
        int const had = courier::async<noted_action>(l).get();
        for (int i = 0; i < calls; ++i) {
            CHECK(courier::async<echo_action>(l, i).get() == i);
            courier::post<note_action>(l, i, payload);
        }
        // The posts have run once the count says so (posts are not ordered with the call).
        while (courier::async<noted_action>(l).get() < had + calls) {
        }
    }
    double const after = courier::get_counters(courier::find_here()).at("/parcels/count/sent-flat");
    double const wanted = static_cast<double>(remotes.size()) * 2 * calls;
    std::printf("flat sends: %.0f of at least %.0f\n", after - before, mpi ? 0.0 : wanted);
    CHECK(mpi ? after == before : after - before >= wanted);
}

} // namespace

int courier_main(int argc, char** argv) {
    std::string scenario = argc > 1 ? argv[1] : "counters";
    if (scenario == "counters") {
        scenario_counters();
    } else if (scenario == "traffic") {
        make_traffic();
    } else if (scenario == "flat") {
        scenario_flat();
    } else {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        ++courier_test::failures;
    }
    std::printf("%s on %u localities: %s\n", scenario.c_str(), courier::get_num_localities(),
                courier_test::failures == 0 ? "ok" : "FAILED");
    std::fflush(stdout);
    courier::finalize();
    return courier_test::failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
