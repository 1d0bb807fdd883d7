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

TEST(profiled, owning_form_round_trips_and_assigns_into_existing_objects) {
    std::vector<sim::particle> mine(4);
    for (std::size_t i = 0; i < mine.size(); ++i) {
        mine[i].pos = {double(i), 0, 0};
        mine[i].vel = {7, 7, 7};
        mine[i].mass = 2;
        mine[i].name = "kept";
    }
    cs::profiled<sim::to_worker, std::vector<sim::particle>> out(mine);
    auto m = cs::save(out);
    EXPECT_EQ(m.total_size(), 8u + 1 + 4 * 32); // only positions and masses
    cs::profiled<sim::to_worker, std::vector<sim::particle>> in;
    cs::load(m, in);
    ASSERT_EQ(in.value().size(), 4u);
    EXPECT_EQ(in.value()[3].pos[0], 3.0);
    EXPECT_EQ(in.value()[3].vel[0], 0.0);

    cs::profiled<sim::to_master, std::vector<sim::particle>> forces(in.value());
    for (auto& p : forces.value()) {
        p.force = {-p.pos[0], 1, 2};
    }
    cs::profiled<sim::to_master, std::vector<sim::particle>> back;
    cs::load(cs::save(forces), back);
    back.assign_to(mine);
    EXPECT_EQ(mine[3].force[0], -3.0);
    EXPECT_EQ(mine[3].vel[1], 7.0);
    EXPECT_EQ(mine[3].name, "kept");
    std::vector<sim::particle> wrong(3);
    EXPECT_THROW(back.assign_to(wrong), std::length_error);
}

TEST(profiled, single_object) {
    sim::particle p;
    p.force = {4, 5, 6};
    p.mass = 9;
    cs::profiled<sim::to_master, sim::particle> in;
    cs::load(cs::save(cs::profiled<sim::to_master, sim::particle>(p)), in);
    sim::particle dest;
    dest.mass = 1;
    in.assign_to(dest);
    EXPECT_EQ(dest.force[1], 5.0);
    EXPECT_EQ(dest.mass, 1.0);
}
