#!/bin/sh
# SPDX-License-Identifier: BSL-1.0
# no_shm_left.sh COMMAND...: runs a job (its status is not judged) and checks that it left no
# courier-* file in /dev/shm. Run alone (RUN_SERIAL): a file that appeared during the run, still
# exists a moment after it and is mapped by no process was left behind by the job.
before=$(mktemp)
trap 'rm -f "$before"' EXIT
ls /dev/shm | grep '^courier-' | sort > "$before"
"$@"
echo "job status: $?"
sleep 1
left=""
for f in $(ls /dev/shm | grep '^courier-' | sort | comm -13 "$before" -); do
    [ -e "/dev/shm/$f" ] || continue
    grep -qs "/dev/shm/$f\( (deleted)\)\?$" /proc/[0-9]*/maps && continue # a live job's
    left="$left $f"
done
if [ -n "$left" ]; then
    echo "left in /dev/shm:$left"
    for f in $left; do rm -f "/dev/shm/$f"; done
    exit 1
fi
echo "nothing left in /dev/shm"
