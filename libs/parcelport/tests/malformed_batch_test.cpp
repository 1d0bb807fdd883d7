// SPDX-License-Identifier: BSL-1.0
// Malformed coalesced messages (wire::batch) from the wire: records of bad lengths, padding,
// flags or headers, and compact records (a parcel's stream alone) good and damaged. Each bad
// one is dropped with a log line and the receiver still works (malformed_support.hpp).
#include "malformed_support.hpp"

#include <algorithm>
#include <random>

TEST(batch_records, a_last_record_without_its_padding_is_refused_and_nothing_past_it_is_read) {
    // A record whose length is not a multiple of 8, at the very end of the message with no
    // padding after it: the reader must refuse it, never step past the message's end (the
    // bytes here end exactly there: ASan in CI sees a read beyond them).
    auto inner = real_parcel();
    while (inner.bytes.size() % 8 != 1) {
        inner.bytes.push_back(std::byte{0});
    }
    auto whole = batch({inner});
    whole.bytes.resize(whole.bytes.size() - 7); // the padding goes
    wire::header h;
    std::memcpy(&h, whole.bytes.data(), sizeof h);
    h.index_size = whole.bytes.size() - sizeof h;
    std::memcpy(whole.bytes.data(), &h, sizeof h);
    auto exact = std::make_unique<std::byte[]>(whole.bytes.size());
    std::memcpy(exact.get(), whole.bytes.data(), whole.bytes.size());
    int records = 0;
    courier::logging::enable_rate_limits(false);
    testing::internal::CaptureStderr();
    pp::for_each_record(h, exact.get(), whole.bytes.size(),
                        [&](std::byte const*, std::size_t, std::uint32_t, bool) { ++records; });
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(records, 0);
    EXPECT_NE(err.find("dropped the rest of a coalesced message"), std::string::npos) << err;
}

TEST_P(malformed, a_well_formed_forged_batch_delivers_each_parcel) {
    e_->raw(batch({real_parcel(), real_parcel(), real_parcel()}).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 3; }));
    for (auto& m : e_->got_b) {
        auto const f = load_fields(m);
        EXPECT_EQ(f.s, "payload");
        EXPECT_EQ(f.i, 12345);
    }
}

TEST_P(malformed, done_records_in_a_batch_complete_nothing_unknown_and_bad_ones_are_dropped) {
    // Over tcp a DONE may ride in a batch as a record (coalescer::add_control). A well-formed
    // one of ids no send has completes nothing and logs nothing; one whose ids do not add up,
    // or that names another source, is dropped with a line; the parcels around them arrive.
    testing::internal::CaptureStderr();
    e_->raw(batch({done_with(2, 2, 0), real_parcel(), done_with(3, 1, 0), done_with(0, 0, 7),
                   real_parcel()})
                .bytes);
    bool const arrived = e_->pump([&] { return e_->got_b.size() == 2; });
    e_->settle(std::chrono::milliseconds(200));
    std::string const err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(arrived) << err;
    EXPECT_EQ(e_->got_b.size(), 2u);
    for (auto& m : e_->got_b) {
        EXPECT_EQ(load_fields(m).i, 12345);
    }
    EXPECT_EQ(occurrences(err, "dropped a DONE in a coalesced message"), 1u) << err;
    EXPECT_EQ(occurrences(err, "bad header"), 1u) << err;
    EXPECT_EQ(occurrences(err, "courier ["), 2u) << err;
    e_->got_b.clear();
    e_->still_works();
}

/// A parcel's stream alone: a compact record's bytes (wire::record_compact).
forged compact_parcel(int i) {
    cs::message m = cs::save(std::string("compact"), i, std::vector<int>{4, 5});
    forged f;
    f.add(m.data().data(), m.data().size());
    return f;
}

