// SPDX-License-Identifier: BSL-1.0
// How the MPI transport lands large parcels (run under `mpirun -np 2` with a mode argument).
//
// "serialized", "multiple" (MPI_THREAD_MULTIPLE): a large parcel's landing buffer is allocated
// without the transport's lock. Allocating can take long (AddressSanitizer writes the shadow of
// a new 2 GiB block page by page, about a second), and while one thread allocated inside a
// progress pass that held the lock, no other thread could progress: the locality's heartbeats
// stayed queued and its peer declared it failed. Here every landing buffer of 32 MiB or more
// takes a second to allocate (this program replaces the aligned operator new[] and hooks
// big_alloc, which the receive buffer pool uses); locality 1 sends a 64 MiB parcel and, every 5 ms,
// a small one. Locality 0 progresses on two threads, and small parcels must arrive while the large
// one's buffer is being allocated.
//
// "tags": parcels that share a sender and a data tag are received in order. With 2 data tags
// (transport_options::mpi_data_tags) and 4 KiB pieces, locality 1 sends two 1 MiB parcels (256
// pieces each, posted by the receiver a few at a time) and right after them 39 parcels of
// 16 KiB: a follower can have a large parcel's tag while its pieces are still being posted,
// and MPI would match a later parcel's receives with the large parcel's remaining pieces. The
// sender, too, posts a large parcel's pieces a few at a time, and a later parcel with its tag
// posted meanwhile would put its pieces among them (0 of 41 whole when the sender did not hold
// the tag); while both large parcels post theirs, both tags are held and the followers wait in
// the sender's backlog. Every parcel must arrive whole.
#include "mpi_check.hpp"

#include <courier/common/big_alloc.hpp>
#include <courier/common/log.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/serialization.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace pp = courier::parcelport;
using pp::test::failures;
namespace cs = courier::serialization;

namespace {

template <class Until>
bool pump_for(pp::transport& tp, Until&& until) {
    return pp::test::pump(tp, until, std::chrono::seconds(60));
}

constexpr std::size_t slow_from = std::size_t{32} << 20;
constexpr std::size_t big_size = std::size_t{64} << 20;
constexpr auto slow_for = std::chrono::seconds(1);
std::atomic<int> slow_allocations{0};
std::atomic<bool> allocating_slowly{false};

enum kind : int { tick = 0, big = 1, stop = 2, numbered = 3 };

char pattern(std::size_t i) {
    return static_cast<char>(i * 7 % 251);
}

} // namespace

namespace {
void slow_when_large(std::size_t n) {
    if (n >= slow_from) {
        ++slow_allocations;
        allocating_slowly.store(true);
        std::this_thread::sleep_for(slow_for);
        allocating_slowly.store(false);
    }
}
} // namespace

// The receive buffer pool's allocations, slow from 32 MiB on: its buffers under 64 MiB come
// from the aligned operator new[] (to a cache line), larger ones from big_alloc (its hook).
void* operator new[](std::size_t n, std::align_val_t a) {
    slow_when_large(n);
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

namespace {

/// What the handlers touch: shared with them, so that it outlives the transport's last call.
struct state {
    std::mutex m;
    std::vector<char> big;
    std::map<int, std::vector<char>> numbered;
    std::atomic<bool> have_big{false}, stopped{false};
    std::atomic<int> ticks{0}, ticks_while_allocating{0}, in_flight{0}, sent{0}, send_errors{0};
};

void on_receive(state& st, cs::message&& msg) {
    int k = -1, n = -1;
    std::vector<char> payload;
    cs::load(msg, k, n, payload);
    std::lock_guard g(st.m);
    if (k == tick) {
        ++st.ticks;
        st.ticks_while_allocating += allocating_slowly.load() ? 1 : 0;
    } else if (k == big) {
        st.big = std::move(payload);
        st.have_big.store(true);
    } else if (k == numbered) {
        st.numbered[n] = std::move(payload);
    } else if (k == stop) {
        st.stopped.store(true);
    }
}

/// Sends a parcel (kind, number, payload); st.in_flight counts it until on_sent. A large payload
/// travels from its own memory (zero copy), kept until then.
void send(pp::transport& tp, std::shared_ptr<state> const& st, std::uint32_t to, int k, int n,
          std::vector<char> payload) {
    auto kept = std::make_shared<std::vector<char>>(std::move(payload));
    ++st->in_flight;
    tp.send(to, cs::save(k, n, *kept), [st, kept](std::error_code ec) {
        st->send_errors += ec ? 1 : 0;
        ++st->sent;
        --st->in_flight;
    });
}

std::vector<char> patterned(std::size_t n, std::size_t seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = pattern(i + seed * 977);
    }
    return v;
}

std::size_t differing(std::vector<char> const& got, std::size_t n, std::size_t seed) {
    if (got.size() != n) {
        return std::max(n, got.size());
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
        wrong += got[i] != pattern(i + seed * 977);
    }
    return wrong;
}

void slow_landing(pp::transport& tp, std::shared_ptr<state> const& st, int rank) {
    if (rank == 1) {
        send(tp, st, 0, big, 0, patterned(big_size, 0));
        auto next = std::chrono::steady_clock::now();
        CHECK(pump_for(tp, [&] {
            if (std::chrono::steady_clock::now() >= next && st->in_flight.load() < 4) {
                send(tp, st, 0, tick, 0, {});
                next += std::chrono::milliseconds(5);
            }
            return st->stopped.load() && st->in_flight.load() == 0;
        }));
        return;
    }
    std::atomic<bool> done{false};
    std::thread second([&] {
        while (!done.load()) {
            tp.progress();
        }
    });
    CHECK(pump_for(tp, [&] { return st->have_big.load(); }));
    done.store(true);
    second.join();
    std::size_t wrong = 0;
    {
        std::lock_guard g(st->m);
        wrong = differing(st->big, big_size, 0);
    }
    CHECK(wrong == 0);
    CHECK(slow_allocations.load() == 1);
    CHECK(st->ticks_while_allocating.load() > 0);
    std::printf("mpi_landing_test: %d small parcels arrived, %d of them during the %lld ms "
                "allocation of the large one's landing buffer; %zu bytes differ\n",
                st->ticks.load(), st->ticks_while_allocating.load(),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(slow_for).count()),
                wrong);
    send(tp, st, 1, stop, 0, {});
    CHECK(pump_for(tp, [&] { return st->in_flight.load() == 0; }));
}

