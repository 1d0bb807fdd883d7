#!/bin/sh
# SPDX-License-Identifier: BSL-1.0
# launcher_killed.sh COURIER_RUN PROGRAM ARGS...: starts a 3-locality job that never ends, kills
# courier-run with SIGKILL, and checks that every locality ends itself within 5 s and that
# none of the job's shared-memory files stays in /dev/shm.
run=$1
shift
"$run" -n 3 --courier:provider=shm "$@" > launcher_killed.out 2>&1 &
launcher=$!
sleep 2
pids=$(pgrep -P "$launcher")
[ -n "$pids" ] || { cat launcher_killed.out; echo "no localities found"; exit 1; }
job=$(tr '\0' '\n' < "/proc/$(echo "$pids" | head -n1)/environ" | sed -n 's/^COURIER_JOB_ID=//p')
[ -n "$job" ] || { echo "no COURIER_JOB_ID in the locality's environment"; exit 1; }
ls /dev/shm | grep -q "^courier-$job-" || { echo "the job made no shm files"; exit 1; }
kill -KILL "$launcher"
left=$pids
for i in $(seq 1 50); do
    left=""
    for p in $pids; do
        kill -0 "$p" 2>/dev/null && left="$left $p"
    done
    [ -z "$left" ] && break
    sleep 0.1
done
cat launcher_killed.out
if [ -n "$left" ]; then
    echo "localities still running 5 s after courier-run was killed:$left"
    kill -KILL $left
    exit 1
fi
files=$(ls /dev/shm | grep "^courier-$job-")
if [ -n "$files" ]; then
    echo "left in /dev/shm: $files"
    exit 1
fi
echo "every locality ended and removed its shm files"
