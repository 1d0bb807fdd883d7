// SPDX-License-Identifier: BSL-1.0
// Forged header messages to the MPI transport (run under `mpirun -np 2`): locality 1 sends, on
// the transport's own communicator, header messages that are too short, of another job, from a
// locality they are not, with sizes no parcel can have, unknown chunk types, a data tag out of
// range, bad batches; then a real parcel. Locality 0 must deliver only the real parcel, log one
// line per forged message, and still answer. MPI's own header matching makes the order certain:
// the forged messages share the real parcel's tag and sender, so they arrive first.
#include "../src/mpi/mpi_transport.hpp"

#include <courier/common/log.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/serialization.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pp = courier::parcelport;
namespace wire = courier::parcelport::wire;
namespace cs = courier::serialization;

namespace {

constexpr std::uint64_t token = 0x5eed;
int failures = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

wire::header header(std::uint8_t kind, std::uint32_t chunks, std::uint64_t index_size,
                    std::uint8_t flags = wire::index_inline) {
    wire::header h{};
    h.magic = wire::magic;
    h.version = wire::version;
    h.kind = kind;
    h.flags = flags;
    h.token = token;
    h.source = 1;
    h.chunk_count = chunks;
    h.index_size = index_size;
    return h;
}

wire::descriptor desc(std::uint8_t type, std::uint64_t size) {
    wire::descriptor d{};
    d.type = type;
    d.size = size;
    return d;
}

std::vector<std::byte> bytes_of(wire::header const& h, std::vector<wire::descriptor> const& ds,
                                std::size_t inline_bytes) {
    std::vector<std::byte> b(sizeof h + ds.size() * sizeof(wire::descriptor) + inline_bytes);
    std::memcpy(b.data(), &h, sizeof h);
    std::memcpy(b.data() + sizeof h, ds.data(), ds.size() * sizeof(wire::descriptor));
    return b;
}

/// One index chunk of 8 bytes, inline: what each forged parcel below departs from.
std::vector<std::byte> parcel(wire::header h, std::vector<wire::descriptor> ds) {
    return bytes_of(h, ds, 8);
}

std::vector<std::byte> batch_of(std::vector<std::vector<std::byte>> const& records,
                                std::uint32_t claimed, bool bad_length) {
    std::vector<std::byte> b(sizeof(wire::header));
    for (auto const& r : records) {
        std::size_t at = b.size();
        b.resize(at + wire::record_size(r.size()));
        pp::write_record_prefix(b.data() + at, bad_length ? r.size() + 4096 : r.size());
        std::memcpy(b.data() + at + wire::record_prefix, r.data(), r.size());
    }
    wire::header h = header(wire::batch, claimed, b.size() - sizeof(wire::header), 0);
    std::memcpy(b.data(), &h, sizeof h);
    return b;
}

std::vector<std::vector<std::byte>> forged_messages() {
    auto const ix = static_cast<std::uint8_t>(cs::chunk_type::index);
    auto const ptr = static_cast<std::uint8_t>(cs::chunk_type::pointer);
    std::vector<std::vector<std::byte>> f;
    f.emplace_back(10); // shorter than a header
    auto h = header(wire::parcel, 1, 8);
    h.magic = 0x12345678;
    f.push_back(parcel(h, {desc(ix, 8)}));
    h = header(wire::parcel, 1, 8);
    h.token = token + 1; // another job's
    f.push_back(parcel(h, {desc(ix, 8)}));
    h = header(wire::parcel, 1, 8);
    h.source = 0; // locality 1 claiming to be 0
    f.push_back(parcel(h, {desc(ix, 8)}));
    f.push_back(parcel(header(wire::parcel, wire::max_chunks + 1, 8), {desc(ix, 8)}));
    f.push_back(bytes_of(header(wire::parcel, 1, 100), {desc(ix, 100)}, 20)); // short of 100
    f.push_back(parcel(header(wire::parcel, 1, 8), {desc(9, 8)}));            // unknown type
    f.push_back(parcel(header(wire::parcel, 2, 8),
                       {desc(ix, 8), desc(ptr, std::uint64_t{1} << 48)})); // > address space
    f.push_back(parcel(header(wire::parcel, 3, 8),
                       {desc(ix, 8), desc(ptr, std::uint64_t{1} << 46),
                        desc(ptr, std::uint64_t{1} << 46)}));       // > this machine's memory
    f.push_back(parcel(header(wire::parcel, 1, 8), {desc(ix, 4)})); // index 4 of 8
    f.push_back(parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, 100)})); // tag 0
    // An index said not to be inline whose last descriptor is not the index buffer's.
    f.push_back(bytes_of(header(wire::parcel, 1, 8, 0), {desc(ix, 8), desc(ptr, 8)}, 0));
    // A batch with a record longer than the batch; one whose parcel has a data chunk.
    auto ok = parcel(header(wire::parcel, 1, 8), {desc(ix, 8)});
    f.push_back(batch_of({ok}, 1, true));
    auto with_data = parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, 100)});
    std::uint64_t tag = 5;
    std::memcpy(with_data.data() + offsetof(wire::header, send_id), &tag, sizeof tag);
    f.push_back(batch_of({with_data}, 1, false));
    return f;
}

