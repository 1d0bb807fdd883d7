// SPDX-License-Identifier: BSL-1.0
// Multi-locality tests, run by ctest through courier-run over the real provider:
//   courier-run -n N distributed_program SCENARIO
// Each scenario checks itself on locality 0 and returns non-zero on the first failure.
#include "../../libs/runtime/src/transport_watch.hpp"
#include "check.hpp"

#include <courier/courier.hpp>

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

// The libfabric transport's test seam (libs/parcelport/src/libfabric/context.hpp).
namespace courier::parcelport::fabric::testing {
void refuse_posts(char const* what, int n, long then) noexcept;
void refuse_posts_outright(char const* what, int n, long code) noexcept;
} // namespace courier::parcelport::fabric::testing

namespace {

using courier_test::failures;

struct particle {
    std::array<double, 3> pos{};
    double mass = 0;
    std::string name;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& pos& mass& name;
    }
};

} // namespace

// ---- a component --------------------------------------------------------------------------

struct accumulator : courier::component_base<accumulator> {
    accumulator() = default;
    explicit accumulator(double start, std::string label)
        : total_(start), label_(std::move(label)) {}
    void add(double x) {
        std::lock_guard g(m_);
        total_ += x;
    }
    double total() const {
        std::lock_guard g(m_);
        return total_;
    }
    std::string describe() const {
        return label_ + " on locality " + std::to_string(courier::get_locality_id()) + ", id " +
               std::to_string(get_id().lsb);
    }
    COURIER_COMPONENT_ACTION(accumulator, add, add_action);
    COURIER_COMPONENT_ACTION(accumulator, total, total_action);
    COURIER_COMPONENT_ACTION(accumulator, describe, describe_action);
    courier::id_type self() const { return get_id(); }
    COURIER_COMPONENT_ACTION(accumulator, self, self_action);

private:
    mutable courier::mutex m_;
    double total_ = 0;
    std::string label_ = "default";
};
COURIER_REGISTER_COMPONENT(accumulator);

// ---- actions ------------------------------------------------------------------------------

std::string hello(std::string const& from) {
    return "hello " + from + " from locality " + std::to_string(courier::get_locality_id());
}
COURIER_PLAIN_ACTION(hello, hello_action);

double scale_sum(std::vector<double> const& v, double factor) {
    return std::accumulate(v.begin(), v.end(), 0.0) * factor;
}
COURIER_PLAIN_ACTION(scale_sum, scale_sum_action);

std::size_t buffer_check(courier::serialize_buffer<char> const& b) {
    for (char c : b) {
        if (c != 'b') {
            return 0;
        }
    }
    return b.size();
}
COURIER_PLAIN_ACTION(buffer_check, buffer_check_action);

std::vector<double> make_vector(std::size_t n, double value) {
    return std::vector<double>(n, value);
}
COURIER_PLAIN_ACTION(make_vector, make_vector_action);

particle move_particle(particle p, std::map<std::string, int> const& m) {
    p.pos[0] += m.at("dx");
    p.name += "@" + std::to_string(courier::get_locality_id());
    return p;
}
COURIER_PLAIN_ACTION(move_particle, move_particle_action);

std::atomic<long> g_counter{0};
void bump(long by) {
    g_counter += by;
}
COURIER_PLAIN_ACTION(bump, bump_action);
long read_counter() {
    return g_counter.load();
}
COURIER_PLAIN_ACTION(read_counter, read_counter_action);

