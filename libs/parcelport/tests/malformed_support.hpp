// SPDX-License-Identifier: BSL-1.0
// What the malformed-message tests share (malformed_test.cpp: parcels, reads and ring messages;
// malformed_batch_test.cpp: coalesced messages; malformed_split_test.cpp: split messages): two
// libfabric endpoints and a forger that sends raw bytes to the second, the fixture that checks
// a forged message is dropped with a log line and harms nothing, and writers of forged messages.
#pragma once

#include "../src/batch_reader.hpp"
#include "../src/libfabric/libfabric_transport.hpp"
#include "../src/wire.hpp"
#include "pump.hpp"
#include "raw_endpoint.hpp"

#include <courier/common/log.hpp>
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cs = courier::serialization;
namespace pp = courier::parcelport;
namespace wire = courier::parcelport::wire;

namespace malformed_support {

// How many times `needle` occurs in `text` (the receiver's log lines of one kind).
inline std::size_t occurrences(std::string const& text, std::string_view needle) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = text.find(needle, at)) != std::string::npos;
         at += needle.size()) {
        ++n;
    }
    return n;
}

struct endpoints {
    std::unique_ptr<pp::transport> a, b;
    std::unique_ptr<pp::test::raw_endpoint> forger; // sends forged bytes to b
    std::vector<cs::message> got_b;

    /// `variant`: a provider, or "shm-fi_read": shm with its own RMA reads (no direct reads).
    explicit endpoints(std::string const& variant) {
        pp::transport_options o;
        o.provider = variant == "shm-fi_read" ? "shm" : variant;
        o.shm_direct_read = variant != "shm-fi_read";
        o.job_token = 42;
        o.read_budget = std::size_t{1} << 20;
        o.read_stall_timeout = std::chrono::milliseconds(200);
        a = pp::make_libfabric_transport(o);
        b = pp::make_libfabric_transport(o);
        forger = std::make_unique<pp::test::raw_endpoint>(o);
        std::vector<std::vector<std::byte>> addrs = {a->address(), b->address()};
        a->set_peers(addrs, 0);
        b->set_peers(addrs, 1);
        forger->connect(b->address());
        b->set_receive_handler(
            [this](std::uint32_t, cs::message&& m) { got_b.push_back(std::move(m)); });
    }
    // Progresses the forger too: its provider may still be connecting when it took a send.
    template <class Pred>
    bool pump(Pred done, std::chrono::milliseconds limit = std::chrono::milliseconds(30000)) {
        return pp::test::pump_all(done, limit, *forger, *a, *b);
    }
    void settle(std::chrono::milliseconds d = std::chrono::milliseconds(50)) {
        pump([] { return false; }, d);
    }
    // A well-formed parcel still goes through, eager and by rendezvous (so the read budget
    // and the receive path survived).
    void still_works() {
        got_b.clear();
        bool sent = false;
        e_send(cs::save(std::string("after"), 7), sent);
        ASSERT_TRUE(pump([&] { return sent && got_b.size() == 1; }));
        std::string s;
        int i = 0;
        cs::load(got_b[0], s, i);
        EXPECT_EQ(s, "after");
        EXPECT_EQ(i, 7);
        std::vector<double> big(300000, 2.5); // 2.4 MB: more than the 1 MiB budget
        bool sent_big = false;
        e_send(cs::save(big), sent_big);
        ASSERT_TRUE(pump([&] { return sent_big && got_b.size() == 2; }));
        std::vector<double> back;
        cs::load(got_b[1], back);
        EXPECT_EQ(back, big);
    }
    // Sends a forged message as it is, progressing both sides until the provider takes it.
    void raw(std::vector<std::byte> const& bytes) {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!forger->send(bytes)) {
            forger->progress();
            a->progress();
            b->progress();
            ASSERT_LT(std::chrono::steady_clock::now(), until) << "the provider never took it";
        }
    }
    void e_send(cs::message&& m, bool& sent) {
        a->send(1, std::move(m), [&sent](std::error_code ec) { sent = !ec; });
    }
};

