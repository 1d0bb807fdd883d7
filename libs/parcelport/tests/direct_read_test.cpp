// SPDX-License-Identifier: BSL-1.0
// Direct reads on shm (libs/parcelport/src/libfabric/direct_read.hpp): the identity check a
// peer passes before its memory is read with process_vm_readv, reads of this process and of
// another, bad addresses, and through a transport: chunks read in steps across progress
// passes, and a peer that fails the check read with fi_read.
#include "../src/libfabric/context.hpp"
#include "../src/libfabric/direct_read.hpp"
#include "../src/libfabric/rendezvous.hpp"
#include "endpoint_pair.hpp"

#include <courier/rma/pool.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <thread>

namespace fab = courier::parcelport::fabric;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::vector<std::byte> v(n);
    for (auto& b : v) {
        b = static_cast<std::byte>(gen());
    }
    return v;
}

std::uint64_t address_of(void const* p) {
    return reinterpret_cast<std::uintptr_t>(p);
}

/// identity() with one field replaced (0: pid, 1: address, 2: value), in hexadecimal.
std::string identity_with(int field, std::uint64_t v) {
    std::string s = fab::direct_reader::identity();
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == ':') {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    }
    EXPECT_EQ(parts.size(), 3u) << s;
    parts.resize(3);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
    parts[static_cast<std::size_t>(field)] = buf;
    return parts[0] + ":" + parts[1] + ":" + parts[2];
}

} // namespace

TEST(direct_reader, a_peer_that_proves_its_identity_is_read_and_the_bytes_are_exact) {
    fab::direct_reader r;
    // Locality 0 offers nothing (this side, say), 1 offers this process's identity.
    EXPECT_EQ(r.connect({"", fab::direct_reader::identity()}), 0u);
    EXPECT_FALSE(r.enabled(0));
    EXPECT_TRUE(r.enabled(1));
    EXPECT_FALSE(r.enabled(2));
    auto const src = random_bytes((std::size_t{1} << 20) + 3, 7);
    std::vector<std::byte> dst(src.size());
    ASSERT_TRUE(r.read(1, dst.data(), address_of(src.data()), src.size()));
    EXPECT_EQ(dst, src);
    EXPECT_FALSE(r.read(0, dst.data(), address_of(src.data()), src.size())) << "not enabled";
    EXPECT_FALSE(r.read(5, dst.data(), address_of(src.data()), src.size())) << "no such peer";
}

TEST(direct_reader, malformed_or_false_identities_are_refused) {
    fab::direct_reader r;
    std::vector<std::string> ids = {
        "x",
        "1:2",
        "0:0:0",
        "12:34:56:78",
        fab::direct_reader::identity() + "z",
        identity_with(2, 0x1234),     // the right pid and address, another value
        identity_with(1, 16),         // an address that is not mapped
        identity_with(0, 0x7ffffffe), // a pid that does not exist (pid_max is lower)
    };
    EXPECT_EQ(r.connect(ids), ids.size());
    for (std::uint32_t i = 0; i < ids.size(); ++i) {
        EXPECT_FALSE(r.enabled(i)) << ids[i];
    }
}

TEST(direct_reader, a_bad_address_fails_the_read_and_the_peer_stays_readable) {
    fab::direct_reader r;
    ASSERT_EQ(r.connect({fab::direct_reader::identity()}), 0u);
    long const page = ::sysconf(_SC_PAGESIZE);
    void* p = ::mmap(nullptr, static_cast<std::size_t>(2 * page), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, 0x5a, static_cast<std::size_t>(page));
    // The second page unmapped: a read across it ends short, which is a failure.
    ASSERT_EQ(::munmap(static_cast<char*>(p) + page, static_cast<std::size_t>(page)), 0);
    std::vector<std::byte> dst(static_cast<std::size_t>(2 * page));
    EXPECT_FALSE(r.read(0, dst.data(), address_of(p), dst.size()));
    EXPECT_FALSE(r.read(0, dst.data(), 16, 64));
    EXPECT_TRUE(r.enabled(0));
    ASSERT_TRUE(r.read(0, dst.data(), address_of(p), static_cast<std::size_t>(page)));
    EXPECT_EQ(dst[0], std::byte{0x5a});
    EXPECT_EQ(dst[static_cast<std::size_t>(page) - 1], std::byte{0x5a});
    ::munmap(p, static_cast<std::size_t>(page));
}

