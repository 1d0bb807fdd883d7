#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Courier's all_reduce / all_gather against OpenMPI's on P localities of this host, in
# alternating rounds (each round runs Courier with its shared-memory collectives, Courier with
# every collective message a parcel (--courier:shm_collectives=0), then MPI); prints per case
# the median latency of each over the rounds and the medians of the per-round ratios.
# usage: benchmarks/collectives/compare.sh [--rounds=N] [--ranks="2 4 8 16"] [--build=DIR]
#            [--before=DIR] [--sizes=8,65536] [--ops=allreduce,allreduce-elementwise,allgather]
#            [--iterations=N]
# (--ops: any of the three, comma-separated; all three by default. allreduce-elementwise is
# all_reduce(v, elementwise(std::plus<>{})); MPI runs the same MPI_Allreduce for both.)
# --before=DIR: also runs DIR's coll_courier (another build, shared-memory collectives) in each
# round and prints Courier's latency over it (below 1 = faster than that build).
# Courier runs on shm with one worker per locality, MPI on vader; both unbound (more ranks than
# cores oversubscribe: OpenMPI then yields when idle, Courier's idle workers sleep).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
rounds=5
ranks="2 4 8 16"
before=""
cases=()
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --ranks=*) ranks=${a#--ranks=} ;;
        --build=*) build=${a#--build=} ;;
        --before=*) before=${a#--before=} ;;
        --sizes=* | --ops=* | --iterations=*) cases+=("$a") ;; # passed to each program
        *) echo "compare.sh: unknown option $a" >&2; exit 2 ;;
    esac
done
bin="$build/bin"
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for p in $ranks; do
    for ((r = 0; r < rounds; r++)); do
        for shm in 1 0; do
            label=courier
            [ "$shm" = 0 ] && label=courier-parcels
            COURIER_BIND=none "$bin/courier-run" -n "$p" --courier-run-job-timeout=300 \
                "$bin/coll_courier" --courier:spmd=1 --courier:provider=shm --courier:threads=1 \
                --courier:shm_collectives="$shm" --label="$label" "${cases[@]}" |
                sed -n "s/^RESULT /$r /p" >> "$raw"
        done
        if [ -n "$before" ]; then
            COURIER_BIND=none "$before/bin/courier-run" -n "$p" --courier-run-job-timeout=300 \
                "$before/bin/coll_courier" --courier:spmd=1 --courier:provider=shm \
                --courier:threads=1 --label=before "${cases[@]}" | sed -n "s/^RESULT /$r /p" >> "$raw"
        fi
        timeout 300 mpirun "${root[@]}" -np "$p" --oversubscribe --bind-to none --mca btl self,vader \
            "$bin/coll_mpi" "${cases[@]}" | sed -n "s/^RESULT /$r /p" >> "$raw"
    done
done
python3 - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    rnd, impl, op, size, ranks, avg, lo, hi = line.split()
    rows.setdefault((op, int(size), int(ranks)), {}).setdefault(impl, {})[int(rnd)] = float(avg)
has_before = any('before' in by for by in rows.values())
print(f"{'op':21} {'bytes':>6} {'ranks':>5} {'courier us':>11} {'parcels us':>11} "
      f"{'mpi us':>9} {'c/mpi':>6} {'p/mpi':>6} {'c/p':>6}" +
      (f" {'before us':>10} {'c/before':>8}" if has_before else ""))
def ratio(a, b):
    common = sorted(set(a) & set(b))
    return statistics.median(a[r] / b[r] for r in common) if common else float('nan')
def med(a):
    return statistics.median(a.values()) if a else float('nan')
for (op, size, ranks), by in sorted(rows.items()):
    c, p, m = by.get('courier', {}), by.get('courier-parcels', {}), by.get('mpi', {})
    b = by.get('before', {})
    print(f"{op:21} {size:>6} {ranks:>5} {med(c):>11.2f} {med(p):>11.2f} {med(m):>9.2f} "
          f"{ratio(c, m):>6.2f} {ratio(p, m):>6.2f} {ratio(c, p):>6.2f}" +
          (f" {med(b):>10.2f} {ratio(c, b):>8.2f}" if has_before else ""))
PY
