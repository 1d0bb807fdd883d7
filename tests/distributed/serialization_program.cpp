// SPDX-License-Identifier: BSL-1.0
// Serialization a user does not write, across localities (run by ctest through courier-run):
//   aggregates  plain structs (nested, standard members, enums, C arrays) as action arguments and
//               results,
//               with no serialization code; bitwise ones travel as pointer chunks.
//   profiles    the MPI Serializer paper's master/worker case as remote calls: positions and
//               masses out, forces back into the master's objects, and only those bytes travel.
#include "check.hpp"

#include <courier/courier.hpp>

#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using courier_test::failures;

// ---- aggregates ----
enum class kind : std::uint8_t { fluid, solid };

struct vec3 { // bitwise: three doubles, no padding
    double x, y, z;
};

struct region {
    std::string name;
    kind what = kind::fluid;
    std::vector<vec3> points;
    std::map<std::string, double> params;
    std::optional<std::array<int, 3>> cell;
    double bounds[2][3]; // C arrays: no code either
    std::string axes[3];
};

// Returns the region moved by `by`, renamed, with one more parameter.
region shift(region r, vec3 by) {
    for (auto& p : r.points) {
        p.x += by.x;
        p.y += by.y;
        p.z += by.z;
    }
    r.name += "@" + std::to_string(courier::get_locality_id());
    r.params["shifted"] = 1.0;
    r.what = kind::solid;
    r.bounds[1][2] += by.z;
    r.axes[2] += "'";
    return r;
}
COURIER_PLAIN_ACTION(shift, shift_action);

/// Zero-copy bytes that came in: read by RMA, copied out of the sender's shm outbox, or pushed.
std::uint64_t rma_bytes_read_here() {
    return courier::get_parcelport_statistics().rendezvous_bytes_received();
}
COURIER_PLAIN_ACTION(rma_bytes_read_here, rma_bytes_read_action);

void scenario_aggregates() {
    region r{"box",
             kind::fluid,
             std::vector<vec3>(4096),
             {{"gamma", 1.4}},
             std::array{1, 2, 3},
             {{0, 0, 0}, {1, 2, 3}},
             {"x", "y", "z"}};
    for (std::size_t i = 0; i < r.points.size(); ++i) {
        r.points[i] = {double(i), 2.0 * i, -1.0 * i};
    }
    for (auto there : courier::find_remote_localities()) {
        auto read_before = courier::async<rma_bytes_read_action>(there).get();
        region back = courier::async<shift_action>(there, r, vec3{1, 10, 100}).get();
        auto read_after = courier::async<rma_bytes_read_action>(there).get();
        CHECK(back.name == "box@" + std::to_string(courier::get_locality_id(there)));
        CHECK(back.what == kind::solid);
        CHECK(back.points.size() == 4096);
        CHECK(back.points[4095].x == 4096.0 && back.points[4095].y == 2.0 * 4095 + 10);
        CHECK(back.params.size() == 2 && back.params["gamma"] == 1.4);
        CHECK(back.cell && (*back.cell)[2] == 3);
        CHECK(back.bounds[0][0] == 0.0 && back.bounds[1][1] == 2.0 && back.bounds[1][2] == 103.0);
        CHECK(back.axes[0] == "x" && back.axes[1] == "y" && back.axes[2] == "z'");
        // The 96 KiB of points are one pointer chunk: read by RMA, or pushed on net.
        CHECK(read_after - read_before >= 4096 * sizeof(vec3));
        std::printf(
            "aggregates: locality %u took %llu zero-copy bytes for a %zu byte point array\n",
            courier::get_locality_id(there),
            static_cast<unsigned long long>(read_after - read_before), 4096 * sizeof(vec3));
    }
}

// ---- profiles: master/worker ----
struct particle {
    std::array<double, 3> pos{}, vel{}, force{};
    double mass = 0;
    std::string label;
};
struct to_worker {};
struct to_master {};

} // namespace

COURIER_SERIALIZATION_PROFILE(to_worker, particle, &particle::pos, &particle::mass);
COURIER_SERIALIZATION_PROFILE(to_master, particle, &particle::force);