TEST(direct_reader, another_process_is_read_by_its_pid) {
    // A child changes its copy of a buffer after fork; the parent reads the child's copy at the
    // same address by the child's pid (its identity word, set before fork, is the same).
    auto buf = random_bytes(300000, 3);
    (void)fab::direct_reader::identity(); // the identity word is made before fork
    int ready[2], done[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(done), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        for (std::size_t i = 0; i < buf.size(); ++i) {
            buf[i] = static_cast<std::byte>(i % 251);
        }
        char c = 1;
        (void)!::write(ready[1], &c, 1);
        (void)!::read(done[0], &c, 1); // until the parent has read
        ::_exit(0);
    }
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    std::uint64_t probe = 0;
    iovec l{&probe, sizeof probe};
    iovec rm{buf.data(), sizeof probe};
    if (::process_vm_readv(child, &l, 1, &rm, 1, 0) < 0 && errno == EPERM) {
        (void)!::write(done[1], &c, 1);
        ::waitpid(child, nullptr, 0);
        for (int fd : {ready[0], ready[1], done[0], done[1]}) {
            ::close(fd);
        }
        GTEST_SKIP() << "this system forbids reading a child's memory (ptrace restrictions, e.g. "
                        "Yama ptrace_scope >= 2): localities here are read with fi_read";
    }
    fab::direct_reader r;
    EXPECT_EQ(r.connect({identity_with(0, static_cast<std::uint64_t>(child))}), 0u);
    std::vector<std::byte> got(buf.size());
    bool const ok = r.read(0, got.data(), address_of(buf.data()), got.size());
    (void)!::write(done[1], &c, 1);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(ok);
    for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], static_cast<std::byte>(i % 251)) << i;
    }
    EXPECT_NE(got, buf) << "the parent's own copy is another";
    // Once the child is gone, its pid reads nothing and is not tried again.
    EXPECT_FALSE(r.read(0, got.data(), address_of(buf.data()), 64));
    EXPECT_FALSE(r.enabled(0));
    for (int fd : {ready[0], ready[1], done[0], done[1]}) {
        ::close(fd);
    }
}

namespace {

/// A shm pair whose b reads a's chunks directly (no outbox), or nullptr with the reason.
std::unique_ptr<pair_of_endpoints> direct_pair(std::string& why) {
    try {
        return std::make_unique<pair_of_endpoints>("shm", 42, pp::transport_options{}.read_budget,
                                                   false, 0, true, 4096, true, 0, 0, 0, true);
    } catch (std::exception const& e) {
        why = e.what();
        return nullptr;
    }
}

cs::serialize_buffer<char> pattern(std::size_t n, int seed) {
    cs::serialize_buffer<char> b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = static_cast<char>(i * 31 + i / 4096 + static_cast<std::size_t>(seed));
    }
    return b;
}

/// Sends the `n` bytes at `src` from a to b as a chunk read where it lies (a reference
/// serialize_buffer) and returns what b received, checked to be those bytes (empty on a
/// failure, reported).
cs::serialize_buffer<char> send_by_reference(pair_of_endpoints& e, char const* src, std::size_t n) {
    cs::serialize_buffer<char> const out(src, n, cs::serialize_buffer<char>::reference);
    e.got_b.clear();
    bool sent = false;
    e.a->send(1, cs::save(out), [&](std::error_code ec) { sent = !ec; });
    if (!e.pump([&] { return sent && e.got_b.size() == 1; })) {
        ADD_FAILURE() << "b did not receive the parcel";
        return {};
    }
    cs::serialize_buffer<char> back;
    cs::load(e.got_b[0].second, back);
    EXPECT_EQ(back.size(), n);
    EXPECT_TRUE(back.size() == n && std::equal(back.data(), back.data() + n, src));
    return back;
}

/// Whether this process's rma pool is shared with the host (the system grants a memfd).
bool pool_shared() {
    return courier::rma::share_with_host().has_value();
}

} // namespace

