// SPDX-License-Identifier: BSL-1.0
// Test helpers: two real libfabric endpoints connected to each other (pair_of_endpoints), the
// `transport` fixture parameterized by provider, and a rendezvous round trip that checks its
// payload (reads_to_receive). Each test file that includes it instantiates the fixture itself.
#pragma once

#include <courier/parcelport/transport.hpp>
#include <courier/rma.hpp>
#include <courier/serialization.hpp>

#include "../src/libfabric/context.hpp"
#include "pump.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace cs = courier::serialization;
namespace pp = courier::parcelport;

namespace {

struct pair_of_endpoints {
    std::unique_ptr<pp::transport> a, b;
    std::vector<std::pair<std::uint32_t, cs::message>> got_a, got_b;

    explicit pair_of_endpoints(std::string const& provider, std::uint64_t token_b = 42,
                               std::size_t read_budget = pp::transport_options{}.read_budget,
                               bool attach_pool_to_a = false, std::size_t read_piece = 0,
                               bool coalescing = true, std::size_t eager_threshold = 4096,
                               bool split_messages = true, std::size_t coalesce_records = 0,
                               std::size_t shm_outbox = 0, std::size_t shm_outbox_chunk = 0,
                               bool shm_direct_read = false, bool shm_rings = true,
                               std::function<void(pp::transport_options&)> const& adjust = {}) {
        pp::transport_options o;
        o.shm_rings = shm_rings;
        // No outbox and no direct reads unless asked: these tests see shm's RMA reads by
        // fi_read (the protocol of chunks over the outbox's largest, and of a peer whose outbox
        // cannot be mapped or whose memory cannot be read directly).
        o.shm_outbox = shm_outbox;
        // Where these tests ask for an outbox they test its mechanics: every chunk it can take
        // is staged, on any processor and to an idle peer too.
        o.shm_outbox_idle = 1;
        o.shm_direct_read = shm_direct_read;
        if (shm_outbox_chunk != 0) {
            o.shm_outbox_chunk = shm_outbox_chunk;
        }
        o.coalescing = coalescing;
        o.coalesce_records = coalesce_records;
        o.split_messages = split_messages;
        o.eager_threshold = eager_threshold;
        o.provider = provider;
        o.read_budget = read_budget;
        o.read_piece = read_piece;
        if (adjust) {
            adjust(o);
        }
        o.job_token = 42;
        o.attach_rma_pool = attach_pool_to_a;
        a = pp::make_libfabric_transport(o);
        o.attach_rma_pool = false;
        o.job_token = token_b;
        b = pp::make_libfabric_transport(o);
        std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
        a->set_peers(addrs, 0);
        b->set_peers(addrs, 1);
        a->set_receive_handler(
            [this](std::uint32_t src, cs::message&& m) { got_a.emplace_back(src, std::move(m)); });
        b->set_receive_handler(
            [this](std::uint32_t src, cs::message&& m) { got_b.emplace_back(src, std::move(m)); });
    }
    /// A pair with the defaults above and whatever `adjust` changes of them (but the job tokens
    /// and attach_rma_pool, set after it).
    pair_of_endpoints(std::string const& provider,
                      std::function<void(pp::transport_options&)> const& adjust)
        : pair_of_endpoints(provider, 42, pp::transport_options{}.read_budget, false, 0, true, 4096,
                            true, 0, 0, 0, false, true, adjust) {}
    // Progresses both until `done` or a timeout.
    template <class Pred>
    bool pump(Pred done, std::chrono::seconds limit = std::chrono::seconds(30)) {
        return pp::test::pump_both(*a, *b, done, limit);
    }
};

// Sends a serialize_buffer of `bytes` from a to b (a rendezvous: it is above the eager
// threshold), checks that it arrives intact, and returns b's RMA reads for it. The chunk may
// come through the shm outbox (no RMA read then).
inline std::uint64_t reads_to_receive_any(pair_of_endpoints& e, std::size_t bytes) {
    cs::serialize_buffer<char> buf(bytes);
    for (std::size_t i = 0; i < buf.size(); ++i) {
        buf[i] = static_cast<char>(i * 7 + i / 65536);
    }
    auto reads_before = e.b->stats().rma_reads;
    bool sent = false;
    e.a->send(1, cs::save(buf), [&](std::error_code ec) { sent = !ec; });
    std::size_t const n = e.got_b.size() + 1;
    EXPECT_TRUE(e.pump([&] { return sent && e.got_b.size() == n; }));
    if (e.got_b.size() != n) {
        return 0;
    }
    cs::serialize_buffer<char> back;
    cs::load(e.got_b.back().second, back);
    EXPECT_EQ(back, buf);
    return e.b->stats().rma_reads - reads_before;
}

// As reads_to_receive_any, and every byte of the chunk was read by RMA.
inline std::uint64_t reads_to_receive(pair_of_endpoints& e, std::size_t bytes) {
    auto bytes_before = e.b->stats().rma_bytes_read;
    std::uint64_t reads = reads_to_receive_any(e, bytes);
    EXPECT_EQ(e.b->stats().rma_bytes_read - bytes_before, bytes);
    return reads;
}

class transport : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        try {
            eps_ = std::make_unique<pair_of_endpoints>(GetParam());
        } catch (std::exception const& e) {
            GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << e.what();
        }
    }
    /// Reopens the pair with nothing pushed (transport_options::push_max 0): for tests of the
    /// rendezvous's reads, budget, announcements and DONEs, which parcels pushed on net skip.
    void read_everything() {
        if (eps_) {
            eps_ = std::make_unique<pair_of_endpoints>(GetParam(), no_push);
        }
    }
    static void no_push(pp::transport_options& o) { o.push_max = 0; }
    std::unique_ptr<pair_of_endpoints> eps_;
};

