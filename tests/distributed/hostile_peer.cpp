// SPDX-License-Identifier: BSL-1.0
// A foreign process that attacks one locality of a running job over libfabric:
//   hostile_peer PROVIDER ADDRESS_HEX TOKEN_HEX
// ADDRESS_HEX is the locality's transport address, TOKEN_HEX the job token (a peer that holds
// it is a confused or corrupted member of the job; one that does not is a stranger). It sends,
// in this order: random garbage; well-formed requests with a wrong token; with the right token
// and a claimed source of locality 0: requests for an unknown action, parcels announcing
// absurd sizes, parcels of an unknown kind, notices of lost replies for calls never made
// (truncated ones among them), forged credits (huge and negative), posts to an
// action of flat arguments, well-formed ones among malformed ones (truncated, trailing bytes,
// a bad bool, an absurd count, a block over the header's zero-copy threshold, a bad magic, an
// endless varint: read where they lie, by flat_reader; truncated or with trailing bytes over
// 4 KiB: read through an input archive), and ordered requests numbered far ahead of their
// stream. It prints what it sent and exits 0; whether the
// locality survived is for the job to check (hostile_program.cpp).
#include "../../libs/parcelport/src/eager_writer.hpp"
#include "../../libs/parcelport/tests/raw_endpoint.hpp"

#include <courier/serialization.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace pp = courier::parcelport;
namespace cs = courier::serialization;
namespace wire = courier::parcelport::wire;

// The runtime's parcel kinds (libs/runtime/src/locality_state.hpp).
constexpr std::uint8_t request = 1;
constexpr std::uint8_t credit = 5;
constexpr std::uint8_t ordered_request = 6;
constexpr std::uint8_t reply_lost = 8;
constexpr std::uint64_t unknown_action = 0xbadc0ffee0ddf00dULL;
// hostile_program.cpp's tally action: (u32 tag, bool flag, serialize_buffer<char>), right when
// tag is flat_tag, flag true and the buffer flat_bytes of 'x'.
constexpr char const* tally_action = "hostile_tally_action";
constexpr std::uint32_t flat_tag = 0x7a11;
constexpr std::size_t flat_bytes = 24;
constexpr int well_formed_flat_posts = 1000;

std::vector<std::byte> from_hex(std::string const& s) {
    if (s.size() % 2 != 0) {
        throw std::invalid_argument("odd number of hex digits");
    }
    std::vector<std::byte> out;
    for (std::size_t i = 0; i < s.size(); i += 2) {
        out.push_back(static_cast<std::byte>(std::stoul(s.substr(i, 2), nullptr, 16)));
    }
    return out;
}

struct attacker {
    pp::test::raw_endpoint ep;
    std::uint64_t token;
    std::uint64_t sent = 0;

    attacker(pp::transport_options const& o, std::vector<std::byte> const& address, std::uint64_t t)
        : ep(o), token(t) {
        ep.connect(address);
    }

    void raw(std::vector<std::byte> const& bytes) {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!ep.send(bytes)) {
            ep.progress();
            if (std::chrono::steady_clock::now() > until) {
                throw std::runtime_error("the locality stopped taking messages for 60 s");
            }
        }
        ep.progress();
        ++sent;
    }

    wire::header header(std::uint64_t with_token) const {
        wire::header h{};
        h.magic = wire::magic;
        h.version = wire::version;
        h.token = with_token;
        h.source = 0; // claims to be locality 0
        h.send_id = 1;
        return h;
    }

    /// A parcel holding `m` (its index, of up to `inline_bytes`, travels inline: the eager
    /// threshold of both providers is at least 8 KiB), as the job's sender writes it.
    void parcel(cs::message const& m, std::uint64_t with_token, std::size_t inline_bytes = 4096) {
        std::vector<std::byte> eager, table;
        pp::write_eager(
            m, header(with_token), inline_bytes,
            [](void const*, std::size_t) -> std::pair<std::uint64_t, std::uint64_t> {
                throw std::logic_error("no RMA chunks in a hostile parcel");
            },
            eager, table);
        raw(eager);
    }

    template <class... T>
    void runtime_parcel(std::uint64_t with_token, T const&... fields) {
        cs::message m;
        {
            cs::output_archive ar(m);
            (ar.save(fields), ...);
        }
        parcel(m, with_token);
    }

    /// A parcel whose stream is `bytes`, whatever they are (a view: nothing checks them).
    void stream_parcel(std::vector<std::byte> const& bytes) {
        cs::message m;
        m.view(bytes);
        parcel(m, token, 8192);
    }
};