// Requests that wait for each other (blocked_requests): each arrives, then waits (suspending
// its Courier thread, polling every millisecond) until all `n` have arrived, for at most 5 s.
std::atomic<long> g_arrived{0}, g_released{0}, g_timed_out{0};
void arrive_and_wait(long n) {
    g_arrived.fetch_add(1);
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (g_arrived.load() < n) {
        if (std::chrono::steady_clock::now() > until) {
            g_timed_out.fetch_add(1);
            return;
        }
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g_released.fetch_add(1);
}
COURIER_PLAIN_ACTION(arrive_and_wait, arrive_and_wait_action);
std::vector<long> wait_outcome() {
    return {g_arrived.load(), g_released.load(), g_timed_out.load()};
}
COURIER_PLAIN_ACTION(wait_outcome, wait_outcome_action);

// Requests that need two workers at once (idle_worker_takes_the_rest): each waits without
// suspending (its worker spins) until another one runs at the same time, for at most 2 s.
std::atomic<int> g_running{0}, g_most_running{0}, g_met{0}, g_alone{0};
void meet_another() {
    int now = g_running.fetch_add(1) + 1;
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (now < 2 && std::chrono::steady_clock::now() < until) {
        now = std::max(now, g_running.load());
    }
    int seen = g_most_running.load();
    while (now > seen && !g_most_running.compare_exchange_weak(seen, now)) {
    }
    (now >= 2 ? g_met : g_alone).fetch_add(1);
    g_running.fetch_sub(1);
}
COURIER_PLAIN_ACTION(meet_another, meet_another_action);
std::vector<int> meetings() {
    return {g_most_running.load(), g_met.load(), g_alone.load()};
}
COURIER_PLAIN_ACTION(meetings, meetings_action);

int thrower(int x) {
    if (x > 0) {
        throw std::invalid_argument("x must not be positive, got " + std::to_string(x));
    }
    return x;
}
COURIER_PLAIN_ACTION(thrower, thrower_action);

void die() {
    std::_Exit(3);
}
COURIER_PLAIN_ACTION(die, die_action);

void stop_self() {
    std::fflush(nullptr);
    ::raise(SIGSTOP); // as a debugger or a hung node would: alive, but silent
}
COURIER_PLAIN_ACTION(stop_self, stop_self_action);

// Ends the process from inside an action, as a careless program would: 0 = std::_Exit(0),
// 1 = std::exit(0) (static destructors run while the runtime's threads still do).
void leave_now(int how) {
    std::fflush(nullptr);
    if (how == 0) {
        std::_Exit(0);
    }
    std::exit(0);
}
COURIER_PLAIN_ACTION(leave_now, leave_now_action);

// Keeps this locality's threads inside the transport (posts to locality 0 from several tasks)
// and then ends the process as leave_now(how) does, while they still send.
void leave_while_sending(int how) {
    std::vector<courier::future<void>> senders;
    for (int t = 0; t < 4; ++t) {
        senders.push_back(courier::async([] {
            try {
                for (;;) {
                    courier::post<bump_action>(courier::find_all_localities()[0], 1L);
                }
            } catch (std::exception const&) {
            }
        }));
    }
    courier::this_thread::sleep_for(std::chrono::milliseconds(50));
    leave_now(how);
}
COURIER_PLAIN_ACTION(leave_while_sending, leave_while_sending_action);

std::atomic<int> g_posted_throw_ran{0};
void posted_throw() {
    g_posted_throw_ran.fetch_add(1);
    throw std::runtime_error("a posted action that fails on purpose");
}
COURIER_PLAIN_ACTION(posted_throw, posted_throw_action);
int posted_throw_ran() {
    return g_posted_throw_ran.load();
}
COURIER_PLAIN_ACTION(posted_throw_ran, posted_throw_ran_action);

int process_id() {
    return static_cast<int>(::getpid());
}
COURIER_PLAIN_ACTION(process_id, process_id_action);

// A chain: locality k forwards to k+1, hops times; the last answers with its id.
int relay(int hops);
COURIER_PLAIN_ACTION(relay, relay_action_type_forward);
int relay(int hops) {
    auto n = courier::get_num_localities();
    auto next = (courier::get_locality_id() + 1) % n;
    if (hops == 0) {
        return static_cast<int>(courier::get_locality_id());
    }
    return courier::async<relay_action_type_forward>(courier::find_all_localities()[next], hops - 1)
        .get();
}

// ---- scenarios ----------------------------------------------------------------------------

namespace {

void scenario_basic() {
    auto all = courier::find_all_localities();
    CHECK(all.size() == courier::get_num_localities());
    CHECK(courier::find_here() == all[0]);
    CHECK(courier::find_remote_localities().size() == all.size() - 1);
    // A hello from each.
    for (auto const& loc : all) {
        auto s = courier::async<hello_action>(loc, std::string("test")).get();
        CHECK(s == "hello test from locality " + std::to_string(courier::get_locality_id(loc)));
    }
    auto there = all.back();
    // Large argument: 8 MiB travels as a pointer chunk by RMA read.
    std::vector<double> v(1 << 20, 0.5);
    CHECK(courier::async<scale_sum_action>(there, v, 2.0).get() == double(1 << 20));
    CHECK(courier::async(scale_sum_action{}, there, std::move(v), 1.0).get() == 0.5 * (1 << 20));
    // serialize_buffer in reference mode with async_cb: the callback says when it may be reused.
    std::vector<char> raw(3 << 20, 'b');
    std::atomic<bool> sent{false};
    courier::serialize_buffer<char> ref(raw.data(), raw.size(),
                                        courier::serialize_buffer<char>::reference);
    auto f = courier::async_cb<buffer_check_action>(
        there, [&](std::error_code const& ec) { sent = !ec; }, ref);
    CHECK(f.get() == raw.size());
    CHECK(sent.load());
    // Large result, user types, maps.
    auto big = courier::async<make_vector_action>(there, std::size_t{1} << 20, 3.0).get();
    CHECK(big.size() == (std::size_t{1} << 20) && big.back() == 3.0);
    particle p;
    p.pos = {1, 2, 3};
    p.name = "p";
    auto q = courier::async<move_particle_action>(there, p, std::map<std::string, int>{{"dx", 10}})
                 .get();
    CHECK(q.pos[0] == 11 && q.name == "p@" + std::to_string(courier::get_locality_id(there)));
    // Exceptions come back as remote_exception with type, message and locality.
    try {
        courier::async<thrower_action>(there, 5).get();
        CHECK(false);
    } catch (courier::remote_exception const& e) {
        CHECK(e.type_name() == "std::invalid_argument");
        CHECK(e.message() == "x must not be positive, got 5");
        CHECK(e.locality() == courier::get_locality_id(there));
        CHECK(std::string(e.what()).find("std::invalid_argument") != std::string::npos);
    }
    CHECK(courier::async<thrower_action>(there, -1).get() == -1);
    // post, then read back (same destination: delivered in order of processing? no: check sum).
    for (int i = 0; i < 100; ++i) {
        courier::post<bump_action>(there, 1L);
    }
    long seen = 0;
    for (int spin = 0; spin < 1000 && seen < 100; ++spin) {
        seen = courier::async<read_counter_action>(there).get();
    }
    CHECK(seen == 100);
    // Many tasks sending concurrently to every locality.
    std::vector<courier::future<std::string>> fs;
    for (int t = 0; t < 400; ++t) {
        fs.push_back(courier::async([t, &all] {
            return courier::async<hello_action>(all[static_cast<std::size_t>(t) % all.size()],
                                                std::to_string(t))
                .get();
        }));
    }
    for (std::size_t t = 0; t < fs.size(); ++t) {
        CHECK(fs[t].get() ==
              "hello " + std::to_string(t) + " from locality " + std::to_string(t % all.size()));
    }
    // An unknown action id is rejected with an error reply, not executed.
    auto st = courier::detail::make_state<int>();
    courier::detail::send_request(
        courier::get_locality_id(there), 0x0123456789abcdefull,
        [](courier::serialization::output_archive&) {},
        courier::detail::reply_handler(&courier::detail::complete_call<int>,
                                       courier::detail::state_ptr<int>(st).detach()),
        nullptr, true);
    std::string err = "none";
    try {
        (void)courier::detail::future_access::make<int>(std::move(st)).get();
    } catch (courier::remote_exception const& x) {
        err = x.type_name();
    } catch (...) {
        err = "other";
    }
    CHECK(err == "courier::unknown_action");
}

void scenario_chain() {
    int n = static_cast<int>(courier::get_num_localities());
    CHECK(courier::async<relay_action_type_forward>(courier::find_here(), 3 * n).get() == 0);
}

void flood(bool coalescing) {
    // Every locality but 0 is flooded with posts from many tasks; nothing may be lost.
    auto remote = courier::find_remote_localities();
    constexpr int per_task = 2000, tasks = 8;
    std::vector<courier::future<void>> fs;
    for (int t = 0; t < tasks; ++t) {
        fs.push_back(courier::async([&remote] {
            for (int i = 0; i < per_task; ++i) {
                courier::post<bump_action>(remote[static_cast<std::size_t>(i) % remote.size()], 1L);
            }
        }));
    }
    courier::wait_all(fs);
    long total = 0;
    for (int spin = 0; spin < 10000; ++spin) {
        total = 0;
        for (auto const& r : remote) {
            total += courier::async<read_counter_action>(r).get();
        }
        if (total == long{per_task} * tasks) {
            break;
        }
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(total == long{per_task} * tasks);
    // Posts from tasks in tight loops go out coalesced, unless --courier:coalesce=0 turned it
    // off (flood_not_coalesced); the checks above hold either way.
    auto st = courier::get_parcelport_statistics();
    std::printf("flood: %llu parcels sent, %llu of them in %llu coalesced messages\n",
                static_cast<unsigned long long>(st.messages_sent),
                static_cast<unsigned long long>(st.parcels_in_batches),
                static_cast<unsigned long long>(st.batches_sent));
    if (coalescing) {
        CHECK(st.batches_sent > 0);
        CHECK(st.parcels_in_batches > st.batches_sent);
    } else {
        CHECK(st.batches_sent == 0);
    }
}

void scenario_flood() {
    flood(true);
}

// A post whose arguments are numbers and a serialize_buffer takes no block from the
// small-object pool: its arguments are saved from the caller's (no pooled copy of them) and it
// makes no future state (nobody waits for a reply). A call makes its future's state. The MPI
// parcelport takes two blocks per MPI message it sends (its send state and eager bytes: a
// batch, or a parcel that leaves alone), none per parcel in a batch.
std::atomic<long> g_cheap_posts{0};
std::atomic<long> g_cheap_sum{0};
void cheap_post(int i, double d, courier::serialization::serialize_buffer<char> const& b) {
    long bytes = 0;
    for (char c : b) {
        bytes += c;
    }
    g_cheap_sum.fetch_add(i + static_cast<long>(d) + bytes);
    g_cheap_posts.fetch_add(1);
}
COURIER_PLAIN_ACTION(cheap_post, cheap_post_action);
long cheap_posts_arrived() {
    return g_cheap_posts.load();
}
COURIER_PLAIN_ACTION(cheap_posts_arrived, cheap_posts_arrived_action);
/// Waits until `count` cheap posts (cheap_post, vector_post) have arrived at `to`.
void wait_for_cheap_posts(courier::id_type const& to, long count) {
    while (courier::async<cheap_posts_arrived_action>(to).get() < count) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}
long cheap_sum() {
    return g_cheap_sum.load();
}
COURIER_PLAIN_ACTION(cheap_sum, cheap_sum_action);

void scenario_posts_take_no_pool_blocks() {
    auto to = courier::find_remote_localities().at(0);
    courier::serialization::serialize_buffer<char> buf(8);
    std::fill(buf.begin(), buf.end(), char{3});
    constexpr int warm = 64, n = 300; // 2 n + warm: within one flow-control window, no wait
    long expected = 0;
    for (int i = 0; i < warm; ++i) {
        courier::post<cheap_post_action>(to, i, 2.0, buf);
        expected += i + 2 + 8 * 3;
    }
    wait_for_cheap_posts(to, warm);
    // The wait may have resumed this task on another worker thread: its first post makes that
    // thread's spare message (send_request's, one pool block), so one post before counting.
    courier::post<cheap_post_action>(to, 0, 2.0, buf);
    expected += 2 + 8 * 3;
    long const warmed = warm + 1;
    bool const over_mpi = courier::get_config_entry("parcelport").value_or("") == "mpi";
    auto const sent_before = courier::get_parcelport_statistics().messages_sent;
    // No suspension in either loop: the count is this OS thread's throughout.
    auto before = courier::detail::small_alloc_thread_count();
    for (int i = 0; i < n; ++i) {
        courier::post<cheap_post_action>(to, i, 2.0, buf);
        expected += i + 2 + 8 * 3;
    }
    auto by_posts = courier::detail::small_alloc_thread_count() - before;
    wait_for_cheap_posts(to, warmed + n);
    // The MPI parcelport counts messages on the wire (a batch once), with a few calls above.
    auto const messages = courier::get_parcelport_statistics().messages_sent - sent_before;
    std::vector<courier::future<long>> calls;
    calls.reserve(n);
    before = courier::detail::small_alloc_thread_count();
    for (int i = 0; i < n; ++i) {
        calls.push_back(courier::async<cheap_posts_arrived_action>(to));
    }
    auto by_calls = courier::detail::small_alloc_thread_count() - before;
    std::printf("posts_take_no_pool_blocks: %llu pool blocks for %d posts, %llu for %d calls\n",
                static_cast<unsigned long long>(by_posts), n,
                static_cast<unsigned long long>(by_calls), n);
    if (over_mpi) {
        std::printf("posts_take_no_pool_blocks: the MPI parcelport sent %llu messages\n",
                    static_cast<unsigned long long>(messages));
        CHECK(by_posts <= 2 * messages);
        CHECK(messages < static_cast<std::uint64_t>(n)); // some batches (else 2 per post pass)
    } else {
        CHECK(by_posts == 0);
    }
    CHECK(by_calls >= static_cast<std::uint64_t>(n)); // the counter counts
    for (auto& f : calls) {
        CHECK(f.get() == warmed + n);
    }
    CHECK(courier::async<cheap_sum_action>(to).get() == expected);
}

// Posts from several Courier threads of one worker, each suspended in flow control now and
// then (run with one worker and a window of 4 parcels): each post's buffer arrives as it was
// written, filled with its sender's byte and as long as its sender's size, so no two posts were
// ever built in the same message (send_request's per-thread spare message is taken by one call
// at a time, also while it waits for credits).
constexpr int marked_senders = 8;
std::atomic<long> g_marked_bad{0};
std::atomic<long> g_marked_count[marked_senders];
std::atomic<long> g_marked_sum[marked_senders];
void marked_post(int sender, int i, courier::serialization::serialize_buffer<char> const& b) {
    if (sender < 0 || sender >= marked_senders) {
        g_marked_bad.fetch_add(1);
        return;
    }
    bool ok = b.size() == static_cast<std::size_t>(16 + 8 * sender);
    for (char c : b) {
        ok = ok && c == static_cast<char>('a' + sender);
    }
    g_marked_bad.fetch_add(ok ? 0 : 1);
    g_marked_sum[sender].fetch_add(i);
    g_marked_count[sender].fetch_add(1);
}
COURIER_PLAIN_ACTION(marked_post, marked_post_action);
/// Wrong posts, then each sender's count and sum of `i`.
std::vector<long> marked_posts_seen() {
    std::vector<long> v{g_marked_bad.load()};
    for (int t = 0; t < marked_senders; ++t) {
        v.push_back(g_marked_count[t].load());
        v.push_back(g_marked_sum[t].load());
    }
    return v;
}
COURIER_PLAIN_ACTION(marked_posts_seen, marked_posts_seen_action);

void scenario_senders_share_a_worker() {
    CHECK(courier::get_config_entry("threads").value_or("") == "1");
    auto to = courier::find_remote_localities().at(0);
    constexpr int n = 400;
    std::vector<courier::future<void>> fs;
    for (int t = 0; t < marked_senders; ++t) {
        fs.push_back(courier::async([t, to] {
            courier::serialization::serialize_buffer<char> b(16 + 8 * static_cast<std::size_t>(t));
            std::fill(b.begin(), b.end(), static_cast<char>('a' + t));
            for (int i = 0; i < n; ++i) {
                courier::post<marked_post_action>(to, t, i, b);
                if (i % 50 == 0) {
                    courier::this_thread::yield(); // the others' posts in between
                }
            }
        }));
    }
    for (auto& f : fs) {
        f.get();
    }
    auto const waits = courier::get_flow_statistics().waits;
    auto arrived = [](std::vector<long> const& v) {
        long total = 0;
        for (int t = 0; t < marked_senders; ++t) {
            total += v[1 + 2 * static_cast<std::size_t>(t)];
        }
        return total;
    };
    std::vector<long> seen;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
        seen = courier::async<marked_posts_seen_action>(to).get();
    } while (arrived(seen) < marked_senders * n && std::chrono::steady_clock::now() < deadline);
    std::printf("senders_share_a_worker: %ld posts arrived, %ld wrong, %llu flow-control waits\n",
                arrived(seen), seen[0], static_cast<unsigned long long>(waits));
    CHECK(seen[0] == 0);
    for (int t = 0; t < marked_senders; ++t) { // each sender's posts, each once
        CHECK(seen[1 + 2 * static_cast<std::size_t>(t)] == n);
        CHECK(seen[2 + 2 * static_cast<std::size_t>(t)] == static_cast<long>(n) * (n - 1) / 2);
    }
    CHECK(waits > 0); // the senders did suspend while sending
}

// Posts of numbers, enums and buffers from several tasks at once: those whose arguments are
// flat (a buffer below the zero-copy threshold) are written straight into their batch when one
// is open (send_post_flat), the others (a buffer at or above it) as messages, and a batch may
// leave between the first look and the lock (the message fallback). Each arrives with the
// values its sender wrote, whatever the path: sizes around the varint's one-byte limit and the
// threshold, every type's bytes checked.
enum class flat_kind : std::uint16_t { low = 7, high = 40000 };
constexpr int flat_senders = 4;
constexpr std::size_t flat_sizes[] = {0, 1, 127, 128, 1000, 4095, 4096, 5000};
std::size_t flat_size(int i) {
    return flat_sizes[static_cast<std::size_t>(i) % std::size(flat_sizes)];
}
std::atomic<long> g_flat_bad{0};
std::atomic<long> g_flat_count{0};
std::atomic<long> g_flat_sum{0};
void flat_post(int sender, int i, std::uint8_t small, double x, flat_kind k, bool odd,
               courier::serialization::serialize_buffer<char> const& b) {
    bool ok = sender >= 0 && sender < flat_senders && small == static_cast<std::uint8_t>(i * 7) &&
              x == i * 0.5 + sender && k == (i % 3 == 0 ? flat_kind::high : flat_kind::low) &&
              odd == (i % 2 == 1) && b.size() == flat_size(i);
    for (std::size_t j = 0; ok && j < b.size(); ++j) {
        ok = b[j] == static_cast<char>('a' + (sender + static_cast<int>(j)) % 26);
    }
    g_flat_bad.fetch_add(ok ? 0 : 1);
    g_flat_sum.fetch_add(i);
    g_flat_count.fetch_add(1);
}
COURIER_PLAIN_ACTION(flat_post, flat_post_action);
std::vector<long> flat_posts_seen() {
    return {g_flat_bad.load(), g_flat_count.load(), g_flat_sum.load()};
}
COURIER_PLAIN_ACTION(flat_posts_seen, flat_posts_seen_action);

void scenario_flat_posts() {
    auto to = courier::find_remote_localities().at(0);
    constexpr int n = 3000;
    std::vector<courier::future<void>> fs;
    for (int t = 0; t < flat_senders; ++t) {
        fs.push_back(courier::async([t, to] {
            std::vector<courier::serialization::serialize_buffer<char>> bufs;
            for (std::size_t size : flat_sizes) {
                courier::serialization::serialize_buffer<char> b(size);
                for (std::size_t j = 0; j < size; ++j) {
                    b[j] = static_cast<char>('a' + (t + static_cast<int>(j)) % 26);
                }
                bufs.push_back(std::move(b));
            }
            for (int i = 0; i < n; ++i) {
                courier::post<flat_post_action>(
                    to, t, i, static_cast<std::uint8_t>(i * 7), i * 0.5 + t,
                    i % 3 == 0 ? flat_kind::high : flat_kind::low, i % 2 == 1,
                    bufs[static_cast<std::size_t>(i) % bufs.size()]);
                if (i % 200 == 0) {
                    courier::this_thread::yield(); // the other senders' posts in between
                }
            }
        }));
    }
    for (auto& f : fs) {
        f.get();
    }
    std::vector<long> seen;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
        seen = courier::async<flat_posts_seen_action>(to).get();
    } while (seen[1] < flat_senders * n && std::chrono::steady_clock::now() < deadline);
    double const flat = courier::get_counters(courier::find_here())["/parcels/count/sent-flat"];
    double const run_flat = courier::get_counters(to)["/parcels/count/received-flat"];
    std::printf("flat_posts: %ld posts arrived, %ld wrong, %.0f written straight into a batch, "
                "%.0f run from their bytes where they lie\n",
                seen[1], seen[0], flat, run_flat);
    CHECK(seen[0] == 0);
    // Every parcelport: a post of a buffer of 0-1000 bytes (5 of flat_sizes' 8) is a stream of
    // one index chunk under 4 KiB, read where it lies (a batch's record or a message of its
    // own), whichever way it was sent; those of 4 KiB or more are not. (The polls of
    // flat_posts_seen_action, calls of no arguments, add to the count.)
    CHECK(run_flat >= flat_senders * n * 5 / 8);
    // Over libfabric (not the MPI parcelport, which builds its batches otherwise) streams of
    // posts to a busy destination take the flat path.
    CHECK(flat > 0 || courier::get_config_entry("parcelport").value_or("") == "mpi");
    CHECK(seen[1] == flat_senders * n);
    CHECK(seen[2] == static_cast<long>(flat_senders) * n * (n - 1) / 2);
}

// A call whose flat arguments do not decode is answered with the error, read where it lies (a
// small stream) or through an input archive (a buffer over the zero-copy threshold, a pointer
// chunk): the same type and words either way, and the action does not run. The request is
// written by hand (send_request with arguments that are not the action's: a bool of 2).
std::atomic<long> g_flagged_runs{0};
void flagged(int, bool, courier::serialization::serialize_buffer<char> const&) {
    g_flagged_runs.fetch_add(1);
}
COURIER_PLAIN_ACTION(flagged, flagged_action);
long flagged_runs() {
    return g_flagged_runs.load();
}
COURIER_PLAIN_ACTION(flagged_runs, flagged_runs_action);

void scenario_malformed_calls() {
    auto to = courier::find_remote_localities().at(0);
    std::vector<std::string> words;
    for (std::size_t bytes : {std::size_t{16}, std::size_t{5000}}) {
        courier::serialization::serialize_buffer<char> b(bytes);
        std::fill(b.begin(), b.end(), 'x');
        auto st = courier::detail::make_state<void>();
        courier::detail::send_request(
            courier::get_locality_id(to), flagged_action::wire_id(),
            [&](courier::serialization::output_archive& out) {
                out.save(7);
                out.save(std::uint8_t{2}); // where the bool is
                out.save(b);
            },
            courier::detail::reply_handler(&courier::detail::complete_call<void>,
                                           courier::detail::state_ptr<void>(st).detach()),
            nullptr, true);
        auto f = courier::detail::future_access::make<void>(std::move(st));
        try {
            f.get();
            CHECK(false);
        } catch (courier::remote_exception const& e) {
            std::printf("malformed_calls: %zu B: %s: %s\n", bytes, e.type_name().c_str(),
                        e.message().c_str());
            CHECK(e.type_name() == "courier::serialization::serialization_error");
            std::string const m = e.message();
            words.push_back(m.substr(0, m.find(" (at index byte")));
        }
    }
    CHECK(words.size() == 2 &&
          words[0] == "courier::serialization: expected a bool (0 or 1), "
                      "found 2" &&
          words[1] == words[0]);
    // Well-formed, both sizes: the action runs.
    for (std::size_t bytes : {std::size_t{16}, std::size_t{5000}}) {
        courier::async<flagged_action>(to, 7, true,
                                       courier::serialization::serialize_buffer<char>(bytes))
            .get();
    }
    CHECK(courier::async<flagged_runs_action>(to).get() == 2);
}

// A post takes its arguments' values when it is called, also when it then waits for flow
// control (run with one worker and a window of 4 parcels): senders share one buffer, each sets
// it and posts it with its size and fill byte, and the next sender replaces it while the
// first may still wait. A post that read the buffer again after its wait would send another
// sender's bytes (or, written into a record sized for the old buffer, past its end).
courier::serialization::serialize_buffer<char> g_shared_buffer;
std::atomic<long> g_captured_bad{0};
std::atomic<long> g_captured_count{0};
void captured_post(int size, char fill, courier::serialization::serialize_buffer<char> const& b) {
    bool ok = b.size() == static_cast<std::size_t>(size);
    for (char c : b) {
        ok = ok && c == fill;
    }
    g_captured_bad.fetch_add(ok ? 0 : 1);
    g_captured_count.fetch_add(1);
}
COURIER_PLAIN_ACTION(captured_post, captured_post_action);
std::vector<long> captured_posts_seen() {
    return {g_captured_bad.load(), g_captured_count.load()};
}
COURIER_PLAIN_ACTION(captured_posts_seen, captured_posts_seen_action);

void scenario_posts_capture_their_arguments() {
    CHECK(courier::get_config_entry("threads").value_or("") == "1");
    auto to = courier::find_remote_localities().at(0);
    constexpr int senders = 8;
    constexpr int n = 300;
    std::vector<courier::future<void>> fs;
    for (int t = 0; t < senders; ++t) {
        fs.push_back(courier::async([t, to] {
            for (int i = 0; i < n; ++i) {
                int const size = 8 + 24 * ((t + i) % 5);
                char const fill = static_cast<char>('a' + (t * 7 + i) % 26);
                g_shared_buffer =
                    courier::serialization::serialize_buffer<char>(static_cast<std::size_t>(size));
                std::fill(g_shared_buffer.begin(), g_shared_buffer.end(), fill);
                courier::post<captured_post_action>(to, size, fill, g_shared_buffer);
            }
        }));
    }
    for (auto& f : fs) {
        f.get();
    }
    auto const waits = courier::get_flow_statistics().waits;
    double const flat = courier::get_counters(courier::find_here())["/parcels/count/sent-flat"];
    std::vector<long> seen;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
        seen = courier::async<captured_posts_seen_action>(to).get();
    } while (seen[1] < senders * n && std::chrono::steady_clock::now() < deadline);
    std::printf("posts_capture_their_arguments: %ld posts arrived, %ld wrong, %llu flow-control "
                "waits, %.0f posts written straight into a batch\n",
                seen[1], seen[0], static_cast<unsigned long long>(waits), flat);
    CHECK(seen[0] == 0);
    CHECK(seen[1] == senders * n);
    CHECK(waits > 0); // the senders did wait while their posts were being sent
    // Posts written into their batch are few here (most find the window of 4 full and go as
    // messages; on tcp a few dozen in 2,400), so their number is printed, not checked: the
    // flat_posts scenario checks that the path is taken.
}

