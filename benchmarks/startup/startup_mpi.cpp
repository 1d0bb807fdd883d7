// SPDX-License-Identifier: BSL-1.0
// The baseline of startup_courier: MPI_Init and MPI_Finalize.
#include <mpi.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
