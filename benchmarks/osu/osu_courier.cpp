// SPDX-License-Identifier: BSL-1.0
// OSU-style latency, bandwidth and bidirectional bandwidth of Courier actions, as HPX measures
// its parcelport: an action receiving a serialize_buffer<char> (reference mode on the sender:
// the payload is a pointer chunk, read by the receiver with RMA above the eager threshold), or
// with --buffer=rma_vector an rma_vector<char> (the HPX paper's Figure 5: an rma chunk from the
// registered pool, received into pool memory and adopted), or with --buffer=std_vector a
// std::vector<char> (a pointer chunk on send, one copy out of the receive buffer on receive).
//   courier-run -n 2 osu_courier [--courier:provider=shm] [--courier:threads=N]
//       [--buffer=serialize_buffer|rma_vector|std_vector] [--tests=latency,bw,bibw,mr,wake]
//       [--latency=echo] [--max-size=BYTES] [--peer=K] [--label=PROVIDER_COLUMN]
//       [--percentiles] [--quick]
// Under mpirun with --courier:parcelport=mpi (the MPI parcelport) the names are "courier-mpi",
// "courier-mpi-rma" and so on, with --label=tcp|shm naming the BTL mpirun was given.
// Reported as "courier" (serialize_buffer), "courier-rma" (rma_vector), "courier-vector"
// (std::vector), or "courier-nocache" (serialize_buffer with --courier:registration_cache=0:
// one registration per send), with "-echo" appended under --latency=echo.
// latency: each side sends `size` bytes from memory it never writes, as osu_latency (pong
// below); --latency=echo sends the received buffer back instead, as HPX's osu_latency does.
// --percentiles: with each latency line, "PERCENTILES impl provider threads latency size p10
// p50 p90 p99 max" (one-way µs: each timed round trip over 2), whether a mean comes from the
// whole distribution or from a tail; the stamps add a clock read to each timed call.
// mr (osu_mbw_mr) runs on an even number of localities: the first half send to the second,
// one-way posts (no reply each) in windows of 64, each window closed by one reply.
// Methodology and output format: osu_common.hpp.
#include "osu_common.hpp"

#include <courier/courier.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

