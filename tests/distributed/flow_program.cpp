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
// large_to_busy_receiver: a 64 MiB parcel to locality 1 while its one worker is busy for 3 s;
//   run with a small read_piece and --courier:peer_timeout=2: no peer is declared failed, and
//   the parcel arrives whole.
// refused: run with --courier:max_parcel_size=65536: calls, replies, posts and ordered calls
//   over it fail with an error saying so (none hangs), and those under it arrive whole.
// refused_no_memory: locality 1 limits its address space; a 512 MiB argument fails with "no
//   memory" instead of hanging, and a later 16 MiB one arrives whole.
// dead_peer_memory (shm, --courier:on_peer_failure=continue): locality 1 fills 256 MiB of its
//   rma pool, which locality 0 maps (mapped reads), then dies; once locality 0 knows it failed,
//   its mapping of that pool is gone (its pages would otherwise stay resident for the rest of
//   the job).
// soak [SECONDS [PATTERNS]]: every locality sends checked calls of 8 B .. 1 MiB, bursts of posts,
// ordered
//   posts and fan-outs for SECONDS (default 10); nothing lost or wrong, and (in runs of 5
//   minutes or more) each locality's RSS at the end within 5 % of its RSS at 20 % of the run.
//   PATTERNS: which of the four (digits 0-3: calls, posts, ordered posts, fan-outs; default all).
#include "check.hpp"

#include <courier/courier.hpp>

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using courier_test::failures;

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

std::atomic<bool> g_occupied{false};

void occupation_started() {
    g_occupied.store(true);
}

} // namespace

COURIER_PLAIN_ACTION(occupation_started, occupation_started_action);

namespace {

/// Keeps this locality's worker busy without yielding (run with one worker): nothing new
/// starts here meanwhile, while parcels still arrive. Locality 0 hears when it has begun.
void occupy(double seconds, bool then_die) {
    courier::post<occupation_started_action>(courier::find_all_localities()[0]);
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

// ---- soak: mixed sizes and patterns from every locality, RSS sampled --------------------------
namespace {

std::vector<std::uint64_t> reversed(std::vector<std::uint64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
}

std::atomic<long> g_small_posts{0};
void small_post(std::uint64_t check) {
    if (check % 7 != 3) {
        std::fprintf(stderr, "soak: a post arrived with a wrong payload %llu\n",
                     static_cast<unsigned long long>(check));
        std::abort();
    }
    g_small_posts.fetch_add(1, std::memory_order_relaxed);
}

// Ordered posts from each source must arrive numbered 0, 1, 2, ...
std::mutex g_seq_mutex;
std::map<std::uint32_t, std::uint64_t> g_seq_next;
std::atomic<long> g_seq_wrong{0};
void numbered(std::uint32_t source, std::uint64_t n) {
    std::lock_guard g(g_seq_mutex);
    if (g_seq_next[source]++ != n) {
        g_seq_wrong.fetch_add(1);
    }
}

double current_rss_mib() {
    long pages = 0, resident = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) {
            resident = 0;
        }
        std::fclose(f);
    }
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) /
           (1024.0 * 1024.0);
}

/// Bytes malloc holds for the program (every arena), in MiB: RSS growth with this flat is the
/// heap's fragmentation or memory outside malloc; with this growing, live objects pile up.
double heap_in_use_mib() {
    return static_cast<double>(mallinfo2().uordblks) / (1024.0 * 1024.0);
}

struct drive_report {
    std::uint64_t calls = 0, wrong = 0, posts_sent = 0;
    double rss_early = 0, rss_end = 0, heap_early = 0, heap_end = 0;
    template <class A>
    void serialize(A& ar) {
        ar& calls& wrong& posts_sent& rss_early& rss_end& heap_early& heap_end;
    }
};
drive_report drive(double seconds, double early, std::string const& patterns);
std::vector<long> soak_counts() {
    return {g_small_posts.load(), g_seq_wrong.load()};
}

} // namespace