// A call of flat arguments goes straight into a batch (send_call_flat) with a sent handler of
// its own: when the transport refuses its batch, after it waited or outright, the call fails
// (its future, or the call itself) instead of waiting for ever, and it leaves nothing behind:
// later calls come back, and shutdown (which waits for every send and request counted) ends.
// tcp only: through shm's message rings nothing is posted to the provider.
long doubled(long x) {
    return 2 * x;
}
COURIER_PLAIN_ACTION(doubled, doubled_action);

/// Calls doubled(x) at `to`: true if it failed (its future or the call threw).
bool doubled_fails(courier::id_type const& to, long x) {
    try {
        long const r = courier::async<doubled_action>(to, x).get();
        CHECK(r == 2 * x);
        return false;
    } catch (std::exception const& e) {
        std::printf("flat_calls_fail_with_their_batch: call %ld failed: %s\n", x, e.what());
        return true;
    }
}

void scenario_flat_calls_fail_with_their_batch() {
    namespace fab = courier::parcelport::fabric;
    auto to = courier::find_remote_localities().at(0);
    CHECK(!doubled_fails(to, 1));
    auto const flat0 = courier::get_counters(courier::find_here()).at("/parcels/count/sent-flat");
    // Every fi_send of this process waits, then is refused: the call's batch among them (a
    // liveness beat may be too, so not one refusal alone, which it could take).
    fab::testing::refuse_posts("fi_send", 1000, -EIO); // FI_EIO is EIO
    CHECK(doubled_fails(to, 2));
    // Refused outright: the call throws to its caller, or its future fails.
    fab::testing::refuse_posts_outright("fi_send", 1000, -EIO); // FI_EIO is EIO
    CHECK(doubled_fails(to, 3));
    fab::testing::refuse_posts("", 0, 0);
    auto const flat1 = courier::get_counters(courier::find_here()).at("/parcels/count/sent-flat");
    CHECK(flat1 - flat0 >= 1); // the refused calls went flat (the outright one is taken back)
    for (long i = 0; i < 50; ++i) {
        CHECK(!doubled_fails(to, 10 + i));
    }
}

// A post (no handler of its own: its end is only counted) whose batch or message the transport
// refuses for good, after it waited or outright, is lost, and leaves nothing counted: its
// termination count and its share of the destination's window come back, so that later posts
// and calls go through and shutdown (which waits until every parcel the program sent has
// arrived) ends. Flat posts and posts as messages. tcp only, as above. Before the failed sends
// gave back what they counted, the window stayed taken and shutdown waited for ever.
std::atomic<long> g_refusable_posts{0};
void refusable_post(long) {
    g_refusable_posts.fetch_add(1);
}
COURIER_PLAIN_ACTION(refusable_post, refusable_post_action);
void refusable_vector_post(std::vector<long> const&) {
    g_refusable_posts.fetch_add(1);
}
COURIER_PLAIN_ACTION(refusable_vector_post, refusable_vector_post_action);
long refusable_posts_seen() {
    return g_refusable_posts.load();
}
COURIER_PLAIN_ACTION(refusable_posts_seen, refusable_posts_seen_action);

