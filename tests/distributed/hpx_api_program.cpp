// SPDX-License-Identifier: BSL-1.0
// The HPX-style API across real localities (run with --courier:spmd=1: every locality runs the
// scenario): every collective and its _async form, names, distributed channels and actions
// that answer with a future. Each locality checks its own results; the job fails if any does.
#include "check.hpp"

#include <courier/courier.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using courier_test::failures;
namespace coll = courier::collectives;

std::string letter(std::uint32_t r) {
    return std::string(1, char('a' + r % 26));
}
/// "abc..." for localities first..last: what a rank-ordered concatenation gives.
std::string letters(std::uint32_t first, std::uint32_t last) {
    std::string s;
    for (std::uint32_t r = first; r <= last; ++r) {
        s += letter(r);
    }
    return s;
}
auto concat = [](std::string a, std::string const& b) { return a + b; };

double my_counter(char const* name) {
    return courier::get_counters(courier::find_here())[name];
}

/// all_reduce with an elementwise operation: vectors under 4 KiB (recursive doubling) and over
/// (reduce-scatter and all-gather), lengths that do not divide by the localities, elements that
/// are not flat (strings: serialized), rank order kept, and lengths that differ.
void check_elementwise_all_reduce() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    auto const ew_plus = coll::elementwise(std::plus<>{});
    for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{3000}, std::size_t{3001}}) {
        std::vector<double> v(n);
        for (std::size_t i = 0; i < n; ++i) {
            v[i] = double(r + 1) * double(i + 1);
        }
        auto sum = coll::all_reduce(v, ew_plus);
        CHECK(sum.size() == n);
        for (std::size_t i = 0; i < sum.size(); ++i) {
            CHECK(sum[i] == double(p * (p + 1) / 2) * double(i + 1));
        }
        // Rank order: keeping the left operand gives locality 0's vector, the right one the
        // last locality's.
        std::vector<std::int64_t> w(n);
        for (std::size_t i = 0; i < n; ++i) {
            w[i] = std::int64_t(r) * 1000000 + std::int64_t(i);
        }
        auto left =
            coll::all_reduce(w, coll::elementwise([](std::int64_t a, std::int64_t) { return a; }));
        auto right =
            coll::all_reduce(w, coll::elementwise([](std::int64_t, std::int64_t b) { return b; }));
        CHECK(left.size() == n && right.size() == n);
        for (std::size_t i = 0; i < n && i < left.size() && i < right.size(); ++i) {
            CHECK(left[i] == std::int64_t(i));
            CHECK(right[i] == std::int64_t(p - 1) * 1000000 + std::int64_t(i));
        }
    }
    // std::vector<bool>: no contiguous elements (whole vectors, serialized).
    auto any =
        coll::all_reduce(std::vector<bool>(3, r == 0), coll::elementwise(std::logical_or<>{}));
    CHECK(any == std::vector<bool>(3, true));
    std::vector<std::string> words(600, letter(r));
    auto joined = coll::all_reduce(words, coll::elementwise(concat));
    CHECK(joined.size() == 600 && joined.front() == letters(0, p - 1) &&
          joined.back() == letters(0, p - 1));
    // One locality's vector is longer: every locality throws, none hangs, and the next
    // collective works.
    bool threw = false;
    try {
        coll::all_reduce(std::vector<int>(r == p - 1 ? 2000 : 1999, 1), ew_plus);
    } catch (std::invalid_argument const&) {
        threw = true;
    }
    CHECK(threw == (p > 1));
    CHECK(coll::all_reduce(std::vector<int>(2000, 1), ew_plus) == std::vector<int>(2000, int(p)));
}

