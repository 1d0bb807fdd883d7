# SPDX-License-Identifier: BSL-1.0
"""Plots of deep_copy_bench: time against nodes per structure, one figure per case.

usage: plot.py BENCH_OUTPUT OUT_CSV PLOT_DIR
"""
import collections
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"courier-buffered": ("C0", "-"), "courier-non_buffered": ("C1", "-"),
         "courier-adaptive": ("C2", "-"), "courier": ("C2", "-"),
         "courier-adaptive-in_place": ("C2", "-."),
         "hand-coded": ("k", "--"), "boost": ("C3", ":")}


def main(raw, csv_path, plot_dir):
    data = collections.defaultdict(dict)
    with open(raw) as f, open(csv_path, "w") as out:
        out.write("case,structure,nodes,implementation,us\n")
        for line in f:
            if not line.startswith("RESULT "):
                continue
            _, case, structure, n, impl, us = line.split()
            data[(case, structure, impl)][int(n)] = float(us)
            out.write(f"{case},{structure},{n},{impl},{us}\n")
    for case in sorted({k[0] for k in data}):
        structures = sorted({k[1] for k in data if k[0] == case})
        fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
        for ax, s in zip(axes.flat, structures):
            for (c, st, impl), pts in sorted(data.items()):
                if c != case or st != s:
                    continue
                xs = sorted(pts)
                color, ls = STYLE.get(impl, ("C5", "-"))
                ax.plot(xs, [pts[x] for x in xs], color=color, linestyle=ls, marker="o",
                        markersize=3, label=impl)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(s)
            ax.set_xlabel("nodes")
            ax.set_ylabel("us per round trip")
            ax.grid(True, which="both", alpha=0.3)
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"deep copy, {case} round trip (MEL's structures)")
        fig.tight_layout()
        fig.savefig(f"{plot_dir}/deep_copy_{case}.png", dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    main(*sys.argv[1:4])
