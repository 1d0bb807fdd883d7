// SPDX-License-Identifier: BSL-1.0
// When the MPI transport holds a parcel for a coalesced message (run under `mpirun -np 2` with
// the value of transport_options::coalesce_in_flight, 0 = auto). An eager MPI_Isend completes
// once MPI has buffered the message, so a lone request or reply finds nothing in flight, and
// by default (1) the second parcel of a burst already joins a batch: the replies to a batch of
// requests go as two messages, not three. Rank 0 sends three small parcels back to back, with
// no progress between; rank 1 receives them. Held (in batches): 3 - coalesce_in_flight.
#include "mpi_check.hpp"

#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/serialization.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace pp = courier::parcelport;
using pp::test::failures;
namespace cs = courier::serialization;

int main(int argc, char** argv) {
    long const hold = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 0;
    if (hold < 0 || hold > 3) {
        std::fprintf(stderr, "mpi_coalescing_test: give coalesce_in_flight, 0 to 3\n");
        return 2;
    }
    pp::transport_options o;
    o.parcelport = "mpi";
    o.doorbell = false;
    o.job_token = 0x1a4e;
    o.coalesce_in_flight = static_cast<std::uint32_t>(hold);
    int rank = 0;
    unsigned long long held = 0;
    {
        auto tp = pp::make_mpi_transport(o);
        rank = pp::test::connect_two_ranks(*tp, "mpi_coalescing_test");
        if (rank < 0) {
            return 2;
        }
        std::vector<int> got;
        tp->set_receive_handler([&got](std::uint32_t, cs::message&& m) {
            int i = -1;
            cs::load(m, i);
            got.push_back(i);
        });
        if (rank == 0) {
            int sent = 0, errors = 0;
            for (int i = 0; i < 3; ++i) {
                tp->send_coalesced(1, cs::save(i), [&](std::error_code ec) {
                    ++sent;
                    errors += ec ? 1 : 0;
                });
            }
            CHECK(pp::test::pump(
                *tp, [&] { return sent == 3; }, std::chrono::seconds(30)));
            CHECK(errors == 0);
            auto const st = tp->stats();
            held = st.parcels_in_batches;
            std::uint32_t const expected_alone = hold == 0 ? 1 : static_cast<std::uint32_t>(hold);
            CHECK(held == 3 - expected_alone);
            CHECK(st.batches_sent == (held == 0 ? 0u : 1u));
        } else {
            CHECK(pp::test::pump(
                *tp, [&] { return got.size() == 3; }, std::chrono::seconds(30)));
            CHECK((got == std::vector<int>{0, 1, 2}));
        }
        pp::mpi_allgather({}); // both sides done before either transport closes
    }
    std::printf("mpi_coalescing_test on rank %d: %llu of 3 parcels held, %s\n", rank, held,
                failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
