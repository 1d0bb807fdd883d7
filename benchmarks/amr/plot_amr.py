#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# Plots run.sh's CSV as the seed paper's figure 6: grids processed per second against the
# number of localities (one panel per tree depth), and the speedup of Courier over libfabric
# against Courier over the MPI parcelport and against the plain MPI version.
# usage: plot_amr.py amr.csv amr.png [main configuration (default libfabric-shm)]
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = list(csv.DictReader(open(sys.argv[1])))
main = sys.argv[3] if len(sys.argv) > 3 else "libfabric-shm"
med = {}
for r in rows:
    med.setdefault((r["config"], int(r["levels"]), int(r["localities"])), []).append(
        float(r["grids_per_s"]))
med = {k: statistics.median(v) for k, v in med.items()}
levels = sorted({k[1] for k in med})
configs = [c for c in [main, main + "-copy", main + "-auto", "libfabric-tcp", "libfabric-tcp-copy",
                       "courier-mpi", "mpi"] if any(k[0] == c for k in med)]
fig, axes = plt.subplots(1, len(levels) + 1, figsize=(4.2 * (len(levels) + 1), 3.8))
for ax, lv in zip(axes, levels):
    for c in configs:
        pts = sorted((p, v) for (cc, l, p), v in med.items() if cc == c and l == lv)
        if pts:
            ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=c)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("localities")
    ax.set_ylabel("grids processed per second")
    ax.set_title(f"{lv} levels")
    ax.grid(True, alpha=0.3)
axes[0].legend(fontsize=7)
ax = axes[-1]
for lv in levels:
    for base, style in (("courier-mpi", "-"), ("mpi", "--")):
        pts = sorted((p, med[(main, lv, p)] / med[(base, lv, p)])
                     for (c, l, p) in med if c == base and l == lv and (main, lv, p) in med)
        if pts:
            ax.plot([p for p, _ in pts], [v for _, v in pts], style, marker="o",
                    label=f"{lv} levels, over {base}")
ax.axhline(1.0, color="grey", lw=0.8)
ax.axhline(1.25, color="grey", lw=0.8, ls=":")
ax.set_xscale("log", base=2)
ax.set_xlabel("localities")
ax.set_ylabel(f"speedup of {main}")
ax.set_title("speedup")
ax.grid(True, alpha=0.3)
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
