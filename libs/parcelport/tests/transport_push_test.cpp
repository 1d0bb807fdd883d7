// SPDX-License-Identifier: BSL-1.0
// Pushed parcels on libfabric's net (src/libfabric/pushed.hpp): which parcels are pushed and
// which are still read, that they arrive whole and their sends complete without a DONE, that a
// peer posting no pushed receives is read from, that the receiver's size limit holds, and that
// forged pushed messages (truncated, inconsistent, hostile) are dropped with a log line while
// the class keeps its posted receives.
#include "../src/libfabric/pushed.hpp"
#include "malformed_support.hpp"

#include <numeric>
#include <string>
#include <vector>

namespace fab = courier::parcelport::fabric;
using malformed_support::desc;
using malformed_support::forged;
using malformed_support::occurrences;
using malformed_support::parcel_header;

namespace {

/// Two net transports, a and b (b's receptions in `got`), each opened with `o` changed by its
/// own adjuster; null (and `why`) where net cannot be opened.
struct net_pair {
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    std::unique_ptr<pp::test::raw_endpoint> forger; // to b

    static std::unique_ptr<net_pair> open(std::string& why,
                                          void (*adjust_a)(pp::transport_options&) = nullptr,
                                          void (*adjust_b)(pp::transport_options&) = nullptr) {
        pp::transport_options o;
        o.provider = "net";
        o.job_token = 42;
        auto p = std::make_unique<net_pair>();
        try {
            pp::transport_options oa = o, ob = o;
            if (adjust_a) {
                adjust_a(oa);
            }
            if (adjust_b) {
                adjust_b(ob);
            }
            p->a = pp::make_libfabric_transport(oa);
            p->b = pp::make_libfabric_transport(ob);
            p->forger = std::make_unique<pp::test::raw_endpoint>(o);
        } catch (std::exception const& e) {
            why = e.what();
            return nullptr;
        }
        std::vector<std::vector<std::byte>> addrs = {p->a->address(), p->b->address()};
        p->a->set_peers(addrs, 0);
        p->b->set_peers(addrs, 1);
        p->forger->connect(p->b->address());
        net_pair* self = p.get();
        p->b->set_receive_handler(
            [self](std::uint32_t, cs::message&& m) { self->got.push_back(std::move(m)); });
        return p;
    }
    template <class Pred>
    bool pump(Pred done, std::chrono::milliseconds limit = std::chrono::milliseconds(30000)) {
        return pp::test::pump_all(done, limit, *forger, *a, *b);
    }
    /// Sends `m` from a to b; true once b has it and a's send completed without an error.
    bool deliver(cs::message&& m) {
        bool sent = false;
        std::size_t const n = got.size() + 1;
        a->send(1, std::move(m), [&sent](std::error_code ec) { sent = !ec; });
        return pump([&] { return sent && got.size() == n; });
    }
    void raw_tagged(std::vector<std::byte> const& bytes, std::uint64_t tag) {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!forger->tsend(bytes, tag)) {
            forger->progress();
            a->progress();
            b->progress();
            ASSERT_LT(std::chrono::steady_clock::now(), until) << "the provider never took it";
        }
    }
};

cs::serialize_buffer<char> patterned(std::size_t n, int seed) {
    cs::serialize_buffer<char> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = static_cast<char>(i * 13 + static_cast<std::size_t>(seed) + i / 4096);
    }
    return b;
}

} // namespace