COURIER_PLAIN_ACTION(reversed, reversed_action);
COURIER_PLAIN_ACTION(small_post, small_post_action);
COURIER_PLAIN_ACTION(numbered, numbered_action);
COURIER_PLAIN_ACTION(drive, drive_action);
COURIER_PLAIN_ACTION(soak_counts, soak_counts_action);

namespace {

/// One locality's part of the soak: rounds of checked calls of 8 B .. 1 MiB to a peer, bursts
/// of small posts, ordered posts and fan-outs to every peer, until `seconds`; its RSS at
/// `early` seconds and at the end.
drive_report drive(double seconds, double early, std::string const& patterns) {
    auto t0 = clock_type::now();
    auto elapsed = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };
    auto peers = courier::find_remote_localities();
    drive_report r;
    std::uint64_t seq = 0;
    auto ordered_to = peers[courier::get_locality_id() % peers.size()];
    for (std::uint64_t round = 0; elapsed() < seconds; ++round) {
        if (r.rss_early == 0 && elapsed() >= early) {
            r.rss_early = current_rss_mib();
            r.heap_early = heap_in_use_mib();
        }
        auto const& peer = peers[round % peers.size()];
        if (patterns.find(static_cast<char>('0' + round % 4)) == std::string::npos) {
            continue;
        }
        switch (round % 4) {
        case 0: { // a checked call, 8 B .. 1 MiB (eager, coalesced and RMA paths)
            std::size_t n = std::size_t{1} << (round / 4 % 18);
            std::vector<std::uint64_t> v(n);
            for (std::size_t i = 0; i < n; ++i) {
                v[i] = round * 1000003 + i;
            }
            auto back = courier::async<reversed_action>(peer, v).get();
            ++r.calls;
            r.wrong += !(back.size() == n && std::equal(back.begin(), back.end(), v.rbegin()));
            break;
        }
        case 1: // a burst of small posts (flow control's window fills)
            for (int i = 0; i < 2000; ++i) {
                courier::post<small_post_action>(peer, std::uint64_t(7 * i + 3));
                ++r.posts_sent;
            }
            break;
        case 2: // ordered posts, numbered
            for (int i = 0; i < 200; ++i) {
                courier::post_ordered<numbered_action>(ordered_to, courier::get_locality_id(),
                                                       seq++);
            }
            break;
        default: { // a fan-out to every peer
            std::vector<courier::future<std::vector<std::uint64_t>>> fs;
            std::vector<std::uint64_t> v(64, round);
            for (auto const& l : peers) {
                fs.push_back(courier::async<reversed_action>(l, v));
            }
            for (auto& f : fs) {
                auto back = f.get();
                ++r.calls;
                r.wrong += back != v; // all equal: reversed is the same
            }
        }
        }
    }
    if (r.rss_early == 0) {
        r.rss_early = current_rss_mib();
        r.heap_early = heap_in_use_mib();
    }
    r.rss_end = current_rss_mib();
    r.heap_end = heap_in_use_mib();
    return r;
}