void check_blocking_collectives() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    // all_reduce: a sum and a rank-ordered (non-commutative) concatenation.
    CHECK(coll::all_reduce(int(r + 1), std::plus<>{}) == int(p * (p + 1) / 2));
    CHECK(coll::all_reduce(letter(r), concat) == letters(0, p - 1));
    check_elementwise_all_reduce();
    for (std::uint32_t root = 0; root < p; ++root) {
        // broadcast of a vector from every root
        auto b = coll::broadcast(std::vector<int>{int(r), 42}, root);
        CHECK(b.size() == 2 && b[0] == int(root) && b[1] == 42);
        // reduce: meaningful on the root only
        auto red = coll::reduce(letter(r), concat, root);
        if (r == root) {
            CHECK(red == letters(0, p - 1));
        }
        // gather: full on the root, empty elsewhere
        auto g = coll::gather(std::string(r + 1, 'x'), root);
        if (r == root) {
            CHECK(g.size() == p);
            for (std::uint32_t i = 0; i < g.size(); ++i) {
                CHECK(g[i] == std::string(i + 1, 'x'));
            }
        } else {
            CHECK(g.empty());
        }
        // scatter: values read on the root only
        std::vector<int> values;
        if (r == root) {
            for (std::uint32_t i = 0; i < p; ++i) {
                values.push_back(int(100 * root + i));
            }
        }
        CHECK(coll::scatter(values, root) == int(100 * root + r));
    }
    auto ag = coll::all_gather(letter(r) + std::to_string(r));
    CHECK(ag.size() == p);
    for (std::uint32_t i = 0; i < ag.size(); ++i) {
        CHECK(ag[i] == letter(i) + std::to_string(i));
    }
    std::vector<std::pair<int, int>> out;
    for (std::uint32_t i = 0; i < p; ++i) {
        out.emplace_back(int(r), int(i));
    }
    auto a2a = coll::all_to_all(out);
    CHECK(a2a.size() == p);
    for (std::uint32_t i = 0; i < a2a.size(); ++i) {
        CHECK(a2a[i] == std::make_pair(int(i), int(r))); // from i, meant for r
    }
    CHECK(coll::inclusive_scan(letter(r), concat) == letters(0, r));
    CHECK(coll::exclusive_scan(letter(r), concat, std::string("<")) ==
          "<" + (r == 0 ? std::string() : letters(0, r - 1)));
    CHECK(coll::inclusive_scan(int(r + 1), std::plus<>{}) == int((r + 1) * (r + 2) / 2));
    coll::barrier();
}

void check_async_collectives() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    // Many collectives of every kind in flight at once, waited for in reverse order.
    constexpr int rounds = 20;
    std::vector<courier::future<int>> sums, scans, scatters, bcasts, reds;
    std::vector<courier::future<std::vector<int>>> gathers, alls, a2as;
    std::vector<courier::future<std::string>> excl;
    std::vector<courier::future<void>> barriers;
    std::vector<courier::future<std::vector<int>>> elementwise;
    for (int k = 0; k < rounds; ++k) {
        std::uint32_t root = std::uint32_t(k) % p;
        sums.push_back(coll::all_reduce_async(int(r) * k, std::plus<>{}));
        gathers.push_back(coll::gather_async(int(r) + k, root));
        alls.push_back(coll::all_gather_async(int(r) * 10 + k));
        scans.push_back(coll::inclusive_scan_async(1, std::plus<>{}));
        excl.push_back(coll::exclusive_scan_async(letter(r), concat, std::string()));
        std::vector<int> sc(r == root ? p : 0);
        std::iota(sc.begin(), sc.end(), k);
        scatters.push_back(coll::scatter_async(sc, root));
        bcasts.push_back(coll::broadcast_async(int(r) + 1000 * k, root));
        reds.push_back(coll::reduce_async(int(r), std::plus<>{}, root));
        std::vector<int> to(p);
        for (std::uint32_t i = 0; i < p; ++i) {
            to[i] = int(1000 * r + i + k);
        }
        a2as.push_back(coll::all_to_all_async(to));
        barriers.push_back(coll::barrier_async());
        elementwise.push_back(coll::all_reduce_async(std::vector<int>(1200 + k, int(r) + k),
                                                     coll::elementwise(std::plus<>{})));
    }
    for (int k = rounds - 1; k >= 0; --k) {
        std::uint32_t root = std::uint32_t(k) % p;
        barriers[k].get();
        CHECK(sums[k].get() == k * int(p * (p - 1) / 2));
        CHECK(elementwise[k].get() ==
              std::vector<int>(1200 + std::size_t(k), int(p * (p - 1) / 2) + k * int(p)));
        auto g = gathers[k].get();
        CHECK(g.size() == (r == root ? p : 0));
        for (std::uint32_t i = 0; i < g.size(); ++i) {
            CHECK(g[i] == int(i) + k);
        }
        auto a = alls[k].get();
        CHECK(a.size() == p);
        for (std::uint32_t i = 0; i < a.size(); ++i) {
            CHECK(a[i] == int(i) * 10 + k);
        }
        CHECK(scans[k].get() == int(r + 1));
        CHECK(excl[k].get() == (r == 0 ? std::string() : letters(0, r - 1)));
        CHECK(scatters[k].get() == k + int(r));
        CHECK(bcasts[k].get() == int(root) + 1000 * k);
        int red = reds[k].get();
        if (r == root) {
            CHECK(red == int(p * (p - 1) / 2));
        }
        auto t = a2as[k].get();
        CHECK(t.size() == p);
        for (std::uint32_t i = 0; i < t.size(); ++i) {
            CHECK(t[i] == int(1000 * i + r + k));
        }
    }
}

