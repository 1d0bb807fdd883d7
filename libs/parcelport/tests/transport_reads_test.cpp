// SPDX-License-Identifier: BSL-1.0
// Two real libfabric endpoints, on tcp and on shm: how a rendezvous parcel's chunks are read.
// The read budget bounds the reads in flight (a flood waits for it; one parcel larger than the
// budget reads a budget's worth at a time), and a large chunk is read in pieces of read_piece.
// The other transport tests: transport_test.cpp.
#include "endpoint_pair.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace {

// Sends n parcels of `ints` ints at once; every one arrives once and intact, and some had to
// wait for the read budget.
void flood_of_large_messages(pair_of_endpoints& e, int n, std::size_t ints) {
    std::vector<std::vector<int>> payloads;
    for (int i = 0; i < n; ++i) {
        payloads.emplace_back(ints, i);
    }
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        e.a->send(1, cs::save(i, payloads[static_cast<std::size_t>(i)]),
                  [&](std::error_code ec) { sent += !ec; });
    }
    ASSERT_TRUE(e.pump([&] { return sent == n && e.got_b.size() == static_cast<std::size_t>(n); }));
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (auto& [src, m] : e.got_b) {
        int i = -1;
        std::vector<int> v;
        cs::load(m, i, v);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, n);
        EXPECT_FALSE(seen[static_cast<std::size_t>(i)]);
        seen[static_cast<std::size_t>(i)] = true;
        EXPECT_EQ(v, payloads[static_cast<std::size_t>(i)]);
    }
    EXPECT_GT(e.b->stats().deferred_rendezvous, 0u);
}

} // namespace

TEST_P(transport, a_flood_of_large_messages_waits_for_the_read_budget_and_loses_nothing) {
    std::unique_ptr<pair_of_endpoints> small;
    try {
        small =
            std::make_unique<pair_of_endpoints>(GetParam(), 42, std::size_t{256} << 10, false, 0,
                                                true, 4096, true, 0, 0, 0, false, true, no_push);
    } catch (std::exception const& e) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << e.what();
    }
    // 40 parcels of 100 KB, 4 MB in all, against a 256 KiB budget: at most two fit at once.
    flood_of_large_messages(*small, 40, 25000);
}

TEST_P(transport, the_default_read_budget_is_the_providers_and_bounds_a_flood) {
    // read_budget 0 (the default) takes default_read_budget(provider): 512 KiB on shm, 4 MiB on
    // tcp, 16 MiB elsewhere. 48 parcels of 400 KB (19.2 MB) cannot all be read at once.
    EXPECT_EQ(pp::transport_options{}.read_budget, 0u);
    EXPECT_EQ(pp::default_read_budget("shm"), std::size_t{512} << 10);
    EXPECT_EQ(pp::default_read_budget("tcp;ofi_rxm"), std::size_t{4} << 20);
    EXPECT_EQ(pp::default_read_budget("tcp"), std::size_t{4} << 20);
    EXPECT_EQ(pp::default_read_budget("verbs;ofi_rxm"), std::size_t{16} << 20);
    read_everything();
    flood_of_large_messages(*eps_, 48, 100000);
}

TEST_P(transport, a_large_chunk_is_read_in_pieces_of_read_piece) {
    // 1 MiB + 17 bytes with 64 KiB pieces: 17 reads, and the bytes intact.
    // The providers' defaults: 1 MiB pieces on tcp and elsewhere, one read per chunk on shm.
    EXPECT_EQ(pp::default_read_piece("tcp;ofi_rxm"), std::size_t{1} << 20);
    EXPECT_EQ(pp::default_read_piece("verbs;ofi_rxm"), std::size_t{1} << 20);
    EXPECT_GT(pp::default_read_piece("shm"), pp::default_read_piece("verbs;ofi_rxm"));
    std::unique_ptr<pair_of_endpoints> pieces;
    try {
        pieces = std::make_unique<pair_of_endpoints>(GetParam(), 42, 0, false, 65536);
    } catch (std::exception const& ex) {
        GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
    }
    EXPECT_EQ(reads_to_receive(*pieces, (std::size_t{1} << 20) + 17), 17u);
}

TEST_P(transport, a_parcel_larger_than_the_read_budget_has_a_budget_of_reads_in_flight) {
    // 8 MiB + 5 bytes with 64 KiB pieces and a 256 KiB budget: admitted alone, read four
    // pieces at a time (all 129 at once, a tcp sender's progress call served them all in one),
    // intact. A budget smaller than a piece: one piece at a time.
    for (auto [budget, most] : {std::pair{std::size_t{256} << 10, std::size_t{256} << 10},
                                {std::size_t{1000}, std::size_t{65536}}}) {
        std::unique_ptr<pair_of_endpoints> e;
        try {
            e = std::make_unique<pair_of_endpoints>(GetParam(), 42, budget, false, 65536);
        } catch (std::exception const& ex) {
            GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
        }
        EXPECT_EQ(reads_to_receive(*e, (std::size_t{8} << 20) + 5), 129u);
        EXPECT_EQ(e->b->stats().rma_read_bytes_in_flight_max, most);
        // The window moves on: a second parcel after the first.
        EXPECT_EQ(reads_to_receive(*e, std::size_t{3} << 20), 48u);
    }
}

TEST_P(transport, by_default_a_large_chunk_is_read_in_the_providers_pieces) {
    // read_piece 0 (the default) takes default_read_piece(provider): a 1 MiB + 1 byte chunk is
    // read with 2 reads of up to 1 MiB on tcp, and with one read on shm.
    std::size_t const bytes = (std::size_t{1} << 20) + 1;
    std::size_t const piece = pp::default_read_piece(GetParam());
    EXPECT_EQ(reads_to_receive(*eps_, bytes), (bytes + piece - 1) / piece);
}

INSTANTIATE_TEST_SUITE_P(providers, transport, transport_providers, provider_label);