namespace {

/// Sends `n` bytes from a to b and counts b's progress passes from the one that took the
/// parcel (its first step) to the one that delivered it. With `b_busy`, b first sends a
/// parcel of its own to a; a progresses only until b has started reading (it may read one
/// step of b's parcel meanwhile), so b's send waits for its DONE throughout. Returns 0 on a
/// failure (reported).
std::size_t passes_to_read(pair_of_endpoints& e, std::size_t n, bool b_busy) {
    auto const buf = pattern(n, 1);
    bool b_sent = false, sent = false;
    if (b_busy) {
        e.b->send(0, cs::save(pattern(n, 2)), [&](std::error_code ec) { b_sent = !ec; });
        e.b->progress(); // its announcement leaves
    }
    e.a->send(1, cs::save(buf), [&](std::error_code ec) { sent = !ec; });
    std::size_t passes = 0, started_at = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (e.got_b.empty() && std::chrono::steady_clock::now() < until) {
        if (!b_busy || started_at == 0) {
            e.a->progress(); // a announces its parcel; with b_busy, not again until b has it
        }
        e.b->progress();
        ++passes;
        if (started_at == 0 && e.b->stats().direct_reads != 0) {
            started_at = passes; // the pass in which b took the parcel and read its first step
        }
        if (b_busy && started_at != 0) {
            EXPECT_FALSE(b_sent) << "a took b's parcel: b's send is no longer in flight";
        }
    }
    EXPECT_TRUE(e.pump([&] { return sent && (!b_busy || (b_sent && e.got_a.size() == 1)); }));
    if (e.got_b.size() != 1 || started_at == 0) {
        ADD_FAILURE() << "b did not receive the parcel by direct reads";
        return 0;
    }
    cs::serialize_buffer<char> back;
    cs::load(e.got_b[0].second, back);
    EXPECT_EQ(back, buf);
    auto const s = e.b->stats();
    EXPECT_EQ(s.direct_reads, 1u);
    EXPECT_EQ(s.rma_reads, 1u);
    EXPECT_EQ(s.rma_bytes_read, n);
    return passes - started_at + 1;
}

} // namespace

TEST(shm_direct_read, a_large_chunk_is_read_in_steps_between_which_progress_returns) {
    // 4 MiB + 5 bytes, read directly: while the reader has sends of its own in flight (the
    // other direction of a stream), at most direct_step (1 MiB) per progress pass, so that its
    // DONEs and announcements and its worker's tasks wait ~0.1 ms at a time (fi_read on shm
    // copies all of it within one call): at least 5 passes of b, and the bytes intact.
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    std::size_t const n = (std::size_t{4} << 20) + 5;
    std::size_t const step = fab::rendezvous::direct_step;
    EXPECT_GE(passes_to_read(*e, n, /*b_busy=*/true), (n + step - 1) / step);
}

TEST(shm_direct_read, a_reader_with_no_sends_in_flight_reads_in_larger_steps) {
    // A parcel a little over one large step to a b that sends nothing: steps of
    // direct_step_alone (8 MiB: fewer passes), so two passes, not the small steps of a stream.
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    std::size_t const n = fab::rendezvous::direct_step_alone + 5;
    std::size_t const step = fab::rendezvous::direct_step_alone;
    static_assert(fab::rendezvous::direct_step_alone > fab::rendezvous::direct_step);
    std::size_t const passes = passes_to_read(*e, n, /*b_busy=*/false);
    EXPECT_GE(passes, (n + step - 1) / step);
    EXPECT_LT(passes, (n + fab::rendezvous::direct_step - 1) / fab::rendezvous::direct_step)
        << "read in the small steps of a stream";
}

TEST(shm_direct_read, a_reader_with_no_sends_in_flight_reads_a_4_MiB_chunk_in_one_pass) {
    // 4 MiB + 5 bytes to a b that sends nothing: one step covers it, so the pass that took the
    // parcel delivers it (with 1 MiB steps a lone 2-4 MiB call took 1.2-1.3x as long).
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    EXPECT_EQ(passes_to_read(*e, (std::size_t{4} << 20) + 5, /*b_busy=*/false), 1u);
}

