#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# The HPX paper's Figure 5, measured locally: Courier actions carrying a serialize_buffer (pointer
# chunks, registration from the cache), an rma_vector (rma chunks from the registered pool,
# adopted on receive) and a std::vector (pointer chunk, one copy on receive), with 1 and 2
# worker threads per locality, on tcp and shm, REPEAT times interleaved; then the cost of
# fi_mr_reg by size on each provider. Writes results/rma.csv, results/mr_reg.txt and
# plots/rma_{latency,bw,bibw}_{tcp,shm}.png, and prints the ratio tables.
# usage: benchmarks/osu/run_rma.sh [--quick] [--repeat=N] [--build=DIR] [--out=DIR]
set -euo pipefail
source "$(dirname "$0")/common.sh"
for r in $(seq 1 "$repeat"); do
    for prov in tcp shm; do
        for t in 1 2; do
            for buf in serialize_buffer rma_vector std_vector; do
                run "$bin/courier-run" -n 2 --courier:provider=$prov --courier:threads=$t \
                    "$bin/osu_courier" --buffer=$buf --min-size=4096 "${quick[@]}"
            done
        done
    done
done
mkdir -p "$out/results" "$out/plots"
/usr/bin/python3 "$here/plot_rma.py" "$raw" "$out/results/rma.csv" "$out/plots"
echo
"$bin/mr_reg_cost" "${quick[@]}" | grep -v '^RESULT' | tee "$out/results/mr_reg.txt"