void scenario_posts_fail_with_their_batch() {
    namespace fab = courier::parcelport::fabric;
    auto to = courier::find_remote_localities().at(0);
    auto const counter = [](char const* name) {
        return courier::get_counters(courier::find_here()).at(name);
    };
    auto const flat0 = counter("/parcels/count/sent-flat");
    // Every fi_send of this process waits, then is refused (a liveness beat's may be too).
    fab::testing::refuse_posts("fi_send", 1000, -EIO); // FI_EIO is EIO
    for (long i = 0; i < 20; ++i) {
        courier::post<refusable_post_action>(to, i);
        courier::post<refusable_vector_post_action>(to, std::vector<long>(64, i));
    }
    // Their window shares come back as their sends fail (none arrives to return a credit).
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (counter("/flow/in-flight/parcels") != 0 && std::chrono::steady_clock::now() < deadline) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::printf("posts_fail_with_their_batch: %.0f posts in flight, %.0f went flat\n",
                counter("/flow/in-flight/parcels"), counter("/parcels/count/sent-flat") - flat0);
    CHECK(counter("/flow/in-flight/parcels") == 0);
    CHECK(counter("/flow/in-flight/bytes") == 0);
    // Refused outright: the post throws to its caller, who gets the error.
    fab::testing::refuse_posts_outright("fi_send", 1000, -EIO);
    bool threw = false;
    try {
        courier::post<refusable_vector_post_action>(to, std::vector<long>(64, 99));
    } catch (std::exception const&) {
        threw = true;
    }
    fab::testing::refuse_posts("", 0, 0);
    CHECK(threw);
    CHECK(counter("/flow/in-flight/parcels") == 0);
    // Later posts arrive; of the refused ones none did.
    for (long i = 0; i < 50; ++i) {
        courier::post<refusable_post_action>(to, 100 + i);
    }
    long seen = 0;
    while ((seen = courier::async<refusable_posts_seen_action>(to).get()) < 50 &&
           std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::printf("posts_fail_with_their_batch: %ld posts arrived\n", seen);
    CHECK(seen == 50);
}

// An ordered post whose send fails once it left (its batch refused for good after waiting) is
// lost, and the skip of its number goes in its place: the ordered posts after it run, in
// order, and shutdown ends. Before, they waited for the lost number for ever.
std::mutex g_ordered_mutex;
std::vector<long> g_ordered_seen;
void ordered_refusable(long i) {
    std::lock_guard g(g_ordered_mutex);
    g_ordered_seen.push_back(i);
}
COURIER_PLAIN_ACTION(ordered_refusable, ordered_refusable_action);
std::vector<long> ordered_refusable_seen() {
    std::lock_guard g(g_ordered_mutex);
    return g_ordered_seen;
}
COURIER_PLAIN_ACTION(ordered_refusable_seen, ordered_refusable_seen_action);

void scenario_ordered_posts_fail_with_their_batch() {
    namespace fab = courier::parcelport::fabric;
    auto to = courier::find_remote_localities().at(0);
    // The next fi_send of this process waits, then is refused: the batch of the first posts
    // (the skips sent in their place must go through: with two refusals, one could take a
    // skip when the ten posts fill a single batch, and the stream would stay stuck).
    fab::testing::refuse_posts("fi_send", 1, -EIO); // FI_EIO is EIO
    for (long i = 0; i < 10; ++i) {
        courier::post_ordered<ordered_refusable_action>(to, i);
    }
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (long i = 100; i < 150; ++i) {
        courier::post_ordered<ordered_refusable_action>(to, i);
    }
    auto const at_least = [](std::vector<long> const& v, long from) {
        return std::count_if(v.begin(), v.end(), [from](long x) { return x >= from; });
    };
    std::vector<long> seen;
    while (at_least(seen = courier::async<ordered_refusable_seen_action>(to).get(), 100) < 50 &&
           std::chrono::steady_clock::now() < deadline) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<long> later;
    for (long v : seen) {
        if (v >= 100) {
            later.push_back(v);
        }
    }
    std::printf("ordered_posts_fail_with_their_batch: %zu of the first 10 and %zu later posts "
                "ran\n",
                seen.size() - later.size(), later.size());
    fab::testing::refuse_posts("", 0, 0);   // (the one refusal was taken by then)
    CHECK(seen.size() - later.size() < 10); // some were lost with their batch
    CHECK(later.size() == 50);
    CHECK(std::is_sorted(seen.begin(), seen.end()));
    // An ordered call lost with its batch fails its future, and its skip goes in its place:
    // the ordered posts after it run.
    int failed = 0;
    for (long attempt = 0; attempt < 5 && failed == 0; ++attempt) {
        fab::testing::refuse_posts("fi_send", 1, -EIO); // FI_EIO is EIO
        try {
            courier::async_ordered<ordered_refusable_action>(to, 200 + attempt).get();
        } catch (std::exception const& e) {
            std::printf("ordered_posts_fail_with_their_batch: an ordered call failed: %s\n",
                        e.what());
            ++failed;
        }
    }
    fab::testing::refuse_posts("", 0, 0);
    CHECK(failed == 1);
    for (long i = 300; i < 310; ++i) {
        courier::post_ordered<ordered_refusable_action>(to, i);
    }
    while (at_least(seen = courier::async<ordered_refusable_seen_action>(to).get(), 300) < 10 &&
           std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(at_least(seen, 300) == 10);
    CHECK(std::is_sorted(seen.begin(), seen.end()));
}

// A flow-control credit lost after it left (the receiver's batch refused for good after
// waiting) is kept and sent again: the sender's window comes back, and its posts go on. With a
// window of 4 parcels, every credit the receiver sends is refused for a while. Before, a lost
// credit was only logged: the window shrank for good, and the sender waited for ever.
std::atomic<long> g_credit_posts{0};
void credit_post(long) {
    g_credit_posts.fetch_add(1);
}
COURIER_PLAIN_ACTION(credit_post, credit_post_action);
void refuse_own_sends(int n) {
    courier::parcelport::fabric::testing::refuse_posts("fi_send", n, -EIO); // FI_EIO is EIO
}
COURIER_PLAIN_ACTION(refuse_own_sends, refuse_own_sends_action);
long credit_posts_seen() {
    return g_credit_posts.load();
}
COURIER_PLAIN_ACTION(credit_posts_seen, credit_posts_seen_action);

void scenario_lost_credits_come_again() {
    CHECK(courier::get_config_entry("parcels_in_flight").value_or("") == "4");
    auto to = courier::find_remote_localities().at(0);
    // A post: its receiver refuses its own next sends from then on (its credits among them).
    courier::post<refuse_own_sends_action>(to, 40);
    constexpr long n = 200;
    for (long i = 0; i < n; ++i) {
        courier::post<credit_post_action>(to, i);
    }
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    long seen = 0;
    while ((seen = courier::async<credit_posts_seen_action>(to).get()) < n &&
           std::chrono::steady_clock::now() < deadline) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto const c = courier::get_counters(courier::find_here());
    std::printf("lost_credits_come_again: %ld of %ld posts arrived, %.0f waits for the window\n",
                seen, n, c.at("/flow/count/waits"));
    CHECK(seen == n);
}

// A reply lost after it left (the callee's batch refused for good after waiting; the callee
// alive) fails its call with network_error: the callee tells the caller that the reply is
// lost (a reply_lost parcel), and sends that notice again if it is lost too (up to three
// times). Later calls and shutdown go through. tcp only, as above. Before, the call waited
// for ever (its caller's locality heard the callee's heartbeats: no failure to end it).
long refuse_then_double(long x, int n) {
    // This locality's next n fi_sends wait, then are refused: the reply's batch first (unless
    // a heartbeat takes the refusal: then the call succeeds, and the caller tries again).
    courier::parcelport::fabric::testing::refuse_posts("fi_send", n, -EIO); // FI_EIO is EIO
    return 2 * x;
}
COURIER_PLAIN_ACTION(refuse_then_double, refuse_then_double_action);
int stop_refusing() {
    courier::parcelport::fabric::testing::refuse_posts("", 0, 0);
    return 1;
}
COURIER_PLAIN_ACTION(stop_refusing, stop_refusing_action);

void scenario_lost_replies_fail_their_calls() {
    auto to = courier::find_remote_localities().at(0);
    // n = 1: the reply is lost; n = 2: the reply and the first notice of its loss.
    for (int n : {1, 2}) {
        int lost = 0, answered = 0;
        for (long attempt = 0; attempt < 10 && lost == 0; ++attempt) {
            try {
                long const r = courier::async<refuse_then_double_action>(to, attempt, n).get();
                CHECK(r == 2 * attempt);
                ++answered;
            } catch (courier::network_error const& e) {
                std::printf("lost_replies_fail_their_calls: n=%d: a call failed: %s\n", n,
                            e.what());
                CHECK(std::string(e.what()).find("was lost") != std::string::npos);
                ++lost;
            }
        }
        std::printf("lost_replies_fail_their_calls: n=%d: %d lost, %d answered\n", n, lost,
                    answered);
        CHECK(lost == 1);
        // Whatever refusal is left goes (a call whose own reply may take it: tried again).
        bool stopped = false;
        for (int i = 0; i < 5 && !stopped; ++i) {
            try {
                stopped = courier::async<stop_refusing_action>(to).get() == 1;
            } catch (courier::network_error const&) {
            }
        }
        CHECK(stopped);
    }
    for (long i = 0; i < 20; ++i) {
        CHECK(courier::async<doubled_action>(to, i).get() == 2 * i);
    }
}

// Calls whose actions suspend before they return (run with one worker on the callee): each
// answer is built while the others' actions are suspended in the middle of theirs, and each
// caller gets its own (handle_request's per-thread spare message for replies is held by one
// action at a time).
std::vector<int> suspended_answer(int i) {
    courier::this_thread::sleep_for(std::chrono::microseconds(200 + 50 * (i % 7)));
    return std::vector<int>(static_cast<std::size_t>(1 + i % 13), i);
}
COURIER_PLAIN_ACTION(suspended_answer, suspended_answer_action);

void scenario_answers_stay_apart() {
    CHECK(courier::get_config_entry("threads").value_or("") == "1");
    auto to = courier::find_remote_localities().at(0);
    constexpr int n = 200;
    std::vector<courier::future<std::vector<int>>> fs;
    fs.reserve(n);
    for (int i = 0; i < n; ++i) {
        fs.push_back(courier::async<suspended_answer_action>(to, i));
    }
    int wrong = 0;
    for (int i = 0; i < n; ++i) {
        std::vector<int> v = fs[static_cast<std::size_t>(i)].get();
        wrong += v != std::vector<int>(static_cast<std::size_t>(1 + i % 13), i);
    }
    std::printf("answers_stay_apart: %d of %d answers wrong\n", wrong, n);
    CHECK(wrong == 0);
}

// A post's arguments that are not saved straight from the caller's (here a vector) are copied
// for the message, which keeps the copy alive: once the message left, nothing of them is kept
// (the message they were built in is send_request's spare, kept for the next call, and lets
// them go). The copy holds a reference to the caller's buffer, so its use count shows it.
void vector_post(std::vector<courier::serialization::serialize_buffer<char>> const&) {
    g_cheap_posts.fetch_add(1);
}
COURIER_PLAIN_ACTION(vector_post, vector_post_action);

void scenario_posts_let_go_of_their_arguments() {
    auto to = courier::find_remote_localities().at(0);
    courier::serialization::serialize_buffer<char> buf(64);
    std::fill(buf.begin(), buf.end(), char{3});
    std::vector<courier::serialization::serialize_buffer<char>> v{buf};
    CHECK(buf.use_count() == 2); // v's
    long const before = courier::async<cheap_posts_arrived_action>(to).get();
    courier::post<vector_post_action>(to, v);
    // No call of this thread's meanwhile: its next one would clear the spare anyway. (On
    // libfabric a small parcel's eager message is a copy, and the count is 2 at once; the MPI
    // parcelport may keep the message until its send completed.)
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (buf.use_count() != 2 && std::chrono::steady_clock::now() < deadline) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    long const count = buf.use_count();
    std::printf("posts_let_go_of_their_arguments: use count %ld after the post (2: ours)\n", count);
    CHECK(count == 2);
    wait_for_cheap_posts(to, before + 1);
}

// Run with one worker and --courier:coalesce_records=5: a task posting in a loop reaches no
// progress pass, yet its batches leave from within the loop, 5 parcels each (the receiver runs
// them meanwhile), on either parcelport.
void scenario_batches_leave_during_a_loop() {
    CHECK(courier::get_config_entry("coalesce_records").value_or("") == "5");
    auto to = courier::find_remote_localities().at(0);
    constexpr int n = 300;
    auto const st0 = courier::get_parcelport_statistics();
    for (int i = 0; i < n; ++i) {
        courier::post<bump_action>(to, 1L);
    }
    auto const st1 = courier::get_parcelport_statistics();
    auto const batches = st1.batches_sent - st0.batches_sent;
    auto const parcels = st1.parcels_in_batches - st0.parcels_in_batches;
    std::printf("batches_leave_during_a_loop: %llu batches of %llu parcels posted in the loop\n",
                static_cast<unsigned long long>(batches), static_cast<unsigned long long>(parcels));
    CHECK(batches >= (n - 2) / 5 - 1);
    CHECK(parcels <= 5 * batches);
    long total = 0;
    for (int spin = 0; spin < 10000 && total < n; ++spin) {
        total = courier::async<read_counter_action>(to).get();
        if (total < n) {
            courier::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    CHECK(total == n);
}

// Asks `to` for an outcome {..., finished one way, finished the other} every few milliseconds
// until the two add up to `n` or `limit` has passed; returns the last answer.
template <class Action, class Where>
auto poll_outcome(Where const& to, long n, std::chrono::seconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto v = courier::async<Action>(to).get();
        if (v[1] + v[2] >= n || std::chrono::steady_clock::now() >= until) {
            return v;
        }
    }
}

// The receiver has one worker. Posts of requests that each wait (suspend) until all have
// arrived: they travel in coalesced messages, whose requests run as one task on the receiver;
// when one blocks, the rest of its message must run meanwhile (else only the first of each
// message ever arrives, and all time out).
void scenario_blocked_requests() {
    auto to = courier::find_remote_localities().at(0);
    constexpr long n = 64;
    auto const st0 = courier::get_parcelport_statistics();
    for (long i = 0; i < n; ++i) {
        courier::post<arrive_and_wait_action>(to, n);
    }
    auto const out = poll_outcome<wait_outcome_action>(to, n, std::chrono::seconds(20));
    // (Batches count when they leave: the last one after the loop.)
    auto const st1 = courier::get_parcelport_statistics();
    std::printf("blocked_requests: %llu of %ld posts coalesced\n",
                static_cast<unsigned long long>(st1.parcels_in_batches - st0.parcels_in_batches),
                n);
    CHECK(st1.parcels_in_batches - st0.parcels_in_batches >= 8); // some messages carried several
    std::printf("blocked_requests: %ld arrived, %ld released, %ld timed out\n", out[0], out[1],
                out[2]);
    CHECK(out[0] == n);
    CHECK(out[1] == n);
    CHECK(out[2] == 0);
}

// The receiver has two workers. Requests that each need another one running at the same time
// (the worker spins, never suspends, for at most 2 s): a coalesced message's requests run as
// one task, whose rest must go to the other worker while it is idle (else they run one after
// another and each waits alone until its time is up). Whether to hand over the rest is decided
// before each request starts, so one that starts just before the other worker turns idle may
// still wait alone.
void scenario_idle_worker_takes_the_rest() {
    auto to = courier::find_remote_localities().at(0);
    constexpr int n = 8;
    // This locality's other worker, idle, would send the open batch at its next progress pass,
    // so the n parcels might leave in several messages: it spins meanwhile, without progress.
    std::atomic<bool> spinning{false}, posted{false};
    auto spinner = courier::async([&] {
        spinning = true;
        auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!posted && std::chrono::steady_clock::now() < until) {
        }
    });
    while (!spinning) {
    }
    auto const st0 = courier::get_parcelport_statistics();
    // The first post leaves alone (a batch of its own: transport::send_stream), the others
    // coalesce behind it (one message in flight holds them, on tcp and through shm's message
    // rings), and the call after them too (its wait sends the batch).
    courier::post<bump_action>(to, 1L);
    courier::post<bump_action>(to, 1L);
    for (int i = 0; i < n; ++i) {
        courier::post<meet_another_action>(to);
    }
    auto behind = courier::async<read_counter_action>(to);
    posted = true;
    spinner.get();
    behind.get();
    auto const st1 = courier::get_parcelport_statistics();
    auto const m = poll_outcome<meetings_action>(to, n, std::chrono::seconds(60));
    std::printf("idle_worker_takes_the_rest: %llu of %d posts coalesced, in %llu messages "
                "(%llu messages sent in all)\n",
                static_cast<unsigned long long>(st1.parcels_in_batches - st0.parcels_in_batches), n,
                static_cast<unsigned long long>(st1.batches_sent - st0.batches_sent),
                static_cast<unsigned long long>(st1.messages_sent - st0.messages_sent));
    CHECK(st1.parcels_in_batches - st0.parcels_in_batches >= n);
    // The first post alone, all the others in one: two batches. One if a message to `to` was
    // still in flight at the first post (a liveness beat), three if a progress pass (the
    // liveness thread's) completed the first before the second was sent, which then left alone.
    auto const batches = st1.batches_sent - st0.batches_sent;
    CHECK(batches >= 1 && batches <= 3);
    std::printf("idle_worker_takes_the_rest: at most %d ran at once; %d met another, %d waited "
                "alone\n",
                m[0], m[1], m[2]);
    CHECK(m[0] == 2);
    CHECK(m[1] + m[2] == n);
    CHECK(m[2] <= n / 2); // one after another: all but one would wait alone
}

// A task that posts a burst and then computes for a long time without yielding: its coalesced
// parcels must not wait for it. Another worker's progress pass (or its wake-up by the send's
// completion, or its sleep's time limit) sends them. Needs two workers (the tests run with
// COURIER_THREADS=2); with one, a batch waits until the task yields.
std::atomic<long> last_stamp{0};
void stamp(long i, std::int64_t ns) {
    if (i == 199) {
        last_stamp.store(ns == 0 ? 0 : std::chrono::steady_clock::now().time_since_epoch().count());
    }
}
COURIER_PLAIN_ACTION(stamp, stamp_action);
std::int64_t read_stamp() {
    return last_stamp.load();
}
COURIER_PLAIN_ACTION(read_stamp, read_stamp_action);

void scenario_burst_then_compute() {
    auto there = courier::find_all_localities()[1];
    CHECK(courier::get_os_thread_count() >= 2);
    CHECK(courier::async<read_stamp_action>(there).get() == 0); // connected (tcp connects lazily)
    auto before = courier::get_parcelport_statistics();
    // A parcel is held for a batch only while two sends to its peer are in flight. If the other
    // worker reaps the sends' completions as fast as the burst posts them (shm completes a small
    // send at once; under a sanitizer posting is slow), nothing is held and this tests nothing:
    // one CI run in many saw that. So a blocker task occupies the other worker, without
    // yielding, until the burst is posted; then that worker is free to send the open batch.
    // The burst task starts it and spins (no yield either) until it runs: it must then run on
    // the other worker. (A yielded task stays on its worker: waiting by yield could leave the
    // blocker spinning on top of the burst task.)
    std::atomic<int> blocker_worker{-1};
    std::atomic<bool> burst_posted{false};
    auto spin_until = [](auto done) {
        auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!done() && std::chrono::steady_clock::now() < limit) {
            // occupied: no yield, no progress on this worker
        }
        return done();
    };
    std::int64_t end = 0;
    int burst_worker = -1;
    bool blocker_ran = false;
    bool blocker_released = false;
    courier::async([&] {
        burst_worker = courier::this_thread::get_worker_id();
        auto blocker = courier::async([&] {
            blocker_worker.store(courier::this_thread::get_worker_id());
            blocker_released = spin_until([&] { return burst_posted.load(); });
        });
        blocker_ran = spin_until([&] { return blocker_worker.load() >= 0; });
        for (long i = 0; i < 200; ++i) {
            courier::post<stamp_action>(there, i, std::int64_t{1});
        }
        burst_posted.store(true);
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
        while (std::chrono::steady_clock::now() < until) {
            // computing: no yield, no progress on this worker
        }
        end = std::chrono::steady_clock::now().time_since_epoch().count();
        blocker.get();
    }).get();
    CHECK(blocker_ran);
    CHECK(blocker_released);
    CHECK(burst_worker != blocker_worker.load());
    auto after = courier::get_parcelport_statistics();
    std::int64_t arrived = courier::async<read_stamp_action>(there).get();
    double early_ms = double(end - arrived) / 1e6;
    auto held = after.parcels_in_batches - before.parcels_in_batches;
    std::printf("burst_then_compute: %llu parcels in %llu coalesced messages; the last arrived "
                "%.1f ms before the computing task ended\n",
                static_cast<unsigned long long>(held),
                static_cast<unsigned long long>(after.batches_sent - before.batches_sent),
                early_ms);
    CHECK(held >= 100); // else this tested nothing (without the blocker: 0 in one CI run)
    CHECK(arrived != 0);
    CHECK(early_ms > 200); // steady_clock is the machine's CLOCK_MONOTONIC: comparable here
}
void scenario_flood_not_coalesced() {
    flood(false);
}

// Collectives from tasks that locality 0 starts on every locality (non-SPMD use).
std::vector<double> collective_worker(int round) {
    auto rank = courier::get_locality_id();
    auto n = courier::get_num_localities();
    std::vector<double> out;
    double sum = courier::collectives::all_reduce(double(rank + 1) * round, std::plus<>{});
    out.push_back(sum);
    // Not commutative: concatenation in rank order proves the order of reduction.
    auto names = courier::collectives::all_reduce(
        std::string(1, char('a' + rank)), [](std::string a, std::string b) { return a + b; });
    out.push_back(names.size() == n && names.front() == 'a' ? 1.0 : 0.0);
    auto b = courier::collectives::broadcast(std::vector<int>{int(rank), 42}, n - 1);
    out.push_back(b.size() == 2 && b[0] == int(n - 1) && b[1] == 42 ? 1.0 : 0.0);
    courier::collectives::barrier();
    return out;
}
COURIER_PLAIN_ACTION(collective_worker, collective_worker_action);

void scenario_collectives() {
    auto all = courier::find_all_localities();
    double n = double(all.size());
    for (int round = 1; round <= 3; ++round) {
        std::vector<courier::future<std::vector<double>>> fs;
        for (auto const& loc : all) {
            fs.push_back(courier::async<collective_worker_action>(loc, round));
        }
        for (auto& f : fs) {
            auto r = f.get();
            CHECK(r.size() == 3);
            CHECK(r[0] == n * (n + 1) / 2 * round);
            CHECK(r[1] == 1.0);
            CHECK(r[2] == 1.0);
        }
    }
}

// Coroutines awaiting remote calls, on every locality. The coroutines report in strings and
// the checks run in courier_main (CHECK's counter is not for concurrent use).
courier::future<std::string> outcome_of_thrower(courier::id_type where, int x) {
    try {
        int v = co_await courier::async<thrower_action>(where, x);
        co_return "value " + std::to_string(v);
    } catch (courier::remote_exception const& e) {
        co_return e.type_name() + ": " + e.message() + " (locality " +
            std::to_string(e.locality()) + ")";
    }
}

/// Greets every locality in turn, then all at once through when_all: a line per greeting.
courier::future<std::string> greet_everywhere(std::string from) {
    auto all = courier::find_all_localities();
    std::string out;
    for (auto const& loc : all) {
        out += co_await courier::async<hello_action>(loc, from) + "\n";
    }
    std::vector<courier::future<std::string>> fs;
    for (auto const& loc : all) {
        fs.push_back(courier::async<hello_action>(loc, from));
    }
    auto ready = co_await courier::when_all(std::move(fs));
    for (auto& f : ready) {
        out += f.get() + "\n";
    }
    co_return out;
}

/// Runs on any locality: coroutines there await calls to every locality, one of them failing.
std::string coroutine_tour(std::string const& from) {
    auto all = courier::find_all_localities();
    auto next = all[(courier::get_locality_id() + 1) % all.size()];
    auto greetings = greet_everywhere(from);
    auto failing = outcome_of_thrower(next, 3);
    auto fine = outcome_of_thrower(next, -4);
    return greetings.get() + failing.get() + "\n" + fine.get();
}
COURIER_PLAIN_ACTION(coroutine_tour, coroutine_tour_action);

courier::future<std::vector<std::string>> tours_from_everywhere() {
    std::vector<courier::future<std::string>> fs;
    auto all = courier::find_all_localities();
    for (std::size_t k = 0; k < all.size(); ++k) {
        fs.push_back(courier::async<coroutine_tour_action>(all[k], "coro " + std::to_string(k)));
    }
    auto ready = co_await courier::when_all(std::move(fs));
    std::vector<std::string> out;
    for (auto& f : ready) {
        out.push_back(f.get());
    }
    co_return out;
}

courier::future<int> uncaught_remote_failure(courier::id_type where) {
    co_return co_await courier::async<thrower_action>(where, 1) + 1;
}

/// Ten calls, each awaited in turn, to localities c, c+1, ...: the sum of their ids.
courier::future<long> sum_of_ids(std::vector<courier::id_type> all, int c) {
    long sum = 0;
    for (int i = 0; i < 10; ++i) {
        auto const& loc = all[static_cast<std::size_t>(c + i) % all.size()];
        sum += co_await courier::async<relay_action_type_forward>(loc, 0);
    }
    co_return sum;
}

void scenario_coroutines() {
    auto all = courier::find_all_localities();
    auto n = static_cast<std::uint32_t>(all.size());
    auto tours = tours_from_everywhere().get();
    CHECK(tours.size() == n);
    for (std::uint32_t k = 0; k < n && k < tours.size(); ++k) {
        std::string expected;
        for (int round = 0; round < 2; ++round) {
            for (std::uint32_t i = 0; i < n; ++i) {
                expected += "hello coro " + std::to_string(k) + " from locality " +
                            std::to_string(i) + "\n";
            }
        }
        expected += "std::invalid_argument: x must not be positive, got 3 (locality " +
                    std::to_string((k + 1) % n) + ")\nvalue -4";
        CHECK(tours[k] == expected);
        if (tours[k] != expected) {
            std::fprintf(stderr, "locality %u reported:\n%s\n", k, tours[k].c_str());
        }
    }
    // Caught at the co_await here: the remote exception names its type, message and locality.
    for (std::uint32_t r = 1; r < n; ++r) {
        CHECK(outcome_of_thrower(all[r], 5).get() ==
              "std::invalid_argument: x must not be positive, got 5 (locality " +
                  std::to_string(r) + ")");
    }
    // Not caught: it escapes the coroutine into its future.
    for (std::uint32_t r = 1; r < n; ++r) {
        try {
            uncaught_remote_failure(all[r]).get();
            CHECK(false);
        } catch (courier::remote_exception const& e) {
            CHECK(e.locality() == r);
            CHECK(e.message() == "x must not be positive, got 1");
        }
    }
    // Many coroutines in flight at once.
    std::vector<courier::future<long>> many;
    for (int c = 0; c < 300; ++c) {
        many.push_back(sum_of_ids(all, c));
    }
    for (int c = 0; c < 300; ++c) {
        long expected = 0;
        for (int i = 0; i < 10; ++i) {
            expected += (c + i) % static_cast<int>(n);
        }
        CHECK(many[static_cast<std::size_t>(c)].get() == expected);
    }
}

// SPMD: courier_main runs everywhere; every locality checks and reports through all_reduce.
int spmd_main() {
    auto rank = courier::get_locality_id();
    auto n = courier::get_num_localities();
    auto r = collective_worker(2);
    int ok = r[0] == double(n) * (n + 1) && r[1] == 1.0 && r[2] == 1.0;
    // Point to point in SPMD as well: everyone asks its right neighbour.
    auto right = courier::find_all_localities()[(rank + 1) % n];
    ok &= courier::async<hello_action>(right, std::string("spmd")).get() ==
          "hello spmd from locality " + std::to_string((rank + 1) % n);
    int all_ok = courier::collectives::all_reduce(ok, [](int a, int b) { return a & b; });
    if (rank == 0) {
        std::printf("spmd on %u localities: %s\n", n, all_ok ? "ok" : "FAILED");
    }
    courier::finalize();
    return all_ok ? 0 : 1;
}

// ---- component lifetime by reference ----
std::size_t component_count() {
    return courier::get_component_count();
}
COURIER_PLAIN_ACTION(component_count, component_count_action);

std::vector<courier::id_type> g_kept; // ids held by this locality for another one
void keep(courier::id_type id) {
    g_kept.push_back(std::move(id));
}
COURIER_PLAIN_ACTION(keep, keep_action);
double use_kept() {
    return courier::async<accumulator::total_action>(g_kept.at(0)).get();
}
COURIER_PLAIN_ACTION(use_kept, use_kept_action);
void drop_kept() {
    g_kept.clear();
}
COURIER_PLAIN_ACTION(drop_kept, drop_kept_action);

/// Passes `id` along `hops` localities (as an argument each time), then reads the total.
double hop(courier::id_type id, int hops);
COURIER_PLAIN_ACTION(hop, hop_action);
double hop(courier::id_type id, int hops) {
    if (hops == 0) {
        return courier::async<accumulator::total_action>(id).get();
    }
    auto next = courier::find_all_localities()[(courier::get_locality_id() + 1) %
                                               courier::get_num_localities()];
    return courier::async<hop_action>(next, id, hops - 1).get();
}

/// Waits up to 10 s for `loc` to hold `expected` components.
bool count_becomes(courier::id_type const& loc, std::size_t expected) {
    for (int i = 0; i < 1000; ++i) {
        if (courier::async<component_count_action>(loc).get() == expected) {
            return true;
        }
        courier::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::fprintf(stderr, "locality %u holds %zu components, expected %zu\n",
                 courier::get_locality_id(loc), courier::async<component_count_action>(loc).get(),
                 expected);
    return false;
}

void component_lifetimes() {
    auto all = courier::find_all_localities();
    auto one = all[1], two = all.back();
    std::size_t base1 = courier::async<component_count_action>(one).get();
    std::size_t base2 = courier::async<component_count_action>(two).get();
    {
        // The last id gone: the component is destroyed.
        auto tmp = courier::new_<accumulator>(one).get();
        CHECK(tmp.is_managed());
        CHECK(courier::async<component_count_action>(one).get() == base1 + 1);
    }
    CHECK(count_becomes(one, base1));
    {
        // An id held by another locality keeps it alive after the creator dropped its own.
        auto kept = courier::new_<accumulator>(one, 5.0, std::string("kept")).get();
        courier::async<keep_action>(two, kept).get();
        kept = courier::id_type{};
        courier::this_thread::sleep_for(std::chrono::milliseconds(100));
        CHECK(courier::async<component_count_action>(one).get() == base1 + 1);
        CHECK(courier::async<use_kept_action>(two).get() == 5.0);
        courier::async<drop_kept_action>(two).get();
    }
    CHECK(count_becomes(one, base1));
    {
        // A chain of 60 hops halves the credits 60 times (2^48 to start with): the holders ask
        // for more on the way.
        auto chained = courier::new_<accumulator>(one, 1.5, std::string("chain")).get();
        CHECK(courier::async<hop_action>(all[0], chained, 60).get() == 1.5);
        CHECK(courier::async<accumulator::total_action>(chained).get() == 1.5);
    }
    CHECK(count_becomes(one, base1));
    {
        // get_id() inside the component hands out a counted reference of its own.
        auto a = courier::new_<accumulator>(two, 2.0, std::string("self")).get();
        auto b = courier::async<accumulator::self_action>(a).get();
        CHECK(b == a && b.is_managed());
        a = courier::id_type{};
        courier::this_thread::sleep_for(std::chrono::milliseconds(100));
        CHECK(courier::async<component_count_action>(two).get() == base2 + 1);
        CHECK(courier::async<accumulator::total_action>(b).get() == 2.0);
    }
    CHECK(count_becomes(two, base2));
    {
        // Dropping the id right after a call does not end the component before the call ran.
        auto fleeting = courier::new_<accumulator>(one, 0.0, std::string("fleeting")).get();
        courier::post<accumulator::add_action>(fleeting, 1.0);
        auto f = courier::async<accumulator::total_action>(fleeting);
        fleeting = courier::id_type{};
        double v = f.get();
        CHECK(v == 1.0 || v == 0.0); // the post may or may not have run first
    }
    CHECK(count_becomes(one, base1));
}

void scenario_components() {
    auto all = courier::find_all_localities();
    std::vector<courier::id_type> ids;
    for (auto const& loc : all) {
        ids.push_back(courier::new_<accumulator>(loc, 10.0, std::string("acc")).get());
        CHECK(courier::get_locality_id(ids.back()) == courier::get_locality_id(loc));
    }
    auto plain = courier::new_<accumulator>(all.back()).get();
    // Concurrent calls from many tasks to every component.
    std::vector<courier::future<void>> fs;
    for (int t = 0; t < 200; ++t) {
        fs.push_back(courier::async<accumulator::add_action>(
            ids[static_cast<std::size_t>(t) % ids.size()], 1.0));
    }
    courier::wait_all(fs);
    for (auto& f : fs) {
        f.get();
    }
    for (std::size_t k = 0; k < ids.size(); ++k) {
        double adds = 0;
        for (int t = 0; t < 200; ++t) {
            adds += static_cast<std::size_t>(t) % ids.size() == k;
        }
        CHECK(courier::async<accumulator::total_action>(ids[k]).get() == 10.0 + adds);
    }
    CHECK(courier::async<accumulator::total_action>(plain).get() == 0.0);
    auto d = courier::async<accumulator::describe_action>(ids.back()).get();
    CHECK(d == "acc on locality " + std::to_string(all.size() - 1) + ", id " +
                   std::to_string(ids.back().lsb));
    // A stale or forged id is an error reply, not a crash.
    courier::id_type bogus = ids.back();
    bogus.lsb += 1000;
    try {
        courier::async<accumulator::total_action>(bogus).get();
        CHECK(false);
    } catch (courier::remote_exception const& e) {
        CHECK(e.type_name() == "std::invalid_argument");
    }
    component_lifetimes();
}

/// Calls locality 1 one after another (a fault was just posted to it) until a call fails with
/// network_error: prints "NAME: network_error after S s[EXTRA]: WHAT" and returns S, or -1 if
/// `calls` calls all succeeded.
double calls_until_network_error(char const* name, int calls, std::string const& extra = "") {
    auto t0 = std::chrono::steady_clock::now();
    try {
        for (int i = 0; i < calls; ++i) {
            courier::async<hello_action>(courier::find_all_localities()[1], std::string("x")).get();
        }
    } catch (courier::network_error const& e) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (name == nullptr) {
            return s;
        }
        std::printf("%s: network_error after %.2f s%s: %s\n", name, s, extra.c_str(), e.what());
        std::fflush(stdout);
        return s;
    }
    return -1;
}

void scenario_killed() {
    // Locality 1 dies in the middle of the job: a future waiting on it fails with
    // network_error (not a hang), and courier-run stops the job with a non-zero status.
    courier::post<die_action>(courier::find_all_localities()[1]);
    calls_until_network_error("killed", 1000000);
}

void scenario_stopped() {
    // Locality 1 stops (SIGSTOP) in the middle of the job, with no launcher to report it:
    // every peer's liveness check declares it failed within --courier:peer_timeout, a future
    // waiting on it fails with network_error, and (on_peer_failure=exit) the job ends non-zero.
    courier::post<stop_self_action>(courier::find_all_localities()[1]);
    double limit = std::stod(courier::get_config_entry("peer_timeout").value_or("5"));
    char extra[64];
    std::snprintf(extra, sizeof extra, " (peer_timeout %.1f s)", limit);
    double s = calls_until_network_error("stopped", 100000000, extra);
    if (s >= 0) {
        CHECK(s <= limit + 0.5); // detected within peer_timeout
    }
}

std::string g_scenario_arg; // the word after the scenario's name, if any

void scenario_exit_early() {
    // Locality 1 ends itself (exit status 0) in the middle of the job: courier-run must see a
    // locality that left without finishing, fail the job and tell locality 0 at once, whose
    // future then fails with network_error (the test's peer_timeout is far longer).
    courier::post<leave_now_action>(courier::find_all_localities()[1],
                                    g_scenario_arg == "exit" ? 1 : 0);
    calls_until_network_error("exit_early", 100000000);
}

void scenario_exit_busy() {
    // As exit_early, but both localities are busy in the transport when locality 1 ends: eight
    // tasks here call it, four there post to here. Every caller must fail with network_error;
    // a locality ending in the middle of a transport call must not wedge this one (a lock it
    // held in shared memory).
    auto there = courier::find_all_localities()[1];
    std::vector<courier::future<double>> callers;
    for (int t = 0; t < 8; ++t) {
        callers.push_back(
            courier::async([] { return calls_until_network_error(nullptr, 100000000); }));
    }
    courier::post<leave_while_sending_action>(there, g_scenario_arg == "exit" ? 1 : 0);
    int failed = 0;
    for (auto& c : callers) {
        failed += c.get() >= 0 ? 1 : 0;
    }
    std::printf("exit_busy: network_error in %d of 8 callers\n", failed);
    CHECK(failed == 8);
}

void scenario_wedged_send() {
    // Locality 1 dies, and a worker here never returns from a transport call: as a send
    // spinning on a lock that locality 1 held in its shared memory when it died (libfabric
    // shm), simulated by a thread that marks itself inside a call and blocks. The caller still
    // gets network_error; then, with the transport wedged, the liveness watchdog must end this
    // locality (2 s after the failure) instead of letting the job hang until the launcher's
    // grace period (peer_timeout) runs out.
    auto there = courier::find_all_localities()[1];
    std::thread([] { // a thread of its own: the job's workers stay free, however many there are
        courier::detail::transport_watch::call inside;
        std::this_thread::sleep_for(std::chrono::hours(1)); // never leaves the call
    })
        .detach();
    courier::post<die_action>(there);
    calls_until_network_error("wedged_send", 100000000);
    for (int i = 0; i < 300; ++i) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("wedged_send: still running 30 s after the failure\n");
    ++failures;
}

/// A component whose destructor stays inside a (simulated) transport call for good: what the
/// heartbeat thread or the endpoint's close does when a dead peer left a lock in shared memory
/// taken while this locality shuts down.
struct wedged_at_close : courier::component_base<wedged_at_close> {
    ~wedged_at_close() {
        courier::detail::transport_watch::call inside;
        std::this_thread::sleep_for(std::chrono::hours(1)); // never leaves the call
    }
};
COURIER_REGISTER_COMPONENT(wedged_at_close);

void scenario_wedged_shutdown() {
    // Locality 1 dies; this locality's shutdown then wedges in a transport call (components are
    // destroyed as the transport closes). The watchdog must still be watching: the locality
    // ends 2 s after the failure instead of hanging until the launcher's grace period.
    // The id is never released, so the component lives until shutdown destroys it.
    new courier::id_type(courier::new_<wedged_at_close>(courier::find_here()).get());
    courier::post<die_action>(courier::find_all_localities()[1]);
    calls_until_network_error("wedged_shutdown", 100000000);
}

void scenario_posted_throw() {
    // A posted action throws on locality 1; nobody waits for it. The job then goes on and ends
    // normally: its status says whether the failure counts (--courier:posted_errors).
    auto there = courier::find_all_localities()[1];
    courier::post<posted_throw_action>(there);
    while (courier::async<posted_throw_ran_action>(there).get() == 0) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void scenario_posted_throw_flood() {
    // 1000 posted actions throw on locality 1: each is counted, and the job's end says how many
    // failed, but no more than a few lines of the log name them one by one.
    auto there = courier::find_all_localities()[1];
    constexpr int posts = 1000;
    for (int i = 0; i < posts; ++i) {
        courier::post<posted_throw_action>(there);
    }
    while (courier::async<posted_throw_ran_action>(there).get() < posts) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

// ---- soak: calls with checked payloads for a while (the fault runs) -------------------------

std::vector<std::uint64_t> reversed(std::vector<std::uint64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
}
COURIER_PLAIN_ACTION(reversed, reversed_action);

int scenario_soak(double seconds) {
    // Locality 0 calls every other locality with payloads of 8 B .. 1 MiB (eager and RMA
    // paths), checking every answer, for `seconds`. Under a fault the run must either finish
    // with every answer right or fail with network_error: never hang, never a wrong answer.
    auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    std::uint64_t calls = 0, wrong = 0;
    // Every locality has joined the job: fault-run waits for this line before its fault.
    std::printf("soak started on %u localities for %.1f s\n", courier::get_num_localities(),
                seconds);
    std::fflush(stdout);
    try {
        for (std::uint64_t round = 0; elapsed() < seconds; ++round) {
            std::size_t n = std::size_t{1} << (round % 18); // 1 .. 128 Ki elements
            std::vector<std::uint64_t> v(n);
            for (std::size_t i = 0; i < n; ++i) {
                v[i] = round * 1000003 + i;
            }
            std::vector<courier::future<std::vector<std::uint64_t>>> fs;
            for (auto const& l : courier::find_remote_localities()) {
                fs.push_back(courier::async<reversed_action>(l, v));
            }
            for (auto& f : fs) {
                auto r = f.get();
                ++calls;
                wrong += !(r.size() == n && std::equal(r.begin(), r.end(), v.rbegin()));
            }
        }
    } catch (courier::network_error const& e) {
        double unix_time =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        std::printf("soak: network_error at %.3f after %.2f s, %llu calls before it (%llu wrong): "
                    "%s\n",
                    unix_time, elapsed(), static_cast<unsigned long long>(calls),
                    static_cast<unsigned long long>(wrong), e.what());
        std::fflush(stdout); // the launcher may end the job before this process exits
        return wrong == 0 ? 3 : 1;
    }
    std::printf("soak: %llu calls in %.2f s, %llu wrong\n", static_cast<unsigned long long>(calls),
                elapsed(), static_cast<unsigned long long>(wrong));
    std::fflush(stdout);
    return wrong == 0 ? 0 : 1;
}

// ---- rails: which provider carried the traffic ----------------------------------------------

// Calls every other locality once (and waits): traffic on every pair's path.
void greet_everyone() {
    std::vector<courier::future<std::string>> fs;
    for (auto const& l : courier::find_remote_localities()) {
        fs.push_back(courier::async<hello_action>(l, std::string("rails")));
    }
    for (auto& f : fs) {
        f.get();
    }
}
COURIER_PLAIN_ACTION(greet_everyone, greet_everyone_action);

std::vector<std::pair<std::string, std::uint64_t>> sent_by_provider() {
    std::vector<std::pair<std::string, std::uint64_t>> v;
    for (auto const& [name, st] : courier::get_parcelport_statistics_by_provider()) {
        v.emplace_back(name, st.messages_sent);
    }
    return v;
}
COURIER_PLAIN_ACTION(sent_by_provider, sent_by_provider_action);

std::string host_name() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
}
COURIER_PLAIN_ACTION(host_name, host_name_action);

/// Bytes this locality has sent by zero copy so far.
double zero_copy_sent() {
    return courier::get_counters(courier::find_here())["/parcels/bytes/zero-copy"];
}

// Each rail its threshold: in a job across hosts a 16 KiB buffer for a locality of this host
// goes by zero copy (shm's threshold), for one on another host inline (tcp's is larger).
void check_thresholds_by_rail() {
    std::string const mine = host_name();
    std::optional<courier::id_type> local, remote;
    for (auto const& l : courier::find_remote_localities()) {
        bool same = courier::async<host_name_action>(l).get() == mine;
        (same ? local : remote) = l;
    }
    CHECK(local.has_value() && remote.has_value());
    if (!local || !remote) {
        return;
    }
    std::size_t const n = 16 << 10;
    courier::serialize_buffer<char> buf(n);
    std::fill(buf.begin(), buf.end(), 'b');
    double const before = zero_copy_sent();
    CHECK(courier::async<buffer_check_action>(*local, buf).get() == n);
    double const after_local = zero_copy_sent();
    CHECK(courier::async<buffer_check_action>(*remote, buf).get() == n);
    double const after_remote = zero_copy_sent();
    std::printf("rails: 16 KiB by zero copy to this host's locality %u: %.0f B, to locality %u "
                "on another host: %.0f B\n",
                courier::get_locality_id(*local), after_local - before,
                courier::get_locality_id(*remote), after_remote - after_local);
    CHECK(after_local - before >= static_cast<double>(n));
    CHECK(after_remote == after_local);
}

void scenario_rails(std::string const& expected) {
    // Every locality greets every other; then the providers that carried messages must be
    // exactly `expected` (comma-separated core names, e.g. "shm,tcp"): across hosts with
    // provider auto, shm within each host and tcp between them.
    std::vector<courier::future<void>> fs;
    for (auto const& l : courier::find_all_localities()) {
        fs.push_back(courier::async<greet_everyone_action>(l));
    }
    for (auto& f : fs) {
        f.get();
    }
    std::map<std::string, std::uint64_t> used;
    for (auto const& l : courier::find_all_localities()) {
        std::string line;
        for (auto const& [name, sent] : courier::async<sent_by_provider_action>(l).get()) {
            std::string core = name.substr(0, name.find(';'));
            // The tcp rail is libfabric's net provider where offered (tcp_provider()).
            used[core == "net" ? "tcp" : core] += sent;
            line += " " + name + ": " + std::to_string(sent);
        }
        std::printf("rails: locality %u sent%s\n", courier::get_locality_id(l), line.c_str());
    }
    std::string got;
    for (auto const& [core, sent] : used) {
        if (sent > 0) {
            got += (got.empty() ? "" : ",") + core;
        }
    }
    std::printf("rails: messages went over %s (expected %s)\n", got.c_str(), expected.c_str());
    CHECK(got == expected);
    if (expected == "shm,tcp") {
        check_thresholds_by_rail();
    }
}

// Over 2 GiB in one argument (HPX broke at INT_MAX): the pointer chunk is read in <= 1 GiB
// pieces. The sender's buffer is mapped, not filled: untouched pages read as zeros and cost no
// memory (the sanitizer builds run this too), so only one byte per MiB and the last are set and
// checked. The transport tests check payload integrity byte for byte at smaller sizes.
constexpr std::size_t huge_stride = std::size_t{1} << 20;

std::uint64_t sampled_checksum(char const* p, std::size_t n) {
    std::uint64_t h = n;
    for (std::size_t i = 0; i < n; i += huge_stride) {
        h = h * 1099511628211ull ^ static_cast<unsigned char>(p[i]);
    }
    return n == 0 ? h : h * 31 + static_cast<unsigned char>(p[n - 1]);
}

std::uint64_t huge_checksum(courier::serialize_buffer<char> const& b) {
    return sampled_checksum(b.data(), b.size());
}
COURIER_PLAIN_ACTION(huge_checksum, huge_checksum_action);

void scenario_huge() {
    std::size_t const n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 3; // 2 GiB + 1 MiB + 3
    void* mem = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(mem != MAP_FAILED);
    if (mem == MAP_FAILED) {
        return;
    }
    auto* data = static_cast<char*>(mem);
    for (std::size_t i = 0; i < n; i += huge_stride) {
        data[i] = static_cast<char>(i / huge_stride * 131 % 251 + 1);
    }
    data[n - 1] = 'z';
    courier::serialize_buffer<char> b(data, n, courier::serialize_buffer<char>::reference);
    auto before = courier::get_parcelport_statistics();
    auto remote = courier::async<huge_checksum_action>(courier::find_all_localities()[1], b).get();
    auto after = courier::get_parcelport_statistics();
    auto local = sampled_checksum(data, n);
    CHECK(remote == local);
    // The payload was not copied on the send side.
    CHECK(after.bytes_copied_on_send - before.bytes_copied_on_send < 4096);
    std::printf("huge: %zu bytes, checksum %s\n", n, remote == local ? "matches" : "DIFFERS");
    ::munmap(mem, n);
}

/// Kills process `pid` (the other side of the 2 GiB transfer `f`) after the scenario's delay
/// (its argument, default 300 ms), and prints how `f` ended: "NAME: network_error: ..." is
/// what the tests look for.
template <class T>
void kill_during(char const* name, std::uint64_t pid, courier::future<T> f) {
    int delay_ms = g_scenario_arg.empty() ? 300 : std::stoi(g_scenario_arg);
    courier::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    try {
        f.get();
        std::printf("%s: the transfer finished before the kill (too fast to test)\n", name);
    } catch (courier::network_error const& e) {
        std::printf("%s: network_error: %s\n", name, e.what());
    }
    std::fflush(stdout);
    // Whatever the provider still reports about the dead peer arrives meanwhile.
    courier::this_thread::sleep_for(std::chrono::milliseconds(500));
}

void scenario_huge_killed() {
    // Locality 1 is killed while it receives a 2 GiB argument (tcp: read in many pieces): one
    // network_error on locality 0, and one line about it, not one per failed piece.
    auto there = courier::find_all_localities()[1];
    auto pid = courier::async<process_id_action>(there).get();
    std::size_t const n = std::size_t{1} << 31;
    void* mem = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(mem != MAP_FAILED);
    if (mem == MAP_FAILED) {
        return;
    }
    auto* data = static_cast<char*>(mem);
    for (std::size_t i = 0; i < n; i += huge_stride) {
        data[i] = 'h';
    }
    courier::serialize_buffer<char> b(data, n, courier::serialize_buffer<char>::reference);
    kill_during("huge_killed", pid, courier::async<huge_checksum_action>(there, b));
    ::munmap(mem, n);
}

courier::serialize_buffer<char> huge_buffer(std::size_t n) {
    void* mem = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    auto* data = static_cast<char*>(mem);
    for (std::size_t i = 0; i < n; i += huge_stride) {
        data[i] = 'h';
    }
    return courier::serialize_buffer<char>(data, n, [n](char* p) { ::munmap(p, n); });
}
COURIER_PLAIN_ACTION(huge_buffer, huge_buffer_action);

void scenario_huge_sender_killed() {
    auto there = courier::find_all_localities()[1];
    auto pid = courier::async<process_id_action>(there).get();
    kill_during("huge_sender_killed", pid,
                courier::async<huge_buffer_action>(there, std::size_t{1} << 31));
}

// Idle localities must not burn the machine: over one idle second, each locality's CPU time
// (every worker, user + system) stays far below what spinning workers would use.
double cpu_seconds() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}
COURIER_PLAIN_ACTION(cpu_seconds, cpu_seconds_action);

void scenario_idle() {
    auto all = courier::find_all_localities();
    std::vector<double> before;
    for (auto const& loc : all) {
        before.push_back(courier::async<cpu_seconds_action>(loc).get());
    }
    auto t0 = std::chrono::steady_clock::now();
    courier::this_thread::sleep_for(std::chrono::seconds(1));
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (std::size_t i = 0; i < all.size(); ++i) {
        double used = courier::async<cpu_seconds_action>(all[i]).get() - before[i];
        std::printf("idle: locality %zu used %.3f s of CPU in %.3f s (%zu workers)\n", i, used,
                    wall, courier::get_os_thread_count());
        CHECK(used < 0.3 * wall);
    }
}

// A request to a locality whose workers sleep wakes it through its doorbell (shm; tcp unless
// --courier:tcp_doorbell=0, which waits on the completion queue's fd and rings nothing). Five
// requests, each after 100 ms of idleness: the target's workers are asleep for all but ~50 us
// of every 10-100 ms (their safety-net timeout), so at least one of them must ring.
void doorbell_check(bool expect_rings) {
    auto there = courier::find_all_localities()[1];
    auto before = courier::get_parcelport_statistics().doorbell_rings;
    for (int i = 0; i < 5; ++i) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(100));
        (void)courier::async<cpu_seconds_action>(there).get();
    }
    auto rings = courier::get_parcelport_statistics().doorbell_rings - before;
    std::printf("doorbell: %llu rings for 5 requests to an idle locality\n",
                static_cast<unsigned long long>(rings));
    CHECK(expect_rings ? rings >= 1 : rings == 0);
}
void scenario_doorbell() {
    doorbell_check(true);
}
void scenario_no_doorbell() {
    doorbell_check(false);
}

