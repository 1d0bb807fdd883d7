// SPDX-License-Identifier: BSL-1.0
// Split messages (wire::fragment) from the wire: parts joined in either order, a batch in two
// parts, and malformed or missing parts dropped, holding few receive buffers and none past the
// stall timeout (malformed_support.hpp).
#include "malformed_support.hpp"

#include <algorithm>
#include <random>

TEST_P(malformed, a_split_message_is_joined_in_either_order) {
    auto whole = real_large_parcel();
    e_->raw(fragment(whole, 1, 0, 4048).bytes);
    e_->raw(fragment(whole, 1, 1, 4048).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 1; }));
    // The second part first (and a split at another place).
    e_->raw(fragment(whole, 2, 1, 3000).bytes);
    e_->raw(fragment(whole, 2, 0, 3000).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 2; }));
    // Interleaved with another split message and a whole one.
    e_->raw(fragment(whole, 3, 0, 4048).bytes);
    e_->raw(fragment(whole, 4, 0, 100).bytes);
    e_->raw(real_parcel().bytes);
    e_->raw(fragment(whole, 4, 1, 100).bytes);
    e_->raw(fragment(whole, 3, 1, 4048).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 5; }));
    for (std::size_t k : {0, 1, 3, 4}) {
        expect_large_parcel(e_->got_b[k]);
    }
    std::string s;
    int i = 0;
    std::vector<int> v;
    cs::load(e_->got_b[2], s, i, v);
    EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
}

TEST_P(malformed, malformed_split_messages_are_dropped) {
    auto whole = real_large_parcel();
    std::vector<forged> fs;
    std::size_t lines = 0;
    auto set = [](forged f, auto change) {
        wire::header h;
        std::memcpy(&h, f.bytes.data(), sizeof h);
        change(h);
        std::memcpy(f.bytes.data(), &h, sizeof h);
        return f;
    };
    // Alone, each is dropped at once: a third part, a whole larger than a receive buffer
    // holds, a part as long as the whole, an empty part, a stranger's token.
    fs.push_back(set(fragment(whole, 10, 0, 4048), [](wire::header& h) { h.chunk_count = 2; }));
    fs.push_back(
        set(fragment(whole, 11, 0, 4048), [](wire::header& h) { h.index_size = 1 << 20; }));
    fs.push_back(set(fragment(whole, 12, 0, 4048), [](wire::header& h) { h.index_size = 4048; }));
    fs.push_back(set(fragment(whole, 13, 1, whole.bytes.size()), [](wire::header&) {}));
    fs.push_back(set(fragment(whole, 14, 0, 4048), [](wire::header& h) { h.token = 43; }));
    lines += 5;
    // Pairs dropped when the second part comes (one line each): lengths that do not add up,
    // a second part 0, a second part 1, totals that differ.
    fs.push_back(fragment(whole, 20, 0, 4048));
    fs.push_back(fragment(whole, 20, 1, 4000));
    fs.push_back(fragment(whole, 21, 0, 4048));
    fs.push_back(fragment(whole, 21, 0, 4048));
    fs.push_back(fragment(whole, 23, 1, 4048));
    fs.push_back(fragment(whole, 23, 1, 4048));
    fs.push_back(fragment(whole, 22, 1, 4048));
    fs.push_back(set(fragment(whole, 22, 0, 4048), [](wire::header& h) { h.index_size += 8; }));
    lines += 4;
    // Joined, not a message of this job: a fragment in a fragment, a stranger's token inside.
    for (int what = 0; what < 2; ++what) {
        auto inner = set(whole, [&](wire::header& h) {
            if (what == 0) {
                h.kind = wire::fragment;
            } else {
                h.token = 43;
            }
        });
        fs.push_back(fragment(inner, 30 + what, 0, 4048));
        fs.push_back(fragment(inner, 30 + what, 1, 4048));
    }
    lines += 2;
    expect_dropped(fs, "malformed split messages", lines);
}

