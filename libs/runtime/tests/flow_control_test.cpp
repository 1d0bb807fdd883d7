// SPDX-License-Identifier: BSL-1.0
// Flow control's window arithmetic (src/flow_control.hpp), on a locality state of its own: the
// window from the options, what fits, credits that give back more than was taken or less
// than nothing. The end-to-end behaviour (waiting, credits over the wire, a peer that dies)
// is tested across processes in tests/distributed (flow.*).
#include "../src/flow_control.hpp"
#include "../src/locality_state.hpp"
#include "../src/options.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cd = courier::detail;

namespace {

cd::config options(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    return cd::parse_config(static_cast<int>(argv.size()), argv.data());
}

/// A state for `localities` with the flow options `args`.
struct flow_fixture {
    cd::locality_state st;
    /// `large_in_flight`, `large_window`: as a transport's large_parcels_in_flight() and
    /// large_parcel_window() (libfabric's 2 and 0).
    flow_fixture(std::uint32_t localities, std::vector<std::string> args,
                 std::uint32_t large_in_flight = 2, std::uint64_t large_window = 0) {
        st.size = localities;
        st.dead = std::vector<std::atomic<bool>>(localities);
        cd::flow_configure(st.flow, options(std::move(args)), localities, large_in_flight,
                           large_window);
    }
    /// How many parcels of `bytes` go to locality 1 before one would wait (at most `most`).
    int admitted(std::int64_t bytes, int most = 1000) {
        int n = 0;
        while (n < most && cd::flow_try_acquire(st, 1, bytes)) {
            ++n;
        }
        return n;
    }
    std::int64_t parcels(std::uint32_t dest) { return st.flow.out[dest].load().first; }
    std::int64_t bytes(std::uint32_t dest) { return st.flow.out[dest].load().second; }
};

} // namespace

TEST(flow_control, window_is_the_per_destination_limit_or_the_total_shared_out) {
    flow_fixture two(2, {});
    EXPECT_EQ(two.st.flow.window_parcels, 1024);
    EXPECT_EQ(two.st.flow.window_bytes, 8 << 20);
    flow_fixture many(1001, {"--courier:total_parcels_in_flight=10000",
                             "--courier:total_bytes_in_flight=100000000"});
    EXPECT_EQ(many.st.flow.window_parcels, 16);   // 10 a peer, at least 16
    EXPECT_EQ(many.st.flow.window_bytes, 100000); // the total shared among 1000 peers
    flow_fixture off(2, {"--courier:parcels_in_flight=0"});
    EXPECT_EQ(off.st.flow.window_parcels, 0);
    EXPECT_THROW(flow_fixture(2, {"--courier:bytes_in_flight=-1"}), cd::config_error);
    EXPECT_THROW(flow_fixture(2, {"--courier:parcels_in_flight=many"}), cd::config_error);
}

TEST(flow_control, a_window_given_in_numbers_is_bounded_as_the_options_are) {
    cd::flow_state f;
    cd::flow_configure(f, 8, 0, 3); // no bytes: no flow control
    EXPECT_EQ(f.window_parcels, 0);
    EXPECT_EQ(f.window_bytes, 0);
    EXPECT_EQ(f.in.size(), 3u);
    EXPECT_EQ(f.kept_from.size(), 3u);
    cd::flow_configure(f, std::int64_t{1} << 40, std::int64_t{1} << 50, 2); // within the fields
    EXPECT_EQ(f.window_parcels, std::int64_t{1} << 22);
    EXPECT_EQ(f.window_bytes, std::int64_t{1} << 38);
    cd::flow_configure(f, 8, 4096, 2);
    EXPECT_EQ(f.window_parcels, 8);
    EXPECT_EQ(f.window_bytes, 4096);
}

TEST(flow_control, credits_give_back_what_was_taken) {
    flow_fixture f(3, {"--courier:parcels_in_flight=4", "--courier:bytes_in_flight=1000"});
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(cd::flow_acquire(f.st, 1, 10));
    }
    EXPECT_EQ(f.parcels(1), 4);
    EXPECT_EQ(f.bytes(1), 40);
    EXPECT_EQ(f.parcels(2), 0); // windows are per destination
    cd::flow_credit(f.st, 1, 3, 30);
    EXPECT_EQ(f.parcels(1), 1);
    EXPECT_EQ(f.bytes(1), 10);
}

TEST(flow_control, a_parcel_larger_than_the_window_goes_while_less_than_half_is_in_use) {
    flow_fixture f(2, {"--courier:parcels_in_flight=100", "--courier:bytes_in_flight=1000"});
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 5000)); // nothing in use: it goes
    EXPECT_EQ(f.bytes(1), 5000);
    cd::flow_credit(f.st, 1, 1, 5000);
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 400));
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 5000)); // 400 < 500 in use: it goes
    EXPECT_EQ(f.bytes(1), 5400);
}