// Never returns: the job overruns courier-run's time limit, which must then make every
// locality report what it waits for and stop the job with status 124 (never a hang).
void never_returns() {
    courier::promise<void> p;
    p.get_future().get();
}
COURIER_PLAIN_ACTION(never_returns, never_returns_action);

void scenario_stuck() {
    courier::async<never_returns_action>(courier::find_all_localities()[1]).get();
}

// ---- registered memory: rma_vector / rma_object cross localities without registration on send
// and without copies on receive (issue 5) ----------------------------------------------------

struct rma_counters {
    std::uint64_t adopted = 0, copied = 0, registrations = 0, pool_chunks_sent = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& adopted& copied& registrations& pool_chunks_sent;
    }
};

rma_counters read_rma_counters() {
    auto p = courier::rma::get_pool_statistics();
    auto t = courier::get_parcelport_statistics();
    // A chunk staged in the shm outbox is sent without a registration too.
    return {p.adopted_loads, p.copied_loads, t.registrations,
            t.pool_chunks_sent + t.outbox_chunks_sent};
}
COURIER_PLAIN_ACTION(read_rma_counters, read_rma_counters_action);

/// Scales the vector in place (it lies in the buffer the network read it into) and sends the
/// same memory back.
courier::rma_vector<double> scale_in_place(courier::rma_vector<double> v, double f) {
    if (!v.empty() && !courier::rma::contains(v.data(), v.size() * sizeof(double))) {
        throw std::runtime_error("received rma_vector is not in pool memory");
    }
    for (auto& x : v) {
        x *= f;
    }
    return v;
}
COURIER_PLAIN_ACTION(scale_in_place, scale_in_place_action);

