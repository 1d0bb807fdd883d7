#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""A PNG timeline of the trace files a job wrote with --courier:trace=PATH.

usage: plot_trace.py [--out timeline.png] [--start MS] [--end MS] [--title T] FILE...
       e.g. plot_trace.py --out run.png trace.*.json

One row per locality and worker (and a row for the locality's other threads when they
recorded anything); tasks are bars, parcels marks (sent ^, received v, at their time), RMA reads
thin bars under the row of the thread that completed them. Time in ms from the earliest event
(the files share CLOCK_MONOTONIC when their localities share a host); --start/--end zoom in.
"""
import argparse
import collections
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def load(paths):
    """(rows, events): rows maps (pid, tid) to a label; events by kind."""
    rows = {}
    tasks, sent, received, reads = [], [], [], []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        names = {}
        begins = {}
        for e in doc["traceEvents"]:
            ph, key = e.get("ph"), (e.get("pid"), e.get("tid"))
            if ph == "M":
                if e["name"] == "thread_name":
                    names[key] = e["args"]["name"]
                continue
            if ph == "X" and e.get("cat") == "task":
                tasks.append((key, e["ts"], e["dur"], e["args"].get("end") == "suspended"))
            elif ph == "i" and e.get("cat") == "parcel":
                (sent if e["name"] == "parcel sent" else received).append((key, e["ts"]))
            elif ph == "b" and e.get("cat") == "rma":
                begins[e["id"]] = e
            elif ph == "e" and e.get("cat") == "rma" and e["id"] in begins:
                b = begins.pop(e["id"])
                reads.append((key, b["ts"], e["ts"] - b["ts"], b["args"]["bytes"]))
            else:
                continue
            rows.setdefault(key, None)
        for key, name in names.items():
            if key in rows or name.startswith("worker"):
                rows[key] = f"L{key[0]} {name}"
    for key in rows:
        if rows[key] is None:
            rows[key] = f"L{key[0]} tid {key[1]}"
    return rows, tasks, sent, received, reads


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="timeline.png")
    ap.add_argument("--start", type=float, help="ms from the earliest event")
    ap.add_argument("--end", type=float, help="ms from the earliest event")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()

    rows, tasks, sent, received, reads = load(args.files)
    stamps = [t[1] for t in tasks] + [s[1] for s in sent + received] + [r[1] for r in reads]
    if not stamps:
        raise SystemExit("plot_trace: no events in " + ", ".join(args.files))
    t0 = min(stamps)

    def ms(us):
        return (us - t0) / 1000.0

    order = sorted(rows, key=lambda k: (k[0], k[1]))
    y = {k: i for i, k in enumerate(order)}
    fig, ax = plt.subplots(figsize=(14, 1.4 + 0.45 * len(order)))

    bars = collections.defaultdict(list)
    for key, ts, dur, suspended in tasks:
        bars[(key, suspended)].append((ms(ts), max(dur / 1000.0, 1e-4)))
    for (key, suspended), spans in bars.items():
        ax.broken_barh(spans, (y[key] - 0.35, 0.5), facecolors="C1" if suspended else "C0",
                       linewidth=0)
    rma = collections.defaultdict(list)
    for key, ts, dur, _ in reads:
        rma[key].append((ms(ts), max(dur / 1000.0, 1e-4)))
    for key, spans in rma.items():
        ax.broken_barh(spans, (y[key] + 0.2, 0.12), facecolors="C3", linewidth=0)
    for events, marker, color, dy in ((sent, "^", "C2", -0.38), (received, "v", "C4", 0.38)):
        if events:
            ax.scatter([ms(ts) for _, ts in events], [y[k] + dy for k, _ in events],
                       marker=marker, s=14, color=color, linewidths=0, zorder=3)

    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([rows[k] for k in order])
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlabel("ms")
    lo = args.start if args.start is not None else ax.get_xlim()[0]
    hi = args.end if args.end is not None else ax.get_xlim()[1]
    ax.set_xlim(lo, hi)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(handles=[
        Patch(color="C0", label="task"),
        Patch(color="C1", label="task slice that suspended"),
        Patch(color="C3", label="RMA read"),
        Line2D([], [], marker="^", color="C2", linestyle="", label="parcel sent"),
        Line2D([], [], marker="v", color="C4", linestyle="", label="parcel received"),
    ], loc="lower center", fontsize=8, ncol=5, frameon=False)
    ax.set_title(args.title or f"{len(tasks)} task slices, {len(sent)} parcels sent, "
                 f"{len(received)} received, {len(reads)} RMA reads")
    fig.tight_layout(rect=(0, 0.1 if len(order) < 6 else 0.05, 1, 1))
    fig.savefig(args.out, dpi=110)
    print(f"plot_trace: wrote {args.out}")


if __name__ == "__main__":
    main()