/// Every locality drives for `seconds`; then every post arrived, no ordered post came out of
/// sequence, no answer was wrong, and each locality's RSS at the end is within 5 % of its RSS
/// at `early` seconds (20 % of the run).
void scenario_soak(double seconds, std::string const& patterns) {
    auto all = courier::find_all_localities();
    std::vector<courier::future<drive_report>> fs;
    for (auto const& l : all) {
        fs.push_back(courier::async<drive_action>(l, seconds, seconds * 0.2, patterns));
    }
    std::uint64_t calls = 0, wrong = 0, posts = 0;
    double worst_growth = 0;
    for (std::size_t k = 0; k < fs.size(); ++k) {
        auto r = fs[k].get();
        calls += r.calls;
        wrong += r.wrong;
        posts += r.posts_sent;
        double growth = (r.rss_end - r.rss_early) / r.rss_early;
        worst_growth = std::max(worst_growth, growth);
        std::printf("soak: locality %zu: %llu calls, RSS %.1f MiB at %.0f s, %.1f MiB at the end "
                    "(%+.1f %%); heap in use %.1f MiB, then %.1f MiB\n",
                    k, static_cast<unsigned long long>(r.calls), r.rss_early, seconds * 0.2,
                    r.rss_end, growth * 100, r.heap_early, r.heap_end);
    }
    // Posts are not ordered with the calls above: wait until the last have run.
    long arrived = 0, seq_wrong = 0;
    auto until = clock_type::now() + std::chrono::seconds(60);
    do {
        arrived = 0;
        seq_wrong = 0;
        for (auto const& l : all) {
            auto c = courier::async<soak_counts_action>(l).get();
            arrived += c[0];
            seq_wrong += c[1];
        }
    } while (static_cast<std::uint64_t>(arrived) < posts && clock_type::now() < until);
    std::printf("soak: %llu checked calls (%llu wrong), %llu posts (%ld arrived), ordered posts "
                "out of sequence %ld, worst RSS growth %+.1f %%\n",
                static_cast<unsigned long long>(calls), static_cast<unsigned long long>(wrong),
                static_cast<unsigned long long>(posts), arrived, seq_wrong, worst_growth * 100);
    CHECK(wrong == 0);
    CHECK(static_cast<std::uint64_t>(arrived) == posts);
    CHECK(seq_wrong == 0);
    if (rss_unchecked != nullptr) {
        std::printf("soak: RSS growth not checked: %s\n", rss_unchecked);
    } else if (seconds < 300) {
        std::printf("soak: RSS growth not checked: a run shorter than 5 minutes measures the "
                    "heap's warm-up\n");
    } else {
        CHECK(worst_growth <= 0.05);
    }
}

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

/// Occupies `there`'s worker for `seconds` (occupy()) and returns once it has begun: parcels
/// are not ordered, so what follows must not go before (a fixed pause was too short on two busy
/// cores under TSan: every call ran before the occupation, and none waited).
void occupy_receiver(courier::id_type there, double seconds, bool then_die) {
    courier::post<occupy_action>(there, seconds, then_die);
    while (!g_occupied.load()) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void scenario_bounded() {
    auto there = courier::find_all_localities()[1];
    constexpr long count = 300000;
    std::vector<char> payload(1024, 'x');
    auto window = courier::get_flow_statistics();
    CHECK(window.window_parcels > 0);
    // The receiver's one worker starts nothing for a while: the window fills and the flood
    // waits for it (without this, a receiver as fast as its sender - under a sanitizer - saw
    // the window never fill, and the test proved nothing about it).
    occupy_receiver(there, 0.5, false);
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
    occupy_receiver(there, 2.0, die);
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
        // Calls were waiting for the window when the receiver died: they woke and failed.
        CHECK(courier::get_flow_statistics().waits > 0);
    }
}

/// Mappings of rma pool segments in this process (/proc/self/maps lines of the memfd).
int pool_segment_mappings() {
    std::FILE* f = std::fopen("/proc/self/maps", "r");
    CHECK(f != nullptr);
    int n = 0;
    char line[512];
    while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
        n += std::strstr(line, "/memfd:courier-rma") != nullptr ? 1 : 0;
    }
    if (f != nullptr) {
        std::fclose(f);
    }
    return n;
}

/// The "KEY: N kB" line of a /proc file such as /proc/meminfo or /proc/self/status, in KiB;
/// -1 when it has none.
long proc_kib(char const* path, char const* key) {
    std::FILE* f = std::fopen(path, "r");
    long kib = -1;
    char line[256];
    std::size_t const n = std::strlen(key);
    while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
            kib = std::strtol(line + n + 1, nullptr, 10);
            break;
        }
    }
    if (f != nullptr) {
        std::fclose(f);
    }
    return kib;
}

/// Shmem of /proc/meminfo, MiB (memfd pages count there).
long shmem_mib() {
    return proc_kib("/proc/meminfo", "Shmem") / 1024;
}

courier::rma_vector<char>* g_filled = nullptr;

