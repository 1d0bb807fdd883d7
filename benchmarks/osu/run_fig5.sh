#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# The HPX paper's Figure 5 (its section 3.5): OSU latency and bidirectional bandwidth of Courier
# over its libfabric parcelport and over its MPI parcelport, with serialize_buffer and
# rma_vector arguments, 1 and 2 worker threads, against native OpenMPI, on shm and on tcp.
# Every configuration runs once per round, interleaved, REPEAT rounds; the medians go to a CSV,
# the ratio tables to stdout, the curves to PLOT_DIR/fig5_{shm,tcp}.png.
#   libfabric: courier-run -n 2 --courier:provider=P --courier:threads=T osu_courier --buffer=B
#   MPI:       mpirun -np 2 --mca pml ob1 --mca btl self,vader|self,tcp osu_courier --buffer=B
#              --courier:parcelport=mpi --courier:threads=T   (the same BTL as native MPI)
#   native:    mpirun -np 2 --bind-to core --mca pml ob1 --mca btl ... osu_mpi
# usage: benchmarks/osu/run_fig5.sh [--quick] [--repeat=N] [--build=DIR] [--out=DIR]
set -euo pipefail
source "$(dirname "$0")/common.sh"
mpi_root=()
[ "$(id -u)" = 0 ] && mpi_root=(--allow-run-as-root)
tests=(--tests=latency,bibw)
for r in $(seq 1 "$repeat"); do
    for prov in shm tcp; do
        if [ $prov = shm ]; then btl=self,vader; else btl=self,tcp; fi
        mpi=(mpirun "${mpi_root[@]}" -np 2 --mca pml ob1 --mca btl $btl
            --mca btl_tcp_if_include lo)
        for t in 1 2; do
            for buf in serialize_buffer rma_vector; do
                run "$bin/courier-run" -n 2 --courier:provider=$prov --courier:threads=$t \
                    "$bin/osu_courier" --buffer=$buf "${tests[@]}" "${quick[@]}"
                # Courier places its workers itself, as under courier-run.
                run "${mpi[@]}" --oversubscribe --bind-to none "$bin/osu_courier" \
                    --label=$prov --buffer=$buf "${tests[@]}" "${quick[@]}" \
                    --courier:parcelport=mpi --courier:threads=$t
            done
        done
        run "${mpi[@]}" --bind-to core "$bin/osu_mpi" --label=$prov "${tests[@]}" "${quick[@]}"
    done
done
mkdir -p "$out/results" "$out/plots"
/usr/bin/python3 "$here/plot_fig5.py" "$raw" "$out/results/fig5.csv" "$out/plots"