std::string hello(std::uint32_t from) {
    return "hello " + std::to_string(from) + " from " + std::to_string(courier::get_locality_id());
}
COURIER_PLAIN_ACTION(hello, hello_action);

std::atomic<bool> go_signal{false};
void go() {
    go_signal = true;
}
COURIER_PLAIN_ACTION(go, go_action);

/// The calling task is not blocked by an _async collective: while the collective waits for a
/// locality that joins late (only once locality 0 has checked, and tells it to go), the caller
/// makes a round trip of its own.
void check_async_does_not_block() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    if (p < 2) {
        return;
    }
    if (r == p - 1) { // suspends this task only: its workers keep serving calls
        while (!go_signal) {
            courier::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    auto f = coll::all_reduce_async(1, std::plus<>{});
    if (r == 0) {
        CHECK(!f.is_ready());
        CHECK(courier::async<hello_action>(courier::find_all_localities()[1], r).get() ==
              "hello 0 from 1");
        CHECK(!f.is_ready()); // still waiting for the late locality
        courier::post<go_action>(courier::find_all_localities()[p - 1]);
    }
    CHECK(f.get() == int(p));
}

/// Large values travel as pointer chunks pulled by RMA (zero copy on the send side).
void check_large_values() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    std::size_t const n = std::size_t{1} << 17; // 1 MiB of doubles
    auto before = courier::get_parcelport_statistics();
    double const read_before = my_counter("/collectives/bytes/shm-read");
    coll::barrier(); // no locality sends its large value before every one has read `before`
    std::vector<double> mine(n, double(r + 1));
    auto sum = coll::all_reduce(mine, [](std::vector<double> a, std::vector<double> const& b) {
        for (std::size_t i = 0; i < a.size(); ++i) {
            a[i] += b[i];
        }
        return a;
    });
    CHECK(sum.size() == n);
    CHECK(sum.front() == double(p * (p + 1) / 2) && sum.back() == double(p * (p + 1) / 2));
    auto all = coll::all_gather(std::vector<double>(n / 4, double(r)));
    CHECK(all.size() == p);
    for (std::uint32_t i = 0; i < all.size(); ++i) {
        CHECK(all[i].size() == n / 4 && all[i][7] == double(i));
    }
    auto after = courier::get_parcelport_statistics();
    // Zero copy: read by RMA or copied out of the sender's shm outbox (parcels), or copied
    // once straight from the sender's memory (the shared-memory collectives between
    // localities of one host).
    double const read_directly = my_counter("/collectives/bytes/shm-read") - read_before;
    if (p > 1) {
        double const moved =
            double(after.rendezvous_bytes_received() - before.rendezvous_bytes_received()) +
            read_directly;
        CHECK(moved >= double(n * sizeof(double)));
        if (moved < double(n * sizeof(double))) {
            std::fprintf(stderr, "rma bytes read %llu -> %llu, rendezvous sends %llu -> %llu\n",
                         (unsigned long long)before.rma_bytes_read,
                         (unsigned long long)after.rma_bytes_read,
                         (unsigned long long)before.rendezvous_sends,
                         (unsigned long long)after.rendezvous_sends);
        }
    }
}

