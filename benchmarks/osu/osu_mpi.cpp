// SPDX-License-Identifier: BSL-1.0
// The MPI baseline for osu_courier: the OSU tests written on MPI point to point (blocking
// ping-pong; Isend/Irecv windows of 64 with a 4-byte acknowledgement), as OSU does them.
//   mpirun -np 2 --bind-to core [--mca btl self,vader | --mca btl self,tcp] osu_mpi
//       [--label=shm|tcp] [--name=mpi] [--tests=...] [--max-size=BYTES] [--quick]
// --label names the provider column of the results, --name the implementation (run.sh runs
// vader twice: "mpi" with OpenMPI's default single-copy mechanism, CMA, and "mpi-nocma").
// Methodology and output format: osu_common.hpp.
#include "osu_common.hpp"

#include <mpi.h>

#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    std::vector<std::string> rest;
    auto plan = osu::parse(argc, argv, &rest);
    std::string label = "mpi";
    std::string name = "mpi";
    for (auto const& a : rest) {
        if (a.rfind("--label=", 0) == 0) {
            label = a.substr(8);
        } else if (a.rfind("--name=", 0) == 0) {
            name = a.substr(7);
        }
    }
    int rank = 0, size_world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size_world);
    bool const only_mr = plan.tests == std::vector<std::string>{"mr"};
    if (only_mr ? size_world % 2 != 0 : size_world != 2) {
        if (rank == 0) {
            std::fprintf(stderr, "osu_mpi needs 2 ranks (--tests=mr alone: an even number)\n");
        }
        MPI_Finalize();
        return 1;
    }
    // The first half of the ranks send (bw, mr), each to its partner in the second half.
    int const half = size_world / 2;
    int peer = rank < half ? rank + half : rank - half;
    bool const sender = rank < half;
    std::size_t max = std::max<std::size_t>(plan.max_size(), 8);
    std::vector<char> sbuf(max, 'a'), rbuf(max, 'b');
    std::vector<MPI_Request> reqs(2 * osu::window);
    char ack[4] = {};
    for (auto const& test : plan.tests) {
        for (std::size_t size : plan.sizes) {
            int n = static_cast<int>(size);
            double value = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            if (test == "latency") {
                int skip = plan.latency_skip(size), iters = plan.latency_iterations(size);
                double t0 = 0;
                for (int i = 0; i < skip + iters; ++i) {
                    if (i == skip) {
                        t0 = MPI_Wtime();
                    }
                    if (rank == 0) {
                        MPI_Send(sbuf.data(), n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                        MPI_Recv(rbuf.data(), n, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
                                 MPI_STATUS_IGNORE);
                    } else {
                        MPI_Recv(rbuf.data(), n, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
                                 MPI_STATUS_IGNORE);
                        MPI_Send(sbuf.data(), n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    }
                }
                value = (MPI_Wtime() - t0) * 1e6 / iters / 2;
            } else if (test == "bw" || test == "bibw" || test == "mr") {
                bool bi = test == "bibw";
                bool sends = sender || bi, receives = !sender || bi;
                int skip = plan.bw_skip(size), loops = plan.bw_loops(size) * (test == "mr" ? 4 : 1);
                double t0 = 0;
                for (int l = 0; l < skip + loops; ++l) {
                    if (l == skip) {
                        t0 = MPI_Wtime();
                    }
                    int k = 0;
                    if (receives) {
                        for (int w = 0; w < osu::window; ++w) {
                            MPI_Irecv(rbuf.data(), n, MPI_CHAR, peer, 10, MPI_COMM_WORLD,
                                      &reqs[static_cast<std::size_t>(k++)]);
                        }
                    }
                    if (sends) {
                        for (int w = 0; w < osu::window; ++w) {
                            MPI_Isend(sbuf.data(), n, MPI_CHAR, peer, 10, MPI_COMM_WORLD,
                                      &reqs[static_cast<std::size_t>(k++)]);
                        }
                    }
                    MPI_Waitall(k, reqs.data(), MPI_STATUSES_IGNORE);
                    if (bi) {
                        MPI_Sendrecv(ack, 4, MPI_CHAR, peer, 20, ack, 4, MPI_CHAR, peer, 20,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else if (!sender) {
                        MPI_Send(ack, 4, MPI_CHAR, peer, 20, MPI_COMM_WORLD);
                    } else {
                        MPI_Recv(ack, 4, MPI_CHAR, peer, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    }
                }
                if (test == "mr") { // every pair done: messages per second over all of them
                    MPI_Barrier(MPI_COMM_WORLD);
                    value = double(half) * osu::window * loops / (MPI_Wtime() - t0);
                } else {
                    value = double(size) * osu::window * loops * (bi ? 2 : 1) / (MPI_Wtime() - t0) /
                            1e6;
                }
            }
            if (rank == 0) {
                osu::report(name.c_str(), label, 1, test, size, value);
            }
        }
    }
    MPI_Finalize();
    return 0;
}
