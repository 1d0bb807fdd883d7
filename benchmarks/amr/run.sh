#!/bin/bash
# SPDX-License-Identifier: BSL-1.0
# The AMR benchmark (the seed paper's figure 6): grids processed per second by the Sedov
# problem at several depths of the tree and numbers of localities, for Courier over libfabric
# (shm, tcp; zero copy on and off), Courier over the MPI parcelport, and the plain MPI version,
# all interleaved round by round. One worker thread per locality (an MPI rank has one too).
# Prints each run, then per (configuration, levels, localities) the median grids/s and the
# ratios the goals name; writes the raw runs as CSV and plots them (plot_amr.py).
# --hosts=H runs the same inside a cluster of H network-namespace hosts (tests/cluster, needs
# root): localities fill each host's slots in turn; Courier's libfabric rails are shm within a
# host and tcp between hosts ("libfabric-hosts", zero copy on at 4096 B and off, and
# "libfabric-hosts-auto": the default threshold of each rail); the MPI runs go through
# mpirun with the cluster's host file. Its files are amr-hosts.csv and amr-hosts.png.
# usage: run.sh [--rounds=3] [--levels=2,3,4] [--localities=1,2,4,8] [--steps=30] [--base=4]
#               [--build=DIR] [--out=DIR (default benchmarks/amr/results)] [--hosts=H] [--quick]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="$here/../../build"
rounds=3 levels=2,3,4 localities=1,2,4,8 steps=30 base=4 out="$here/results" hosts=0 in_cluster=0
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --levels=*) levels=${a#--levels=} ;;
        --localities=*) localities=${a#--localities=} ;;
        --steps=*) steps=${a#--steps=} ;;
        --base=*) base=${a#--base=} ;;
        --build=*) build=${a#--build=} ;;
        --out=*) out=${a#--out=} ;;
        --hosts=*) hosts=${a#--hosts=} ;;
        --in-cluster) in_cluster=1 ;;
        --quick) rounds=1 levels=1 localities=1,2 steps=4 base=2 ;;
        *) sed -n '3,15p' "$0" >&2; exit 2 ;;
    esac
done
if [ "$hosts" -gt 0 ] && [ "$in_cluster" = 0 ]; then
    most=$(echo "${localities//,/ }" | tr ' ' '\n' | sort -n | tail -1)
    exec "$here/../../tests/cluster/netns-cluster" --hosts="$hosts" \
        --slots=$(((most + hosts - 1) / hosts)) -- "$0" "$@" --in-cluster
fi
mkdir -p "$out"
csv="$out/amr.csv" main=libfabric-shm
if [ "$in_cluster" = 1 ]; then
    csv="$out/amr-hosts.csv" main=libfabric-hosts
fi
export COURIER_BIND=none COURIER_THREADS=1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
launch=("$build/bin/courier-run")
if [ "$in_cluster" = 1 ]; then
    mpirun+=(--hostfile "$COURIER_CLUSTER_HOSTFILE" --mca plm_rsh_agent "$COURIER_CLUSTER_AGENT"
        --mca oob_tcp_if_include 198.18.0.0/15 --mca btl_tcp_if_include 198.18.0.0/15)
    launch+=(--hostfile="$COURIER_CLUSTER_HOSTFILE" --agent="$COURIER_CLUSTER_AGENT")
fi
have_mpi=0
if command -v mpirun > /dev/null && [ -x "$build/bin/amr_mpi" ]; then
    have_mpi=1
else
    echo "run.sh: no mpirun or amr_mpi: the MPI runs are left out" >&2
