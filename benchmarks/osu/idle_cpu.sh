#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# CPU time of idle localities: a job of N localities whose tasks all wait (distributed_program's
# `stuck` scenario: locality 0 waits for a call to locality 1 that never returns), measured from
# each process's per-thread scheduler statistics (/proc/PID/task/*/schedstat, exact run time)
# over a window after startup, in ms of CPU per second per locality. With --base=DIR the build
# in DIR runs in the same rounds, alternating, and the ratio of the medians is printed. Runs
# inside a netns-cluster (every process started by the cluster's agent):
#   tests/cluster/netns-cluster --hosts=2 --slots=2 -- benchmarks/osu/idle_cpu.sh [--rounds=N]
#       [--build=DIR] [--base=DIR] [--threads=T] [--window=S] [-- EXTRA COURIER OPTIONS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
base=""
rounds=4
threads=1
window=3
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds=*) rounds=${1#--rounds=} ;;
        --build=*) build=${1#--build=} ;;
        --base=*) base=${1#--base=} ;;
        --threads=*) threads=${1#--threads=} ;;
        --window=*) window=${1#--window=} ;;
        --) shift; extra=("$@"); break ;;
        *) echo "usage: $0 [--rounds=N] [--build=DIR] [--base=DIR] [--threads=T] [--window=S] [-- OPTIONS]" >&2
           exit 2 ;;
    esac
    shift
done
: "${COURIER_CLUSTER_HOSTFILE:?run it inside tests/cluster/netns-cluster}"
slots=$(awk '{for (i = 2; i <= NF; ++i) if ($i ~ /^slots=/) { sub("slots=", "", $i); n += $i }} END {print n}' \
    "$COURIER_CLUSTER_HOSTFILE")
tag="idle-cpu-$$"
# One round of one build: prints the ms of CPU per second of every locality.
measure() {
    local dir=$1 prog
    prog=$(cd "$dir" && pwd)/tests/distributed/distributed_program
    [ -x "$prog" ] || { echo "idle_cpu.sh: no $prog" >&2; exit 1; }
    # The time limit ends the job after the window (status 124, expected).
    "$dir/bin/courier-run" -n "$slots" --courier-run-job-timeout=$((window + 6)) \
        --hostfile="$COURIER_CLUSTER_HOSTFILE" --agent="$COURIER_CLUSTER_AGENT" \
        "$prog" stuck "--courier:threads=$threads" --courier:bind=none "--$tag" ${extra[@]+"${extra[@]}"} \
        > /dev/null 2>&1 &
    local job=$!
    sleep 3 # startup, connections, the first sleeps
    snap() {
        local p s t
        for p in $(pgrep -f -- "--$tag"); do
            [ "$(cat "/proc/$p/comm" 2> /dev/null)" = distributed_pro ] || continue
            s=0
            for t in /proc/"$p"/task/*; do
                s=$((s + $(cut -d' ' -f1 "$t/schedstat" 2> /dev/null || echo 0)))
            done
            echo "$p $s"
        done | sort
    }
    local a b
    a=$(snap)
    sleep "$window"
    b=$(snap)
    join <(echo "$a") <(echo "$b") | awk -v w="$window" '{printf "%.1f ", ($3 - $2) / w / 1e6}'
    echo
    wait "$job" || true
}
declare -a cur_all base_all
for r in $(seq 1 "$rounds"); do
    line=$(measure "$build")
    echo "round $r current: $line ms/s per locality"
    cur_all+=($line)
    if [ -n "$base" ]; then
        line=$(measure "$base")
        echo "round $r base:    $line ms/s per locality"
        base_all+=($line)
    fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
m=$(median "${cur_all[@]}")
echo "median current: $m ms/s per idle locality ($slots localities, $threads workers each)"
if [ -n "$base" ]; then
    mb=$(median "${base_all[@]}")
    echo "median base:    $mb ms/s per idle locality"
    awk -v a="$m" -v b="$mb" 'BEGIN {printf "ratio current/base: %.2f\n", a / b}'
fi
