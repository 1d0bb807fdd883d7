// SPDX-License-Identifier: BSL-1.0
// Flow control across real processes (courier-run, tcp and shm):
//   courier-run -n 2 flow_program SCENARIO
// bounded: 300,000 posts of 1 KiB from locality 0 to 1; the sender never has more than its
//   window in flight, waits for it, both sides' peak RSS stays small, every post runs, and the
//   credits add up (what locality 0 holds in flight is what locality 1 has not yet returned).
// busy_receiver: locality 1's one worker is busy for 2 s; locality 0's posts fill the window
//   and wait, then all run.
// receiver_dies: as busy_receiver, but locality 1 dies while locality 0 waits: the waiting
//   async fails with network_error (--courier:on_peer_failure=continue).
// ordered: post_ordered calls of mixed sizes from two Courier threads run one at a time, in
//   sequence, and an async_ordered after them runs last (ordered_plain: the same with plain
//   calls, which promise no order: it shows what the ordered ones prevent; ordered_local: to
//   locality 0 itself).
#include <courier/courier.hpp>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

int failures = 0;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr char const* rss_unchecked = "a sanitizer's shadow memory and quarantine";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr char const* rss_unchecked = "a sanitizer's shadow memory and quarantine";
#else
constexpr char const* rss_unchecked = nullptr;
#endif
#else
constexpr char const* rss_unchecked = nullptr;
#endif

using clock_type = std::chrono::steady_clock;

double peak_rss_mib() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::atomic<long> g_ran{0};
std::atomic<std::uint64_t> g_bytes{0};

void consume(std::vector<char> const& v) {
    g_bytes.fetch_add(v.size(), std::memory_order_relaxed);
    g_ran.fetch_add(1, std::memory_order_acq_rel);
}

struct receiver_report {
    long ran = 0;
    std::uint64_t bytes = 0;
    double rss = 0;
    courier::flow_statistics flow;
    template <class A>
    void serialize(A& ar) {
        ar& ran& bytes& rss& flow.parcels_unreturned& flow.bytes_unreturned& flow.credits_sent;
    }
};

receiver_report report() {
    return {g_ran.load(), g_bytes.load(), peak_rss_mib(), courier::get_flow_statistics()};
}

/// Keeps this locality's worker busy without yielding (run with one worker): nothing new
/// starts here meanwhile, while parcels still arrive.
void occupy(double seconds, bool then_die) {
    auto until = clock_type::now() + std::chrono::duration<double>(seconds);
    while (clock_type::now() < until) {
    }
    if (then_die) {
        std::fflush(nullptr);
        std::_Exit(3);
    }
}

long ran_so_far() {
    return g_ran.load();
}

// Ordered calls: each must find the previous one finished and be the next in sequence.
std::atomic<int> g_running{0};
std::atomic<long> g_next{0};
std::atomic<long> g_out_of_order{0};
std::atomic<long> g_overlapping{0};

void in_sequence(long i, std::vector<char> const& pad) {
    if (g_running.fetch_add(1) != 0) {
        g_overlapping.fetch_add(1);
    }
    if (g_next.load() != i) {
        g_out_of_order.fetch_add(1);
    }
    g_next.store(i + 1);
    // Some take a while (and a large pad travels by RMA read): later ones arrive meanwhile.
    if (!pad.empty() && pad.size() % 3 == 0) {
        courier::this_thread::yield();
    }
    g_running.fetch_sub(1);
}

std::vector<long> sequence_report() {
    return {g_next.load(), g_out_of_order.load(), g_overlapping.load()};
}

} // namespace

COURIER_PLAIN_ACTION(consume, consume_action);
COURIER_PLAIN_ACTION(report, report_action);
COURIER_PLAIN_ACTION(occupy, occupy_action);
COURIER_PLAIN_ACTION(ran_so_far, ran_so_far_action);
COURIER_PLAIN_ACTION(in_sequence, in_sequence_action);
COURIER_PLAIN_ACTION(sequence_report, sequence_report_action);