template <class Until>
bool pump(pp::transport& tp, Until until) {
    auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!until()) {
        tp.progress();
        if (std::chrono::steady_clock::now() > limit) {
            return false;
        }
    }
    return true;
}

int count(std::string const& text, std::string const& what) {
    int n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

} // namespace

int main() {
    courier::logging::enable_rate_limits(false); // one line per forged message, all counted
    pp::transport_options o;
    o.parcelport = "mpi";
    o.doorbell = false;
    o.job_token = token;
    std::vector<std::pair<std::uint32_t, cs::message>> got;
    int rank = 0;
    {
        auto tp = pp::make_mpi_transport(o);
        auto addresses = pp::mpi_allgather(tp->address());
        rank = static_cast<int>(pp::mpi_world_info().rank);
        if (addresses.size() != 2) {
            std::fprintf(stderr, "mpi_malformed_test runs on 2 ranks (mpirun -np 2)\n");
            return 2;
        }
        tp->set_peers(addresses, static_cast<std::uint32_t>(rank));
        tp->set_receive_handler(
            [&](std::uint32_t src, cs::message&& m) { got.emplace_back(src, std::move(m)); });
        auto sent = [&] {
            auto done = std::make_shared<bool>(false);
            return std::pair{done, [done](std::error_code) { *done = true; }};
        };
        if (rank == 1) {
            auto forged = forged_messages();
            auto* raw = dynamic_cast<pp::mpi_pp::mpi_transport*>(tp.get());
            CHECK(raw != nullptr);
            for (auto const& f : forged) {
                CHECK(raw->send_raw_for_testing(0, 1, f) == MPI_SUCCESS);
            }
            auto [done, on_sent] = sent();
            tp->send(0, cs::save(std::string("real"), static_cast<int>(forged.size())), on_sent);
            CHECK(pump(*tp, [&] { return *done && got.size() == 1; }));
            if (got.size() == 1) {
                std::string s;
                cs::load(got[0].second, s);
                CHECK(s == "still answering");
            }
        } else {
            // What the forged messages log goes to a file, counted once the real parcel came.
            char path[] = "/tmp/courier-mpi-malformed-XXXXXX";
            int fd = ::mkstemp(path);
            int saved = ::dup(2);
            ::dup2(fd, 2);
            bool arrived = pump(*tp, [&] { return !got.empty(); });
            std::fflush(stderr);
            ::dup2(saved, 2);
            ::close(saved);
            ::close(fd);
            std::ifstream in(path);
            std::stringstream log;
            log << in.rdbuf();
            ::unlink(path);
            std::string const text = log.str();
            std::fputs(text.c_str(), stderr);
            CHECK(arrived);
            CHECK(got.size() == 1);
            int forged_count = 0;
            if (got.size() == 1) {
                std::string s;
                cs::load(got[0].second, s, forged_count);
                CHECK(s == "real" && got[0].first == 1);
            }
            int lines = count(text, "dropped a malformed") + count(text, "ends in a bad record");
            std::printf("mpi_malformed_test: %d forged messages, %d lines logged, %zu parcel "
                        "delivered\n",
                        forged_count, lines, got.size());
            CHECK(forged_count > 0 && lines == forged_count);
            CHECK(count(text, "the job token of another job") == 1);
            CHECK(count(text, "it claims to come from locality 0") == 1);
            CHECK(count(text, "a data tag out of range") == 2);
            CHECK(tp->stats().messages_received == 1);
            auto [done, on_sent] = sent();
            tp->send(1, cs::save(std::string("still answering")), on_sent);
            CHECK(pump(*tp, [&] { return *done; }));
        }
        got.clear();
        pp::mpi_allgather({}); // both sides done before either transport closes
    }
    std::printf("mpi_malformed_test on rank %d: %s\n", rank, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