namespace {

using outbound = courier::serialization::profiled<to_worker, std::vector<particle>>;
using inbound = courier::serialization::profiled<to_master, std::vector<particle>>;

inbound compute_forces(outbound in) {
    inbound out(std::move(in.value()));
    for (auto& p : out.value()) {
        // A spring to the origin; a worker sees no velocity and no label (not sent).
        bool saw_unsent = p.vel[0] != 0 || !p.label.empty();
        p.force = {-p.mass * p.pos[0], -p.mass * p.pos[1], saw_unsent ? 1e300 : -p.mass * p.pos[2]};
    }
    return out;
}
COURIER_PLAIN_ACTION(compute_forces, compute_forces_action);

struct traffic {
    std::uint64_t eager_sent = 0;
    std::uint64_t rma_read = 0;
};
traffic traffic_here() {
    auto s = courier::get_parcelport_statistics();
    return {s.eager_bytes_sent, s.rendezvous_bytes_received()};
}
COURIER_PLAIN_ACTION(traffic_here, traffic_action);

std::uint64_t total_traffic() {
    std::uint64_t sum = 0;
    for (auto l : courier::find_all_localities()) {
        auto t = courier::async<traffic_action>(l).get();
        sum += t.eager_sent + t.rma_read;
    }
    return sum;
}

void scenario_profiles() {
    auto workers = courier::find_remote_localities();
    CHECK(workers.size() >= 2);
    constexpr std::size_t per_worker = 2000;
    std::vector<std::vector<particle>> mine(workers.size());
    for (std::size_t w = 0; w < workers.size(); ++w) {
        mine[w].resize(per_worker);
        for (std::size_t i = 0; i < per_worker; ++i) {
            auto& p = mine[w][i];
            p.pos = {double(i), double(w), 1.0};
            p.vel = {3, 3, 3};
            p.mass = 1.0 + double(i % 7);
            p.label = "particle-" + std::to_string(i);
        }
    }
    auto before = total_traffic();
    std::vector<courier::future<inbound>> results;
    for (std::size_t w = 0; w < workers.size(); ++w) {
        results.push_back(courier::async<compute_forces_action>(workers[w], outbound(mine[w])));
    }
    for (std::size_t w = 0; w < workers.size(); ++w) {
        results[w].get().assign_to(mine[w]); // the forces land in the master's own objects
    }
    auto after = total_traffic();
    bool forces_right = true;
    for (std::size_t w = 0; w < workers.size(); ++w) {
        for (std::size_t i = 0; i < per_worker; ++i) {
            auto const& p = mine[w][i];
            forces_right = forces_right && p.force[0] == -p.mass * double(i) &&
                           p.force[1] == -p.mass * double(w) && p.force[2] == -p.mass &&
                           p.vel[0] == 3 && p.label == "particle-" + std::to_string(i);
        }
    }
    CHECK(forces_right);
    // What travelled: per worker, positions and masses out (32 bytes a particle), forces back
    // (24 bytes a particle), plus parcel headers, and the small statistics calls in between.
    std::uint64_t profile_bytes = workers.size() * per_worker * (32 + 24);
    std::uint64_t whole_bytes = workers.size() * per_worker * 2 * (10 * 8 + 10); // + labels
    std::uint64_t travelled = after - before;
    std::printf("profiles: %llu bytes travelled for %llu bytes of profile fields (whole particles "
                "both ways: at least %llu)\n",
                static_cast<unsigned long long>(travelled),
                static_cast<unsigned long long>(profile_bytes),
                static_cast<unsigned long long>(whole_bytes));
    CHECK(travelled >= profile_bytes);
    CHECK(travelled <= profile_bytes + 4096);
}

} // namespace

int courier_main(int argc, char** argv) {
    std::string_view scenario = argc > 1 ? argv[1] : "";
    if (scenario == "aggregates") {
        scenario_aggregates();
    } else if (scenario == "profiles") {
        scenario_profiles();
    } else {
        std::fprintf(stderr, "unknown scenario '%.*s' (aggregates, profiles)\n",
                     static_cast<int>(scenario.size()), scenario.data());
        ++failures;
    }
    int rc = courier_test::verdict(argc > 1 ? argv[1] : "serialization_program");
    courier::finalize();
    return rc;
}

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
