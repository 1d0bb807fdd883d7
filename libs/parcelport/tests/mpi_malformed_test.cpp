// SPDX-License-Identifier: BSL-1.0
// Forged messages to the MPI transport (run under `mpirun -np 2`): locality 1 sends, on the
// transport's own communicator, header messages that are too short, of another job or version,
// from a locality they are not, with flags, sizes or chunk types no parcel can have, a data tag
// out of range, bad batches, and a data message shorter than its descriptor; then a real parcel.
// Locality 0 must deliver only the real parcel, log for each forged message the line of its own
// reason (and nothing else), and still answer. MPI's own header matching makes the order
// certain: the forged headers share the real parcel's tag and sender, so they arrive first.
#include "../src/mpi/mpi_transport.hpp"

#include "mpi_check.hpp"

#include <courier/common/log.hpp>
#include <courier/parcelport/mpi.hpp>
#include <courier/serialization.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace pp = courier::parcelport;
using pp::test::failures;
namespace wire = courier::parcelport::wire;
namespace cs = courier::serialization;

namespace {

template <class Until>
bool pump_for(pp::transport& tp, Until&& until) {
    return pp::test::pump(tp, until, std::chrono::seconds(20));
}

constexpr std::uint64_t token = 0x5eed;

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
                                std::uint32_t claimed, bool bad_length,
                                std::uint32_t record_flags = 0) {
    std::vector<std::byte> b(sizeof(wire::header));
    for (auto const& r : records) {
        std::size_t at = b.size();
        b.resize(at + wire::record_size(r.size()));
        pp::write_record_prefix(b.data() + at, bad_length ? r.size() + 4096 : r.size(),
                                record_flags);
        std::memcpy(b.data() + at + wire::record_prefix, r.data(), r.size());
    }
    wire::header h = header(wire::batch, claimed, b.size() - sizeof(wire::header), 0);
    std::memcpy(b.data(), &h, sizeof h);
    return b;
}

/// A forged message, the MPI tag it goes out with, and what locality 0 must log for it (one
/// line each).
struct forgery {
    std::vector<std::byte> bytes;
    std::vector<std::string> reasons;
    int tag = 1; // the header tag
};

constexpr int forged_data_tag = 5000;