struct field_block {
    double cells[4096];
    std::uint64_t generation;
};

courier::rma_object<field_block> advance_block(courier::rma_object<field_block> b) {
    b->generation += 1;
    b->cells[4095] += 1.0;
    return b;
}
COURIER_PLAIN_ACTION(advance_block, advance_block_action);

std::size_t allocate_rma(std::size_t bytes) {
    courier::rma_vector<char> v(bytes);
    return v.size();
}
COURIER_PLAIN_ACTION(allocate_rma, allocate_rma_action);

void scenario_rma() {
    auto remotes = courier::find_remote_localities();
    for (std::size_t n : {std::size_t{3}, std::size_t{100000}, std::size_t{1} << 20}) {
        courier::rma_vector<double> v(n);
        std::iota(v.begin(), v.end(), 1.0);
        for (auto const& there : remotes) {
            auto mine = read_rma_counters();
            auto theirs = courier::async<read_rma_counters_action>(there).get();
            auto back = courier::async<scale_in_place_action>(there, v, 2.0).get();
            auto mine2 = read_rma_counters();
            auto theirs2 = courier::async<read_rma_counters_action>(there).get();
            bool ok = back.size() == n;
            for (std::size_t i = 0; ok && i < n; ++i) {
                ok = back[i] == 2.0 * v[i];
            }
            CHECK(ok);
            CHECK(courier::rma::contains(back.data(), n * sizeof(double)));
            bool zero_copy = n * sizeof(double) >= 4096;
            // Neither side registered memory to send, nor copied a received vector.
            CHECK(mine2.registrations == mine.registrations);
            CHECK(theirs2.registrations == theirs.registrations);
            CHECK(mine2.copied == mine.copied);
            CHECK(theirs2.copied == theirs.copied);
            if (zero_copy) {
                CHECK(theirs2.adopted == theirs.adopted + 1);
                CHECK(mine2.adopted == mine.adopted + 1);
                // The pool is registered with one provider: across hosts (shm + tcp) the
                // network's; a shm peer's pool chunks then come from the registration cache
                // (no new registration either way: checked above).
                if (courier::get_parcelport_statistics_by_provider().size() == 1) {
                    CHECK(mine2.pool_chunks_sent == mine.pool_chunks_sent + 1);
                    CHECK(theirs2.pool_chunks_sent == theirs.pool_chunks_sent + 1);
                }
            }
            std::printf("rma: %zu doubles to locality %u and back: %s, adopted here %llu, there "
                        "%llu\n",
                        n, courier::get_locality_id(there), ok ? "ok" : "WRONG",
                        static_cast<unsigned long long>(mine2.adopted - mine.adopted),
                        static_cast<unsigned long long>(theirs2.adopted - theirs.adopted));
        }
    }
    // rma_object, and many transfers in flight at once, in both directions.
    auto block = courier::make_rma_object<field_block>();
    block->cells[4095] = 10.0;
    std::vector<courier::future<courier::rma_object<field_block>>> fs;
    std::vector<courier::future<courier::rma_vector<double>>> vs;
    courier::rma_vector<double> w(1 << 16, 1.5);
    for (int i = 0; i < 16; ++i) {
        auto const& there = remotes[static_cast<std::size_t>(i) % remotes.size()];
        fs.push_back(courier::async<advance_block_action>(there, block));
        vs.push_back(courier::async<scale_in_place_action>(there, w, double(i)));
    }
    for (int i = 0; i < 16; ++i) {
        auto b = fs[static_cast<std::size_t>(i)].get();
        CHECK(b->generation == 1 && b->cells[4095] == 11.0);
        auto r = vs[static_cast<std::size_t>(i)].get();
        CHECK(r.size() == w.size() && r[0] == 1.5 * i && r[r.size() - 1] == 1.5 * i);
    }
    CHECK(w[0] == 1.5); // the caller's vector was sent, not modified remotely
    // Over the pool's limit: a clear error travels back, nothing aborts.
    try {
        (void)courier::async<allocate_rma_action>(remotes[0], std::size_t{1} << 39).get();
        CHECK(false);
    } catch (courier::remote_exception const& e) {
        CHECK(std::string(e.what()).find("rma_pool_limit") != std::string::npos);
        std::printf("rma: over the limit: %s\n", e.what());
    }
    auto p = courier::rma::get_pool_statistics();
    std::printf("rma: pool here: %llu bytes registered, %llu in use, peak %llu, %llu "
                "registrations, hits %llu, misses %llu\n",
                static_cast<unsigned long long>(p.bytes_registered),
                static_cast<unsigned long long>(p.bytes_in_use),
                static_cast<unsigned long long>(p.peak_bytes_in_use),
                static_cast<unsigned long long>(p.registrations),
                static_cast<unsigned long long>(p.cache_hits),
                static_cast<unsigned long long>(p.cache_misses));
}