TEST_P(malformed, compact_records_deliver_each_parcel_and_bad_ones_are_dropped_alone) {
    // Three compact records, as the sender writes small parcels into a batch; the second's
    // stream is damaged (its archive header overwritten): it is dropped with a line, the
    // others arrive. A record with unknown record flags, or an empty compact record, ends its
    // batch.
    auto bad = compact_parcel(2);
    bad.bytes[0] = std::byte{'X'};
    courier::logging::enable_rate_limits(false);
    testing::internal::CaptureStderr();
    e_->raw(batch({compact_parcel(1), bad, compact_parcel(3)}, {}, wire::record_compact).bytes);
    e_->raw(batch({compact_parcel(4)}, {}, 2).bytes);
    e_->raw(batch({forged{}, compact_parcel(6)}, {}, wire::record_compact).bytes);
    e_->raw(batch({compact_parcel(5)}, {}, wire::record_compact).bytes);
    ASSERT_TRUE(e_->pump([&] { return e_->got_b.size() == 3; }));
    e_->pump([] { return false; }, std::chrono::seconds(1)); // nothing more comes
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(e_->got_b.size(), 3u);
    std::vector<int> numbers;
    for (auto& m : e_->got_b) {
        auto const f = load_fields(m);
        EXPECT_EQ(f.s, "compact");
        EXPECT_EQ(f.v, (std::vector<int>{4, 5}));
        numbers.push_back(f.i);
    }
    std::sort(numbers.begin(), numbers.end());
    EXPECT_EQ(numbers, (std::vector<int>{1, 3, 5}));
    EXPECT_NE(err.find("malformed parcel"), std::string::npos) << err;
    EXPECT_NE(err.find("unknown record flags"), std::string::npos) << err;
    EXPECT_NE(err.find("a record of 0 bytes"), std::string::npos) << err;
}

// wire::quiet marks a control message of its own (send_control), whose arrival alone is no
// work. A peer that sets it on a batch's record (one with two chunks, so it is not taken as a
// small stream) does not make the batch quiet: the receiver's pass that delivers it is work.
TEST_P(malformed, a_quiet_flag_on_a_batch_record_is_work) {
    cs::message m = cs::save(std::string("payload"), 12345, std::vector<int>{1, 2, 3});
    std::vector<std::byte> index(m.data().begin(), m.data().end());
    auto const index_t = static_cast<std::uint8_t>(cs::chunk_type::index);
    auto const pointer_t = static_cast<std::uint8_t>(cs::chunk_type::pointer);
    forged record = eager(parcel_header(2, index.size(), wire::index_inline | wire::quiet),
                          {desc(index_t, index.size()), desc(pointer_t, 0)}, index);
    e_->raw(batch({record}).bytes);
    bool worked = false;
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (e_->got_b.empty() && std::chrono::steady_clock::now() < until) {
        e_->forger->progress();
        worked = e_->b->progress() || worked;
    }
    ASSERT_EQ(e_->got_b.size(), 1u);
    EXPECT_TRUE(worked);
}

TEST_P(malformed, malformed_batches_and_unknown_kinds_are_dropped) {
    std::vector<forged> fs;
    // The header's size is not the message's.
    auto wrong_size = batch({real_parcel()});
    wire::header h;
    std::memcpy(&h, wrong_size.bytes.data(), sizeof h);
    h.index_size += 8;
    std::memcpy(wrong_size.bytes.data(), &h, sizeof h);
    fs.push_back(wrong_size);
    // A record longer than what remains, one shorter than a header, a non-zero prefix.
    for (std::uint32_t bad_len : {100000u, 20u}) {
        auto f = batch({real_parcel()});
        std::memcpy(f.bytes.data() + sizeof(wire::header), &bad_len, sizeof bad_len);
        fs.push_back(f);
    }
    auto nonzero = batch({real_parcel()});
    nonzero.bytes[sizeof(wire::header) + 5] = std::byte{1};
    fs.push_back(nonzero);
    // Inner parcels with a stranger's token, another source, or not a parcel.
    for (int what = 0; what < 3; ++what) {
        auto inner = real_parcel();
        wire::header ih;
        std::memcpy(&ih, inner.bytes.data(), sizeof ih);
        if (what == 0) {
            ih.token = 43;
        } else if (what == 1) {
            ih.source = 1;
        } else {
            ih.kind = wire::batch;
        }
        std::memcpy(inner.bytes.data(), &ih, sizeof ih);
        fs.push_back(batch({inner}));
    }
    // A truncated record prefix after the last record.
    fs.push_back(batch({}, std::vector<std::byte>(4)));
    // A message of an unknown kind.
    auto unknown = real_parcel();
    unknown.bytes[offsetof(wire::header, kind)] = std::byte{9};
    fs.push_back(unknown);
    expect_dropped(fs, "malformed batches");
}

INSTANTIATE_TEST_SUITE_P(providers, malformed, malformed_support::providers(),
                         malformed_support::provider_name);