namespace {

using buffer = courier::serialize_buffer<char>;
using rma_buffer = courier::rma_vector<char>;
using clock_type = std::chrono::steady_clock;

/// latency with --latency=echo (HPX's osu_latency): the received buffer goes back.
buffer echo(buffer const& b) {
    return b;
}
COURIER_PLAIN_ACTION(echo, echo_action);
rma_buffer echo_rma(rma_buffer const& b) {
    return b;
}
COURIER_PLAIN_ACTION(echo_rma, echo_rma_action);

/// bw: the receiver takes the message; its (empty) reply is the per-message completion.
void sink(buffer const&) {}
COURIER_PLAIN_ACTION(sink, sink_action);
void sink_rma(rma_buffer const&) {}
COURIER_PLAIN_ACTION(sink_rma, sink_rma_action);
std::vector<char> echo_vec(std::vector<char> const& b) {
    return b;
}
COURIER_PLAIN_ACTION(echo_vec, echo_vec_action);
void sink_vec(std::vector<char> const&) {}
COURIER_PLAIN_ACTION(sink_vec, sink_vec_action);

enum class kind { serialize_buffer, rma_vector, std_vector };

std::vector<char>& payload() {
    static std::vector<char> p;
    return p;
}

/// One rma_vector per size, allocated once from the registered pool (as an application keeps
/// its registered arrays).
template <class Buffer>
Buffer const& payload_of_size(std::size_t size) {
    static courier::mutex m;
    static std::map<std::size_t, Buffer> by_size;
    std::lock_guard g(m);
    auto it = by_size.find(size);
    if (it == by_size.end()) {
        it = by_size.emplace(size, Buffer(size, 'a')).first;
    }
    return it->second;
}
rma_buffer const& rma_payload(std::size_t size) {
    return payload_of_size<rma_buffer>(size);
}

/// latency (osu_latency's method, which osu_fabric and osu_mpi follow): the answer is
/// `b.size()` bytes of the peer's own memory, which no one writes; so each side sends from a
/// buffer it never writes and receives into one it does not send from. An echo sends back
/// what the peer has just written, whose cache lines the reader must then take from the
/// other core: on a 2-core Intel Xeon that made a 256 KiB shm read 1.5-2x slower, a cost the
/// baselines do not pay.
/// The peer's buffer of a size is looked up (a lock and a map search) when the size changes,
/// not in every timed round trip; payload_of_size's entries live as long as the process.
template <class Buffer>
Buffer const& pong_payload(std::size_t size) {
    thread_local std::size_t last_size = SIZE_MAX;
    thread_local Buffer const* last = nullptr;
    if (size != last_size) {
        last = &payload_of_size<Buffer>(size);
        last_size = size;
    }
    return *last;
}
buffer pong(buffer const& b) {
    auto const& mine = pong_payload<std::vector<char>>(b.size());
    return buffer(mine.data(), b.size(), buffer::reference);
}
COURIER_PLAIN_ACTION(pong, pong_action);
rma_buffer pong_rma(rma_buffer const& b) {
    return pong_payload<rma_buffer>(b.size());
}
COURIER_PLAIN_ACTION(pong_rma, pong_rma_action);

void run_window(courier::id_type const& to, std::size_t size, kind k) {
    std::vector<courier::future<void>> fs;
    fs.reserve(osu::window);
    if (k == kind::rma_vector) {
        rma_buffer const& b = rma_payload(size);
        for (int w = 0; w < osu::window; ++w) {
            fs.push_back(courier::async<sink_rma_action>(to, b));
        }
    } else if (k == kind::std_vector) {
        auto const& b = payload_of_size<std::vector<char>>(size);
        for (int w = 0; w < osu::window; ++w) {
            fs.push_back(courier::async<sink_vec_action>(to, b));
        }
    } else {
        buffer b(payload().data(), size, buffer::reference);
        for (int w = 0; w < osu::window; ++w) {
            fs.push_back(courier::async<sink_action>(to, b));
        }
    }
    courier::wait_all(fs);
    for (auto& f : fs) {
        f.get();
    }
}

// ---- mr (osu_mbw_mr): windows of one-way posts, each window closed by one reply ----------

/// The receiving side: messages counted; one sender at a time waits for a count.
struct mr_receiver {
    std::atomic<std::uint64_t> count{0};
    std::atomic<bool> waiting{false};
    std::mutex m;
    std::uint64_t target = 0;
    courier::promise<void> waiter;
};
mr_receiver& receiver() {
    static mr_receiver r;
    return r;
}
void release_if_reached(mr_receiver& r) {
    std::unique_lock lk(r.m);
    if (r.waiting.load() && r.count.load() >= r.target) {
        r.waiting.store(false);
        courier::promise<void> p = std::move(r.waiter);
        lk.unlock();
        p.set_value();
    }
}
void mr_message(buffer const&) {
    mr_receiver& r = receiver();
    r.count.fetch_add(1); // seq_cst, then `waiting`: pairs with mr_wait's store, then load
    if (r.waiting.load()) {
        release_if_reached(r);
    }
}
COURIER_PLAIN_ACTION(mr_message, mr_message_action);
std::uint64_t mr_count() {
    return receiver().count.load();
}
COURIER_PLAIN_ACTION(mr_count, mr_count_action);
/// Ready once `target` messages have arrived in all (the reply closes the sender's window).
courier::future<void> mr_wait(std::uint64_t target) {
    mr_receiver& r = receiver();
    courier::future<void> f;
    {
        std::lock_guard lk(r.m);
        r.waiter = courier::promise<void>();
        f = r.waiter.get_future();
        r.target = target;
        r.waiting.store(true);
    }
    release_if_reached(r); // messages that came before `waiting` was set
    return f;
}
COURIER_PLAIN_ACTION(mr_wait, mr_wait_action);

/// One sender of `mr`: `skip` + `loops` windows of posts to `dest`; returns the seconds the
/// timed loops took.
double mr_send(std::uint32_t dest, std::size_t size, int skip, int loops) {
    payload().resize(std::max(payload().size(), size));
    auto to = courier::find_all_localities()[dest];
    buffer b(payload().data(), size, buffer::reference);
    std::uint64_t done = courier::async<mr_count_action>(to).get();
    clock_type::time_point t0;
    for (int l = 0; l < skip + loops; ++l) {
        if (l == skip) {
            t0 = clock_type::now();
        }
        for (int w = 0; w < osu::window; ++w) {
            courier::post<mr_message_action>(to, b);
        }
        done += osu::window;
        courier::async<mr_wait_action>(to, done).get();
    }
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}
COURIER_PLAIN_ACTION(mr_send, mr_send_action);

/// bibw: the peer runs its windows towards us while we run ours towards it.
void windows_towards(std::uint32_t dest, std::size_t size, int loops, kind k) {
    payload().resize(std::max(payload().size(), size));
    auto to = courier::find_all_localities()[dest];
    for (int l = 0; l < loops; ++l) {
        run_window(to, size, k);
    }
}
COURIER_PLAIN_ACTION(windows_towards, windows_towards_action);

/// One-way latencies (µs) of the calls between consecutive `stamps`, as percentiles.
void print_percentiles(std::string const& impl, std::string const& provider, int threads,
                       std::size_t size, std::vector<clock_type::time_point> const& stamps) {
    std::vector<double> one_way;
    for (std::size_t i = 1; i < stamps.size(); ++i) {
        one_way.push_back(
            std::chrono::duration<double, std::micro>(stamps[i] - stamps[i - 1]).count() / 2);
    }
    if (one_way.empty()) {
        return;
    }
    std::sort(one_way.begin(), one_way.end());
    auto at = [&](double q) {
        return one_way[static_cast<std::size_t>(q * static_cast<double>(one_way.size() - 1))];
    };
    std::printf("PERCENTILES %s %s %d latency %zu %.3f %.3f %.3f %.3f %.3f\n", impl.c_str(),
                provider.c_str(), threads, size, at(0.1), at(0.5), at(0.9), at(0.99),
                one_way.back());
    std::fflush(stdout);
}

int courier_main(int argc, char** argv) {
    std::vector<std::string> rest;
    auto plan = osu::parse(argc, argv, &rest);
    kind k = kind::serialize_buffer;
    std::uint32_t peer_id = 1;
    std::string label;
    bool echo = false;
    bool percentiles = false;
    for (auto const& a : rest) {
        if (a.rfind("--peer=", 0) == 0) {
            peer_id = static_cast<std::uint32_t>(std::stoul(a.substr(7)));
        } else if (a.rfind("--label=", 0) == 0) {
            label = a.substr(8);
        } else if (a == "--latency=echo") {
            echo = true;
        } else if (a == "--percentiles") {
            percentiles = true;
        } else if (a == "--buffer=rma_vector") {
            k = kind::rma_vector;
        } else if (a == "--buffer=std_vector") {
            k = kind::std_vector;
        } else if (a != "--buffer=serialize_buffer") {
            std::fprintf(stderr, "osu_courier: unknown argument %s\n", a.c_str());
            return courier::finalize(), 2;
        }
    }
    // Over the MPI parcelport: "courier-mpi", "courier-mpi-rma", ...
    bool const over_mpi = courier::get_config_entry("parcelport").value_or("") == "mpi";
    std::string impl = k == kind::rma_vector   ? "courier-rma"
                       : k == kind::std_vector ? "courier-vector"
                       : courier::get_config_entry("registration_cache").value_or("") == "0"
                           ? "courier-nocache"
                           : "courier";
    if (over_mpi) {
        impl.insert(7, "-mpi");
    }
    if (echo) {
        impl += "-echo";
    }
    auto all = courier::find_all_localities();
    bool const mr = std::find(plan.tests.begin(), plan.tests.end(), "mr") != plan.tests.end();
    if (mr && all.size() % 2 != 0) {
        std::fprintf(stderr, "osu_courier --tests=mr needs an even number of localities "
                             "(the first half send to the second)\n");
        return courier::finalize(), 1;
    }
    if (all.size() < 2 || peer_id == 0 || peer_id >= all.size()) {
        std::fprintf(stderr, "osu_courier measures locality 0 against --peer=K (default 1) of "
                             "at least 2 localities\n");
        return courier::finalize(), 1;
    }
    auto peer = all[peer_id];
    std::string provider =
        label.empty() ? courier::get_config_entry("provider").value_or("?") : label;
    int threads = static_cast<int>(courier::get_os_thread_count());
    payload().assign(plan.max_size(), 'a');
    for (auto const& test : plan.tests) {
        if (test == "wake") {
            // An 8-byte round trip to a locality that has been idle for `gap` (both sides
            // sleep meanwhile): what an idle locality's wake-up costs (median of 25).
            buffer b(payload().data(), 8, buffer::reference);
            for (int gap_us : {100, 1000, 5000, 20000}) {
                std::vector<double> rtt;
                for (int i = 0; i < 25; ++i) {
                    courier::this_thread::sleep_for(std::chrono::microseconds(gap_us));
                    auto t0 = clock_type::now();
                    courier::async<echo_action>(peer, b).get();
                    rtt.push_back(
                        std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
                }
                std::nth_element(rtt.begin(), rtt.begin() + 12, rtt.end());
                osu::report(impl.c_str(), provider, threads, "wake",
                            static_cast<std::size_t>(gap_us), rtt[12]);
            }
            continue;
        }
        for (std::size_t size : plan.sizes) {
            double value = 0;
            if (test == "latency") {
                buffer b(payload().data(), size, buffer::reference);
                rma_buffer const* rb = k == kind::rma_vector ? &rma_payload(size) : nullptr;
                auto const* vb =
                    k == kind::std_vector ? &payload_of_size<std::vector<char>>(size) : nullptr;
                int skip = plan.latency_skip(size), iters = plan.latency_iterations(size);
                std::vector<clock_type::time_point> stamps; // --percentiles: each call's start
                if (percentiles) {
                    stamps.reserve(static_cast<std::size_t>(iters) + 1);
                }
                clock_type::time_point t0;
                for (int i = 0; i < skip + iters; ++i) {
                    if (i == skip) {
                        t0 = clock_type::now();
                    }
                    if (percentiles && i >= skip) {
                        stamps.push_back(clock_type::now());
                    }
                    std::size_t got = 0;
                    if (vb != nullptr) {
                        got = courier::async<echo_vec_action>(peer, *vb).get().size();
                    } else if (rb != nullptr) {
                        got = (echo ? courier::async<echo_rma_action>(peer, *rb)
                                    : courier::async<pong_rma_action>(peer, *rb))
                                  .get()
                                  .size();
                    } else {
                        got = (echo ? courier::async<echo_action>(peer, b)
                                    : courier::async<pong_action>(peer, b))
                                  .get()
                                  .size();
                    }
                    if (got != size) {
                        std::fprintf(stderr, "echo returned %zu bytes, sent %zu\n", got, size);
                        return courier::finalize(), 1;
                    }
                }
                auto const t1 = clock_type::now();
                value = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters / 2;
                if (percentiles) {
                    stamps.push_back(t1);
                    print_percentiles(impl, provider, threads, size, stamps);
                }
            } else if (test == "bw" || test == "bibw") {
                bool bi = test == "bibw";
                int skip = plan.bw_skip(size), loops = plan.bw_loops(size);
                // The warm-up runs both ways in bibw, as OSU's (and osu_mpi's, osu_fabric's):
                // the peer's first windows towards us must not fall into the timed loops.
                courier::future<void> warm;
                if (bi) {
                    warm = courier::async<windows_towards_action>(peer, 0u, size, skip, k);
                }
                for (int l = 0; l < skip; ++l) {
                    run_window(peer, size, k);
                }
                if (bi) {
                    warm.get();
                }
                auto t0 = clock_type::now();
                courier::future<void> other;
                if (bi) {
                    other = courier::async<windows_towards_action>(peer, 0u, size, loops, k);
                }
                for (int l = 0; l < loops; ++l) {
                    run_window(peer, size, k);
                }
                if (bi) {
                    other.get();
                }
                double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
                value = double(size) * osu::window * loops * (bi ? 2 : 1) / secs / 1e6;
            } else if (test == "mr") {
                // The first half of the localities send, each to its partner in the second
                // half, all at once; messages per second over all pairs.
                auto pairs = static_cast<std::uint32_t>(all.size() / 2);
                int skip = plan.bw_skip(size), loops = plan.bw_loops(size) * 4;
                std::vector<courier::future<double>> senders;
                for (std::uint32_t i = 0; i < pairs; ++i) {
                    senders.push_back(
                        courier::async<mr_send_action>(all[i], i + pairs, size, skip, loops));
                }
                double secs = 0;
                for (auto& f : senders) {
                    secs = std::max(secs, f.get());
                }
                value = double(pairs) * osu::window * loops / secs;
            } else {
                std::fprintf(stderr, "unknown test '%s'\n", test.c_str());
                return courier::finalize(), 1;
            }
            osu::report(impl.c_str(), provider, threads, test, size, value);
        }
    }
    return courier::finalize();
}

} // namespace

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
