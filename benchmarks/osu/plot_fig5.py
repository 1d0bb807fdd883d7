# SPDX-License-Identifier: BSL-1.0
"""Figure 5 of the HPX paper from run_fig5.sh's RESULT lines: medians to a CSV, the issue's
ratios as markdown tables, and per provider one PNG with latency and bidirectional bandwidth.

usage: plot_fig5.py RAW_RESULTS OUT_CSV PLOT_DIR
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot import load_results, size_label  # noqa: E402

BUFFERS = (("", "serialize_buffer"), ("-rma", "rma_vector"))


def fmt(v):
    return "" if v is None else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def main(raw_path, csv_path, plot_dir):
    samples, med = load_results(raw_path, csv_path)
    runs = max(len(v) for v in samples.values())

    def best(impl, prov, test, n):
        """The better of the 1- and 2-thread medians (as the paper plots its best)."""
        vals = [med[k] for k in med if k[0] == impl and k[1] == prov and k[3] == test and
                k[4] == n]
        if not vals:
            return None
        return min(vals) if test == "latency" else max(vals)

    for prov in ("shm", "tcp"):
        sizes = sorted({k[4] for k in med if k[1] == prov})
        if not sizes:
            continue
        for suffix, name in BUFFERS:
            lf, mp = "courier" + suffix, "courier-mpi" + suffix
            print(f"\n#### {prov}, {name} (median of {runs} runs; best of 1 and 2 threads)\n")
            head = ["size", "lat libfabric", "lat MPI pp", "lat OpenMPI", "lat lf − mpi pp",
                    "bibw libfabric", "bibw MPI pp", "bibw OpenMPI", "bibw lf / mpi pp",
                    "bibw mpi pp / OpenMPI"]
            print("| " + " | ".join(head) + " |")
            print("|" + "---:|" * len(head))
            for n in sizes:
                la, lb, lm = (best(i, prov, "latency", n) for i in (lf, mp, "mpi"))
                ba, bb, bm = (best(i, prov, "bibw", n) for i in (lf, mp, "mpi"))
                row = [size_label(n), fmt(la), fmt(lb), fmt(lm),
                       "" if la is None or lb is None else f"{la - lb:+.2f} us",
                       fmt(ba), fmt(bb), fmt(bm),
                       "" if not ba or not bb else f"{ba / bb:.2f}x",
                       "" if not bb or not bm else f"{bb / bm:.2f}x"]
                print("| " + " | ".join(row) + " |")
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        for ax, test, unit in ((axes[0], "latency", "latency (us)"),
                               (axes[1], "bibw", "bidirectional bandwidth (MB/s)")):
            series = sorted({(k[0], k[2]) for k in med if k[1] == prov and k[3] == test})
            for impl, t in series:
                xs = [n for n in sizes if (impl, prov, t, test, n) in med]
                ys = [med[(impl, prov, t, test, n)] for n in xs]
                style = "-" if impl.startswith("courier-mpi") else "--" if impl == "mpi" else "-."
                label = "OpenMPI (native)" if impl == "mpi" else f"{impl}, {t} thr"
                ax.plot(xs, ys, style, marker="o", markersize=3, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(unit)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"Courier over libfabric vs over MPI vs OpenMPI, {prov} "
                     f"(HPX paper Figure 5; median of {runs})")
        fig.tight_layout()
        fig.savefig(f"{plot_dir}/fig5_{prov}.png", dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main(*sys.argv[1:4])