fi
echo "round,config,levels,localities,subgrids,steps,seconds,grids_per_s,parcels,bytes,zero_copy_bytes" > "$csv"
run() { # round config levels localities command...
    local round=$1 config=$2 lv=$3 p=$4
    shift 4
    local line
    # (courier-run with a host file tags each line with its locality: "[0] amr ...")
    line=$(timeout 900 "$@" --base="$base" --max-level="$((lv - 1))" --steps="$steps" |
        sed -n 's/^\(\[[0-9]*\] \)\{0,1\}\(amr .*\)/\2/p')
    [ -n "$line" ] || { echo "run.sh: no summary line from: $*" >&2; return 1; }
    echo "round $round $config levels=$lv localities=$p: $line"
    echo "$line" | awk -v r="$round" -v c="$config" -v l="$lv" -v p="$p" '{
        for (i = 1; i < NF; ++i) v[$i] = $(i + 1)
        printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", r, c, l, p, v["subgrids"], v["steps"],
            v["seconds"], v["grids/s"], v["parcels"], v["bytes"], v["zero-copy-bytes"] }' >> "$csv"
}
courier() { # round config levels localities provider threshold
    local provider=()
    [ -n "$5" ] && provider=(--courier:provider="$5")
    run "$1" "$2" "$3" "$4" "${launch[@]}" -n "$4" --courier-run-job-timeout=800 \
        "$build/bin/amr_courier" --courier:spmd=1 "${provider[@]}" \
        --courier:zero_copy_threshold="$6"
}
for round in $(seq 1 "$rounds"); do
    for lv in ${levels//,/ }; do
        for p in ${localities//,/ }; do
            if [ "$in_cluster" = 1 ]; then
                courier "$round" libfabric-hosts "$lv" "$p" "" 4096
                courier "$round" libfabric-hosts-copy "$lv" "$p" "" 0
                # the default: each rail its own threshold (shm's within a host, tcp's between)
                courier "$round" libfabric-hosts-auto "$lv" "$p" "" auto
            else
                courier "$round" libfabric-shm "$lv" "$p" shm 4096
                courier "$round" libfabric-shm-copy "$lv" "$p" shm 0
                courier "$round" libfabric-tcp "$lv" "$p" tcp 4096
                courier "$round" libfabric-tcp-copy "$lv" "$p" tcp 0
            fi
            if [ "$have_mpi" = 1 ]; then
                run "$round" courier-mpi "$lv" "$p" "${mpirun[@]}" -np "$p" \
                    -x COURIER_BIND -x COURIER_THREADS "$build/bin/amr_courier" \
                    --courier:spmd=1 --courier:parcelport=mpi --courier:zero_copy_threshold=4096
                run "$round" mpi "$lv" "$p" "${mpirun[@]}" -np "$p" "$build/bin/amr_mpi"
            fi
        done
    done
done
python3 - "$csv" "$main" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
main = sys.argv[2]
med = {}
for key in {(r["config"], int(r["levels"]), int(r["localities"])) for r in rows}:
    med[key] = statistics.median(float(r["grids_per_s"]) for r in rows
                                 if (r["config"], int(r["levels"]), int(r["localities"])) == key)
auto = main + "-auto"
has_auto = any(k[0] == auto for k in med)
configs = [main, main + "-copy"] + ([auto] if has_auto else []) + (
    ["libfabric-tcp", "libfabric-tcp-copy"] if main == "libfabric-shm" else []) + [
    "courier-mpi", "mpi"]
print(f"\nmedian grids/s; ratios: {main} over courier-mpi (goal >= 1.25) and over mpi "
      "(goal >= 1.0 at 4 localities and up)" + (f"; the same for {auto}" if has_auto else ""))
print("levels localities " + " ".join(f"{c:>18}" for c in configs) + "  lf/c-mpi    lf/mpi" +
      (" auto/c-mpi  auto/mpi" if has_auto else ""))
for lv in sorted({k[1] for k in med}):
    for p in sorted({k[2] for k in med}):
        vals = [med.get((c, lv, p)) for c in configs]
        cells = " ".join(f"{v:18.0f}" if v else f"{'-':>18}" for v in vals)
        shm, cm, m = vals[0], vals[-2], vals[-1]
        r1 = f"{shm / cm:11.2f}" if shm and cm else f"{'-':>11}"
        r2 = f"{shm / m:9.2f}" if shm and m else f"{'-':>9}"
        extra = ""
        if has_auto:
            a = vals[2]
            extra = (f"{a / cm:11.2f}" if a and cm else f"{'-':>11}") + (
                f"{a / m:10.2f}" if a and m else f"{'-':>10}")
        print(f"{lv:6} {p:10} {cells} {r1} {r2}{extra}")
PY
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" "$here/plot_amr.py" "$csv" "${csv%.csv}.png" "$main"
echo "raw runs: $csv; plot: ${csv%.csv}.png"