/// Fills `mib` MiB of this locality's rma pool (kept until it dies); the mappings it has.
int fill_pool(int mib) {
    g_filled = new courier::rma_vector<char>(std::size_t(mib) << 20);
    std::memset(g_filled->data(), 'p', g_filled->size());
    return pool_segment_mappings();
}

void die_now() {
    std::fflush(nullptr);
    std::_Exit(3);
}

std::uint64_t large_sum(courier::serialize_buffer<std::uint64_t> const& b) {
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        h = h * 31 + b[i];
    }
    return h;
}

} // namespace

COURIER_PLAIN_ACTION(large_sum, large_sum_action);
COURIER_PLAIN_ACTION(fill_pool, fill_pool_action);
COURIER_PLAIN_ACTION(die_now, die_now_action);

namespace {

void scenario_dead_peer_memory() {
    auto there = courier::find_all_localities()[1];
    int const mine = pool_segment_mappings();
    int const theirs = courier::async<fill_pool_action>(there, 256).get();
    long const shmem_filled = shmem_mib();
    std::printf("dead_peer_memory: %d pool mappings here, %d there; Shmem %ld MiB\n", mine, theirs,
                shmem_filled);
    // Each maps its own segment and the other's. A process whose pool is not shared (the
    // system refused a memfd, or strict overcommit) has nothing to test; one that shares its
    // pool must map the peer's too.
    if (mine == 0) {
        std::printf("dead_peer_memory: skipped: this process's rma pool is not shared (no "
                    "memfd segment)\n");
        return;
    }
    CHECK(mine >= 2 && theirs >= 2);
    if (mine < 2 || theirs < 2) {
        return;
    }
    courier::post<die_now_action>(there);
    auto t0 = clock_type::now();
    try {
        for (;;) {
            courier::async<ran_so_far_action>(there).get();
            CHECK(clock_type::now() - t0 < std::chrono::seconds(30));
        }
    } catch (courier::network_error const& e) {
        std::printf("dead_peer_memory: network_error after %.2f s: %s\n",
                    std::chrono::duration<double>(clock_type::now() - t0).count(), e.what());
    }
    // The transport lets go of the peer's segment as the failure is handled (a call made
    // meanwhile fails at once: the locality is marked failed first).
    int after = pool_segment_mappings();
    for (auto until = clock_type::now() + std::chrono::seconds(10);
         after != mine - 1 && clock_type::now() < until; after = pool_segment_mappings()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    long const shmem_after = shmem_mib();
    std::printf("dead_peer_memory: %d pool mappings here after the failure; Shmem %ld MiB "
                "(%ld MiB less)\n",
                after, shmem_after, shmem_filled - shmem_after);
    CHECK(after == mine - 1);
}

/// A large parcel to a receiver whose one worker is busy for 3 s (its liveness thread still
/// receives, a little each tick, and never lands a large parcel), in pieces of read_piece
/// (run with a small one: thousands of pieces), under --courier:peer_timeout=2: the peers'
/// heartbeats pass meanwhile (neither is declared failed), then the parcel arrives whole.
void scenario_large_to_busy_receiver() {
    auto there = courier::find_all_localities()[1];
    std::vector<std::uint64_t> v(std::size_t{8} << 20); // 64 MiB
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = i * 2654435761u;
    }
    courier::serialize_buffer<std::uint64_t> b(v.data(), v.size(),
                                               courier::serialize_buffer<std::uint64_t>::reference);
    auto t0 = clock_type::now();
    occupy_receiver(there, 3.0, false);
    try {
        auto remote = courier::async<large_sum_action>(there, b).get();
        double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        std::printf("large_to_busy_receiver: 64 MiB arrived after %.2f s, sum %s\n", s,
                    remote == large_sum(b) ? "matches" : "DIFFERS");
        CHECK(remote == large_sum(b));
        CHECK(s > 2.5); // it waited for the busy worker
    } catch (courier::network_error const& e) {
        std::printf("large_to_busy_receiver: network_error: %s\n", e.what());
        CHECK(false);
    }
}

// Refused parcels: larger than --courier:max_parcel_size, or than what the receiver can allocate.
std::mutex g_marks_mutex;
std::vector<long> g_marks;

void ordered_mark(long i, courier::serialize_buffer<std::uint64_t> const&) {
    std::lock_guard g(g_marks_mutex);
    g_marks.push_back(i);
}

std::vector<long> ordered_marks() {
    std::lock_guard g(g_marks_mutex);
    return g_marks;
}

courier::serialize_buffer<std::uint64_t> filled(std::size_t n, std::uint64_t seed) {
    courier::serialize_buffer<std::uint64_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = (i + seed) * 2654435761u;
    }
    return b;
}