TEST_P(malformed, a_batch_in_two_parts_is_joined_and_malformed_ones_are_dropped) {
    // A batch larger than shm's inject size goes as two fragments whose id has its low 32 bits
    // all ones (coalescer::post_split_batch); joined, it is taken apart as any batch. Forged
    // here: a well-formed one in either order delivers each of its parcels; joined batches
    // that are malformed are dropped with a line each, and nothing of them is delivered.
    auto const both = batch({real_large_parcel(), real_parcel()});
    ASSERT_GT(both.bytes.size(), 4096u);
    std::uint64_t const id = (std::uint64_t{7} << 32) | 0xffffffffu;
    e_->raw(fragment(both, id, 0, 4000).bytes);
    e_->raw(fragment(both, id, 1, 4000).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 2; }));
    e_->raw(fragment(both, id + (std::uint64_t{1} << 32), 1, 2000).bytes);
    e_->raw(fragment(both, id + (std::uint64_t{1} << 32), 0, 2000).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 4; }));
    for (std::size_t k : {0, 2}) {
        expect_large_parcel(e_->got_b[k]);
    }
    for (std::size_t k : {1, 3}) {
        std::string s;
        int i = 0;
        std::vector<int> v;
        cs::load(e_->got_b[k], s, i, v);
        EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
    }
    e_->got_b.clear();
    // Joined, each of these is a malformed batch: its header's size is not the message's, or
    // its first record runs past the end (both dropped whole); or its first record is a
    // fragment, or a DONE (which may ride in a batch) whose length is not its ids', which is
    // dropped while the well-formed parcel behind it arrives.
    std::vector<forged> whole;
    auto wrong_size = both;
    wire::header h;
    std::memcpy(&h, wrong_size.bytes.data(), sizeof h);
    h.index_size -= 8;
    std::memcpy(wrong_size.bytes.data(), &h, sizeof h);
    whole.push_back(wrong_size);
    auto overlong = both;
    std::uint32_t const bad_len = 8000;
    std::memcpy(overlong.bytes.data() + sizeof(wire::header), &bad_len, sizeof bad_len);
    whole.push_back(overlong);
    for (std::uint8_t kind : {wire::fragment, wire::done}) {
        auto inner = real_large_parcel();
        inner.bytes[offsetof(wire::header, kind)] = std::byte{kind};
        whole.push_back(batch({inner, real_parcel()}));
    }
    testing::internal::CaptureStderr();
    std::uint64_t next = id + (std::uint64_t{2} << 32);
    for (auto const& w : whole) {
        ASSERT_GT(w.bytes.size(), 4096u);
        e_->raw(fragment(w, next, 1, 4000).bytes);
        e_->raw(fragment(w, next, 0, 4000).bytes);
        next += std::uint64_t{1} << 32;
    }
    bool const arrived = e_->pump([&] { return e_->got_b.size() >= 2; });
    e_->settle(std::chrono::milliseconds(300));
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(arrived) << err;
    EXPECT_EQ(occurrences(err, "coalesced message"), whole.size()) << err;
    ASSERT_EQ(e_->got_b.size(), 2u) << err;
    for (auto& m : e_->got_b) {
        std::string s;
        int i = 0;
        std::vector<int> v;
        cs::load(m, s, i, v);
        EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
    }
    e_->still_works();
}

TEST_P(malformed, first_parts_whose_second_never_comes_hold_few_receive_buffers) {
    // 40 first parts, never completed: at most 16 wait (each holds a receive buffer); the
    // older are dropped with a line each, and the receiver keeps receiving. A waiting first
    // part is still joined when its second part comes (before the stall timeout drops it).
    auto whole = real_large_parcel();
    testing::internal::CaptureStderr();
    for (std::uint64_t id = 100; id < 140; ++id) {
        e_->raw(fragment(whole, id, 0, 4048).bytes);
    }
    e_->raw(fragment(whole, 139, 1, 4048).bytes);
    bool joined = e_->pump([&] { return e_->got_b.size() == 1; });
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(joined) << err;
    expect_large_parcel(e_->got_b[0]);
    EXPECT_EQ(occurrences(err, "others waited"), 40u - 16u) << err;
    e_->still_works();
}

TEST_P(malformed, a_first_part_whose_second_never_comes_is_dropped_after_the_stall_timeout) {
    // Its sender died between the parts: after read_stall_timeout (200 ms here) the waiting
    // parts are dropped with a line each and their receive buffers re-posted.
    auto whole = real_large_parcel();
    std::vector<forged> fs;
    for (std::uint64_t id = 200; id < 203; ++id) {
        fs.push_back(fragment(whole, id, 0, 4048));
    }
    fs.push_back(fragment(whole, 203, 1, 4048)); // a lone second part too
    testing::internal::CaptureStderr();
    for (auto const& f : fs) {
        e_->raw(f.bytes);
    }
    e_->settle(std::chrono::milliseconds(700));
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(occurrences(err, "has not come within"), 4u) << err;
    // Dropped, not waiting: a second part now finds nothing to join.
    e_->raw(fragment(whole, 202, 1, 4048).bytes);
    e_->settle(std::chrono::milliseconds(100));
    EXPECT_TRUE(e_->got_b.empty());
    e_->still_works();
}

INSTANTIATE_TEST_SUITE_P(providers, malformed, malformed_support::providers(),
                         malformed_support::provider_name);
