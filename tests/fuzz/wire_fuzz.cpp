// SPDX-License-Identifier: BSL-1.0
// libFuzzer target: arbitrary bytes as the messages a locality's libfabric endpoint receives
// (wire_fuzz.hpp says how an input holds several). Each goes through the transport's own
// receive code (eager_reader: header and job token, split parts joined, batch records, an
// eager-only parcel's descriptors), and every parcel that comes out is handed, through the
// loopback transport, to locality 0 of a running in-process job, whose runtime decodes it
// (request, reply, heartbeat, goodbye, credit; unknown action ids; absurd sizes inside the
// archive). Run it with -close_fd_mask=2: every rejected message logs a line. A crash, a sanitizer
// report, an allocation past -malloc_limit_mb, or a locality that does not become idle again (a
// hang) is a bug.
//
// Parcels with chunks to read (rendezvous) are counted, not read: there is no peer memory to
// read here (malformed_test.cpp sends those over real providers).
#include "wire_fuzz.hpp"

#include "../../libs/parcelport/src/libfabric/eager_reader.hpp"
#include "../../libs/runtime/src/in_process.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

namespace {

namespace fabric = courier::parcelport::fabric;
namespace wire = courier::parcelport::wire;

class to_locality final : public fabric::message_sink {
public:
    explicit to_locality(courier::parcelport::loopback_hub& hub) : hub_(hub) {}
    bool header_ok(wire::header const& h) const override {
        return h.magic == wire::magic && h.version == wire::version &&
               h.token == courier::fuzz::job_token && h.source < courier::fuzz::localities;
    }
    void done(std::uint64_t) override {} // a DONE for a send that does not exist
    void eager_parcel(std::uint32_t source, courier::serialization::message&& m) override {
        hub_.inject(source, 0, std::move(m));
    }
    // A coalesced message's small parcels, and a lone small parcel, reach the runtime's batch
    // path (deliver_batch).
    bool eager_batch(std::uint32_t source,
                     std::span<std::span<std::byte const> const> parcels) override {
        std::vector<std::vector<std::byte>> copies;
        copies.reserve(parcels.size());
        for (auto s : parcels) {
            copies.emplace_back(s.begin(), s.end());
        }
        hub_.inject_batch(source, 0, std::move(copies));
        return true;
    }
    void rendezvous_parcel(wire::header const&, std::byte const*, std::size_t,
                           std::size_t) override {}
    void release(fabric::recv_op* r) override { held_.erase(r); }
    std::unordered_set<fabric::recv_op*>& held() { return held_; }

private:
    courier::parcelport::loopback_hub& hub_;
    std::unordered_set<fabric::recv_op*> held_; // receive buffers the reader keeps (part 0s)
};

struct harness {
    courier::detail::in_process_job job{{.localities = courier::fuzz::localities, .threads = 1}};
    to_locality sink{job.hub()};
    std::vector<std::unique_ptr<fabric::recv_op>> buffers;

    fabric::recv_op* free_buffer() {
        for (auto& b : buffers) {
            if (!sink.held().contains(b.get())) {
                return b.get();
            }
        }
        buffers.push_back(std::make_unique<fabric::recv_op>());
        buffers.back()->buf.reset(new std::byte[courier::fuzz::recv_size]);
        return buffers.back().get();
    }
};

harness& the_harness() {
    // Never destroyed: libFuzzer ends the process with exit(), and the job's workers must not
    // be stopped under a running input.
    static harness* h = new harness;
    return *h;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    harness& h = the_harness();
    auto const* p = reinterpret_cast<std::byte const*>(data);
    // A fresh reader per input: a first part left waiting by one input is not joined with
    // the next input's second (every input runs alone, reproducibly).
    fabric::eager_reader reader(h.sink, courier::fuzz::recv_size, std::chrono::milliseconds(0));
    h.sink.held().clear();
    std::size_t at = 0;
    while (size - at >= 2) {
        std::size_t n =
            std::to_integer<std::size_t>(p[at]) | std::to_integer<std::size_t>(p[at + 1]) << 8;
        at += 2;
        n = std::min({n, size - at, courier::fuzz::recv_size});
        fabric::recv_op* r = h.free_buffer();
        std::memcpy(r->buf.get(), p + at, n);
        at += n;
        if (reader.received(r, n)) {
            h.sink.held().insert(r);
        }
    }
    if (!h.job.drain(std::chrono::seconds(10), std::chrono::microseconds(50))) {
        std::fprintf(stdout, "wire_fuzz: the locality did not become idle within 10 s\n");
        std::abort();
    }
    return 0;
}