/// Opens two libfabric transports of `o` into `a` and `b`; false, with the reason in `why`,
/// when the provider cannot be opened here (the caller skips the test).
inline bool open_two(pp::transport_options const& o, std::unique_ptr<pp::transport>& a,
                     std::unique_ptr<pp::transport>& b, std::string& why) {
    try {
        a = pp::make_libfabric_transport(o);
        b = pp::make_libfabric_transport(o);
    } catch (std::exception const& e) {
        why = e.what();
        return false;
    }
    return true;
}

/// Opens a and b with `o` and connects them, b given a's address with its parts changed by
/// `alter` (a peer b sees differently from what a is); b's receptions go into `got`. false,
/// with the reason, if the provider cannot open here.
inline bool open_two_altered(pp::transport_options const& o, std::unique_ptr<pp::transport>& a,
                             std::unique_ptr<pp::transport>& b,
                             std::function<void(courier::parcelport::fabric::address_parts&)> alter,
                             std::vector<cs::message>& got, std::string& why) {
    if (!open_two(o, a, b, why)) {
        return false;
    }
    std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
    a->set_peers(addrs, 0);
    auto parts = courier::parcelport::fabric::split_address(addrs[0], 0);
    alter(parts);
    addrs[0] = courier::parcelport::fabric::join_address(parts);
    b->set_peers(addrs, 1);
    b->set_receive_handler([&got](std::uint32_t, cs::message&& m) { got.push_back(std::move(m)); });
    return true;
}

/// Sends `buf` from a to b (as open_two_altered connects them, b's receptions in `got`) and
/// checks that it arrives once and intact.
inline void send_one_checked(pp::transport& a, pp::transport& b, std::vector<cs::message>& got,
                             cs::serialize_buffer<char> const& buf) {
    bool sent = false;
    std::size_t const n = got.size() + 1;
    a.send(1, cs::save(buf), [&](std::error_code ec) { sent = !ec; });
    ASSERT_TRUE(pp::test::pump_both(
        a, b, [&] { return sent && got.size() == n; }, std::chrono::seconds(30)));
    cs::serialize_buffer<char> back;
    cs::load(got.back(), back);
    EXPECT_EQ(back, buf);
}

/// The providers the `transport` fixture runs on, and their names in the tests' names: net is
/// what "tcp" opens where libfabric offers it (tcp_provider()), rxm ("tcp") the fallback.
/// A transport::stream_writer whose context is the std::span<std::byte const> it copies: a
/// parcel's whole stream (a message of one index chunk's data()) for send_stream().
inline void copy_stream(void const* ctx, std::byte* at) {
    auto const& s = *static_cast<std::span<std::byte const> const*>(ctx);
    std::memcpy(at, s.data(), s.size());
}

inline auto const transport_providers = ::testing::Values("tcp;ofi_rxm", "shm", "net");
inline std::string provider_label(::testing::TestParamInfo<std::string> const& info) {
    return info.param == "tcp;ofi_rxm" ? std::string("tcp") : info.param;
}

} // namespace
