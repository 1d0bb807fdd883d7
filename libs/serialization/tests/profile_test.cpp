// SPDX-License-Identifier: BSL-1.0
// Per-direction partial marshaling (seed 002): master->worker and worker->master profiles.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

namespace cs = courier::serialization;

namespace sim {
struct particle {
    std::array<double, 3> pos{};
    std::array<double, 3> vel{};
    std::array<double, 3> force{};
    double mass = 0;
    std::string name;
};
struct to_worker {};
struct to_master {};
} // namespace sim

COURIER_SERIALIZATION_PROFILE(sim::to_worker, sim::particle, &sim::particle::pos,
                              &sim::particle::mass);
COURIER_SERIALIZATION_PROFILE(sim::to_master, sim::particle, &sim::particle::force);

TEST(profile, master_to_worker_sends_only_position_and_mass) {
    std::vector<sim::particle> master(100);
    for (std::size_t i = 0; i < master.size(); ++i) {
        master[i].pos = {double(i), 1, 2};
        master[i].vel = {9, 9, 9};
        master[i].mass = 1.0 + i;
        master[i].name = "p";
    }
    auto m = cs::save(cs::with_profile<sim::to_worker>(master));
    // count varint (1) + 100 * (3 doubles + 1 double)
    EXPECT_EQ(m.total_size(), 8u + 1 + 100 * 32);
    std::vector<sim::particle> worker;
    cs::load(m, cs::with_profile<sim::to_worker>(worker));
    ASSERT_EQ(worker.size(), 100u);
    EXPECT_EQ(worker[42].pos[0], 42.0);
    EXPECT_EQ(worker[42].mass, 43.0);
    EXPECT_EQ(worker[42].vel[0], 0.0); // not sent
    EXPECT_EQ(worker[42].name, "");
}

TEST(profile, worker_to_master_updates_only_forces_in_place) {
    std::vector<sim::particle> master(10);
    for (auto& p : master) {
        p.mass = 5;
        p.name = "keep";
    }
    std::vector<sim::particle> worker(10);
    for (std::size_t i = 0; i < worker.size(); ++i) {
        worker[i].force = {double(i), -1, 0};
    }
    cs::load(cs::save(cs::with_profile<sim::to_master>(worker)),
             cs::with_profile<sim::to_master>(master));
    EXPECT_EQ(master[7].force[0], 7.0);
    EXPECT_EQ(master[7].mass, 5.0);
    EXPECT_EQ(master[7].name, "keep");
}

TEST(profile, single_objects_and_fixed_arrays) {
    sim::particle p;
    p.force = {1, 2, 3};
    p.mass = 4;
    sim::particle q;
    cs::load(cs::save(cs::with_profile<sim::to_master>(p)), cs::with_profile<sim::to_master>(q));
    EXPECT_EQ(q.force[2], 3.0);
    EXPECT_EQ(q.mass, 0.0);
    std::array<sim::particle, 3> a{}, b{};
    a[2].mass = 8;
    cs::load(cs::save(cs::with_profile<sim::to_worker>(a)), cs::with_profile<sim::to_worker>(b));
    EXPECT_EQ(b[2].mass, 8.0);
}

TEST(profile, absurd_count_is_rejected_before_resizing) {
    std::vector<sim::particle> v(2);
    auto m = cs::save(cs::with_profile<sim::to_master>(v));
    std::vector<std::byte> bytes(m.data().begin(), m.data().end());
    bytes[8] = std::byte{0x7f}; // claim 127 particles, 2 present
    std::vector<sim::particle> out;
    EXPECT_THROW(cs::load(cs::message::from_bytes(bytes), cs::with_profile<sim::to_master>(out)),
                 cs::serialization_error);
    EXPECT_LE(out.capacity(), 2u);
}