courier::serialize_buffer<std::uint64_t> make_large(std::size_t n) {
    return filled(n, 0);
}

std::size_t vm_size_bytes() {
    return static_cast<std::size_t>(std::max(0L, proc_kib("/proc/self/status", "VmSize"))) * 1024;
}

rlimit g_saved_as{};

/// Limits this process's address space to what it maps now plus `headroom` bytes (0: lifts
/// the limit again): a landing buffer larger than that cannot be allocated.
bool limit_memory(std::size_t headroom) {
    if (headroom == 0) {
        return ::setrlimit(RLIMIT_AS, &g_saved_as) == 0;
    }
    ::getrlimit(RLIMIT_AS, &g_saved_as);
    rlimit r = g_saved_as;
    r.rlim_cur = vm_size_bytes() + headroom;
    return ::setrlimit(RLIMIT_AS, &r) == 0;
}

} // namespace

COURIER_PLAIN_ACTION(ordered_mark, ordered_mark_action);
COURIER_PLAIN_ACTION(ordered_marks, ordered_marks_action);
COURIER_PLAIN_ACTION(make_large, make_large_action);
COURIER_PLAIN_ACTION(limit_memory, limit_memory_action);

namespace {

/// A call that must fail because its parcel is refused: true if it threw an error containing
/// `why`. Every way: the call's future, within a bounded time (the test's timeout).
template <class F>
bool fails_with(F&& call, char const* why) {
    try {
        call();
        std::printf("refused: a call that should fail succeeded\n");
    } catch (std::exception const& e) {
        if (std::string(e.what()).find(why) != std::string::npos) {
            return true;
        }
        std::printf("refused: failed with another error: %s\n", e.what());
    }
    return false;
}

/// Run with --courier:max_parcel_size=65536: calls, replies, posts and ordered calls of 128 KiB
/// fail with an error saying why, and the 32 KiB ones between them arrive whole (1100 rounds:
/// more than the MPI parcelport's 1024 data tags, so every tag is reused after a refusal).
void scenario_refused() {
    auto there = courier::find_all_localities()[1];
    constexpr std::size_t big = 16384, small = 4096; // elements: 128 KiB and 32 KiB
    constexpr int rounds = 1100;
    int refused = 0, whole = 0;
    auto t0 = clock_type::now();
    for (int i = 0; i < rounds; ++i) {
        auto b = filled(big, static_cast<std::uint64_t>(i));
        refused += fails_with([&] { courier::async<large_sum_action>(there, b).get(); },
                              "over the receiver's limit of 65536 bytes");
        auto s = filled(small, static_cast<std::uint64_t>(i));
        whole += courier::async<large_sum_action>(there, s).get() == large_sum(s);
    }
    std::printf("refused: %d of %d calls of 128 KiB refused, %d of %d of 32 KiB whole, in %.2f s\n",
                refused, rounds, whole, rounds,
                std::chrono::duration<double>(clock_type::now() - t0).count());
    CHECK(refused == rounds);
    CHECK(whole == rounds);
    // A reply over the caller's limit fails the caller's future; one under it arrives.
    CHECK(fails_with([&] { courier::async<make_large_action>(there, big).get(); },
                     "was not received: its 131072 bytes of chunks are over the receiver's "
                     "limit"));
    auto r = courier::async<make_large_action>(there, small).get();
    CHECK(large_sum(r) == large_sum(filled(small, 0)));
    // A refused post is reported where it was refused; later calls are not held up.
    courier::post<large_sum_action>(there, filled(big, 7));
    auto s = filled(small, 8);
    CHECK(courier::async<large_sum_action>(there, s).get() == large_sum(s));
    // An ordered stream goes on past a refused call.
    courier::post_ordered<ordered_mark_action>(there, 0L, filled(small, 0));
    auto bad = courier::async_ordered<ordered_mark_action>(there, 1L, filled(big, 1));
    courier::post_ordered<ordered_mark_action>(there, 2L, filled(small, 2));
    auto marks = courier::async_ordered<ordered_marks_action>(there).get();
    CHECK(fails_with([&] { bad.get(); }, "over the receiver's limit"));
    CHECK((marks == std::vector<long>{0, 2}));
    std::printf("refused: ordered calls that ran: %zu\n", marks.size());
}

/// Run with --courier:max_parcel_size=65536 and --courier:posted_errors=fail (the default): a
/// post of flat arguments whose 128 KiB chunk locality 1 refused is a failed posted action
/// there (logged, and locality 1's status is not 0: the test expects the job to say so), not a
/// malformed parcel, which is dropped without failing the job.
void scenario_refused_post() {
    auto there = courier::find_all_localities()[1];
    courier::post<large_sum_action>(there, filled(16384, 7));
    auto s = filled(4096, 8);
    CHECK(courier::async<large_sum_action>(there, s).get() == large_sum(s));
    std::printf("refused_post: posted 128 KiB over a limit of 64 KiB\n");
}

/// Without a limit: locality 1 can map only 256 MiB more, and a 512 MiB argument fails with
/// "no memory" instead of hanging its caller; a 16 MiB one after it arrives whole.
void scenario_refused_no_memory() {
    if (rss_unchecked != nullptr) {
        std::printf("refused_no_memory: skipped: %s takes the address space a limit would "
                    "bound\n",
                    rss_unchecked);
        return;
    }
    auto there = courier::find_all_localities()[1];
    CHECK(courier::async<limit_memory_action>(there, std::size_t{256} << 20).get());
    auto b = filled(std::size_t{64} << 20, 1); // 512 MiB
    auto t0 = clock_type::now();
    bool failed = fails_with([&] { courier::async<large_sum_action>(there, b).get(); },
                             "the receiver had no memory for its 536870912 bytes");
    std::printf("refused_no_memory: 512 MiB %s after %.2f s\n", failed ? "refused" : "NOT refused",
                std::chrono::duration<double>(clock_type::now() - t0).count());
    CHECK(failed);
    auto s = filled(std::size_t{2} << 20, 2); // 16 MiB
    CHECK(courier::async<large_sum_action>(there, s).get() == large_sum(s));
    CHECK(courier::async<limit_memory_action>(there, std::size_t{0}).get());
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
    } else if (scenario == "soak") {
        scenario_soak(argc > 2 ? std::stod(argv[2]) : 10.0, argc > 3 ? argv[3] : "0123");
    } else if (scenario == "ordered" || scenario == "ordered_plain" ||
               scenario == "ordered_local") {
        scenario_ordered(scenario == "ordered_plain", scenario == "ordered_local");
    } else if (scenario == "refused") {
        scenario_refused();
    } else if (scenario == "refused_post") {
        scenario_refused_post();
    } else if (scenario == "refused_no_memory") {
        scenario_refused_no_memory();
    } else if (scenario == "large_to_busy_receiver") {
        scenario_large_to_busy_receiver();
    } else if (scenario == "dead_peer_memory") {
        scenario_dead_peer_memory();
    } else if (scenario == "busy_receiver" || scenario == "receiver_dies") {
        scenario_busy_receiver(scenario == "receiver_dies");
    } else {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        return courier::finalize(), 2;
    }
    int status = courier_test::verdict(scenario.c_str());
    courier::finalize();
    return status;
}

} // namespace

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