namespace {

/// Waits until locality 1 ran `n` calls (at most 60 s).
long wait_for_runs(courier::id_type there, long n) {
    auto until = clock_type::now() + std::chrono::seconds(60);
    long ran = 0;
    while ((ran = courier::async<ran_so_far_action>(there).get()) < n &&
           clock_type::now() < until) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ran;
}

void scenario_bounded() {
    auto there = courier::find_all_localities()[1];
    constexpr long count = 300000;
    std::vector<char> payload(1024, 'x');
    auto window = courier::get_flow_statistics();
    CHECK(window.window_parcels > 0);
    std::int64_t most = 0;
    for (long i = 0; i < count; ++i) {
        courier::post<consume_action>(there, payload);
        most = std::max(most, courier::get_flow_statistics().parcels_in_flight);
    }
    CHECK(wait_for_runs(there, count) == count);
    // The report is a request too: this side's figures after it, so that both count it.
    auto theirs = courier::async<report_action>(there).get();
    auto mine = courier::get_flow_statistics();
    std::printf("bounded: window %lld parcels / %lld bytes, at most %lld in flight, %llu waits; "
                "peak RSS %.1f MiB here, %.1f MiB there; in flight %lld / %lld bytes, unreturned "
                "there %lld / %lld bytes\n",
                static_cast<long long>(mine.window_parcels),
                static_cast<long long>(mine.window_bytes), static_cast<long long>(most),
                static_cast<unsigned long long>(mine.waits), peak_rss_mib(), theirs.rss,
                static_cast<long long>(mine.parcels_in_flight),
                static_cast<long long>(mine.bytes_in_flight),
                static_cast<long long>(theirs.flow.parcels_unreturned),
                static_cast<long long>(theirs.flow.bytes_unreturned));
    CHECK(theirs.ran == count);
    CHECK(theirs.bytes == static_cast<std::uint64_t>(count) * payload.size());
    CHECK(most <= mine.window_parcels);
    CHECK(mine.waits > 0);
    CHECK(mine.overdrafts == 0);
    // Every credit is accounted for: what is still in flight here is exactly what locality 1
    // started and has not yet given back.
    CHECK(mine.parcels_in_flight == theirs.flow.parcels_unreturned);
    CHECK(mine.bytes_in_flight == theirs.flow.bytes_unreturned);
    CHECK(theirs.flow.credits_sent > 0 && mine.credits_received == theirs.flow.credits_sent);
    if (rss_unchecked != nullptr) {
        std::printf("bounded: peak RSS not checked: %s\n", rss_unchecked);
    } else {
        // Unbounded, this flood held ~680 MiB on the sender (shm) and ~100 MiB on the receiver.
        CHECK(peak_rss_mib() < 160);
        CHECK(theirs.rss < 160);
    }
}

void scenario_busy_receiver(bool die) {
    auto there = courier::find_all_localities()[1];
    auto window = courier::get_flow_statistics().window_parcels;
    auto t0 = clock_type::now();
    courier::post<occupy_action>(there, 2.0, die);
    // Parcels are not ordered: give the occupation time to start before the calls arrive.
    courier::this_thread::sleep_for(std::chrono::milliseconds(300));
    long const count = window * 3;
    std::vector<char> payload(64, 'y');
    try {
        // A future per call: the last ones wait for room in the window.
        std::vector<courier::future<void>> calls;
        for (long i = 0; i < count; ++i) {
            calls.push_back(courier::async<consume_action>(there, payload));
        }
        for (auto& f : calls) {
            f.get();
        }
        double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        auto mine = courier::get_flow_statistics();
        std::printf("busy_receiver: %ld calls in %.2f s, %llu waits\n", count, s,
                    static_cast<unsigned long long>(mine.waits));
        CHECK(!die);
        CHECK(mine.waits > 0);
        CHECK(s > 1.5); // the window filled: the calls waited for the busy receiver
        CHECK(wait_for_runs(there, count) == count);
    } catch (courier::network_error const& e) {
        double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        std::printf("receiver_dies: network_error after %.2f s: %s\n", s, e.what());
        CHECK(die);
    }
}

/// 20,000 ordered calls of mixed sizes (coalesced, eager, RMA read) from two Courier threads
/// alternately taking the next number, then an ordered async: every call ran alone and in
/// sequence, and the async came last. `plain`: the same with post/async (no promise).
void scenario_ordered(bool plain, bool local) {
    auto there = local ? courier::find_here() : courier::find_all_localities()[1];
    constexpr long count = 20000;
    std::atomic<long> next{0};
    courier::mutex turn; // makes the two threads' calls one sequence
    auto sender = [&] {
        for (;;) {
            std::unique_lock lk(turn);
            long i = next.fetch_add(1);
            if (i >= count) {
                return;
            }
            std::size_t pad = i % 97 == 0 ? 300000 : i % 13 == 0 ? 3000 : 0;
            if (plain) {
                courier::post<in_sequence_action>(there, i, std::vector<char>(pad, 'z'));
            } else {
                courier::post_ordered<in_sequence_action>(there, i, std::vector<char>(pad, 'z'));
            }
        }
    };
    auto a = courier::async(sender);
    auto b = courier::async(sender);
    a.get();
    b.get();
    auto last = plain ? courier::async<sequence_report_action>(there).get()
                      : courier::async_ordered<sequence_report_action>(there).get();
    std::printf("ordered%s: when the last call ran, %ld of %ld had run; %ld out of order, %ld "
                "overlapping\n",
                plain ? " (plain calls)" : "", last[0], count, last[1], last[2]);
    CHECK(last[0] == count);
    CHECK(last[1] == 0);
    CHECK(last[2] == 0);
}

int courier_main(int argc, char** argv) {
    std::string scenario = argc > 1 ? argv[1] : "bounded";
    if (courier::get_num_localities() < 2) {
        std::fprintf(stderr, "flow_program needs 2 localities\n");
        return courier::finalize(), 2;
    }
    if (scenario == "bounded") {
        scenario_bounded();
    } else if (scenario == "ordered" || scenario == "ordered_plain" ||
               scenario == "ordered_local") {
        scenario_ordered(scenario == "ordered_plain", scenario == "ordered_local");
    } else if (scenario == "busy_receiver" || scenario == "receiver_dies") {
        scenario_busy_receiver(scenario == "receiver_dies");
    } else {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        return courier::finalize(), 2;
    }
    std::printf("%s: %s\n", scenario.c_str(), failures == 0 ? "ok" : "FAILED");
    std::fflush(stdout);
    courier::finalize();
    return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