TEST(pushed, classes_cover_the_push_limit_from_half_the_first_class) {
    EXPECT_EQ(fab::push_classes::covering(0).count, 0u);
    EXPECT_EQ(fab::push_classes::covering(65535).count, 0u);
    EXPECT_EQ(fab::push_classes::covering(65536).count, 1u);
    EXPECT_EQ(fab::push_classes::covering(131072).count, 1u);
    EXPECT_EQ(fab::push_classes::covering(131073).count, 2u);
    EXPECT_EQ(fab::push_classes::covering(524288).count, 3u);
    EXPECT_EQ(fab::push_classes::covering(std::size_t{1} << 40).count,
              fab::push_classes::max_classes);
    auto const c = fab::push_classes::covering(524288);
    EXPECT_EQ(c.class_of(64, 65535), c.count) << "under half the first class: read";
    EXPECT_EQ(c.class_of(64, 65536), 0u);
    EXPECT_EQ(c.class_of(fab::push_classes::eager_room, 131072), 0u);
    EXPECT_EQ(c.class_of(fab::push_classes::eager_room + 64, 131072), c.count)
        << "an eager part over eager_room: read";
    // An eager message's worth of index (96 KiB on tcp) fits, and the largest class's buffer
    // stays within its landing-pool block.
    EXPECT_GE(fab::push_classes::eager_room, std::size_t{96} << 10);
    EXPECT_LE(fab::push_classes::capacity(0), 2 * fab::push_classes::chunk_capacity(0));
    EXPECT_EQ(c.class_of(64, 131073), 1u);
    EXPECT_EQ(c.class_of(64, 524288), 2u);
    EXPECT_EQ(c.class_of(64, 524289), c.count);
    EXPECT_EQ(pp::default_push_max("net"), std::size_t{256} << 10);
    EXPECT_EQ(pp::default_push_max("shm"), 0u);
    EXPECT_EQ(pp::default_push_max("tcp"), 0u) << "rxm's tcp reads";
}

TEST(pushed, parcels_of_64_to_256_kib_arrive_whole_without_reads_or_dones) {
    std::string why;
    auto p = net_pair::open(why);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    std::size_t const sizes[] = {65536, 100000, 131072, 200001, 262144};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
        auto const buf = patterned(sizes[i], static_cast<int>(i));
        ASSERT_TRUE(p->deliver(cs::save(static_cast<int>(i), buf))) << sizes[i];
        int k = -1;
        cs::serialize_buffer<char> back;
        cs::load(p->got.back(), k, back);
        EXPECT_EQ(k, static_cast<int>(i));
        EXPECT_EQ(back, buf) << sizes[i];
        // Landed cache-line aligned, where the sender put it in the message.
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(back.data()) % 64, 0u) << sizes[i];
    }
    // Three chunks, the first two whole lines long: one message too.
    std::vector<double> x(16384, 1.5), y(8192, -2.0);
    auto const z = patterned(50001, 9);
    ASSERT_TRUE(p->deliver(cs::save(x, y, z)));
    std::vector<double> bx, by;
    cs::serialize_buffer<char> bz;
    cs::load(p->got.back(), bx, by, bz);
    EXPECT_EQ(bx, x);
    EXPECT_EQ(by, y);
    EXPECT_EQ(bz, z);
    auto const sa = p->a->stats();
    auto const sb = p->b->stats();
    EXPECT_EQ(sa.pushed_sends, std::size(sizes) + 1);
    EXPECT_EQ(sb.pushed_receives, std::size(sizes) + 1);
    EXPECT_EQ(sa.rendezvous_sends, 0u);
    EXPECT_EQ(sb.rma_reads, 0u);
    EXPECT_EQ(sb.done_messages, 0u);
}

TEST(pushed, a_block_beside_an_index_that_goes_eager_is_pushed_with_it) {
    // The runtime's zero-copy threshold on net is 64 KiB: a 64-96 KiB block is a chunk of its
    // own, which went in the eager message before; beside an index that goes eager (up to
    // tcp's 96 KiB) it is pushed, not read (a round trip and a DONE).
    std::string why;
    auto const eager_default = [](pp::transport_options& o) { o.eager_threshold = 0; };
    auto p = net_pair::open(why, eager_default, eager_default);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    for (std::size_t words_n : {2000, 9000}) { // an index of ~16 and ~72 KB
        std::vector<std::string> const words(words_n, std::string("seven!!"));
        auto const block = patterned(70000, 7);
        auto m = cs::save(words, block);
        ASSERT_GT(m.index_size(), std::size_t{8} << 10) << "an index over the old 4 KiB room";
        ASSERT_EQ(m.chunks().size(), 2u);
        ASSERT_TRUE(p->deliver(std::move(m)));
        std::vector<std::string> bw;
        cs::serialize_buffer<char> bb;
        cs::load(p->got.back(), bw, bb);
        EXPECT_EQ(bw, words);
        EXPECT_EQ(bb, block);
    }
    EXPECT_EQ(p->a->stats().pushed_sends, 2u);
    EXPECT_EQ(p->a->stats().rendezvous_sends, 0u);
    EXPECT_EQ(p->b->stats().rma_reads, 0u);
}