/// The stream of a well-formed post to the tally action with a buffer of `bytes` (zero copy
/// off: a buffer of 4 KiB or more stays in the index, whose 4 KiB or more the receiver then
/// reads through an input archive, not where it lies).
std::vector<std::byte> tally_post(std::size_t bytes = flat_bytes) {
    cs::message m;
    {
        cs::output_archive ar(m, cs::options{4096, false});
        cs::serialize_buffer<char> b(bytes);
        std::fill(b.begin(), b.end(), 'x');
        ar.save(request);
        ar.save(cs::detail::fnv1a64(tally_action));
        ar.save(std::uint64_t{0}); // a post
        ar.save(flat_tag);
        ar.save(true);
        ar.save(b);
    }
    auto d = m.data();
    return {d.begin(), d.end()};
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: hostile_peer PROVIDER ADDRESS_HEX TOKEN_HEX\n");
        return 2;
    }
    try {
        pp::transport_options o;
        o.provider = std::string(argv[1]) == "tcp" ? "tcp;ofi_rxm" : argv[1];
        attacker a(o, from_hex(argv[2]), std::stoull(argv[3], nullptr, 16));
        std::mt19937_64 rng(20261124);
        auto t0 = std::chrono::steady_clock::now();

        // Garbage, some of it starting with the right magic and version.
        for (int i = 0; i < 20000; ++i) {
            std::vector<std::byte> g(1 + rng() % 1024);
            for (auto& b : g) {
                b = static_cast<std::byte>(rng());
            }
            if (i % 2 == 0 && g.size() >= sizeof(wire::header)) {
                wire::header h = a.header(i % 4 == 0 ? a.token : rng());
                h.kind = static_cast<std::uint8_t>(rng() % 6);
                h.index_size = rng() >> (rng() % 64);
                h.chunk_count = static_cast<std::uint32_t>(rng() >> (rng() % 64));
                std::memcpy(g.data(), &h, sizeof h);
            }
            a.raw(g);
        }
        // Well-formed requests from a stranger (a wrong token).
        for (int i = 0; i < 2000; ++i) {
            a.runtime_parcel(a.token ^ 0x5a5a, request, unknown_action, std::uint64_t{0});
        }
        // The right token from here on. Requests for an action nobody registered (posts:
        // a request id would forge a reply to locality 0).
        for (int i = 0; i < 2000; ++i) {
            a.runtime_parcel(a.token, request, unknown_action + static_cast<std::uint64_t>(i),
                             std::uint64_t{0}, std::string("argument"));
        }
        // Absurd sizes: chunks of 2^62 bytes, 2^31 chunks, an index of 2^60 bytes.
        for (int i = 0; i < 2000; ++i) {
            wire::header h = a.header(a.token);
            h.kind = wire::parcel;
            wire::descriptor d{};
            d.type = static_cast<std::uint8_t>(i % 3);
            d.size = std::uint64_t{1} << (40 + i % 23);
            d.address = rng();
            d.key = rng();
            h.chunk_count = i % 2 == 0 ? 1U : 1U << 31;
            h.index_size = i % 3 == 0 ? std::uint64_t{1} << 60 : d.size;
            std::vector<std::byte> b(sizeof h + sizeof d);
            std::memcpy(b.data(), &h, sizeof h);
            std::memcpy(b.data() + sizeof h, &d, sizeof d);
            a.raw(b);
        }
        // Parcels of kinds the runtime does not know.
        for (int i = 0; i < 2000; ++i) {
            a.runtime_parcel(a.token, static_cast<std::uint8_t>(reply_lost + 1 + i % 200), rng());
        }
        // Notices of lost replies: short ids of the first slots and generations (those a
        // pending call of locality 1 would have), random ones, and truncated notices.
        for (std::uint64_t i = 0; i < 2000; ++i) {
            if (i % 4 == 3) {
                a.runtime_parcel(a.token, reply_lost);
            } else {
                std::uint64_t const low = (1 + i % 4) << 20 | i % 256; // generation, index
                a.runtime_parcel(a.token, reply_lost, i % 2 == 0 ? low : rng());
            }
        }
        // Forged credits: for far more than was ever in flight, and negative ones.
        for (int i = 0; i < 2000; ++i) {
            std::int64_t n = i % 2 == 0 ? std::int64_t{1} << 40 : -(std::int64_t{1} << 40);
            a.runtime_parcel(a.token, credit, n, n);
        }
        // Posts of flat arguments, malformed ones among the well-formed: each malformed one is
        // dropped (and logged, rate-limited), each well-formed one runs once (checked by
        // hostile_program). Offsets in tally_post(): header 8, kind 1, action 8, request id 8,
        // then the tag (4), the flag (1), the count (1) and the bytes.
        std::vector<std::byte> const good = tally_post();
        std::vector<std::byte> const large = tally_post(4100);
        constexpr std::size_t flag_at = 8 + 1 + 8 + 8 + 4;
        int malformed = 0;
        for (int i = 0; i < well_formed_flat_posts; ++i) {
            a.stream_parcel(good);
            std::vector<std::byte> bad = good;
            switch (i % 9) {
            case 0: // truncated in the buffer's bytes
                bad.resize(bad.size() - 5);
                break;
            case 1: // trailing bytes
                bad.insert(bad.end(), 3, std::byte{0});
                break;
            case 2: // a bool that is neither 0 nor 1
                bad[flag_at] = std::byte{2};
                break;
            case 3: { // a count of 2^40 elements in 24 bytes
                std::vector<std::byte> count{std::byte{0x80}, std::byte{0x80}, std::byte{0x80},
                                             std::byte{0x80}, std::byte{0x80}, std::byte{0x20}};
                bad.erase(bad.begin() + flag_at + 1);
                bad.insert(bad.begin() + flag_at + 1, count.begin(), count.end());
                break;
            }
            case 4: // a zero-copy threshold of 4: the 24-byte block should be a pointer chunk
                bad[4] = std::byte{4};
                bad[5] = bad[6] = bad[7] = std::byte{0};
                break;
            case 5: // not a stream of ours
                bad[0] = std::byte{'X'};
                break;
            case 6: // a varint that never ends
                bad.resize(flag_at + 1);
                bad.insert(bad.end(), 11, std::byte{0xff});
                break;
            case 7: // over 4 KiB, truncated
                bad = large;
                bad.resize(bad.size() - 5);
                break;
            default: // over 4 KiB, trailing bytes
                bad = large;
                bad.insert(bad.end(), 3, std::byte{0});
                break;
            }
            a.stream_parcel(bad);
            ++malformed;
        }
        std::printf("hostile_peer: %d well-formed and %d malformed posts of flat arguments\n",
                    well_formed_flat_posts, malformed);
        // Ordered requests far ahead of their stream (each would wait for its turn forever).
        for (std::uint64_t i = 0; i < 20000; ++i) {
            a.runtime_parcel(a.token, ordered_request, 1000 + i * 7, unknown_action,
                             std::uint64_t{0}, std::vector<char>(256, 'x'));
        }
        auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
        std::printf("hostile_peer: sent %llu messages in %.0f ms\n",
                    static_cast<unsigned long long>(a.sent), ms.count());
        // Let the provider deliver the last ones before the endpoint closes.
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        while (std::chrono::steady_clock::now() < until) {
            a.ep.progress();
        }
    } catch (std::exception const& e) {
        std::fprintf(stderr, "hostile_peer: %s\n", e.what());
        return 1;
    }
    return 0;
}
