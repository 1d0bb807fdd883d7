#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Runs the OSU-style benchmarks of Courier and their baselines in one run, on each provider:
#   Courier actions (1 and 2 worker threads per locality), native libfabric (osu_fabric), the
#   latency on Courier's transport alone (osu_transport), and
#   MPI (osu_mpi: OpenMPI ob1 over vader = shared memory, with its default single-copy
#   mechanism, CMA, and as "mpi-nocma" with copy-in/copy-out; and over tcp), REPEAT times each,
#   interleaved, then writes the medians to a CSV, prints the ratio tables and draws the plots.
# usage: benchmarks/osu/run.sh [--quick] [--repeat=N] [--build=DIR] [--out=DIR]
set -euo pipefail
source "$(dirname "$0")/common.sh"
mpi_root=()
[ "$(id -u)" = 0 ] && mpi_root=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}
for r in $(seq 1 "$repeat"); do
    for prov in tcp shm; do
        run "$bin/osu_fabric" --provider=$prov "${quick[@]}"
        run "$bin/osu_fabric" --provider=$prov --distinct --tests=bw,bibw "${quick[@]}"
        run "$bin/osu_transport" --provider=$prov "${quick[@]}"
        for t in 1 2; do
            run "$bin/courier-run" -n 2 --courier:provider=$prov --courier:threads=$t \
                "$bin/osu_courier" "${quick[@]}"
        done
        if [ -x "$bin/osu_mpi" ] && command -v mpirun > /dev/null; then
            if [ $prov = shm ]; then btl=self,vader; else btl=self,tcp; fi
            run mpirun "${mpi_root[@]}" -np 2 --bind-to core --mca pml ob1 --mca btl $btl \
                --mca btl_tcp_if_include lo "$bin/osu_mpi" --label=$prov "${quick[@]}"
            if [ $prov = shm ]; then # vader's copy-in/copy-out too: faster on some machines
                run env OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun "${mpi_root[@]}" \
                    -np 2 --bind-to core --mca pml ob1 --mca btl $btl "$bin/osu_mpi" \
                    --label=$prov --name=mpi-nocma "${quick[@]}"
            fi
        fi
    done
done
mkdir -p "$out/results" "$out/plots"
csv="$out/results/osu.csv"
/usr/bin/python3 "$here/plot.py" "$raw" "$csv" "$out/plots"
