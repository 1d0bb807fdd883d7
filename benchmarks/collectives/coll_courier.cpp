// SPDX-License-Identifier: BSL-1.0
// all_reduce and all_gather latency on Courier (osu_allreduce's method: coll_common.hpp).
//   courier-run -n P coll_courier --courier:spmd=1
#include "coll_common.hpp"

#include <courier/courier.hpp>

#include <chrono>
#include <cstdlib>

namespace {

double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

template <class Op>
void measure(char const* name, std::size_t bytes, Op op) {
    namespace c = courier::collectives;
    int skip = coll::skip(bytes), iters = coll::iterations(bytes);
    for (int i = 0; i < skip; ++i) {
        op();
    }
    c::barrier();
    double t0 = now_us();
    for (int i = 0; i < iters; ++i) {
        op();
    }
    double mean = (now_us() - t0) / iters;
    auto all = c::gather(mean, 0);
    if (courier::get_locality_id() == 0) {
        coll::report("courier", name, bytes, all);
    }
    c::barrier();
}

} // namespace

int courier_main(int, char**) {
    auto sum = [](std::vector<double> a, std::vector<double> const& b) {
        for (std::size_t i = 0; i < a.size(); ++i) {
            a[i] += b[i];
        }
        return a;
    };
    for (std::size_t bytes : coll::sizes()) {
        std::vector<double> v(bytes / sizeof(double), 1.0);
        measure("allreduce", bytes, [&] {
            auto r = courier::collectives::all_reduce(v, sum);
            if (r.empty()) {
                std::abort();
            }
        });
    }
    for (std::size_t bytes : coll::sizes()) {
        std::vector<char> part(bytes, 'x');
        measure("allgather", bytes, [&] {
            auto r = courier::collectives::all_gather(part);
            if (r.empty()) {
                std::abort();
            }
        });
    }
    courier::finalize();
    return 0;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