// ---- deep copy: a pointer structure as an action argument and result (issue 6) ---------------

struct tnode {
    double* payload = nullptr;
    std::size_t n = 0;
    tnode* left = nullptr;
    tnode* right = nullptr;
    ~tnode() { delete[] payload; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& courier::serialization::array(payload, n) & courier::serialization::shared(left) &
            courier::serialization::shared(right);
    }
};

void free_tree(tnode* root) {
    std::vector<tnode*> stack{root};
    while (!stack.empty()) {
        tnode* t = stack.back();
        stack.pop_back();
        if (t != nullptr) {
            stack.push_back(t->left);
            stack.push_back(t->right);
            delete t;
        }
    }
}

/// Owns a tree; moves only.
struct tree {
    tnode* root = nullptr;
    tree() = default;
    explicit tree(tnode* r) : root(r) {}
    tree(tree&& o) noexcept : root(std::exchange(o.root, nullptr)) {}
    tree& operator=(tree&& o) noexcept {
        std::swap(root, o.root);
        return *this;
    }
    ~tree() { free_tree(root); }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& courier::serialization::shared(root);
    }
};

/// The same wire format, not owning: what the caller sends from its own tree.
struct tree_view {
    tnode* root = nullptr;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& courier::serialization::shared(root);
    }
};