TEST(pushed, parcels_outside_the_classes_are_read_as_before) {
    std::string why;
    auto p = net_pair::open(why);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    std::vector<cs::message> ms;
    ms.push_back(cs::save(patterned(40000, 1)));  // under half the first class
    ms.push_back(cs::save(patterned(300000, 2))); // over push_max (256 KiB)
    // A chunk after one that ends within a line: it would land unaligned.
    ms.push_back(cs::save(patterned(70001, 3), patterned(70000, 4)));
    // Four chunks: more than net's iov limit takes with the eager part.
    ms.push_back(cs::save(patterned(65536, 5), patterned(65536, 6), patterned(65536, 7),
                          patterned(65536, 8)));
    std::size_t const n = ms.size();
    for (auto& m : ms) {
        ASSERT_TRUE(p->deliver(std::move(m)));
    }
    EXPECT_EQ(p->a->stats().pushed_sends, 0u);
    EXPECT_EQ(p->a->stats().rendezvous_sends, n);
    EXPECT_GE(p->b->stats().rma_reads, n);
    cs::serialize_buffer<char> a4, b4, c4, d4;
    cs::load(p->got[3], a4, b4, c4, d4);
    EXPECT_EQ(d4, patterned(65536, 8));
}

TEST(pushed, a_peer_that_posts_no_pushed_receives_is_read_from) {
    // b opens with push_max 0: its address names no classes, so a reads to it what it would
    // push to a peer that posts them (a pushed message no receive matches would wait in the
    // socket for good).
    std::string why;
    auto p = net_pair::open(why, nullptr, [](pp::transport_options& o) { o.push_max = 0; });
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    auto const buf = patterned(262144, 3);
    ASSERT_TRUE(p->deliver(cs::save(buf)));
    cs::serialize_buffer<char> back;
    cs::load(p->got.back(), back);
    EXPECT_EQ(back, buf);
    EXPECT_EQ(p->a->stats().pushed_sends, 0u);
    EXPECT_EQ(p->b->stats().rma_reads, 1u);
}

TEST(pushed, between_hosts_each_pushed_parcel_rings_with_a_push_notice) {
    // The network doorbell keeps a receiver awake for 1 ms after the last arrival; a pushed
    // message slower than that on the wire would find it asleep, with no read under way to keep
    // it awake. Each pushed parcel rings with a notice (net_bell.hpp), also within the quiet
    // time that holds plain rings back, and every one arrives pushed.
    std::string why;
    auto across = [](pp::transport_options& o) {
        o.peers_on_other_hosts = true;
        o.tcp_doorbell = false; // as the runtime opens its network rail
        o.interface = "lo";
    };
    auto p = net_pair::open(why, across, across);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    auto const parts = fab::split_address(p->a->address(), 0);
    if (parts.bell.rfind("udp:", 0) != 0) {
        GTEST_SKIP() << "no network doorbell on lo here (bell '" << parts.bell << "')";
    }
    EXPECT_NE(parts.push, "") << "the address offers no pushed receives";
    ASSERT_TRUE(p->deliver(cs::save(patterned(200000, 4)))); // first contact
    auto const rings = p->a->stats().doorbell_rings;
    constexpr int n = 3;
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        p->a->send(1, cs::save(patterned(200000, i)),
                   [&sent](std::error_code ec) { sent += ec ? 1000 : 1; });
    }
    ASSERT_TRUE(p->pump([&] { return sent == n && p->got.size() == 1 + n; }));
    // Plain rings within the quiet time: one at most for the three.
    EXPECT_GE(p->a->stats().doorbell_rings, rings + n) << "a pushed parcel without its notice";
    for (int i = 0; i < n; ++i) {
        cs::serialize_buffer<char> back;
        cs::load(p->got[1 + static_cast<std::size_t>(i)], back);
        EXPECT_EQ(back, patterned(200000, i)) << "parcel " << i;
    }
    EXPECT_EQ(p->a->stats().pushed_sends, 1u + n);
    EXPECT_EQ(p->b->stats().pushed_receives, 1u + n);
    EXPECT_EQ(p->b->stats().rma_reads, 0u);
}

