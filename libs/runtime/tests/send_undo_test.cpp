// SPDX-License-Identifier: BSL-1.0
// What a counted send gives back if it fails, packed into its 64-bit tag (src/parcel_send.hpp):
// each kind's fields come back from the tag as they went in, what does not fit says so, and a
// reply's short request id finds the request that waits in its slot, not a later one there.
// The end-to-end behaviour (a lost post, credit, ordered request or reply) is tested across
// processes in tests/distributed (*_fail_with_their_batch, lost_*).
#include "../src/parcel_send.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace cd = courier::detail;
using kind = cd::send_undo::kind;

namespace {

cd::send_undo round_trip(cd::send_undo const& u) {
    EXPECT_TRUE(u.fits());
    return cd::send_undo::of(u.tag());
}

} // namespace

TEST(send_undo, every_kind_comes_back_from_its_tag) {
    cd::send_undo post{kind::post, (1u << 24) - 1, (std::uint64_t{1} << 38) - 1};
    auto p = round_trip(post);
    EXPECT_EQ(p.what, kind::post);
    EXPECT_EQ(p.dest, (1u << 24) - 1);
    EXPECT_EQ(p.bytes, (std::uint64_t{1} << 38) - 1);

    cd::send_undo credit{kind::credit, 7, (1u << 26) - 1, 4095};
    auto c = round_trip(credit);
    EXPECT_EQ(c.what, kind::credit);
    EXPECT_EQ(c.dest, 7u);
    EXPECT_EQ(c.parcels, 4095u);
    EXPECT_EQ(c.bytes, (1u << 26) - 1);

    auto const rid = std::uint64_t{0x12345} << 32 | 0xabcde; // generation 0x12345, index 0xabcde
    for (bool control : {false, true}) {
        for (std::uint8_t notices = 0; notices <= cd::send_undo::max_notices; ++notices) {
            cd::send_undo reply = cd::send_undo::reply_to(3, rid, control);
            reply.notices = notices;
            auto r = round_trip(reply);
            EXPECT_EQ(r.what, kind::reply);
            EXPECT_EQ(r.dest, 3u);
            EXPECT_EQ(r.control_request, control);
            EXPECT_EQ(r.notices, notices);
            EXPECT_EQ(r.request, cd::send_undo::short_request_id(rid));
        }
    }
    auto k = round_trip(cd::send_undo{kind::control, 5});
    EXPECT_EQ(k.what, kind::control);
    EXPECT_EQ(k.dest, 5u);
}

TEST(send_undo, a_posts_tag_built_directly_is_the_structs) {
    for (std::uint32_t dest : {0u, 1u, 77u, (1u << 24) - 1, 1u << 24}) {
        for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{21}, std::uint64_t{1} << 20,
                                    (std::uint64_t{1} << 38) - 1, std::uint64_t{1} << 38}) {
            cd::send_undo const post{kind::post, dest, bytes};
            EXPECT_EQ(cd::send_undo::post_fits(dest, bytes), post.fits()) << dest << " " << bytes;
            if (post.fits()) {
                EXPECT_EQ(cd::send_undo::post_tag(dest, bytes), post.tag()) << dest << " " << bytes;
            }
        }
    }
}

TEST(send_undo, what_does_not_fit_a_tag_says_so) {
    EXPECT_FALSE((cd::send_undo{kind::control, 1u << 24}).fits());
    EXPECT_FALSE((cd::send_undo{kind::post, 0, std::uint64_t{1} << 38}).fits());
    EXPECT_FALSE((cd::send_undo{kind::credit, 0, 1u << 26, 1}).fits());
    EXPECT_FALSE((cd::send_undo{kind::credit, 0, 1, 4096}).fits());
    cd::send_undo reply = cd::send_undo::reply_to(0, 1, false);
    reply.notices = cd::send_undo::max_notices + 1;
    EXPECT_FALSE(reply.fits());
}

TEST(send_undo, a_short_request_id_tells_a_waiting_request_from_a_later_one_in_its_slot) {
    cd::locality_state::pending_table table;
    auto* s = table.acquire();
    std::uint64_t const first = s->id();
    auto const short_first = cd::send_undo::short_request_id(first);
    // The slot's index is in the short id whole: a notice finds the slot.
    EXPECT_EQ(short_first & cd::send_undo::mask(cd::send_undo::index_bits), first & 0xffffffffu);
    table.publish(s);
    EXPECT_EQ(table.live_id_at(static_cast<std::uint32_t>(first)), first);
    ASSERT_EQ(table.claim(first), s);
    table.release(s);
    EXPECT_EQ(table.live_id_at(static_cast<std::uint32_t>(first)), 0u);
    // The slot's next request: the same index, another short id.
    auto* again = table.acquire();
    ASSERT_EQ(again, s);
    table.publish(again);
    std::uint64_t const second = again->id();
    EXPECT_EQ(second & 0xffffffffu, first & 0xffffffffu);
    EXPECT_NE(cd::send_undo::short_request_id(second), short_first);
    EXPECT_EQ(table.live_id_at(static_cast<std::uint32_t>(second)), second);
    EXPECT_EQ(table.live_id_at(1u << 19), 0u); // never taken
}
