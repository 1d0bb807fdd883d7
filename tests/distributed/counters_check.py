#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Runs a job with --courier:print_counters and checks what it printed at shutdown:

  counters_check.py --localities N [--min-received K] -- COMMAND...

Every locality prints each counter once, as "locality#R NAME VALUE", its lines in name order;
the usual counters are there, with plausible values; every locality but 0 received at least K
parcels (the traffic locality 0 made).
"""
import argparse
import re
import subprocess
import sys

REQUIRED = [
    "/parcels/count/sent", "/parcels/count/received", "/parcels/bytes/sent",
    "/parcels/bytes/received", "/parcels/bytes/zero-copy", "/parcels/bytes/rma-read",
    "/threads/count/executed", "/threads/idle-rate", "/rma/pool/bytes-in-use",
    "/rma/pool/bytes-registered", "/flow/count/waits", "/parcelport/count/messages-sent",
]
LINE = re.compile(r"^locality#(\d+) (/\S+) (-?[0-9]+(?:\.[0-9]+)?)$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--localities", type=int, required=True)
    ap.add_argument("--min-received", type=int, default=1)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(run.stdout)
    failures = []
    if run.returncode != 0:
        failures.append(f"the job failed with status {run.returncode}")

    names = {r: [] for r in range(args.localities)}
    values = {r: {} for r in range(args.localities)}
    for line in run.stdout.splitlines():
        if not line.startswith("locality#"):
            continue
        m = LINE.match(line)
        if not m:
            failures.append(f"malformed counter line: {line!r}")
            continue
        r, name, value = int(m.group(1)), m.group(2), float(m.group(3))
        if r not in names:
            failures.append(f"a line from locality {r}: {line!r}")
            continue
        if name in values[r]:
            failures.append(f"locality {r} printed {name} twice")
        names[r].append(name)
        values[r][name] = value

    for r in range(args.localities):
        v = values[r]
        if names[r] != sorted(names[r]):
            failures.append(f"locality {r}: lines not sorted by name")
        for n in REQUIRED:
            if n not in v:
                failures.append(f"locality {r}: no {n}")
        if not v:
            continue
        if not 0 <= v.get("/threads/idle-rate", -1) <= 1:
            failures.append(f"locality {r}: idle-rate {v.get('/threads/idle-rate')}")
        if v.get("/threads/count/executed", 0) <= 0:
            failures.append(f"locality {r}: no task executed")
        if v.get("/parcels/count/sent", 0) <= 0:
            failures.append(f"locality {r}: no parcel sent")
        if r != 0 and v.get("/parcels/count/received", 0) < args.min_received:
            failures.append(f"locality {r}: {v.get('/parcels/count/received')} parcels "
                            f"received, expected at least {args.min_received}")

    for f in failures[:20]:
        print("counters_check: FAILED:", f)
    print("counters_check:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
