// SPDX-License-Identifier: BSL-1.0
// The MPI transport allocates a large parcel's landing buffer without its lock (run under
// `mpirun -np 2`, optionally with the argument "multiple" for MPI_THREAD_MULTIPLE). Allocating
// can take long (AddressSanitizer writes the shadow of a new 2 GiB block page by page, about a
// second), and while one thread allocated inside a progress pass that held the lock, no other
// thread could progress: the locality's heartbeats stayed queued and its peer declared it
// failed. Here every landing buffer of 32 MiB or more takes a second to allocate (this program
// replaces the aligned operator new[], which the receive buffer pool uses); locality 1 sends a
// 64 MiB parcel and, every 5 ms, a small one. Locality 0 progresses on two threads, and small
// parcels must arrive while the large one's buffer is being allocated.
#include <courier/common/log.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/serialization.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace pp = courier::parcelport;
namespace cs = courier::serialization;

namespace {

constexpr std::size_t slow_from = std::size_t{32} << 20;
constexpr std::size_t big_size = std::size_t{64} << 20;
constexpr auto slow_for = std::chrono::seconds(1);
std::atomic<int> slow_allocations{0};
std::atomic<bool> allocating_slowly{false};
int failures = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

enum kind : int { tick = 0, big = 1, stop = 2 };

char pattern(std::size_t i) {
    return static_cast<char>(i * 7 % 251);
}

template <class Until>
bool pump(pp::transport& tp, Until until) {
    auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!until()) {
        tp.progress();
        if (std::chrono::steady_clock::now() > limit) {
            return false;
        }
    }
    return true;
}

} // namespace

// The receive buffer pool's allocation (aligned to a cache line): slow from 32 MiB on.
void* operator new[](std::size_t n, std::align_val_t a) {
    if (n >= slow_from) {
        ++slow_allocations;
        allocating_slowly.store(true);
        std::this_thread::sleep_for(slow_for);
        allocating_slowly.store(false);
    }
    auto const al = static_cast<std::size_t>(a);
    void* p = std::aligned_alloc(al, (n + al - 1) / al * al);
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    return p;
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

int main(int argc, char** argv) {
    pp::transport_options o;
    o.parcelport = "mpi";
    o.doorbell = false;
    o.job_token = 0x1a4d;
    o.mpi_thread_multiple = argc > 1 && std::strcmp(argv[1], "multiple") == 0;
    int rank = 0;
    {
        auto tp = pp::make_mpi_transport(o);
        auto addresses = pp::mpi_allgather(tp->address());
        rank = static_cast<int>(pp::mpi_world_info().rank);
        if (addresses.size() != 2) {
            std::fprintf(stderr, "mpi_landing_test runs on 2 ranks (mpirun -np 2)\n");
            return 2;
        }
        tp->set_peers(addresses, static_cast<std::uint32_t>(rank));
        std::mutex m;
        std::vector<char> got_big;
        std::atomic<bool> have_big{false}, stopped{false};
        std::atomic<int> ticks{0}, ticks_while_allocating{0};
        // Runs on either of locality 0's progressing threads.
        tp->set_receive_handler([&](std::uint32_t, cs::message&& msg) {
            int k = -1;
            std::vector<char> payload;
            cs::load(msg, k, payload);
            if (k == tick) {
                ++ticks;
                ticks_while_allocating += allocating_slowly.load() ? 1 : 0;
            } else if (k == big) {
                std::lock_guard g(m);
                got_big = std::move(payload);
                have_big.store(true);
            } else if (k == stop) {
                stopped.store(true);
            }
        });
        if (rank == 1) {
            std::vector<char> payload(big_size);
            for (std::size_t i = 0; i < payload.size(); ++i) {
                payload[i] = pattern(i);
            }
            std::atomic<bool> big_sent{false};
            tp->send(0, cs::save(int{big}, payload), [&](std::error_code ec) {
                CHECK(!ec);
                big_sent.store(true);
            });
            auto in_flight = std::make_shared<std::atomic<int>>(0);
            auto next = std::chrono::steady_clock::now();
            CHECK(pump(*tp, [&] {
                if (std::chrono::steady_clock::now() >= next && in_flight->load() < 4) {
                    ++*in_flight;
                    tp->send(0, cs::save(int{tick}, std::vector<char>()),
                             [in_flight](std::error_code) { --*in_flight; });
                    next += std::chrono::milliseconds(5);
                }
                return stopped.load() && big_sent.load() && in_flight->load() == 0;
            }));
        } else {
            std::atomic<bool> done{false};
            std::thread second([&] {
                while (!done.load()) {
                    tp->progress();
                }
            });
            CHECK(pump(*tp, [&] { return have_big.load(); }));
            done.store(true);
            second.join();
            std::size_t wrong = 0;
            {
                std::lock_guard g(m);
                CHECK(got_big.size() == big_size);
                for (std::size_t i = 0; i < got_big.size(); ++i) {
                    wrong += got_big[i] != pattern(i);
                }
            }
            CHECK(wrong == 0);
            CHECK(slow_allocations.load() == 1);
            CHECK(ticks_while_allocating.load() > 0);
            std::printf(
                "mpi_landing_test: %d small parcels arrived, %d of them during the %lld ms "
                "allocation of the large one's landing buffer; %zu bytes differ\n",
                ticks.load(), ticks_while_allocating.load(),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(slow_for).count()),
                wrong);
            std::atomic<bool> stop_sent{false};
            tp->send(1, cs::save(int{stop}, std::vector<char>()),
                     [&](std::error_code) { stop_sent.store(true); });
            CHECK(pump(*tp, [&] { return stop_sent.load(); }));
        }
        pp::mpi_allgather({}); // both sides done before either transport closes
    }
    std::printf("mpi_landing_test on rank %d: %s\n", rank, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