int scenario_collectives() {
    check_blocking_collectives();
    check_async_collectives();
    check_async_does_not_block();
    check_large_values();
    return courier_test::verdict("collectives");
}

// ---- the shared-memory path of collectives (collective_rings) ----
/// `expect_rings`: the localities share this host and --courier:shm_collectives is on, so small
/// messages must take the rings; else none may.
int scenario_shm_paths(bool expect_rings) {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    double const sent0 = my_counter("/collectives/count/shm-sent");
    for (int i = 0; i < 50; ++i) {
        CHECK(coll::all_reduce(int(r) + i, std::plus<>{}) == int(p * (p - 1) / 2) + i * int(p));
    }
    double const sent = my_counter("/collectives/count/shm-sent") - sent0;
    if (p > 1) {
        CHECK(expect_rings ? sent >= 50 : sent == 0);
        std::printf("shm_paths: locality %u sent %.0f messages through shared memory\n", r, sent);
    }

    // More in flight than a ring holds (8 cells per pair): the rest travel as parcels, and
    // every result is right whatever its path.
    std::vector<courier::future<std::vector<std::vector<int>>>> many;
    for (int i = 0; i < 64; ++i) {
        many.push_back(coll::all_gather_async(std::vector<int>{int(r), i}));
    }
    for (int i = 63; i >= 0; --i) {
        auto all = many[static_cast<std::size_t>(i)].get();
        CHECK(all.size() == p);
        for (std::uint32_t j = 0; j < all.size(); ++j) {
            CHECK(all[j].size() == 2 && all[j][0] == int(j) && all[j][1] == i);
        }
    }

    // Values on both sides of a cell's capacity (992 bytes: 123 doubles and their count fit,
    // 124 do not), of different sizes on different localities in one collective.
    for (std::size_t base : {100, 123, 124, 200, 1000}) {
        std::size_t const n = base + r % 3;
        auto all = coll::all_gather(std::vector<double>(n, double(r) + 0.5));
        CHECK(all.size() == p);
        for (std::uint32_t j = 0; j < all.size(); ++j) {
            CHECK(all[j].size() == base + j % 3 && all[j].back() == double(j) + 0.5);
        }
        auto sum = coll::all_reduce(std::vector<double>(base, 1.0),
                                    [](std::vector<double> a, std::vector<double> const& b) {
                                        for (std::size_t k = 0; k < a.size(); ++k) {
                                            a[k] += b[k];
                                        }
                                        return a;
                                    });
        CHECK(sum.size() == base && sum.front() == double(p) && sum.back() == double(p));
    }
    // Those too large for a cell were copied straight from their senders' memory.
    double const read = coll::all_reduce(my_counter("/collectives/bytes/shm-read"), std::plus<>{});
    if (p > 1) {
        CHECK(expect_rings ? read >= double(p * 124 * sizeof(double)) : read == 0);
    }
    // Values that are not flat go serialized (strings, nested in vectors).
    CHECK(coll::all_reduce(letter(r), concat) == letters(0, p - 1));
    auto words = coll::all_gather(std::vector<std::string>{letter(r), std::string(r, 'z')});
    for (std::uint32_t j = 0; j < words.size(); ++j) {
        CHECK(words[j].size() == 2 && words[j][0] == letter(j) && words[j][1].size() == j);
    }

    // A late locality: its peers give up spinning and suspend, so its messages must wake them
    // (a nudge parcel), or the collective would hang.
    double const nudges0 = my_counter("/collectives/count/shm-nudges");
    if (r == p - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    CHECK(coll::all_reduce(1, std::plus<>{}) == int(p));
    double const nudges =
        coll::all_reduce(my_counter("/collectives/count/shm-nudges") - nudges0, std::plus<>{});
    if (p > 1) {
        CHECK(expect_rings ? nudges >= 1 : nudges == 0);
        if (r == 0) {
            std::printf("shm_paths: %.0f nudges after a late locality\n", nudges);
        }
    }

    // Lent values. A large vector passed to all_gather by reference is read by the others
    // where it is: it stays as it was, and the result holds a copy of it.
    std::vector<double> const big(4096, double(r) + 0.25);
    double const big_read0 = my_counter("/collectives/bytes/shm-read");
    coll::barrier(); // no locality sends its value before every one has read big_read0
    auto gathered = coll::all_gather(big);
    CHECK(gathered.size() == p && gathered[r].data() != big.data());
    CHECK(big.size() == 4096 && big.front() == double(r) + 0.25);
    for (std::uint32_t j = 0; j < gathered.size(); ++j) {
        CHECK(gathered[j].size() == 4096 && gathered[j].front() == double(j) + 0.25 &&
              gathered[j].back() == double(j) + 0.25);
    }
    // An rvalue is moved into the result, not copied.
    std::vector<double> moved(4096, double(r));
    double const* const moved_data = moved.data();
    auto gathered_moved = coll::all_gather(std::move(moved));
    CHECK(gathered_moved.size() == p && gathered_moved[r].data() == moved_data);
    double const big_read =
        coll::all_reduce(my_counter("/collectives/bytes/shm-read") - big_read0, std::plus<>{});
    if (p > 1) {
        CHECK(expect_rings ? big_read >= double(p * (p - 1) * 4096 * sizeof(double))
                           : big_read == 0);
    }
    // The root of a broadcast lends its value to a late child and returns it: it may return
    // only once the child has copied it, so overwriting it at once must not reach the child.
    std::vector<double> root_value(8192, r == 0 ? 7.0 : 0.0);
    if (r == p - 1 && r != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    auto cast = coll::broadcast(std::move(root_value), 0);
    if (r == 0) {
        std::fill(cast.begin(), cast.end(), -1.0);
    } else {
        CHECK(cast.size() == 8192 &&
              std::all_of(cast.begin(), cast.end(), [](double x) { return x == 7.0; }));
    }
    return courier_test::verdict("shm_paths");
}

// ---- names ----
struct named_thing : courier::component_base<named_thing> {
    explicit named_thing(std::uint32_t w = 0) : who(w) {}
    std::uint32_t where() const { return who; }
    COURIER_COMPONENT_ACTION(named_thing, where, where_action);
    std::uint32_t who;
};
COURIER_REGISTER_COMPONENT(named_thing);

int scenario_names() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    // Lookups before the registrations: they wait. Locality 0 registers last, after a pause.
    std::vector<courier::future<courier::id_type>> found;
    for (std::uint32_t i = 0; i < p; ++i) {
        found.push_back(courier::find_from_basename("thing", i));
    }
    if (r == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        CHECK(p == 1 || !found[0].is_ready());
    }
    auto id = courier::new_<named_thing>(courier::find_here(), r).get();
    CHECK(courier::register_with_basename("thing", id).get());
    CHECK(!courier::register_with_basename("thing", id).get()); // taken
    for (std::uint32_t i = 0; i < p; ++i) {
        auto other = found[i].get();
        CHECK(courier::get_locality_id(other) == i);
        CHECK(courier::async<named_thing::where_action>(other).get() == i);
    }
    coll::barrier();
    // Unregister: the name goes, the id comes back; a later lookup waits for a new one.
    auto back = courier::unregister_with_basename("thing").get();
    CHECK(back == id);
    CHECK(!courier::unregister_with_basename("thing").get());
    coll::barrier();
    auto again = courier::find_from_basename("thing", (r + 1) % p);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(!again.is_ready());
    coll::barrier();
    CHECK(courier::register_with_basename("thing", id).get());
    CHECK(courier::get_locality_id(again.get()) == (r + 1) % p);
    coll::barrier();
    return courier_test::verdict("names");
}

std::atomic<std::uint32_t> barrier_done{0};
void count_barrier_done() {
    ++barrier_done;
}
COURIER_PLAIN_ACTION(count_barrier_done, barrier_done_action);

/// A name of a component on a locality that dies: its lookups fail with network_error.
int scenario_names_dead() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    if (r == p - 1) {
        auto id = courier::new_<named_thing>(courier::find_here(), r).get();
        courier::register_with_basename("doomed", id).get();
    }
    coll::barrier();
    // The doomed locality dies once every other one has finished the barrier (its messages of
    // the barrier's last round may still be on their way when its own barrier returns).
    if (r == p - 1) {
        while (barrier_done.load() != p - 1) {
            courier::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::_Exit(3); // dies without a word
    }
    courier::post<barrier_done_action>(courier::find_all_localities()[p - 1]);
    // Wait until this locality knows, then look the name up (whichever locality serves it).
    for (int i = 0; i < 400; ++i) {
        try {
            courier::async<named_thing::where_action>(
                courier::find_from_basename("doomed", p - 1).get())
                .get();
        } catch (courier::network_error const& e) {
            std::printf("names_dead: network_error on locality %u: %s\n", r, e.what());
            std::fflush(stdout);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    try {
        (void)courier::find_from_basename("doomed", p - 1).get();
        CHECK(!"a lookup of a dead locality's component succeeded");
    } catch (courier::network_error const&) {
    }
    // Collectives are broken for good: they fail, never hang.
    try {
        coll::barrier();
        CHECK(!"a barrier with a dead locality completed");
    } catch (courier::network_error const& e) {
        std::printf("names_dead: barrier failed: %s\n", e.what());
    }
    return courier_test::verdict("names_dead");
}

/// A locality dies before it has copied a value lent to it (a large broadcast value, named by
/// address in shared memory): the root's broadcast fails with network_error, neither hanging
/// nor returning a value the dead locality could still be reading.
int scenario_lend_dead() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    coll::barrier();
    if (r == p - 1) {
        // Out of every collective (nothing drains its inbox), alive while the root lends.
        // (Its worker keeps running: the post and the barrier's last nudge must leave.)
        courier::post<go_action>(courier::find_all_localities()[0]); // it has left the barrier
        courier::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::_Exit(3); // dies without a word, before its broadcast
    }
    while (r == 0 && !go_signal.load()) {
        courier::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto const t0 = std::chrono::steady_clock::now();
    try {
        auto v = coll::broadcast(std::vector<double>(8192, 1.0), 0);
        CHECK(r != 0 && v.size() == 8192); // the root lent to the dying locality
    } catch (courier::network_error const& e) {
        CHECK(r == 0 || p > 2);
        std::printf("lend_dead: locality %u: network_error after %.2f s: %s\n", r,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    e.what());
    }
    return courier_test::verdict("lend_dead");
}

// ---- channels ----
int scenario_channels() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    courier::distributed::channel<std::vector<int>> mine(courier::find_here());
    CHECK(mine.register_as("ring/" + std::to_string(r)).get());
    courier::distributed::channel<std::vector<int>> right;
    right.connect_to("ring/" + std::to_string((r + 1) % p)); // usable at once
    constexpr std::size_t generations = 1000;
    // Gets first (every generation waits on this locality's channel), then the left
    // neighbour's sets arrive, newest generation first.
    std::vector<courier::future<std::vector<int>>> gets;
    for (std::size_t g = 0; g < generations; ++g) {
        gets.push_back(mine.get(g));
    }
    coll::barrier();
    for (std::size_t g = generations; g-- > 0;) {
        right.set(std::vector<int>{int(r), int(g)}, g);
    }
    std::uint32_t const left = (r + p - 1) % p;
    for (std::size_t g = 0; g < generations; ++g) {
        auto v = gets[g].get();
        CHECK(v.size() == 2 && v[0] == int(left) && v[1] == int(g));
    }
    coll::barrier();
    // Values set before their get are kept; a generation taken is gone: a second get waits.
    right.set(std::vector<int>{7}, 5000);
    coll::barrier();
    CHECK(mine.get(5000).get() == std::vector<int>{7});
    auto second = mine.get(5000);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(!second.is_ready());
    coll::barrier();
    right.set(std::vector<int>{8}, 5000);
    CHECK(second.get() == std::vector<int>{8});
    // A large value (zero copy on the way) through a channel.
    std::vector<int> big(1 << 18, int(r));
    right.set(big, 6000);
    auto got = mine.get(6000).get();
    CHECK(got.size() == big.size() && got[12345] == int(left));
    coll::barrier();
    // A get on a channel whose every reference goes away fails instead of waiting for ever.
    auto orphan = courier::distributed::channel<int>(courier::find_here()).get(3);
    try {
        (void)orphan.get();
        CHECK(!"a get on a destroyed channel returned");
    } catch (courier::remote_exception const& e) {
        CHECK(std::string(e.what()).find("destroyed") != std::string::npos);
    }
    coll::barrier();
    return courier_test::verdict("channels");
}

// ---- actions answering with a future ----
courier::future<int> later_double(int x) {
    return courier::async([x] {
        courier::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (x < 0) {
            throw std::domain_error("negative " + std::to_string(x));
        }
        return 2 * x;
    });
}
COURIER_PLAIN_ACTION(later_double, later_double_action);

int scenario_future_actions() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    auto right = courier::find_all_localities()[(r + 1) % p];
    std::vector<courier::future<int>> fs;
    for (int i = 0; i < 200; ++i) { // more than workers: nobody blocks a worker while waiting
        fs.push_back(courier::async<later_double_action>(right, i));
    }
    for (int i = 0; i < 200; ++i) {
        CHECK(fs[i].get() == 2 * i);
    }
    try {
        courier::async<later_double_action>(right, -3).get();
        CHECK(!"no exception");
    } catch (courier::remote_exception const& e) {
        CHECK(std::string(e.what()).find("negative -3") != std::string::npos);
        CHECK(e.locality() == (r + 1) % p);
    }
    coll::barrier();
    return courier_test::verdict("future_actions");
}

/// Collective messages a peer forges or repeats: a receive of the wrong type fails with the
/// types named, a duplicate is dropped (logged) and does not replace the first value.
int scenario_bad_messages() {
    std::uint32_t const r = courier::get_locality_id(), p = courier::get_num_localities();
    CHECK(p == 3);
    auto const localities = courier::find_all_localities();
    coll::barrier(); // generation 0
    if (r == 1) {
        // Generation 1, round 0 is where locality 0 receives the broadcast from root 1. When
        // that receive waits already, the forged message fails it and this call fails too.
        try {
            courier::async<coll::detail::message_action<std::string>>(
                localities[0], std::uint64_t{1}, 0u, std::string("forged"))
                .get();
        } catch (courier::remote_exception const& e) {
            CHECK(std::string(e.what()).find("expected a int") != std::string::npos);
        }
        std::uint64_t const far = std::uint64_t{1} << 40;
        courier::async<coll::detail::message_action<int>>(localities[0], far, 0u, 5).get();
        courier::async<coll::detail::message_action<int>>(localities[0], far, 0u, 6).get();
    }
    std::string error;
    try {
        CHECK(coll::broadcast(7, 1) == 7); // generation 1
    } catch (std::exception const& e) {
        error = e.what();
    }
    CHECK((r == 0) == !error.empty());
    if (r == 0) {
        CHECK(error.find("expected a int, got a std::") != std::string::npos);
    }
    coll::barrier(); // generation 2: the messages of locality 1 have all arrived
    if (r == 0) {
        coll::detail::round_trip c(std::uint64_t{1} << 40);
        CHECK(c.receive<int>(1, 0) == 5); // the first one, kept
    }
    coll::barrier();
    return courier_test::verdict("bad_messages");
}

} // namespace

int courier_main(int argc, char** argv) {
    std::string scenario = argc > 1 ? argv[1] : "collectives";
    int rc = 1;
    if (scenario == "collectives") {
        rc = scenario_collectives();
    } else if (scenario == "names") {
        rc = scenario_names();
    } else if (scenario == "names_dead") {
        rc = scenario_names_dead();
    } else if (scenario == "lend_dead") {
        rc = scenario_lend_dead();
    } else if (scenario == "channels") {
        rc = scenario_channels();
    } else if (scenario == "future_actions") {
        rc = scenario_future_actions();
    } else if (scenario == "shm_paths") {
        rc = scenario_shm_paths(argc > 2 && std::string(argv[2]) == "rings");
    } else if (scenario == "bad_messages") {
        rc = scenario_bad_messages();
    } else {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    }
    courier::finalize();
    return rc;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