constexpr int larges = 2, followers = 40;
constexpr std::size_t large_size = std::size_t{1} << 20, follower_size = 16384;

void same_tags(pp::transport& tp, std::shared_ptr<state> const& st, int rank) {
    if (rank == 1) {
        // Two large ones: while both post their pieces, both tags are held by the sender, and
        // the followers wait in its backlog for one of them.
        for (int i = 0; i < larges; ++i) {
            send(tp, st, 0, numbered, i, patterned(large_size, static_cast<std::size_t>(i)));
        }
        for (int i = larges; i <= followers; ++i) {
            send(tp, st, 0, numbered, i, patterned(follower_size, static_cast<std::size_t>(i)));
        }
        CHECK(pump_for(tp, [&] { return st->stopped.load() && st->in_flight.load() == 0; }));
        CHECK(st->send_errors.load() == 0);
        return;
    }
    CHECK(pump_for(tp, [&] {
        std::lock_guard g(st->m);
        return st->numbered.size() == followers + 1;
    }));
    std::size_t wrong = 0, whole = 0;
    {
        std::lock_guard g(st->m);
        for (int i = 0; i <= followers; ++i) {
            auto it = st->numbered.find(i);
            std::size_t n = i < larges ? large_size : follower_size;
            std::size_t w = it == st->numbered.end()
                                ? n
                                : differing(it->second, n, static_cast<std::size_t>(i));
            wrong += w;
            whole += w == 0;
        }
    }
    CHECK(wrong == 0);
    auto const stats = tp.stats();
    std::printf("mpi_landing_test: %zu of %d parcels with 2 data tags arrived whole; %zu bytes "
                "differ; %llu waited as deferred headers\n",
                whole, followers + 1, wrong,
                static_cast<unsigned long long>(stats.deferred_rendezvous));
    send(tp, st, 1, stop, 0, {});
    CHECK(pump_for(tp, [&] { return st->in_flight.load() == 0; }));
}

} // namespace

int main(int argc, char** argv) {
    std::string const mode = argc > 1 ? argv[1] : "serialized";
    courier::detail::testing::set_big_alloc_hook(slow_when_large);
    pp::transport_options o;
    o.parcelport = "mpi";
    o.doorbell = false;
    o.job_token = 0x1a4d;
    o.mpi_thread_multiple = mode == "multiple";
    if (mode == "tags") {
        o.mpi_data_tags = 2;
        o.read_piece = 4096;
    }
    int rank = 0;
    {
        auto st = std::make_shared<state>();
        auto tp = pp::make_mpi_transport(o);
        rank = pp::test::connect_two_ranks(*tp, "mpi_landing_test");
        if (rank < 0) {
            return 2;
        }
        tp->set_receive_handler(
            [st](std::uint32_t, cs::message&& msg) { on_receive(*st, std::move(msg)); });
        if (mode == "tags") {
            same_tags(*tp, st, rank);
        } else {
            slow_landing(*tp, st, rank);
        }
        pp::mpi_allgather({}); // both sides done before either transport closes
    }
    std::printf("mpi_landing_test on rank %d: %s\n", rank, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