inline wire::header parcel_header(std::uint32_t chunks, std::uint64_t index_size,
                                  std::uint8_t flags) {
    wire::header h{};
    h.magic = wire::magic;
    h.version = wire::version;
    h.kind = wire::parcel;
    h.flags = flags;
    h.token = 42;
    h.source = 0;
    h.chunk_count = chunks;
    h.send_id = 12345;
    h.index_size = index_size;
    return h;
}

struct forged {
    std::vector<std::byte> bytes;
    void add(void const* p, std::size_t n) {
        auto const* q = static_cast<std::byte const*>(p);
        bytes.insert(bytes.end(), q, q + n);
    }
};

inline forged eager(wire::header const& h, std::vector<wire::descriptor> const& ds,
                    std::vector<std::byte> const& index) {
    forged f;
    f.add(&h, sizeof h);
    for (auto const& d : ds) {
        f.add(&d, sizeof d);
    }
    f.add(index.data(), index.size());
    return f;
}

inline wire::descriptor desc(std::uint8_t type, std::uint64_t size, std::uint64_t address = 0,
                             std::uint64_t key = 0) {
    wire::descriptor d{};
    d.type = type;
    d.size = size;
    d.address = address;
    d.key = key;
    return d;
}

class malformed : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        // These tests count the lines their forged messages leave, one per message.
        courier::logging::enable_rate_limits(false);
        try {
            e_ = std::make_unique<endpoints>(GetParam());
        } catch (std::exception const& ex) {
            GTEST_SKIP() << "provider " << GetParam() << " unavailable here: " << ex.what();
        }
    }
    // Sends each forged message, checks that none was delivered and that each left a line on
    // stderr, then that the receiver still works.
    void expect_dropped(std::vector<forged> const& fs, char const* why) {
        expect_dropped(fs, why, fs.size());
    }
    void expect_dropped(std::vector<forged> const& fs, char const* why, std::size_t min_lines) {
        auto const lines_before = courier::logging::lines_written();
        testing::internal::CaptureStderr();
        for (auto const& f : fs) {
            e_->raw(f.bytes);
        }
        // Waits for the lines the drops must leave (a forged read fails only after the
        // provider connects to the peer it names: over a second under TSan on a guest with slow
        // page faults), then a little longer for any others.
        e_->pump([&] { return courier::logging::lines_written() - lines_before >= min_lines; });
        e_->settle(std::chrono::milliseconds(300));
        std::string err = testing::internal::GetCapturedStderr();
        EXPECT_TRUE(e_->got_b.empty()) << why;
        EXPECT_GE(occurrences(err, "courier ["), min_lines) << why << "\n" << err;
        e_->still_works();
        if (HasFailure()) {
            std::fprintf(stderr, "what the receiver logged:\n%s", err.c_str());
        }
    }
    std::unique_ptr<endpoints> e_;
};

// The eager message a sender makes of `m` when all its data is inline.
inline forged eager_of(cs::message const& m) {
    std::vector<std::byte> index(m.data().begin(), m.data().end());
    std::vector<wire::descriptor> ds;
    for (auto const& c : m.chunks()) {
        ds.push_back(desc(static_cast<std::uint8_t>(c.type), c.size));
    }
    return eager(
        parcel_header(static_cast<std::uint32_t>(ds.size()), index.size(), wire::index_inline), ds,
        index);
}

/// The fields of a forged parcel (real_parcel, compact_parcel: a string, an int, ints), loaded
/// from `m`. Throws serialization_error as cs::load does.
struct parcel_fields {
    std::string s;
    int i = 0;
    std::vector<int> v;
};
inline parcel_fields load_fields(cs::message& m) {
    parcel_fields f;
    cs::load(m, f.s, f.i, f.v);
    return f;
}

