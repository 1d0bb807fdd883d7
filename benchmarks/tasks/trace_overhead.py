#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""The cost of --courier:trace on tasks_bench: runs it in rounds, each configuration once per
round in turn (so drift hits all alike), and prints for each Courier row the median of its
medians and the best of its bests over the rounds, and their ratios to the first
configuration.

usage: trace_overhead.py [--rounds N] [--baseline BIN] [--configs C,...] [--trace-dir DIR] BENCH

Configurations: [baseline: BIN without tracing,] off: BENCH without tracing, on: BENCH with
COURIER_TRACE=DIR/trace.json (the default limit of 1,048,576 events; later ones are dropped),
on-all: the same with COURIER_TRACE_EVENTS=100000000 (every event kept). tasks_bench starts
the runtime once per case, and each start writes its trace file at shutdown, outside the timed
part. DIR should be a tmpfs (default /dev/shm/courier-trace-overhead).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess

ROW = re.compile(r"^  (courier.*?)\s{2,}([0-9.]+)\s+([0-9.]+)\s+(\S+)")


def run(binary, env):
    out = subprocess.run([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, check=True).stdout
    rows, section, seen = {}, "", {}
    for line in out.splitlines():
        if line[:1] == "(":
            section = line[:3]
        m = ROW.match(line)
        if m:
            name = f"{section} {m.group(1)}"
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name += f" #{seen[name]}"
            rows[name] = (float(m.group(2)), float(m.group(3)), m.group(4))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench")
    ap.add_argument("--baseline")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trace-dir", default="/dev/shm/courier-trace-overhead")
    ap.add_argument("--configs", default="baseline,off,on,on-all",
                    help="which to run (baseline only with --baseline)")
    args = ap.parse_args()
    os.makedirs(args.trace_dir, exist_ok=True)
    trace = os.path.join(args.trace_dir, "trace.json")
    plain = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_TRACE")}
    configs = []
    if args.baseline:
        configs.append(("baseline", args.baseline, plain))
    configs.append(("off", args.bench, plain))
    configs.append(("on", args.bench, dict(plain, COURIER_TRACE=trace)))
    configs.append(("on-all", args.bench,
                    dict(plain, COURIER_TRACE=trace, COURIER_TRACE_EVENTS="100000000")))
    wanted = args.configs.split(",")
    configs = [c for c in configs if c[0] in wanted]
    results = {name: [] for name, _, _ in configs}
    for r in range(args.rounds):
        for name, binary, env in configs:
            results[name].append(run(binary, env))
            print(f"round {r + 1}/{args.rounds}: {name} done", flush=True)
    shutil.rmtree(args.trace_dir, ignore_errors=True)

    first = configs[0][0]
    names = list(results[first][0])
    cols = [n for n, _, _ in configs]
    print(f"{'row (unit): median / best':<62}" + "".join(f"{n:>18}" for n in cols) +
          "".join(f"{n + '/' + first:>18}" for n in cols[1:]))
    for row in names:
        med, best = {}, {}
        for n in cols:
            meds = [rs[row][0] for rs in results[n] if row in rs]
            bests = [rs[row][1] for rs in results[n] if row in rs]
            med[n] = statistics.median(meds) if meds else float("nan")
            best[n] = min(bests) if bests else float("nan")
        unit = results[first][0][row][2]
        line = f"{row + ' (' + unit + ')':<62}"
        line += "".join(f"{med[n]:>9.1f} /{best[n]:>7.1f}" for n in cols)
        line += "".join(f"{med[n] / med[first]:>9.2f} /{best[n] / best[first]:>7.2f}"
                        for n in cols[1:])
        print(line)

if __name__ == "__main__":
    main()
