# SPDX-License-Identifier: BSL-1.0
"""Figure 5 of the HPX paper, measured locally: serialize_buffer vs rma_vector vs std::vector.

usage: plot_rma.py RAW_RESULTS OUT_CSV PLOT_DIR
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot import load_results, size_label  # noqa: E402

NAMES = {"courier": "serialize_buffer", "courier-rma": "rma_vector",
         "courier-vector": "std::vector", "courier-nocache": "serialize_buffer, no cache"}


def main(raw_path, csv_path, plot_dir):
    samples, med = load_results(raw_path, csv_path)
    runs = max(len(v) for v in samples.values())
    impls = [i for i in NAMES if any(k[0] == i for k in med)]
    for prov in sorted({k[1] for k in med}, reverse=True):
        for test in ("latency", "bw", "bibw"):
            sizes = sorted({k[4] for k in med if k[1] == prov and k[3] == test})
            if not sizes:
                continue
            unit = "us" if test == "latency" else "MB/s"
            cols = [(i, t) for t in (1, 2) for i in impls]
            print(f"\n#### {test} on {prov} ({unit}, median of {runs} runs)\n")
            head = ["size"] + [f"{NAMES[i]} {t}thr" for i, t in cols] + \
                [f"rma/sb {t}thr" for t in (1, 2)] + [f"rma/vector {t}thr" for t in (1, 2)]
            print("| " + " | ".join(head) + " |")
            print("|" + "---:|" * len(head))
            for n in sizes:
                row = [size_label(n)]
                for i, t in cols:
                    v = med.get((i, prov, t, test, n))
                    row.append("" if v is None else f"{v:.1f}" if v < 100 else f"{v:.0f}")
                for base in ("courier", "courier-vector"):
                    for t in (1, 2):
                        r = med.get(("courier-rma", prov, t, test, n))
                        b = med.get((base, prov, t, test, n))
                        if r is None or not b:
                            row.append("")
                        elif test == "latency":
                            row.append(f"{r - b:+.2f} us")
                        else:
                            row.append(f"{r / b:.2f}x")
                print("| " + " | ".join(row) + " |")
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for i, t in cols:
                pts = sorted((k[4], v) for k, v in med.items()
                             if k[:4] == (i, prov, t, test))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                            linestyle="-" if t == 1 else "--", label=f"{NAMES[i]}, {t} thr")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("one-way latency (us)" if test == "latency" else
                          "bandwidth (MB/s, 1e6 B/s)")
            ax.set_title(f"osu_{test}: action argument kinds, provider {prov}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(f"{plot_dir}/rma_{test}_{prov}.png", dpi=110)
            plt.close(fig)


if __name__ == "__main__":
    main(*sys.argv[1:4])
