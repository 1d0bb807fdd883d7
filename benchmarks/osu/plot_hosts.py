# SPDX-License-Identifier: BSL-1.0
"""Medians and plots of run_hosts.sh: latency and bandwidth between two hosts (Courier and
OpenMPI over tcp) and within one (Courier's shm, OpenMPI's vader).

usage: plot_hosts.py RAW OUT_CSV PLOT_DIR   (RAW lines: ROUND LABEL RESULT impl prov thr test size value)
"""
import collections
import statistics
import sys

import matplotlib.pyplot as plt

from plot import size_label  # beside this script; it also selects matplotlib's Agg backend


def main(raw_path, csv_path, plot_dir):
    samples = collections.defaultdict(list)
    for line in open(raw_path, encoding="utf-8"):
        f = line.split()
        if len(f) != 9 or f[2] != "RESULT":
            continue
        samples[(f[1], f[6], int(f[7]))].append(float(f[8]))
    with open(csv_path, "w", encoding="utf-8") as out:
        out.write("label,test,size,median,min,max,rounds\n")
        for key in sorted(samples):
            v = samples[key]
            out.write(",".join(map(str, key)) +
                      f",{statistics.median(v):.3f},{min(v):.3f},{max(v):.3f},{len(v)}\n")
    med = {k: statistics.median(v) for k, v in samples.items()}
    labels = sorted({k[0] for k in med})
    for test, unit in (("latency", "us"), ("bw", "MB/s")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label in labels:
            pts = sorted((s, v) for (l, t, s), v in med.items() if l == label and t == test)
            if pts:
                style = "-" if "courier" in label else "--"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted({k[2] for k in med if k[1] == test})
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes], rotation=45, ha="right")
        ax.set_xlabel("message size")
        ax.set_ylabel(f"{test} ({unit}), median of rounds")
        ax.set_title(f"OSU {test} between two namespace hosts (tcp) and within one")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{plot_dir}/osu_hosts_{test}.png", dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