std::vector<forgery> forged_messages() {
    auto const ix = static_cast<std::uint8_t>(cs::chunk_type::index);
    auto const ptr = static_cast<std::uint8_t>(cs::chunk_type::pointer);
    std::vector<forgery> f;
    auto add = [&](std::vector<std::byte> b, std::vector<std::string> why) {
        f.push_back({std::move(b), std::move(why)});
    };
    add(std::vector<std::byte>(10), {"a header of 10 bytes"});
    auto h = header(wire::parcel, 1, 8);
    h.magic = 0x12345678;
    add(parcel(h, {desc(ix, 8)}), {"bad magic, version or kind"});
    h = header(wire::parcel, 1, 8);
    h.version = 99;
    add(parcel(h, {desc(ix, 8)}), {"bad magic, version or kind"});
    h = header(wire::parcel, 1, 8);
    h.token = token + 1; // another job's
    add(parcel(h, {desc(ix, 8)}), {"the job token of another job"});
    h = header(wire::parcel, 1, 8);
    h.source = 0; // locality 1 claiming to be 0
    add(parcel(h, {desc(ix, 8)}), {"it claims to come from locality 0"});
    // A remote descriptor table, which no MPI sender lays out.
    add(parcel(header(wire::parcel, 1, 8, wire::index_inline | wire::descriptors_remote),
               {desc(ix, 8)}),
        {"flags 3"});
    add(parcel(header(wire::parcel, wire::max_chunks + 1, 8), {desc(ix, 8)}),
        {"announcing " + std::to_string(wire::max_chunks + 1) + " chunks"});
    add(bytes_of(header(wire::parcel, 1, 100), {desc(ix, 100)}, 20),
        {"its length does not match its header"}); // 20 of 100 index bytes
    // An unknown type on an empty chunk: everything else about the parcel adds up.
    add(parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(9, 0)}), {"unknown chunk type 9"});
    // A size that would wrap the sum to 4 bytes: only the per-chunk bound stops it.
    add(parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, ~std::uint64_t{0} - 3)}),
        {"bytes is larger than any address space"});
    add(parcel(header(wire::parcel, 3, 8),
               {desc(ix, 8), desc(ptr, std::uint64_t{1} << 46), desc(ptr, std::uint64_t{1} << 46)}),
        {"larger than this machine's memory"});
    add(parcel(header(wire::parcel, 1, 8), {desc(ix, 4)}), {"index chunks do not add up"});
    add(parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, 100)}), // send_id (tag) 0
        {"a data tag out of range"});
    // An index said not to be inline whose last descriptor is not the index buffer's.
    add(bytes_of(header(wire::parcel, 1, 8, 0), {desc(ix, 8), desc(ptr, 8)}, 0),
        {"descriptors do not match the header"});
    // Batches: a record longer than the batch; a record whose parcel has a data chunk; a batch
    // in a batch; one that announces 2 parcels and holds 1 (itself bad); one whose size is not
    // its header's.
    auto ok = parcel(header(wire::parcel, 1, 8), {desc(ix, 8)});
    add(batch_of({ok}, 1, true), {"dropped the rest of a coalesced message"});
    auto with_data = parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, 100)});
    std::uint64_t tag = 5;
    std::memcpy(with_data.data() + offsetof(wire::header, send_id), &tag, sizeof tag);
    add(batch_of({with_data}, 1, false), {"a data tag out of range"});
    add(batch_of({batch_of({ok}, 1, false)}, 1, false), {"bad magic, version or kind"});
    h = header(wire::parcel, 1, 8);
    h.magic = 0;
    add(batch_of({parcel(h, {desc(ix, 8)})}, 2, false),
        {"bad magic, version or kind", "announced 2 records and held 1"});
    // A compact record (a stream alone), which only the libfabric sender writes.
    add(batch_of({std::vector<std::byte>(16, std::byte{1})}, 1, false, wire::record_compact),
        {"a compact record"});
    auto wrong_size = batch_of({ok}, 1, false);
    wrong_size.resize(wrong_size.size() + 8); // 8 bytes the header does not announce
    add(wrong_size, {"it announces"});
    // A data message shorter than its descriptor: 32 of 64 bytes under the parcel's data tag.
    auto short_data = parcel(header(wire::parcel, 2, 8), {desc(ix, 8), desc(ptr, 64)});
    std::uint64_t data_tag = forged_data_tag;
    std::memcpy(short_data.data() + offsetof(wire::header, send_id), &data_tag, sizeof data_tag);
    add(short_data, {"a data message of 32 bytes where 64 were due"});
    f.push_back({std::vector<std::byte>(32), {}, forged_data_tag});
    return f;
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
        rank = pp::test::connect_two_ranks(*tp, "mpi_malformed_test");
        if (rank < 0) {
            return 2;
        }
        tp->set_receive_handler(
            [&](std::uint32_t src, cs::message&& m) { got.emplace_back(src, std::move(m)); });
        auto sent = [&] {
            auto done = std::make_shared<bool>(false);
            return std::pair{done, [done](std::error_code) { *done = true; }};
        };
        auto const forged = forged_messages();
        if (rank == 1) {
            auto* raw = dynamic_cast<pp::mpi_pp::mpi_transport*>(tp.get());
            CHECK(raw != nullptr);
            for (auto const& f : forged) {
                CHECK(raw->send_raw_for_testing(0, f.tag, f.bytes) == MPI_SUCCESS);
            }
            auto [done, on_sent] = sent();
            tp->send(0, cs::save(std::string("real")), on_sent);
            CHECK(pump_for(*tp, [&] { return *done && got.size() == 1; }));
            if (got.size() == 1) {
                std::string s;
                cs::load(got[0].second, s);
                CHECK(s == "still answering");
            }
        } else {
            // What the forged messages log goes to a file, counted once the real parcel and the
            // short data message (whose parcel's receive is counted when it ends) came.
            char path[] = "/tmp/courier-mpi-malformed-XXXXXX";
            int fd = ::mkstemp(path);
            int saved = ::dup(2);
            ::dup2(fd, 2);
            bool arrived =
                pump_for(*tp, [&] { return !got.empty() && tp->stats().rma_bytes_read >= 64; });
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
            if (got.size() == 1) {
                std::string s;
                cs::load(got[0].second, s);
                CHECK(s == "real" && got[0].first == 1);
            }
            // Each forged message was dropped for its own reason, and nothing else was logged.
            std::map<std::string, int> due;
            int reasons = 0;
            for (auto const& f : forged) {
                for (auto const& r : f.reasons) {
                    ++due[r];
                    ++reasons;
                }
            }
            for (auto const& [reason, n] : due) {
                if (count(text, reason) != n) {
                    std::fprintf(stderr, "expected %d line(s) with '%s', found %d\n", n,
                                 reason.c_str(), count(text, reason));
                    ++failures;
                }
            }
            int lines = count(text, "\n");
            std::printf("mpi_malformed_test: %zu forged messages, %d reasons due, %d lines logged, "
                        "%zu parcel delivered\n",
                        forged.size(), reasons, lines, got.size());
            CHECK(lines == reasons);
            CHECK(tp->stats().messages_received == 1);
            auto [done, on_sent] = sent();
            tp->send(1, cs::save(std::string("still answering")), on_sent);
            CHECK(pump_for(*tp, [&] { return *done; }));
        }
        got.clear();
        pp::mpi_allgather({}); // both sides done before either transport closes
    }
    std::printf("mpi_malformed_test on rank %d: %s\n", rank, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
