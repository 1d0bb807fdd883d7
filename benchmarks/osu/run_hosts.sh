#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# OSU latency and bandwidth between two hosts, Courier against OpenMPI's tcp path, in paired
# rounds (the order alternates each round), plus the intra-host pair of the same Courier job
# over shm and OpenMPI's shared memory (vader) for reference. Runs inside a netns-cluster of two
# hosts (every process started by the cluster's agent, both launchers alike):
#   tests/cluster/netns-cluster --hosts=2 --slots=2 -- benchmarks/osu/run_hosts.sh [--rounds=N]
#       [--sizes=N,N,...] [--build=DIR] [--out=DIR]
# Courier: one job of 4 localities (2 per host, provider auto, one worker each); osu_courier
# measures locality 0 against locality 2 (other host: tcp) and against locality 1 (same host:
# shm). OpenMPI: -np 2 with one rank per host, ob1 over tcp on the cluster's addresses (and
# -np 2 on host 0 over vader). Prints compare.py's paired table against mpi-tcp and writes the
# medians to results/osu_hosts.csv and plots/osu_hosts_{latency,bw}.png under --out (default:
# benchmarks/osu).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
out="$here"
rounds=6
sizes=(--sizes=1,8,64,512,4096,16384,65536,262144,1048576,4194304)
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --sizes=*) sizes=("$a") ;;
        --build=*) build=${a#--build=} ;;
        --out=*) out=${a#--out=} ;;
        *) echo "usage: $0 [--rounds=N] [--sizes=N,N,...] [--build=DIR] [--out=DIR]" >&2; exit 2 ;;
    esac
done
: "${COURIER_CLUSTER_HOSTFILE:?run it inside tests/cluster/netns-cluster --hosts=2}"
bin="$build/bin"
h0=${COURIER_CLUSTER_PREFIX}h0
h1=${COURIER_CLUSTER_PREFIX}h1
agent=$COURIER_CLUSTER_AGENT
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.stderr"' EXIT
mkdir -p "$out/results" "$out/plots"
mpi=(mpirun --allow-run-as-root --bind-to none --mca plm_rsh_agent "$agent" --mca pml ob1
    --mca oob_tcp_if_include 198.18.0.0/15)
courier=("$bin/courier-run" -n 4 --hostfile="$COURIER_CLUSTER_HOSTFILE" --agent="$agent"
    "$bin/osu_courier" --courier:threads=1 --courier:bind=none --tests=latency,bw "${sizes[@]}")
run_one() {
    local r=$1 label=$2
    local -a cmd
    case $label in
        courier-tcp) cmd=("${courier[@]}" --peer=2 --label=tcp-hosts) ;;
        courier-shm) cmd=("${courier[@]}" --peer=1 --label=shm-host) ;;
        mpi-tcp) cmd=("${mpi[@]}" -np 2 --host "$h0,$h1" --mca btl self,tcp
            --mca btl_tcp_if_include 198.18.0.0/15 "$bin/osu_mpi" --label=tcp-hosts
            --tests=latency,bw "${sizes[@]}") ;;
        mpi-shm) cmd=("${mpi[@]}" -np 2 --host "$h0:2" --mca btl self,vader "$bin/osu_mpi"
            --label=shm-host --tests=latency,bw "${sizes[@]}") ;;
    esac
    echo "+ round $r: $label" >&2
    # courier-run prefixes each line with the locality's rank: "[0] RESULT ..."
    if ! timeout 900 "${cmd[@]}" 2>> "$raw.stderr" | sed 's/^\[[0-9]*\] //' |
        grep '^RESULT' | sed "s/^/$r $label /" >> "$raw"; then
        echo "run_hosts.sh: round $r, $label failed; its stderr:" >&2
        tail -n 20 "$raw.stderr" >&2
        exit 1
    fi
}
configs=(mpi-tcp courier-tcp courier-shm mpi-shm)
for r in $(seq 1 "$rounds"); do
    order=("${configs[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=(mpi-shm courier-shm courier-tcp mpi-tcp)
    fi
    for c in "${order[@]}"; do
        run_one "$r" "$c"
    done
done
/usr/bin/python3 "$here/compare.py" "$raw" mpi-tcp
/usr/bin/python3 "$here/plot_hosts.py" "$raw" "$out/results/osu_hosts.csv" "$out/plots"
