#!/bin/bash
# SPDX-License-Identifier: BSL-1.0
# The flood benchmark, bounded (the default flow control) and unbounded
# (--courier:parcels_in_flight=0) interleaved round by round: posts of 1 KiB and of 8 B, 1 M
# and 10 M of each, from locality 0 to locality 1. Unbounded runs of 10 M are not made: they
# would need ~45 GiB (1 KiB) / ~23 GiB (8 B) on the sender at the per-parcel cost that 1 M
# shows. Prints one line per run and a table: peak RSS of both sides, the receiver's rate, and
# the bounded run's rate over the unbounded run's best phase (the same size, 1 M), and over its
# best phase among those that ended before the last call had arrived (an unbounded run's best
# tenth is its queue draining once everything arrived: calls run, none received).
# usage: run.sh [--rounds=N] [--provider=shm|tcp] [--counts=1000000,10000000]
#               [--sizes=1024,8] [--build=DIR] [--out=FILE.csv (default results/flood_PROVIDER.csv)]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="$here/../../build"
rounds=2
provider=shm
counts=1000000,10000000
sizes=1024,8
out=""
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --provider=*) provider=${a#--provider=} ;;
        --counts=*) counts=${a#--counts=} ;;
        --sizes=*) sizes=${a#--sizes=} ;;
        --build=*) build=${a#--build=} ;;
        --out=*) out=${a#--out=} ;;
        *) sed -n '3,12p' "$0" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out="$here/results/flood_$provider.csv"
mkdir -p "$(dirname "$out")"
echo "round,provider,flow,mode,size,count,seconds,rate,best_phase_rate,best_receiving_phase_rate,worst_phase_rate,sender_rss_mib,receiver_rss_mib,waits,phase_rates" > "$out"
one() { # round label args...
    local round=$1 label=$2
    shift 2
    local line
    line=$(timeout 1800 "$build/bin/courier-run" -n 2 --courier:provider="$provider" \
        "$build/bin/flood" "$@" | grep -E '^(mode|phase_rates)=' | tr ',\n' '; ')
    echo "round $round $label: $line"
    echo "$line" | tr ' ' '\n' | awk -F= -v r="$round" -v p="$provider" -v l="$label" '
        { v[$1] = $2 }
        END { printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", r, p, l, v["mode"], v["size"],
              v["count"], v["seconds"], v["rate"], v["best_phase_rate"],
              v["best_receiving_phase_rate"], v["worst_phase_rate"], v["sender_rss_mib"],
              v["receiver_rss_mib"], v["waits"], v["phase_rates"] }' >> "$out"
}
for ((r = 1; r <= rounds; ++r)); do
    for size in ${sizes//,/ }; do
        for count in ${counts//,/ }; do
            # Alternate which goes first, so that drift hits both alike.
            if ((r % 2)); then order="bounded unbounded"; else order="unbounded bounded"; fi
            for flow in $order; do
                if [[ $flow == unbounded ]]; then
                    ((count <= 1000000)) || continue
                    one "$r" unbounded --count="$count" --size="$size" --courier:parcels_in_flight=0
                else
                    one "$r" bounded --count="$count" --size="$size"
                fi
            done
        done
    done
done
python3 - "$out" <<'PY'
import csv, sys, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
best, receiving = {}, {}
for r in rows:
    if r["flow"] == "unbounded":
        best.setdefault(r["size"], []).append(float(r["best_phase_rate"]))
        receiving.setdefault(r["size"], []).append(float(r["best_receiving_phase_rate"]))
print("\n| flow | size | count | rate (calls/s, median) | / unbounded best phase | / unbounded best phase while receiving | peak RSS sender / receiver (MiB, max) | waits |")
print("|---|---|---|---|---|---|---|---|")
keys = sorted({(r["flow"], int(r["size"]), int(r["count"])) for r in rows}, key=lambda k: (-k[1], k[2], k[0]))
for flow, size, count in keys:
    g = [r for r in rows if (r["flow"], int(r["size"]), int(r["count"])) == (flow, size, count)]
    rate = statistics.median(float(r["rate"]) for r in g)
    ref = max(best.get(str(size), [0]))
    ratio = f"{rate / ref:.2f}" if ref else "-"
    ref_receiving = max(receiving.get(str(size), [0]))
    ratio_receiving = f"{rate / ref_receiving:.2f}" if ref_receiving else "-"
    s = max(float(r["sender_rss_mib"]) for r in g)
    v = max(float(r["receiver_rss_mib"]) for r in g)
    w = statistics.median(int(r["waits"]) for r in g)
    print(f"| {flow} | {size} B | {count:,} | {rate:,.0f} | {ratio} | {ratio_receiving} | {s:.0f} / {v:.0f} | {w:.0f} |")
PY