TEST(shm_direct_read, parcels_read_directly_one_after_another_all_arrive_intact) {
    // Twelve parcels of 600 KB to 1.5 MB sent at once: while one is read in steps the next
    // ones wait their turn; all arrive, each intact, and every read was direct.
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    constexpr int count = 12;
    int sent = 0;
    for (int i = 0; i < count; ++i) {
        e->a->send(1, cs::save(i, pattern(600000 + 80000 * static_cast<std::size_t>(i), i)),
                   [&](std::error_code ec) { sent += !ec; });
    }
    ASSERT_TRUE(e->pump([&] { return sent == count && e->got_b.size() == std::size_t(count); }));
    std::set<int> seen;
    for (auto& [src, m] : e->got_b) {
        int i = -1;
        cs::serialize_buffer<char> b;
        cs::load(m, i, b);
        ASSERT_GE(i, 0);
        EXPECT_EQ(b, pattern(600000 + 80000 * static_cast<std::size_t>(i), i)) << i;
        seen.insert(i);
    }
    EXPECT_EQ(seen.size(), std::size_t(count));
    EXPECT_EQ(e->b->stats().direct_reads, std::uint64_t{count});
    EXPECT_EQ(e->b->stats().rma_reads, std::uint64_t{count});
}

TEST(shm_direct_read, chunks_of_every_rendezvous_size_are_read_directly) {
    // From just over the eager threshold to 1 MiB and more, each chunk is one direct read,
    // and arrives intact (reads_to_receive checks its bytes).
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    std::uint64_t count = 0;
    for (std::size_t n :
         {std::size_t{4097}, std::size_t{65536}, std::size_t{300000}, (std::size_t{1} << 20) + 1}) {
        EXPECT_EQ(reads_to_receive(*e, n), 1u) << n << " bytes";
        EXPECT_EQ(e->b->stats().direct_reads, ++count) << n << " bytes";
    }
}

TEST(shm_direct_read, a_peer_that_fails_the_identity_check_is_read_with_fi_read) {
    // b is given a's address with a false identity word: b does not read a's memory itself but
    // asks shm (fi_read); the chunk arrives intact.
    pp::transport_options o;
    o.provider = "shm";
    o.job_token = 42;
    o.shm_outbox = 0;
    std::unique_ptr<pp::transport> a, b;
    std::vector<cs::message> got;
    auto false_identity = [](fab::address_parts& parts) {
        EXPECT_FALSE(parts.direct.empty()) << "a offers direct reads";
        parts.direct = identity_with(2, 0x5eed);
    };
    if (std::string why; !open_two_altered(o, a, b, false_identity, got, why)) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    send_one_checked(*a, *b, got, pattern(1000000, 9));
    EXPECT_EQ(b->stats().direct_reads, 0u);
    EXPECT_EQ(b->stats().rma_reads, 1u);
}

TEST(shm_direct_read, a_chunk_lands_at_the_senders_offset_within_a_cache_line) {
    // The kernel's copy of a direct read is slower when source and destination sit at different
    // offsets within their cache lines (receive_buffer_pool): each chunk lands at its sender's
    // offset modulo 64 rounded down to 16 bytes (operator new's alignment), from sources at
    // several offsets, and arrives intact.
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    std::size_t const n = 300000;
    std::vector<char> storage(n + 128);
    auto const base = reinterpret_cast<std::uintptr_t>(storage.data());
    std::size_t const to_line = (64 - base % 64) % 64; // storage.data() + to_line: offset 0
    for (std::size_t offset : {std::size_t{0}, std::size_t{16}, std::size_t{40}, std::size_t{63}}) {
        char* src = storage.data() + to_line + offset;
        for (std::size_t i = 0; i < n; ++i) {
            src[i] = static_cast<char>(i * 7 + offset);
        }
        cs::serialize_buffer<char> const back = send_by_reference(*e, src, n);
        ASSERT_EQ(back.size(), n) << offset;
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(back.data()) % 64, offset / 16 * 16)
            << "landed at another offset within its cache line than the sender's";
        EXPECT_TRUE(std::equal(back.data(), back.data() + n, src)) << offset;
    }
    EXPECT_EQ(e->b->stats().direct_reads, 4u);
}

// Mapped reads (direct_read.hpp): a peer's rma pool segment, mapped by the reader, from which
// chunks in it are copied instead of read by the system call.

namespace {

/// pool_identity()'s fields (fd, base, size, word), or empty when the pool is not shared.
std::vector<std::uint64_t> pool_fields() {
    std::string s = fab::direct_reader::pool_identity(courier::rma::share_with_host());
    std::vector<std::uint64_t> v;
    if (s.empty()) {
        return v;
    }
    EXPECT_EQ(s[0], '@') << s;
    std::size_t start = 1;
    for (std::size_t i = 1; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == ':') {
            v.push_back(std::stoull(s.substr(start, i - start), nullptr, 16));
            start = i + 1;
        }
    }
    EXPECT_EQ(v.size(), 4u) << s;
    return v;
}

