# SPDX-License-Identifier: BSL-1.0
"""Medians, ratio tables and OSU-style plots from the RESULT lines of the osu_* programs.

usage: plot.py RAW_RESULTS OUT_CSV PLOT_DIR
"""
import collections
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def size_label(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def load_results(raw_path, csv_path):
    """The RESULT lines of the osu_* programs in RAW_PATH, by (implementation, provider, threads,
    test, size): every sample, and the medians, which also go to CSV_PATH with min, max, runs."""
    samples = collections.defaultdict(list)
    with open(raw_path) as f:
        for line in f:
            _, impl, prov, threads, test, size, value = line.split()
            samples[(impl, prov, int(threads), test, int(size))].append(float(value))
    with open(csv_path, "w") as out:
        out.write("implementation,provider,threads,test,size,median,min,max,runs\n")
        for key in sorted(samples):
            v = samples[key]
            out.write(",".join(map(str, key)) +
                      f",{statistics.median(v):.3f},{min(v):.3f},{max(v):.3f},{len(v)}\n")
    return samples, {k: statistics.median(v) for k, v in samples.items()}


def main(raw_path, csv_path, plot_dir):
    samples, med = load_results(raw_path, csv_path)
    series = sorted({(k[0], k[1], k[2]) for k in med})
    for prov in ("tcp", "shm"):
        for test in ("latency", "bw", "bibw"):
            lines = [s for s in series if s[1] == prov and
                     any(k[:4] == (*s, test) for k in med)]
            if not lines:
                continue
            sizes = sorted({k[4] for k in med if k[1] == prov and k[3] == test})
            unit = "us" if test == "latency" else "MB/s"
            # Ratio table (markdown): Courier against the baselines, per size.
            names = [f"{i} ({t} thr)" if i == "courier" else i for i, _, t in lines]
            print(f"\n#### {test} on {prov} ({unit}, median of "
                  f"{max(len(v) for v in samples.values())} runs)\n")
            base = {i: (i, p, t) for i, p, t in lines if i != "courier"}
            head = ["size"] + names + [f"courier/{b}" for b in base]
            print("| " + " | ".join(head) + " |")
            print("|" + "---:|" * len(head))
            for n in sizes:
                row = [size_label(n)]
                for s in lines:
                    v = med.get((*s, test, n))
                    row.append("" if v is None else f"{v:.2f}" if v < 100 else f"{v:.0f}")
                best = max((t for i, p, t in lines if i == "courier"), key=lambda t: (
                    -med.get(("courier", prov, t, test, n), float("inf"))
                    if test == "latency" else med.get(("courier", prov, t, test, n), 0)),
                    default=None)
                c = med.get(("courier", prov, best, test, n)) if best else None
                for b, key in base.items():
                    v = med.get((*key, test, n))
                    if c is None or v is None or v == 0:
                        row.append("")
                    elif test == "latency":
                        row.append(f"{c - v:+.2f} us")
                    else:
                        row.append(f"{c / v:.2f}x")
                print("| " + " | ".join(row) + " |")
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for s, name in zip(lines, names):
                pts = sorted((k[4], v) for k, v in med.items() if k[:4] == (*s, test))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                        label=name)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("one-way latency (us)" if test == "latency" else
                          "bandwidth (MB/s, 1e6 B/s)")
            ax.set_title(f"osu_{test}, 2 localities on one machine, provider {prov}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(f"{plot_dir}/osu_{test}_{prov}.png", dpi=110)
            plt.close(fig)
    # The best Courier configuration per test and size is the one the ratios use.
    print("\n(ratios use the better of Courier's 1- and 2-thread runs at each size)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
