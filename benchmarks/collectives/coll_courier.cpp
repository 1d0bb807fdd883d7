// SPDX-License-Identifier: BSL-1.0
// all_reduce and all_gather latency on Courier (osu_allreduce's method: coll_common.hpp).
//   courier-run -n P coll_courier --courier:spmd=1 [--label=NAME]
// --label names the configuration in the RESULT lines (compare.sh runs this program with the
// shared-memory collectives on, "courier", and off, "courier-parcels").
#include "coll_common.hpp"

#include <courier/courier.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string_view>

namespace {

double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

char const* g_label = "courier";

template <class Op>
void measure(char const* name, std::size_t bytes, coll::selection const& sel, Op op) {
    namespace c = courier::collectives;
    int skip = coll::skip(bytes), iters = sel.iterations(bytes);
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
        coll::report(g_label, name, bytes, all);
    }
    c::barrier();
}

} // namespace

int courier_main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.starts_with("--label=")) {
            g_label = argv[i] + 8;
        }
    }
    auto sum = [](std::vector<double> a, std::vector<double> const& b) {
        for (std::size_t i = 0; i < a.size(); ++i) {
            a[i] += b[i];
        }
        return a;
    };
    coll::selection const sel = coll::select(argc, argv);
    for (std::size_t bytes : sel.sizes_of("allreduce")) {
        std::vector<double> v(bytes / sizeof(double), 1.0);
        measure("allreduce", bytes, sel, [&] {
            auto r = courier::collectives::all_reduce(v, sum);
            if (r.empty()) {
                std::abort();
            }
        });
    }
    for (std::size_t bytes : sel.sizes_of("allreduce-elementwise")) {
        std::vector<double> v(bytes / sizeof(double), 1.0);
        measure("allreduce-elementwise", bytes, sel, [&] {
            auto r = courier::collectives::all_reduce(
                v, courier::collectives::elementwise(std::plus<>{}));
            if (r.empty()) {
                std::abort();
            }
        });
    }
    for (std::size_t bytes : sel.sizes_of("allgather")) {
        std::vector<char> part(bytes, 'x');
        measure("allgather", bytes, sel, [&] {
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