std::string offer(std::vector<std::uint64_t> const& v) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "@%llx:%llx:%llx:%llx", static_cast<unsigned long long>(v[0]),
                  static_cast<unsigned long long>(v[1]), static_cast<unsigned long long>(v[2]),
                  static_cast<unsigned long long>(v[3]));
    return buf;
}

} // namespace

TEST(direct_reader, a_peers_pool_segment_is_mapped_and_its_chunks_are_copied_out_of_it) {
    auto const fields = pool_fields();
    if (fields.empty()) {
        GTEST_SKIP() << "this system refuses a memfd: the pool is not shared, chunks are read "
                        "with process_vm_readv";
    }
    fab::direct_reader r;
    ASSERT_EQ(r.connect({"", fab::direct_reader::identity() + offer(fields)}), 0u);
    EXPECT_FALSE(r.mapped(0));
    ASSERT_TRUE(r.enabled(1));
    ASSERT_TRUE(r.mapped(1));
    std::size_t const n = 300001;
    auto* p = static_cast<std::byte*>(courier::rma::allocate(n));
    auto const src = random_bytes(n, 11);
    std::memcpy(p, src.data(), n);
    std::vector<std::byte> dst(n);
    ASSERT_TRUE(r.read(1, dst.data(), address_of(p), n));
    EXPECT_EQ(dst, src);
    EXPECT_EQ(r.mapped_bytes(), n);
    // Memory outside the pool is read by the system call, as before.
    auto const other = random_bytes(n, 12);
    std::vector<std::byte> dst2(n);
    ASSERT_TRUE(r.read(1, dst2.data(), address_of(other.data()), n));
    EXPECT_EQ(dst2, other);
    EXPECT_EQ(r.mapped_bytes(), n);
    // A range that begins in the segment and runs past its end is not copied from the mapping.
    std::uint64_t const end = fields[1] + fields[2];
    (void)r.read(1, dst.data(), end - 8, 16);
    EXPECT_EQ(r.mapped_bytes(), n);
    courier::rma::deallocate(p, n);
}

TEST(direct_reader, a_segment_offer_that_does_not_match_is_not_mapped_and_the_peer_stays_readable) {
    auto const fields = pool_fields();
    if (fields.empty()) {
        GTEST_SKIP() << "this system refuses a memfd: the pool is not shared";
    }
    auto with = [&](int i, std::uint64_t v) {
        auto f = fields;
        f[static_cast<std::size_t>(i)] = v;
        return offer(f);
    };
    std::vector<std::string> offers = {
        "@",
        "@zz",
        "@1:2:3",
        offer(fields) + ":5",
        with(0, 0),                // stdin: not the segment
        with(0, 987654),           // no such descriptor
        with(1, fields[1] + 4096), // another base than the header's
        with(2, fields[2] - 4096), // another size
        with(2, 100),              // smaller than the header
        with(3, fields[3] ^ 0x10), // another word
        with(2, std::uint64_t{1} << 60),
    };
    for (auto const& o : offers) {
        fab::direct_reader r;
        EXPECT_EQ(r.connect({fab::direct_reader::identity() + o}), 0u) << o;
        EXPECT_TRUE(r.enabled(0)) << o;
        EXPECT_FALSE(r.mapped(0)) << o;
    }
}

