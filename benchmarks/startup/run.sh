#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Job startup and shutdown, launch to exit: startup_courier under courier-run (one locality
# without it) and under mpirun (the MPI parcelport), against startup_mpi under mpirun, in
# interleaved rounds (each round runs every configuration once per locality count). Prints the
# median wall time of each in ms and its ratio to MPI's at the same count.
# usage: benchmarks/startup/run.sh [--rounds=15] [--localities=1,2,4] [--build=DIR]
#            [--before=DIR] [--quick]
#   --before=DIR: also courier-run and startup_courier from DIR (another build's bin/), as
#   "before" (shm), so that a change is measured in the same rounds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
rounds=15 localities=1,2,4 before=""
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --localities=*) localities=${a#--localities=} ;;
        --build=*) build=${a#--build=} ;;
        --before=*) before=${a#--before=} ;;
        --quick) rounds=1 localities=1,2 ;;
        *) echo "usage: $0 [--rounds=N] [--localities=1,2,4] [--build=DIR] [--before=DIR] [--quick]" >&2
           exit 2 ;;
    esac
done
bin="$build/bin"
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.stderr"' EXIT
mpirun=(mpirun --oversubscribe --bind-to none --mca btl self,vader)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
have_mpi=0
[ -x "$bin/startup_mpi" ] && command -v mpirun > /dev/null && have_mpi=1

# time_ms LABEL N CMD...: runs CMD once, appends "LABEL N ms" to $raw; a failure stops the run.
time_ms() {
    local label=$1 n=$2
    shift 2
    local t0 t1
    t0=$(date +%s%N)
    if ! timeout 120 "$@" > /dev/null 2>> "$raw.stderr"; then
        echo "run.sh: $label on $n failed: $*; the end of its stderr:" >&2
        tail -n 20 "$raw.stderr" >&2
        exit 1
    fi
    t1=$(date +%s%N)
    echo "$label $n $(( (t1 - t0) / 1000 ))" >> "$raw"
}

# courier_job DIR N: the command that starts startup_courier from DIR as N localities.
courier_job() {
    if [ "$2" = 1 ]; then
        job=("$1/startup_courier")
    else
        job=("$1/courier-run" -n "$2" "$1/startup_courier")
    fi
}

IFS=, read -r -a counts <<< "$localities"
for ((r = 1; r <= rounds; r++)); do
    for n in "${counts[@]}"; do
        courier_job "$bin" "$n"
        time_ms shm "$n" "${job[@]}" --courier:provider=shm
        if [ "$n" != 1 ]; then
            time_ms tcp "$n" "${job[@]}" --courier:provider=tcp
        fi
        if [ -n "$before" ]; then
            courier_job "$before" "$n"
            time_ms before "$n" "${job[@]}" --courier:provider=shm
        fi
        if [ $have_mpi = 1 ]; then
            time_ms mpi-parcelport "$n" "${mpirun[@]}" -np "$n" "$bin/startup_courier" \
                --courier:parcelport=mpi
            time_ms mpi "$n" "${mpirun[@]}" -np "$n" "$bin/startup_mpi"
        fi
    done
done
/usr/bin/python3 - "$raw" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, n, us = line.split()
    runs[(label, int(n))].append(int(us) / 1000)
labels = [l for l in ["shm", "before", "tcp", "mpi-parcelport", "mpi"]
          if any(k[0] == l for k in runs)]
counts = sorted({n for _, n in runs})
print("launch to exit, median ms (rounds: %d); in brackets: the ratio to mpi" %
      max(len(v) for v in runs.values()))
print("%-10s" % "localities" + "".join("%22s" % l for l in labels))
for n in counts:
    mpi = statistics.median(runs[("mpi", n)]) if ("mpi", n) in runs else None
    cells = []
    for l in labels:
        if (l, n) not in runs:
            cells.append("%22s" % "-")
            continue
        m = statistics.median(runs[(l, n)])
        cells.append("%22s" % ("%.0f" % m + (" (%.2fx)" % (m / mpi) if mpi else "")))
    print("%-10d" % n + "".join(cells))
PY
