#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Instructions per round trip (callgrind Ir / 500), exact and immune to machine noise: the record
# with each library, the record and the small struct as aggregates with no code and with a
# hand-written serialize(). CASES="courier-on ..." runs a subset (an older binary lacks some).
#   benchmarks/serialization/ir.sh build/bin/serialization_bench
set -euo pipefail
bench=${1:-build/bin/serialization_bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-14s %12s\n' case "Ir/round trip"
for c in ${CASES:-memcpy courier-on courier-off cereal boost courier-aggregate courier-small courier-small-aggregate}; do
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/$c.out" \
        "$bench" --ir="$c" >/dev/null 2>"$tmp/$c.log"
    total=$(grep '^totals:' "$tmp/$c.out" | awk '{print $2}')
    printf '%-14s %12.0f\n' "$c" "$(echo "$total / 500" | bc -l)"
done
