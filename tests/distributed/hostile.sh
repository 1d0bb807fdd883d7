#!/bin/sh
# SPDX-License-Identifier: BSL-1.0
# hostile.sh MAX_LINES COMMAND...: runs a job under attack (hostile_program.cpp) and checks
# that it succeeded and that its localities logged at most MAX_LINES error lines per 10 s of
# the job: the hostile peer sends tens of thousands of bad messages, each rejected, and the log
# must not grow with them. Rate-limited lines say how many like them were suppressed; a limit
# admits a burst per period (10 s: logging::rate_limit's default), so the log may grow with
# time, never with the number of messages (a slow build, such as TSan's, attacks for longer).
per_period=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$@" 2>"$log"
status=$?
periods=$(( ($(date +%s) - start) / 10 + 1 ))
max=$((per_period * periods))
lines=$(grep -c '^courier \[error' "$log")
grep '^courier \[error' "$log" | sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -20
grep -v '^courier \[error' "$log"
echo "job status $status; $lines error lines (at most $max: $per_period per 10 s, $periods periods begun)"
[ "$status" -eq 0 ] && [ "$lines" -le "$max" ]