inline forged real_parcel() {
    return eager_of(cs::save(std::string("payload"), 12345, std::vector<int>{1, 2, 3}));
}

/// A DONE message from locality `source` whose header names `more` more ids, followed by `ids`
/// ids (1000, 1001, ...): well-formed when more + 1 == ids.
inline forged done_with(std::uint32_t more, std::size_t ids, std::uint32_t source = 0) {
    auto h = parcel_header(more, 0, 0);
    h.kind = wire::done;
    h.source = source;
    forged f;
    f.add(&h, sizeof h);
    for (std::size_t i = 0; i < ids; ++i) {
        std::uint64_t id = 1000 + i;
        f.add(&id, sizeof id);
    }
    return f;
}

/// A coalesced message (wire::batch) of `records`, each given its length prefix (with record
/// flags `flags`) and padding; `extra` bytes are appended after the records (and counted in the
/// header).
inline forged batch(std::vector<forged> const& records, std::vector<std::byte> const& extra = {},
                    std::uint32_t flags = 0) {
    std::vector<std::byte> body;
    for (auto const& r : records) {
        auto len = static_cast<std::uint32_t>(r.bytes.size());
        std::size_t at = body.size();
        body.resize(at + wire::record_size(len));
        std::memcpy(body.data() + at, &len, sizeof len);
        std::memcpy(body.data() + at + sizeof len, &flags, sizeof flags);
        if (len != 0) { // an empty record: memcpy's source may not be null
            std::memcpy(body.data() + at + wire::record_prefix, r.bytes.data(), len);
        }
    }
    body.insert(body.end(), extra.begin(), extra.end());
    wire::header h = parcel_header(static_cast<std::uint32_t>(records.size()), body.size(), 0);
    h.kind = wire::batch;
    h.send_id = 0;
    forged f;
    f.add(&h, sizeof h);
    f.add(body.data(), body.size());
    return f;
}

// A real eager parcel of about 4.5 KB (a string, an int and 4400 chars, all inline): larger
// than shm's inject size, as a split message's is.
inline forged real_large_parcel() {
    cs::options copy_all;
    copy_all.zero_copy = false;
    std::vector<char> chars(4400);
    for (std::size_t i = 0; i < chars.size(); ++i) {
        chars[i] = static_cast<char>(i * 13);
    }
    return eager_of(cs::save(copy_all, std::string("payload"), 12345, chars));
}

inline void expect_large_parcel(cs::message& m) {
    std::string s;
    int i = 0;
    std::vector<char> chars;
    cs::load(m, s, i, chars);
    EXPECT_EQ(s, "payload");
    EXPECT_EQ(i, 12345);
    ASSERT_EQ(chars.size(), 4400u);
    for (std::size_t k = 0; k < chars.size(); ++k) {
        ASSERT_EQ(chars[k], static_cast<char>(k * 13)) << k;
    }
}

// Part `part` of `whole` split after `first` bytes, as message `id` (wire::fragment).
inline forged fragment(forged const& whole, std::uint64_t id, std::uint32_t part,
                       std::size_t first) {
    wire::header h = parcel_header(part, whole.bytes.size(), 0);
    h.kind = wire::fragment;
    h.send_id = id;
    forged f;
    f.add(&h, sizeof h);
    if (part == 0) {
        f.add(whole.bytes.data(), first);
    } else {
        f.add(whole.bytes.data() + first, whole.bytes.size() - first);
    }
    return f;
}

/// The providers every malformed-input suite runs on, and their test-name suffixes.
inline auto providers() {
    return ::testing::Values("tcp;ofi_rxm", "shm", "shm-fi_read", "net");
}
inline std::string provider_name(::testing::TestParamInfo<std::string> const& info) {
    return info.param == "tcp;ofi_rxm"   ? std::string("tcp")
           : info.param == "shm-fi_read" ? std::string("shm_fi_read")
                                         : info.param;
}

} // namespace malformed_support

using namespace malformed_support; // NOLINT: the tests' own vocabulary
