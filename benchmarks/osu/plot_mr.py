# SPDX-License-Identifier: BSL-1.0
"""Draws the message rate (compare.sh --tests=mr --raw=FILE runs) against the message size.

Each input file holds one provider's rounds (lines: ROUND LABEL RESULT <name> <provider>
<threads> mr <size> <value>); every label's median over the rounds is drawn, one panel per file.
usage: plot_mr.py OUT.png RAW_FILE...
"""
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def medians(path):
    """{label: {size: median value}} and the provider named in the file."""
    values, provider = {}, "?"
    for line in open(path, encoding="utf-8"):
        f = line.split()
        if len(f) != 9 or f[2] != "RESULT" or f[6] != "mr":
            continue
        provider = f[4]
        values.setdefault(f[1], {}).setdefault(int(f[7]), []).append(float(f[8]))
    return {label: {s: statistics.median(v) for s, v in by.items()}
            for label, by in values.items()}, provider


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, files = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(1, len(files), figsize=(6 * len(files), 4.5), squeeze=False)
    for ax, path in zip(axes[0], files):
        series, provider = medians(path)
        if not series:
            print(f"plot_mr.py: no mr results in {path}", file=sys.stderr)
            return 1
        for label, by in sorted(series.items()):
            sizes = sorted(by)
            ax.plot(sizes, [by[s] / 1e6 for s in sizes], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("million messages / s (one pair, window 64)")
        ax.set_title(f"message rate, {provider}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