TEST(pushed, a_stream_larger_than_the_posted_receives_arrives_whole_and_in_order) {
    // 200 parcels of 256 KiB (50 MiB) sent before b polls once: 8 receives are posted for
    // their class, so most wait in a's socket until b reposts; none is lost or doubled, and
    // b holds no more buffers than the parcels it kept.
    std::string why;
    auto p = net_pair::open(why);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    constexpr int n = 200;
    auto const buf = patterned(262144, 0);
    int sent = 0;
    for (int i = 0; i < n; ++i) {
        p->a->send(1, cs::save(i, buf), [&sent](std::error_code ec) { sent += ec ? 1000 : 1; });
    }
    ASSERT_TRUE(p->pump([&] { return sent == n && p->got.size() == std::size_t{n}; }));
    for (int i = 0; i < n; ++i) {
        int k = -1;
        cs::serialize_buffer<char> back;
        cs::load(p->got[static_cast<std::size_t>(i)], k, back);
        EXPECT_EQ(k, i) << "pushed parcels of one sender arrive in the order sent";
        if (i % 50 == 0) {
            EXPECT_EQ(back, buf);
        }
    }
    EXPECT_EQ(p->b->stats().pushed_receives, std::uint64_t{n});
}

TEST(pushed, the_receivers_size_limit_refuses_a_pushed_parcel) {
    std::string why;
    auto p =
        net_pair::open(why, nullptr, [](pp::transport_options& o) { o.max_parcel_bytes = 100000; });
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    ASSERT_TRUE(p->deliver(cs::save(7, patterned(262144, 1))));
    EXPECT_TRUE(p->got.back().refused());
    EXPECT_EQ(p->b->stats().refused_parcels, 1u);
    ASSERT_TRUE(p->deliver(cs::save(8, patterned(65536, 2))));
    EXPECT_FALSE(p->got.back().refused());
}

namespace {

/// A forged pushed parcel: header (flags pushed | index_inline unless `flags`), descriptors, an
/// index of `index` bytes, padded to 64, then `payload` bytes of 0x5a.
forged pushed_message(std::vector<wire::descriptor> const& ds, std::size_t index,
                      std::size_t payload, std::uint8_t flags = wire::pushed | wire::index_inline) {
    forged f;
    auto h = parcel_header(static_cast<std::uint32_t>(ds.size()), index, flags);
    f.add(&h, sizeof h);
    for (auto const& d : ds) {
        f.add(&d, sizeof d);
    }
    f.bytes.resize(f.bytes.size() + index, std::byte{0});
    f.bytes.resize((f.bytes.size() + 63) / 64 * 64, std::byte{0});
    f.bytes.resize(f.bytes.size() + payload, std::byte{0x5a});
    return f;
}

} // namespace

