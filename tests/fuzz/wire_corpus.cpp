// SPDX-License-Identifier: BSL-1.0
// Writes the wire fuzzer's seed corpus: `wire_corpus DIR`. An in-process job runs requests,
// replies (ok and failed), posts, an unknown action id, a large argument, credits, heartbeats
// and goodbyes; every parcel a locality receives is written as the eager message the
// libfabric transport's sender would send for it (eager_writer.hpp: a parcel with chunks to
// read becomes a rendezvous announcement with null addresses), alone, coalesced with others
// (a batch), split in two parts (in both orders) and as a DONE. One file per seed, named by
// what it holds.
#include "wire_fuzz.hpp"

#include "../../libs/parcelport/src/eager_writer.hpp"
#include "../../libs/runtime/src/in_process.hpp"

#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace wire = courier::parcelport::wire;

wire::header header_from(std::uint32_t source) {
    wire::header h{};
    h.magic = wire::magic;
    h.version = wire::version;
    h.token = courier::fuzz::job_token;
    h.source = source;
    return h;
}

std::vector<std::byte> as_bytes(wire::header const& h) {
    std::vector<std::byte> b(sizeof h);
    std::memcpy(b.data(), &h, sizeof h);
    return b;
}

struct seed_writer {
    std::string dir;
    int count = 0;
    void write(std::string const& name, std::vector<std::vector<std::byte>> const& messages) {
        std::vector<std::byte> input;
        for (auto const& m : messages) {
            courier::fuzz::append_framed(input, m);
        }
        std::ofstream(dir + "/" + name, std::ios::binary)
            .write(reinterpret_cast<char const*>(input.data()),
                   static_cast<std::streamsize>(input.size()));
        ++count;
    }
};

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    std::mutex m;
    std::vector<std::pair<std::uint32_t, std::vector<std::byte>>> seen; // source, eager message
    std::uint64_t id = 1;
    {
        courier::detail::in_process_options o;
        o.localities = courier::fuzz::localities;
        o.observer = [&](std::uint32_t, std::uint32_t source,
                         courier::serialization::message const& msg) {
            wire::header h = header_from(source);
            std::vector<std::byte> eager, table;
            std::lock_guard g(m);
            h.send_id = id++;
            courier::parcelport::write_eager(
                msg, h, courier::fuzz::recv_size,
                [](void const*, std::size_t) { return std::pair<std::uint64_t, std::uint64_t>{}; },
                eager, table);
            seen.emplace_back(source, std::move(eager));
        };
        courier::detail::in_process_job job(o);
        job.run_on(1, [] {
            auto zero = courier::find_all_localities().at(0);
            (void)courier::async<fuzz_add_action>(zero, 2, 3).get();
            (void)courier::async<fuzz_total_length_action>(
                zero, std::vector<std::string>{"courier", "wire", ""})
                .get();
            (void)courier::async<fuzz_sum_of_action>(zero, std::vector<double>(4096, 0.5)).get();
            try {
                (void)courier::async<fuzz_thrower_action>(zero, 7).get();
            } catch (std::exception const&) {
            }
            courier::post<fuzz_add_action>(zero, 1, 1);
            // An action id nobody registered, as a request expecting a reply.
            auto st = courier::detail::make_state<int>();
            courier::detail::send_request(
                0, 0x0123456789abcdefULL,
                [](courier::serialization::output_archive& ar) { ar.save(42); },
                courier::detail::reply_handler(&courier::detail::complete_call<int>,
                                               courier::detail::state_ptr<int>(st).detach()),
                nullptr, true);
            try {
                (void)courier::detail::future_access::make<int>(std::move(st)).get();
            } catch (std::exception const&) {
            }
            courier::detail::send_credit(0, 3, 4096);
            auto& here = courier::detail::here();
            here.tp->send(0, courier::detail::control_word(courier::detail::heartbeat), nullptr);
            here.tp->send(0, courier::detail::control_word(courier::detail::goodbye), nullptr);
        });
        job.drain(std::chrono::seconds(10));
    }
    seed_writer out{argv[1]};
    std::vector<std::vector<std::byte>> batchable;
    for (std::size_t i = 0; i < seen.size(); ++i) {
        auto const& [source, eager] = seen[i];
        out.write("parcel-" + std::to_string(i), {eager});
        wire::header h;
        std::memcpy(&h, eager.data(), sizeof h);
        if ((h.flags & wire::index_inline) != 0 && eager.size() < 1024 && source == 1) {
            batchable.push_back(eager);
        }
    }
    // A coalesced message of the small parcels from locality 1.
    std::vector<std::byte> batch(sizeof(wire::header));
    for (auto const& e : batchable) {
        courier::parcelport::append_record(batch, e);
    }
    wire::header bh = header_from(1);
    bh.kind = wire::batch;
    bh.chunk_count = static_cast<std::uint32_t>(batchable.size());
    bh.index_size = batch.size() - sizeof bh;
    std::memcpy(batch.data(), &bh, sizeof bh);
    out.write("batch", {batch});
    // The same parcels as compact records (wire::record_compact: each one's stream alone), as
    // the libfabric sender writes a small parcel of one index chunk.
    std::vector<std::byte> compact(sizeof(wire::header));
    std::uint32_t compact_count = 0;
    for (auto const& e : batchable) {
        wire::header h;
        std::memcpy(&h, e.data(), sizeof h);
        std::size_t const fixed = sizeof h + sizeof(wire::descriptor);
        if (h.chunk_count != 1 || e.size() <= fixed) {
            continue;
        }
        std::size_t const n = e.size() - fixed;
        std::size_t const at = compact.size();
        compact.resize(at + wire::record_size(n)); // zero-filled: the padding
        courier::parcelport::write_record_prefix(compact.data() + at, n, wire::record_compact);
        std::memcpy(compact.data() + at + wire::record_prefix, e.data() + fixed, n);
        ++compact_count;
    }
    bh.chunk_count = compact_count;
    bh.index_size = compact.size() - sizeof bh;
    std::memcpy(compact.data(), &bh, sizeof bh);
    out.write("batch-compact", {compact});
    // The batch split in two parts, in either order.
    std::size_t first = batch.size() / 2 + 1;
    auto part = [&](std::uint32_t i) {
        auto b = as_bytes(courier::parcelport::split_header(header_from(1), 77, i, batch.size()));
        auto from = batch.begin() + (i == 0 ? 0 : static_cast<std::ptrdiff_t>(first));
        auto to = i == 0 ? batch.begin() + static_cast<std::ptrdiff_t>(first) : batch.end();
        b.insert(b.end(), from, to);
        return b;
    };
    out.write("split", {part(0), part(1)});
    out.write("split-reversed", {part(1), part(0)});
    wire::header dh = header_from(1);
    dh.kind = wire::done;
    dh.send_id = 1;
    out.write("done", {as_bytes(dh)});
    dh.chunk_count = 2; // a DONE of three sends: two more ids after the header
    auto three = as_bytes(dh);
    for (std::uint64_t more : {std::uint64_t{2}, std::uint64_t{3}}) {
        auto const* q = reinterpret_cast<std::byte const*>(&more);
        three.insert(three.end(), q, q + sizeof more);
    }
    out.write("done-of-three", {three});
    std::printf("%d seeds in %s\n", out.count, argv[1]);
    return 0;
}
