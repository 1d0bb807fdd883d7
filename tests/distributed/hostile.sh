#!/bin/sh
# SPDX-License-Identifier: BSL-1.0
# hostile.sh MAX_LINES COMMAND...: runs a job under attack (hostile_program.cpp) and checks
# that it succeeded and that its localities logged at most MAX_LINES error lines: the hostile
# peer sends tens of thousands of bad messages, each rejected, and the log must not grow with
# them (rate-limited lines say how many like them were suppressed).
max=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
status=$?
lines=$(grep -c '^courier \[error' "$log")
grep '^courier \[error' "$log" | sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -20
grep -v '^courier \[error' "$log"
echo "job status $status; $lines error lines (at most $max)"
[ "$status" -eq 0 ] && [ "$lines" -le "$max" ]