TEST(pushed, forged_pushed_messages_are_dropped_and_the_class_keeps_its_receives) {
    courier::logging::enable_rate_limits(false);
    std::string why;
    auto p = net_pair::open(why);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    using serialization_chunk = courier::serialization::chunk_type;
    auto const index = static_cast<std::uint8_t>(serialization_chunk::index);
    auto const pointer = static_cast<std::uint8_t>(serialization_chunk::pointer);
    auto const rma = static_cast<std::uint8_t>(serialization_chunk::rma);
    // Header, two descriptors and 16 index bytes: 128 bytes, padded; the chunk at 128.
    constexpr std::size_t at = 128, n = 70000;
    std::vector<forged> fs;
    fs.push_back({std::vector<std::byte>(20, std::byte{1})}); // shorter than a header
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, n, at)}, 16, n,
                                wire::index_inline)); // not flagged pushed
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, n, at + 8)}, 16, n)); // unaligned
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, n, 64)}, 16, n)); // in the index
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, n + 1, at)}, 16, n)); // past it
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, ~std::uint64_t{0} - 8, at)}, 16,
                                n));                                          // a size that wraps
    fs.push_back(pushed_message({desc(index, 16), desc(rma, n, at)}, 16, n)); // an rma chunk
    fs.push_back(pushed_message({desc(index, 17), desc(pointer, n, at)}, 16, n)); // index sum
    fs.push_back(pushed_message({desc(index, 16), desc(pointer, 64, std::uint64_t{1} << 40)}, 16,
                                n)); // a chunk far past the message's end
    // Three descriptors: the chunks start at 192; the second lies inside the first.
    fs.push_back(pushed_message(
        {desc(index, 16), desc(pointer, 64000, 192), desc(pointer, 1000, 256)}, 16, 64000));
    {
        auto f = pushed_message({desc(index, 16), desc(pointer, n, at)}, 16, n);
        f.bytes[8] = std::byte{99}; // the job token
        fs.push_back(f);
    }
    {
        auto f = pushed_message({desc(index, 16), desc(pointer, n, at)}, 16, n);
        std::uint32_t const count = 1u << 30; // more descriptors than bytes
        std::memcpy(f.bytes.data() + offsetof(wire::header, chunk_count), &count, sizeof count);
        fs.push_back(f);
    }
    auto const lines_before = courier::logging::lines_written();
    testing::internal::CaptureStderr();
    // Over the posted receives of class 0 (8): a receive a drop did not give back would leave
    // the class without one, and the real parcels below would never land.
    for (int round = 0; round < 2; ++round) {
        for (auto const& f : fs) {
            p->raw_tagged(f.bytes, fab::push_classes::tag(0));
        }
    }
    p->pump([&] { return courier::logging::lines_written() - lines_before >= 2 * fs.size(); });
    // Larger than the class's buffers: net fails the receive (truncated) and drops the forger's
    // connection; the buffer goes back.
    constexpr std::size_t over = fab::push_classes::capacity(0) + 4096;
    auto const oversize = pushed_message({desc(index, 16), desc(pointer, over, at)}, 16, over);
    p->raw_tagged(oversize.bytes, fab::push_classes::tag(0));
    p->pump([&] { return courier::logging::lines_written() - lines_before > 2 * fs.size(); });
    std::string const err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(p->got.empty());
    EXPECT_EQ(occurrences(err, "dropped a malformed pushed parcel"), 2 * fs.size()) << err;
    EXPECT_EQ(occurrences(err, "a receive failed"), 1u) << err;
    for (int i = 0; i < 12; ++i) {
        auto const buf = patterned(100000, i);
        ASSERT_TRUE(p->deliver(cs::save(buf))) << "parcel " << i << " after the forged ones";
        cs::serialize_buffer<char> back;
        cs::load(p->got.back(), back);
        EXPECT_EQ(back, buf);
    }
    EXPECT_EQ(p->b->stats().pushed_receives, 12u);
}

TEST(pushed, an_untagged_message_flagged_pushed_is_dropped) {
    courier::logging::enable_rate_limits(false);
    std::string why;
    auto p = net_pair::open(why);
    if (!p) {
        GTEST_SKIP() << "no net endpoint here: " << why;
    }
    auto const index = static_cast<std::uint8_t>(courier::serialization::chunk_type::index);
    auto const pointer = static_cast<std::uint8_t>(courier::serialization::chunk_type::pointer);
    auto f = pushed_message({desc(index, 16), desc(pointer, 1000, 128)}, 16, 0);
    testing::internal::CaptureStderr();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!p->forger->send(f.bytes)) {
        p->pump([] { return false; }, std::chrono::milliseconds(1));
        ASSERT_LT(std::chrono::steady_clock::now(), until);
    }
    p->pump([&] { return false; }, std::chrono::milliseconds(300));
    std::string const err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(p->got.empty());
    EXPECT_EQ(occurrences(err, "a pushed parcel outside a pushed receive"), 1u) << err;
    EXPECT_EQ(p->b->stats().rma_reads, 0u) << "nothing was read for it";
    ASSERT_TRUE(p->deliver(cs::save(patterned(200000, 1))));
}