tnode* build_tree(int depth, std::size_t payload, int& counter) {
    if (depth == 0) {
        return nullptr;
    }
    auto* t = new tnode;
    t->n = payload;
    t->payload = new double[payload];
    for (std::size_t i = 0; i < payload; ++i) {
        t->payload[i] = counter + double(i) / 1e6;
    }
    ++counter;
    t->left = build_tree(depth - 1, payload, counter);
    t->right = build_tree(depth - 1, payload, counter);
    return t;
}

/// Scales every payload of the tree it received and sends the same tree back.
tree scale_tree(tree& t, double f) {
    std::vector<tnode*> stack{t.root};
    while (!stack.empty()) {
        tnode* n = stack.back();
        stack.pop_back();
        if (n != nullptr) {
            for (std::size_t i = 0; i < n->n; ++i) {
                n->payload[i] *= f;
            }
            stack.push_back(n->left);
            stack.push_back(n->right);
        }
    }
    return std::move(t);
}
COURIER_PLAIN_ACTION(scale_tree, scale_tree_action);

struct rnode {
    std::int64_t id = 0;
    rnode* next = nullptr;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id& courier::serialization::shared(next);
    }
};

/// Owns a ring.
struct ring {
    rnode* head = nullptr;
    ring() = default;
    ring(ring&& o) noexcept : head(std::exchange(o.head, nullptr)) {}
    ring& operator=(ring&&) = delete;
    ~ring() {
        if (head != nullptr) {
            rnode* p = head->next;
            while (p != head) {
                rnode* q = p->next;
                delete p;
                p = q;
            }
            delete head;
        }
    }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& courier::serialization::shared(head);
    }
};

/// Walks the ring it received on a 64 KiB fiber stack: nodes and the sum of their ids.
std::pair<std::size_t, std::int64_t> walk_ring(ring& r) {
    std::size_t n = 0;
    std::int64_t sum = 0;
    rnode* p = r.head;
    do {
        ++n;
        sum += p->id;
        p = p->next;
    } while (p != r.head && p != nullptr);
    return {n, sum};
}
COURIER_PLAIN_ACTION(walk_ring, walk_ring_action);

/// Zero-copy bytes that came in: read by RMA, copied out of the sender's shm outbox, or pushed.
std::uint64_t rma_bytes_read_here() {
    return courier::get_parcelport_statistics().rendezvous_bytes_received();
}
COURIER_PLAIN_ACTION(rma_bytes_read_here, rma_bytes_read_action);

void scenario_deep() {
    int counter = 0;
    tnode* root = build_tree(7, 1024, counter); // 127 nodes, 8 KiB arrays: pointer chunks
    auto there = courier::find_remote_localities()[0];
    auto read_before = courier::async<rma_bytes_read_action>(there).get();
    tree back = courier::async<scale_tree_action>(there, tree_view{root}, 3.0).get();
    auto read_after = courier::async<rma_bytes_read_action>(there).get();
    // Same shape, scaled payloads, a different copy.
    std::vector<std::pair<tnode*, tnode*>> todo{{root, back.root}};
    std::size_t nodes = 0;
    bool ok = true;
    while (!todo.empty() && ok) {
        auto [a, b] = todo.back();
        todo.pop_back();
        if ((a == nullptr) != (b == nullptr)) {
            ok = false;
            break;
        }
        if (a == nullptr) {
            continue;
        }
        ++nodes;
        ok = a != b && a->n == b->n;
        for (std::size_t i = 0; ok && i < a->n; ++i) {
            ok = b->payload[i] == a->payload[i] * 3.0;
        }
        todo.emplace_back(a->left, b->left);
        todo.emplace_back(a->right, b->right);
    }
    CHECK(ok);
    CHECK(nodes == 127);
    // The leaf arrays travelled by the rendezvous (pointer chunks read by RMA, or copied out of
    // the sender's shm outbox), not through the eager message.
    CHECK(read_after - read_before >= 127 * 1024 * sizeof(double));
    std::printf("deep: a %zu-node tree with 8 KiB arrays there and back: %s; %llu bytes by "
                "rendezvous there\n",
                nodes, ok ? "ok" : "WRONG",
                static_cast<unsigned long long>(read_after - read_before));
    free_tree(root);
    // A ring of 100 000 nodes: loaded breadth first, so the action's 64 KiB fiber stack holds.
    ring r;
    std::vector<rnode*> ring_nodes(100000);
    for (std::size_t i = 0; i < ring_nodes.size(); ++i) {
        ring_nodes[i] = new rnode{static_cast<std::int64_t>(i), nullptr};
    }
    for (std::size_t i = 0; i < ring_nodes.size(); ++i) {
        ring_nodes[i]->next = ring_nodes[(i + 1) % ring_nodes.size()];
    }
    r.head = ring_nodes[0];
    auto [n, sum] = courier::async<walk_ring_action>(there, std::move(r)).get();
    CHECK(n == 100000);
    CHECK(sum == std::int64_t{100000} * 99999 / 2);
    std::printf("deep: a ring of %zu nodes walked there: %s\n", n,
                n == 100000 && sum == std::int64_t{100000} * 99999 / 2 ? "ok" : "WRONG");
}

/// What a locality was started with: its worker count and the variable the test names.
std::string environment_here(std::string const& name) {
    char const* v = std::getenv(name.c_str());
    return "threads=" + std::to_string(courier::get_os_thread_count()) + " " + name + "=" +
           (v != nullptr ? v : "(unset)");
}
COURIER_PLAIN_ACTION(environment_here, environment_action);

/// `environment NAME=VALUE`: every locality was started with NAME=VALUE and as many workers as
/// locality 0. A launcher that starts localities in a clean environment (ssh, an agent) must
/// carry the caller's settings.
void scenario_environment() {
    auto eq = g_scenario_arg.find('=');
    CHECK(eq != std::string::npos);
    std::string const name = g_scenario_arg.substr(0, eq);
    std::string const expected =
        "threads=" + std::to_string(courier::get_os_thread_count()) + " " + g_scenario_arg;
    for (auto loc : courier::find_all_localities()) {
        std::string there = courier::async<environment_action>(loc, name).get();
        std::printf("environment: locality %u: %s\n", courier::get_locality_id(loc), there.c_str());
        CHECK(there == expected);
    }
}

/// Under ThreadSanitizer an idle locality's CPU time measures TSan: perf shows its shadow
/// memory's page faults (__tsan::MemoryAccessRange, then clear_page) and TLB-flush IPIs taking
/// most of it, and locality 0 (whose main task sleeps on a timer) uses 0.5-1.1 s of CPU per idle
/// second over tcp on a 2 vCPU machine, with the code from before the MPI parcelport as well
/// (default build: 0.01-0.04 s).
bool skip_idle_here() {
#if defined(__SANITIZE_THREAD__)
    std::printf("idle: SKIPPED under ThreadSanitizer (CPU time of an idle locality is TSan's "
                "shadow-memory faults there); run in the default and ASan builds\n");
    return true;
#else
    return false;
#endif
}

/// TSan's recv()/send() interceptors update the shadow of the whole buffer the tcp provider
/// reads into: measured 11 GB of RSS and 37 s for the huge scenario alone. Its memcpy
/// interceptor does the same to OpenMPI's copies (the MPI parcelport): 10.6 GB, and both
/// localities stall long enough to declare each other failed.
bool skip_huge_here() {
#if defined(__SANITIZE_THREAD__)
    if (courier::get_config_entry("parcelport").value_or("") == "mpi") {
        std::printf("huge: SKIPPED under ThreadSanitizer on MPI (its memcpy interceptor shadows "
                    "the whole 2 GiB OpenMPI copies: ~11 GB RSS); run in the default and ASan "
                    "builds\n");
        return true;
    }
    if (courier::get_config_entry("provider").value_or("") != "shm") {
        std::printf("huge: SKIPPED under ThreadSanitizer on tcp (its socket interceptors shadow "
                    "the whole 2 GiB buffer: ~11 GB RSS); run in the default and ASan builds, "
                    "and on shm here\n");
        return true;
    }
#endif
    return false;
}

} // namespace

int courier_main(int argc, char** argv) {
    std::string scenario = argc > 1 ? argv[1] : "basic";
    g_scenario_arg = argc > 2 ? argv[2] : "";
    if (scenario == "spmd") {
        return spmd_main();
    }
    if (scenario == "soak") {
        // 0: every answer right; 3: network_error (no wrong answer before it); 1: wrong data.
        int rc = scenario_soak(argc > 2 ? std::stod(argv[2]) : 5.0);
        courier::finalize();
        return rc;
    }
    if (scenario == "rails") {
        scenario_rails(argc > 2 ? argv[2] : "shm");
        std::printf("rails on %u localities: %s\n", courier::get_num_localities(),
                    failures == 0 ? "ok" : "FAILED");
        courier::finalize();
        return failures == 0 ? 0 : 1;
    }
    if (scenario == "idle" && skip_idle_here()) {
        courier::finalize();
        return 77;
    }
    if (scenario == "huge" && skip_huge_here()) {
        courier::finalize();
        return 77;
    }
    static constexpr std::pair<std::string_view, void (*)()> scenarios[] = {
        {"basic", scenario_basic},
        {"chain", scenario_chain},
        {"flood", scenario_flood},
        {"flood_not_coalesced", scenario_flood_not_coalesced},
        {"posts_take_no_pool_blocks", scenario_posts_take_no_pool_blocks},
        {"batches_leave_during_a_loop", scenario_batches_leave_during_a_loop},
        {"senders_share_a_worker", scenario_senders_share_a_worker},
        {"flat_posts", scenario_flat_posts},
        {"flat_calls_fail_with_their_batch", scenario_flat_calls_fail_with_their_batch},
        {"posts_fail_with_their_batch", scenario_posts_fail_with_their_batch},
        {"ordered_posts_fail_with_their_batch", scenario_ordered_posts_fail_with_their_batch},
        {"lost_credits_come_again", scenario_lost_credits_come_again},
        {"lost_replies_fail_their_calls", scenario_lost_replies_fail_their_calls},
        {"malformed_calls", scenario_malformed_calls},
        {"posts_capture_their_arguments", scenario_posts_capture_their_arguments},
        {"answers_stay_apart", scenario_answers_stay_apart},
        {"posts_let_go_of_their_arguments", scenario_posts_let_go_of_their_arguments},
        {"burst_then_compute", scenario_burst_then_compute},
        {"blocked_requests", scenario_blocked_requests},
        {"idle_worker_takes_the_rest", scenario_idle_worker_takes_the_rest},
        {"killed", scenario_killed},
        {"stopped", scenario_stopped},
        {"exit_early", scenario_exit_early},
        {"exit_busy", scenario_exit_busy},
        {"wedged_send", scenario_wedged_send},
        {"wedged_shutdown", scenario_wedged_shutdown},
        {"posted_throw", scenario_posted_throw},
        {"posted_throw_flood", scenario_posted_throw_flood},
        {"huge_killed", scenario_huge_killed},
        {"huge_sender_killed", scenario_huge_sender_killed},
        {"huge", scenario_huge},
        {"idle", scenario_idle},
        {"doorbell", scenario_doorbell},
        {"no_doorbell", scenario_no_doorbell},
        {"stuck", scenario_stuck},
        {"components", scenario_components},
        {"collectives", scenario_collectives},
        {"coroutines", scenario_coroutines},
        {"rma", scenario_rma},
        {"deep", scenario_deep},
        {"environment", scenario_environment},
    };
    auto it = std::find_if(std::begin(scenarios), std::end(scenarios),
                           [&](auto const& s) { return s.first == scenario; });
    if (it == std::end(scenarios)) {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        ++failures;
    } else {
        it->second();
    }
    std::printf("%s on %u localities: %s\n", scenario.c_str(), courier::get_num_localities(),
                failures == 0 ? "ok" : "FAILED");
    courier::finalize();
    return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