TEST(flow_control, parcels_over_half_the_window_travel_two_at_a_time) {
    flow_fixture f(2, {"--courier:parcels_in_flight=100", "--courier:bytes_in_flight=1000"});
    // A failed destination ends a wait at once: false here means "would have waited".
    f.st.dead[1].store(true);
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 600));
    EXPECT_TRUE(cd::flow_acquire(f.st, 1, 600)); // 600 >= 500 in use, but only one in flight
    EXPECT_EQ(f.parcels(1), 2);
    EXPECT_EQ(f.bytes(1), 1200);
    EXPECT_FALSE(cd::flow_acquire(f.st, 1, 600)); // a third waits
    EXPECT_FALSE(cd::flow_acquire(f.st, 1, 1));   // and so does anything beyond the window
    EXPECT_EQ(f.parcels(1), 2);
    cd::flow_credit(f.st, 1, 1, 600); // until a credit comes back
    EXPECT_TRUE(cd::flow_acquire(f.st, 1, 600));
    EXPECT_EQ(f.bytes(1), 1200);

    // A transport that asks for one at a time (MPI) gets one.
    flow_fixture one(2, {"--courier:parcels_in_flight=100", "--courier:bytes_in_flight=1000"}, 1);
    one.st.dead[1].store(true);
    ASSERT_TRUE(cd::flow_acquire(one.st, 1, 600));
    EXPECT_FALSE(cd::flow_acquire(one.st, 1, 600));
    EXPECT_TRUE(cd::flow_acquire(one.st, 1, 400)); // what fits still goes
    // A transport asking for none still gets one: any parcel must be able to go.
    EXPECT_EQ(flow_fixture(2, {}, 0).st.flow.large_in_flight, 1);
}

TEST(flow_control, excess_or_negative_credits_never_open_the_window_wider) {
    flow_fixture f(2, {"--courier:parcels_in_flight=2", "--courier:bytes_in_flight=1000"});
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 10));
    cd::flow_credit(f.st, 1, 50, 5000); // a confused or forged peer
    EXPECT_EQ(f.parcels(1), 0);
    EXPECT_EQ(f.bytes(1), 0);
    EXPECT_EQ(f.st.flow.excess_credits.load(), 1u);
    cd::flow_credit(f.st, 1, -7, -100); // dropped
    EXPECT_EQ(f.parcels(1), 0);
    EXPECT_EQ(f.bytes(1), 0);
    // Still a window of 2: a third parcel would wait (a failed destination ends the wait).
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 10));
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 10));
    f.st.dead[1].store(true);
    EXPECT_FALSE(cd::flow_acquire(f.st, 1, 10));
}

TEST(flow_control, parcels_and_bytes_share_a_word_without_carrying_into_each_other) {
    // Windows larger than the word's fields are cut to fit them.
    flow_fixture big(
        2, {"--courier:parcels_in_flight=1099511627776", "--courier:bytes_in_flight=1099511627776",
            "--courier:total_parcels_in_flight=0", "--courier:total_bytes_in_flight=0"});
    EXPECT_EQ(big.st.flow.window_parcels, std::int64_t{1} << 22);
    EXPECT_EQ(big.st.flow.window_bytes, std::int64_t{1} << 38);

    // A parcel of more than 2^36 bytes counts as 2^36 when taken and when given back.
    flow_fixture f(2, {"--courier:parcels_in_flight=8", "--courier:bytes_in_flight=1000"});
    std::int64_t const huge = std::int64_t{1} << 50;
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, huge)); // nothing in use: it goes
    EXPECT_EQ(f.parcels(1), 1);
    EXPECT_EQ(f.bytes(1), std::int64_t{1} << 36);
    cd::flow_release(f.st, 1, huge);
    EXPECT_EQ(f.parcels(1), 0);
    EXPECT_EQ(f.bytes(1), 0);

    // Sends that cannot wait go over the window (overdrafts, here from within a transport's
    // progress): the bytes saturate at the field's top and never carry into the parcels.
    {
        cd::progress_scope in_progress;
        for (int i = 0; i < 40; ++i) {
            ASSERT_TRUE(cd::flow_acquire(f.st, 1, huge));
        }
    }
    EXPECT_EQ(f.parcels(1), 40);
    EXPECT_EQ(f.bytes(1), (std::int64_t{1} << 40) - 1); // 40 * 2^36 is more: saturated
    EXPECT_EQ(f.st.flow.overdrafts.load(), 38u);        // two fit (two large ones may be in flight)
    cd::flow_credit(f.st, 1, 40, std::int64_t{40} << 36);
    EXPECT_EQ(f.parcels(1), 0);
    EXPECT_EQ(f.bytes(1), 0);
    // The bytes had saturated: the credit returns more than the field held, an excess.
    EXPECT_EQ(f.st.flow.excess_credits.load(), 1u);
    // A forged credit of the largest values a peer can send empties the word and no more.
    ASSERT_TRUE(cd::flow_acquire(f.st, 1, 10));
    cd::flow_credit(f.st, 1, INT64_MAX, INT64_MAX);
    EXPECT_EQ(f.parcels(1), 0);
    EXPECT_EQ(f.bytes(1), 0);
    EXPECT_EQ(f.st.flow.excess_credits.load(), 2u);
}