TEST(direct_reader, another_processes_pool_segment_is_mapped_by_its_pid) {
    // A child shares its pool, fills a buffer in it and offers its identity; the parent maps
    // the child's segment and copies the buffer out of it.
    int to_parent[2], done[2];
    ASSERT_EQ(::pipe(to_parent), 0);
    ASSERT_EQ(::pipe(done), 0);
    std::size_t const n = 1 << 20;
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::string msg = "none";
        std::string pool = fab::direct_reader::pool_identity(courier::rma::share_with_host());
        if (!pool.empty()) {
            auto* p = static_cast<std::byte*>(courier::rma::allocate(n));
            for (std::size_t i = 0; i < n; ++i) {
                p[i] = static_cast<std::byte>(i % 251);
            }
            msg = std::to_string(address_of(p)) + " " + fab::direct_reader::identity() + pool;
        }
        (void)!::write(to_parent[1], msg.data(), msg.size());
        ::close(to_parent[1]);
        char c;
        (void)!::read(done[0], &c, 1);
        ::_exit(0);
    }
    ::close(to_parent[1]);
    std::string msg;
    char buf[256];
    for (ssize_t k; (k = ::read(to_parent[0], buf, sizeof buf)) > 0;) {
        msg.append(buf, static_cast<std::size_t>(k));
    }
    auto finish = [&] {
        char c = 0;
        (void)!::write(done[1], &c, 1);
        ::waitpid(child, nullptr, 0);
        for (int fd : {to_parent[0], done[0], done[1]}) {
            ::close(fd);
        }
    };
    if (msg == "none") {
        finish();
        GTEST_SKIP() << "the child could not share its pool: this system refuses a memfd, or this "
                        "process shared its own before the fork (a fork child never shares; "
                        "ctest runs this test alone)";
    }
    std::size_t space = msg.find(' ');
    ASSERT_NE(space, std::string::npos) << msg;
    std::uint64_t const at = std::stoull(msg.substr(0, space));
    fab::direct_reader r;
    EXPECT_EQ(r.connect({msg.substr(space + 1)}), 0u);
    if (!r.enabled(0)) {
        finish();
        GTEST_SKIP() << "this system forbids reading a child's memory (ptrace restrictions)";
    }
    EXPECT_TRUE(r.mapped(0));
    std::vector<std::byte> got(n);
    bool const ok = r.read(0, got.data(), at, n);
    // A false identity word (as where Yama forbids process_vm_readv between siblings): the
    // check fails, yet the segment, which proves itself by its header, is mapped, and only what
    // lies in it is read.
    std::string const identity = msg.substr(space + 1);
    std::size_t const colon = identity.find(':', identity.find(':') + 1);
    std::string const forged =
        identity.substr(0, colon + 1) + "5eed" + identity.substr(identity.find('@'));
    fab::direct_reader f;
    EXPECT_EQ(f.connect({forged}), 1u) << forged;
    EXPECT_FALSE(f.enabled(0));
    EXPECT_TRUE(f.mapped(0));
    EXPECT_TRUE(f.covers(0, at, n));
    std::vector<std::byte> got2(n);
    bool const ok2 = f.read(0, got2.data(), at, n);
    std::uint64_t const outside = address_of(&got); // this process's stack: not in the segment
    EXPECT_FALSE(f.covers(0, outside, 8));
    EXPECT_FALSE(f.read(0, got2.data(), outside, 8)) << "read by the system call, not allowed";
    finish();
    ASSERT_TRUE(ok);
    ASSERT_TRUE(ok2);
    EXPECT_EQ(r.mapped_bytes(), n);
    EXPECT_EQ(f.mapped_bytes(), n);
    for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], static_cast<std::byte>(i % 251)) << i;
        ASSERT_EQ(got2[i], got[i]) << i;
    }
    // The child has ended; its segment lives on in the mappings. Released while another thread
    // reads it: every read either copies the exact bytes or fails (never a partial or zero
    // copy), and once release() has returned nothing more is read.
    std::atomic<bool> stop{false};
    std::atomic<int> good{0}, refused{0}, wrong{0};
    std::thread reader([&] {
        std::vector<std::byte> b(n);
        while (!stop.load()) {
            std::fill(b.begin(), b.end(), std::byte{0xee});
            if (!r.read(0, b.data(), at, n)) {
                refused.fetch_add(1);
                continue;
            }
            good.fetch_add(1);
            for (std::size_t i = 0; i < n; i += 4093) {
                wrong.fetch_add(b[i] != static_cast<std::byte>(i % 251) ? 1 : 0);
            }
        }
    });
    while (good.load() < 20) {
        std::this_thread::yield();
    }
    EXPECT_GE(r.release(0), n); // the whole segment's mapping
    int const good_at_release = good.load();
    EXPECT_FALSE(r.mapped(0));
    EXPECT_FALSE(r.enabled(0));
    EXPECT_FALSE(r.covers(0, at, n));
    std::vector<std::byte> after(n);
    EXPECT_FALSE(r.read(0, after.data(), at, n));
    while (refused.load() < 20) {
        std::this_thread::yield();
    }
    stop.store(true);
    reader.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_LE(good.load(), good_at_release + 1); // at most the read that had begun
    EXPECT_EQ(r.release(0), 0u);                 // once
    EXPECT_GE(f.release(0), n); // a mapping without the identity check is let go as well
    EXPECT_FALSE(f.mapped(0));
}

