// SPDX-License-Identifier: BSL-1.0
// 1-D heat diffusion on a ring, in the shape of HPX's distributed 1d_stencil examples: every
// locality owns a stepper component found by a symbolic name, holds `np` partitions of `nx`
// points, and exchanges its two boundary values with its neighbours through distributed
// channels, one generation per time step; the partitions advance as a dataflow graph, so a
// partition computes as soon as its neighbours of the previous step are ready.
//
//   courier-run -n 4 build/bin/stencil --courier:spmd=1 --nx=1000 --np=8 --nt=100 [--check]
//
// Runs in SPMD mode (--courier:spmd=1): every locality creates and names its stepper;
// locality 0 finds them all by name, starts them, gathers the final state and, with --check,
// compares it with a serial computation of the same steps (bitwise: the same operations in
// the same order).
#include <courier/courier.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr double k = 0.5;  // heat transfer coefficient
constexpr double dt = 1.0; // time step
constexpr double dx = 1.0; // grid spacing

using partition = std::vector<double>;

double heat(double left, double middle, double right) {
    return middle + (k * dt / (dx * dx)) * (left - 2 * middle + right);
}

/// One time step of a partition, given the last point of its left neighbour and the first of
/// its right one.
partition heat_part(double left, partition const& p, double right) {
    partition next(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
        double l = i == 0 ? left : p[i - 1];
        double r = i + 1 == p.size() ? right : p[i + 1];
        next[i] = heat(l, p[i], r);
    }
    return next;
}

/// The initial value of global point `i`.
double initial(std::size_t i) {
    return double(i % 97) + 0.25 * double(i % 13);
}

std::string channel_name(std::uint32_t locality, char const* side) {
    return "/stencil/" + std::to_string(locality) + "/" + side;
}

} // namespace

/// A locality's share of the ring: its partitions and the channels to its neighbours.
struct stepper : courier::component_base<stepper> {
    stepper() {
        std::uint32_t r = courier::get_locality_id(), n = courier::get_num_localities();
        from_left_ = courier::distributed::channel<double>(courier::find_here());
        from_right_ = courier::distributed::channel<double>(courier::find_here());
        (void)from_left_.register_as(channel_name(r, "from_left"));
        (void)from_right_.register_as(channel_name(r, "from_right"));
        to_left_.connect_to(channel_name((r + n - 1) % n, "from_right"));
        to_right_.connect_to(channel_name((r + 1) % n, "from_left"));
    }

    /// Runs `nt` steps on `np` partitions of `nx` points; returns the final points.
    partition do_work(std::size_t np, std::size_t nx, std::size_t nt) {
        std::uint32_t r = courier::get_locality_id();
        std::vector<courier::shared_future<partition>> current(np);
        for (std::size_t p = 0; p < np; ++p) {
            partition part(nx);
            for (std::size_t i = 0; i < nx; ++i) {
                part[i] = initial((r * np + p) * nx + i);
            }
            current[p] = courier::make_ready_future(std::move(part)).share();
        }
        auto first = [](courier::shared_future<partition> f) { return f.get().front(); };
        auto last = [](courier::shared_future<partition> f) { return f.get().back(); };
        for (std::size_t t = 0; t < nt; ++t) {
            // Our boundary values of step t go to the neighbours as soon as they exist.
            (void)current.front().then([this, t](courier::shared_future<partition> f) {
                to_left_.set(f.get().front(), t);
            });
            (void)current.back().then([this, t](courier::shared_future<partition> f) {
                to_right_.set(f.get().back(), t);
            });
            std::vector<courier::shared_future<partition>> next(np);
            for (std::size_t p = 0; p < np; ++p) {
                courier::future<double> left =
                    p == 0 ? from_left_.get(t) : current[p - 1].then(last);
                courier::future<double> right =
                    p + 1 == np ? from_right_.get(t) : current[p + 1].then(first);
                next[p] = courier::dataflow(
                              [](courier::future<double> l, courier::shared_future<partition> m,
                                 courier::future<double> rt) {
                                  return heat_part(l.get(), m.get(), rt.get());
                              },
                              std::move(left), current[p], std::move(right))
                              .share();
            }
            current = std::move(next);
        }
        partition all;
        for (auto& f : current) {
            auto const& part = f.get();
            all.insert(all.end(), part.begin(), part.end());
        }
        return all;
    }
    COURIER_COMPONENT_ACTION(stepper, do_work, do_work_action);

private:
    courier::distributed::channel<double> from_left_, from_right_, to_left_, to_right_;
};
COURIER_REGISTER_COMPONENT(stepper);

namespace {

std::size_t option(int argc, char** argv, std::string_view name, std::size_t fallback) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.starts_with(name) && a.size() > name.size() && a[name.size()] == '=') {
            return std::strtoull(a.data() + name.size() + 1, nullptr, 10);
        }
    }
    return fallback;
}
bool flag(int argc, char** argv, std::string_view name) {
    for (int i = 1; i < argc; ++i) {
        if (argv[i] == name) {
            return true;
        }
    }
    return false;
}

partition serial(std::size_t total, std::size_t nt) {
    partition u(total);
    for (std::size_t i = 0; i < total; ++i) {
        u[i] = initial(i);
    }
    partition next(total);
    for (std::size_t t = 0; t < nt; ++t) {
        for (std::size_t i = 0; i < total; ++i) {
            next[i] = heat(u[(i + total - 1) % total], u[i], u[(i + 1) % total]);
        }
        std::swap(u, next);
    }
    return u;
}

} // namespace

int courier_main(int argc, char** argv) {
    std::size_t nx = option(argc, argv, "--nx", 1000);
    std::size_t np = option(argc, argv, "--np", 8);
    std::size_t nt = option(argc, argv, "--nt", 100);
    std::uint32_t r = courier::get_locality_id(), n = courier::get_num_localities();
    // Every locality names its stepper; locality 0 finds them by name and drives them.
    auto id = courier::new_<stepper>(courier::find_here()).get();
    courier::register_with_basename("/stencil/stepper", id).get();
    int rc = 0;
    if (r == 0) {
        auto start = std::chrono::steady_clock::now();
        std::vector<courier::future<partition>> parts;
        for (std::uint32_t l = 0; l < n; ++l) {
            auto s = courier::find_from_basename("/stencil/stepper", l).get();
            parts.push_back(courier::async<stepper::do_work_action>(s, np, nx, nt));
        }
        partition result;
        for (auto& f : parts) {
            auto p = f.get();
            result.insert(result.end(), p.begin(), p.end());
        }
        double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("stencil: %u localities x %zu partitions x %zu points, %zu steps: %.3f s, "
                    "%.1f Mpoint-steps/s\n",
                    n, np, nx, nt, seconds, double(result.size() * nt) / seconds / 1e6);
        if (flag(argc, argv, "--check")) {
            partition expected = serial(std::size_t(n) * np * nx, nt);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < expected.size(); ++i) {
                wrong += i >= result.size() || result[i] != expected[i] ? 1 : 0;
            }
            std::printf("stencil check: %zu of %zu points differ from the serial computation: "
                        "%s\n",
                        wrong, expected.size(), wrong == 0 ? "ok" : "FAILED");
            rc = wrong == 0 ? 0 : 1;
        }
    }
    courier::finalize();
    return rc;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