TEST(flow_control, a_transport_window_for_large_parcels_bounds_them_alone) {
    constexpr std::int64_t mib = 1 << 20;
    // The MPI transport's: 4 MiB for parcels of 256 KiB or more, one large one at a time.
    flow_fixture f(2, {}, 1, 4 * mib); // the pair's window: 8 MiB
    EXPECT_EQ(f.st.flow.large_window, 4 * mib);
    EXPECT_EQ(f.admitted(mib), 4); // 8 within the pair's window alone
    cd::flow_credit(f.st, 1, 4, 4 * mib);
    EXPECT_EQ(f.admitted(2 * mib), 2);
    cd::flow_credit(f.st, 1, 2, 4 * mib);
    EXPECT_EQ(f.admitted(4 * mib), 1); // over half of it: one at a time
    cd::flow_credit(f.st, 1, 1, 4 * mib);
    // Smaller parcels fill the pair's window: 128 of 64 KiB, where a 4 MiB one takes 64.
    EXPECT_EQ(f.admitted(64 << 10), 128);
    cd::flow_credit(f.st, 1, 128, 8 * mib);
    // Over a pair's window of 64 MiB, a large parcel waits only once a quarter of it (16 MiB)
    // is in flight, whose start brings back a credit (credits go back a quarter at a time).
    flow_fixture big(2, {"--courier:bytes_in_flight=64MiB"}, 1, 4 * mib);
    EXPECT_EQ(big.admitted(mib), 16);
    // A transport window over the pair's changes nothing.
    flow_fixture small(2, {"--courier:bytes_in_flight=2MiB"}, 1, 4 * mib);
    EXPECT_EQ(small.st.flow.large_window, 0);
    EXPECT_EQ(small.admitted(mib), 2);
    flow_fixture none(2, {}, 1, 0);
    EXPECT_EQ(none.admitted(mib), 8);
}

TEST(flow_control, the_inline_take_takes_only_what_fits_as_the_window_stands) {
    // Against flow_try_acquire on a twin state, parcel by parcel: where the inline take takes,
    // the full one takes the same (it never admits what the window rules refuse); where it
    // declines, the full one still decides (a large parcel, one past the window's room).
    for (std::uint64_t large_window : {std::uint64_t{0}, std::uint64_t{1} << 16}) {
        flow_fixture inline_first(
            2, {"--courier:parcels_in_flight=64", "--courier:bytes_in_flight=262144"}, 2,
            large_window);
        flow_fixture full(2, {"--courier:parcels_in_flight=64", "--courier:bytes_in_flight=262144"},
                          2, large_window);
        int fitting = 0;
        for (std::int64_t bytes : {std::int64_t{100}, std::int64_t{4000}, std::int64_t{8000},
                                   std::int64_t{70000}, std::int64_t{300000}}) {
            for (int i = 0; i < 80; ++i) {
                bool const fast = cd::flow_take_fitting(inline_first.st.flow, 1, bytes);
                bool const took = fast || cd::flow_try_acquire(inline_first.st, 1, bytes);
                EXPECT_EQ(took, cd::flow_try_acquire(full.st, 1, bytes))
                    << bytes << " B, parcel " << i << ", large window " << large_window;
                if (fast) {
                    ++fitting;
                    // Taken as it stood: within the window, and not a large parcel.
                    EXPECT_LE(inline_first.bytes(1), inline_first.st.flow.window_bytes);
                    EXPECT_LE(inline_first.parcels(1), inline_first.st.flow.window_parcels);
                    EXPECT_TRUE(large_window == 0 ||
                                bytes < static_cast<std::int64_t>(large_window / 16));
                }
            }
            EXPECT_EQ(inline_first.parcels(1), full.parcels(1));
            EXPECT_EQ(inline_first.bytes(1), full.bytes(1));
            // Credits give the window back for the next size.
            cd::flow_credit(inline_first.st, 1, inline_first.parcels(1), inline_first.bytes(1));
            cd::flow_credit(full.st, 1, full.parcels(1), full.bytes(1));
        }
        EXPECT_GT(fitting, 60); // the small parcels took the inline way
    }
    flow_fixture off(2, {"--courier:parcels_in_flight=0"});
    EXPECT_FALSE(cd::flow_take_fitting(off.st.flow, 1, 8)); // no window: the full call says yes
    EXPECT_TRUE(cd::flow_try_acquire(off.st, 1, 8));
    flow_fixture two(2, {});
    EXPECT_FALSE(cd::flow_take_fitting(two.st.flow, 2, 8)); // no such destination
    EXPECT_FALSE(cd::flow_take_fitting(two.st.flow, 1, -1));
}
