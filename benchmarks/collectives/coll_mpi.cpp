// SPDX-License-Identifier: BSL-1.0
// The MPI baseline of coll_courier: MPI_Allreduce (doubles, MPI_SUM) and MPI_Allgather
// latency, osu_allreduce's method (coll_common.hpp).
//   mpirun -np P [--oversubscribe] coll_mpi
#include "coll_common.hpp"

#include <mpi.h>

namespace {

template <class Op>
void measure(char const* name, std::size_t bytes, coll::selection const& sel, Op op) {
    int skip = coll::skip(bytes), iters = sel.iterations(bytes);
    for (int i = 0; i < skip; ++i) {
        op();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        op();
    }
    double mean = (MPI_Wtime() - t0) * 1e6 / iters;
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<double> all(static_cast<std::size_t>(size));
    MPI_Gather(&mean, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        coll::report("mpi", name, bytes, all);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    coll::selection const sel = coll::select(argc, argv);
    // MPI_SUM is elementwise either way: the same call is the baseline of both cases.
    for (char const* op : {"allreduce", "allreduce-elementwise"}) {
        for (std::size_t bytes : sel.sizes_of(op)) {
            std::vector<double> in(bytes / sizeof(double), 1.0), out(in.size());
            measure(op, bytes, sel, [&] {
                MPI_Allreduce(in.data(), out.data(), int(in.size()), MPI_DOUBLE, MPI_SUM,
                              MPI_COMM_WORLD);
            });
        }
    }
    for (std::size_t bytes : sel.sizes_of("allgather")) {
        std::vector<char> part(bytes, 'x'), all(bytes * std::size_t(size));
        measure("allgather", bytes, sel, [&] {
            MPI_Allgather(part.data(), int(bytes), MPI_CHAR, all.data(), int(bytes), MPI_CHAR,
                          MPI_COMM_WORLD);
        });
    }
    MPI_Finalize();
    return 0;
}