TEST(shm_direct_read, a_chunk_in_the_senders_pool_is_copied_out_of_its_mapped_segment) {
    // An rma chunk (pool memory: rma_vector's) is copied by b out of a's pool segment; a chunk
    // in a's ordinary memory is read by the system call; both arrive intact.
    std::string why;
    auto e = direct_pair(why);
    if (!e) {
        GTEST_SKIP() << "provider shm unavailable here: " << why;
    }
    if (!pool_shared()) {
        GTEST_SKIP() << "this system refuses a memfd: the pool is not shared";
    }
    std::size_t const n = (std::size_t{1} << 20) + 3;
    auto* p = static_cast<char*>(courier::rma::allocate(n));
    for (std::size_t i = 0; i < n; ++i) {
        p[i] = static_cast<char>(i * 13 + 1);
    }
    for (bool pool : {true, false}) {
        std::vector<char> plain(p, p + n);
        char* src = pool ? p : plain.data();
        auto const mapped_before = e->b->stats().mapped_read_bytes;
        ASSERT_EQ(send_by_reference(*e, src, n).size(), n) << pool;
        EXPECT_EQ(e->b->stats().mapped_read_bytes - mapped_before, pool ? n : 0u) << pool;
    }
    EXPECT_EQ(e->b->stats().direct_reads, 2u);
    courier::rma::deallocate(p, n);
}

TEST(shm_direct_read, a_chunk_in_the_senders_shared_pool_is_not_staged_in_its_outbox) {
    // With an outbox that stages every chunk up to 1 MiB: a 64 KiB chunk of ordinary memory is
    // staged (copied by the sender, then by the receiver), one in the sender's shared pool is
    // not (the receiver copies it out of the pool: one copy in all).
    std::unique_ptr<pair_of_endpoints> e;
    try {
        e = std::make_unique<pair_of_endpoints>("shm", 42, pp::transport_options{}.read_budget,
                                                false, 0, true, 4096, true, 0, std::size_t{8} << 20,
                                                std::size_t{1} << 20, true);
    } catch (std::exception const& x) {
        GTEST_SKIP() << "provider shm unavailable here: " << x.what();
    }
    if (!pool_shared()) {
        GTEST_SKIP() << "this system refuses a memfd: the pool is not shared";
    }
    std::size_t const n = 65536;
    auto* p = static_cast<char*>(courier::rma::allocate(n));
    for (std::size_t i = 0; i < n; ++i) {
        p[i] = static_cast<char>(i * 5 + 3);
    }
    std::vector<char> plain(p, p + n);
    for (bool pool : {false, true}) {
        char* src = pool ? p : plain.data();
        auto const a0 = e->a->stats();
        auto const b0 = e->b->stats();
        ASSERT_EQ(send_by_reference(*e, src, n).size(), n) << pool;
        auto const a1 = e->a->stats();
        auto const b1 = e->b->stats();
        EXPECT_EQ(a1.outbox_chunks_sent - a0.outbox_chunks_sent, pool ? 0u : 1u) << pool;
        EXPECT_EQ(b1.mapped_read_bytes - b0.mapped_read_bytes, pool ? n : 0u) << pool;
    }
    courier::rma::deallocate(p, n);
}

TEST(direct_reader, a_range_is_within_a_segment_only_wholly_and_without_overflow) {
    using fab::direct_reader;
    EXPECT_TRUE(direct_reader::within(4096, 100, 4096, 100));
    EXPECT_TRUE(direct_reader::within(4096, 100, 4196, 0));
    EXPECT_FALSE(direct_reader::within(4096, 100, 4097, 100)) << "one byte past the end";
    EXPECT_FALSE(direct_reader::within(4096, 100, 4095, 10)) << "one byte before the start";
    EXPECT_FALSE(direct_reader::within(4096, 100, 4096, 101)) << "larger than the segment";
    EXPECT_FALSE(direct_reader::within(4096, 100, ~std::uint64_t{0} - 4, 16)) << "wraps around";
    EXPECT_FALSE(direct_reader::within(4096, 100, 4100, ~std::size_t{0})) << "absurd size";
}
