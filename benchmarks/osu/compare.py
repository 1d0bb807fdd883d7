# SPDX-License-Identifier: BSL-1.0
"""Paired statistics of compare.sh's rounds.

Input lines: ROUND LABEL RESULT <name> <provider> <threads> <test> <size> <value>. For each
test and size, prints every label's median and, paired by round against the base label, the
median and geometric mean of its ratios and the number of rounds in which it was better
(higher bandwidth, lower latency).
usage: compare.py RAW_FILE BASE_LABEL
"""
import collections
import statistics
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    raw, base = sys.argv[1], sys.argv[2]
    values = {}  # (test, size, label) -> {round: value}
    labels = []
    for line in open(raw, encoding="utf-8"):
        f = line.split()
        if len(f) != 9 or f[2] != "RESULT":
            continue
        rnd, label, test, size, value = int(f[0]), f[1], f[6], int(f[7]), float(f[8])
        values.setdefault((test, size, label), {})[rnd] = value
        if label not in labels:
            labels.append(label)
    if base not in labels:
        print(f"compare.py: no results for the base label {base!r}", file=sys.stderr)
        return 1
    cells = sorted({(t, s) for (t, s, _) in values})
    by_test = collections.defaultdict(list)
    for t, s in cells:
        by_test[t].append(s)
    for test, sizes in by_test.items():
        higher_is_better = test != "latency"
        print(f"\n{test}: median | paired against {base}: median ratio, geometric mean, "
              f"rounds better")
        for s in sizes:
            b = values.get((test, s, base), {})
            for label in labels:
                v = values.get((test, s, label), {})
                if not v:
                    continue
                line = f"{s:>9} {label:>12} {statistics.median(v.values()):10.2f}"
                common = [r for r in v if r in b and b[r] > 0 and v[r] > 0]
                if label != base and common:
                    ratios = [v[r] / b[r] for r in common]
                    better = sum((x > 1) == higher_is_better and x != 1 for x in ratios)
                    line += (f" | {statistics.median(ratios):.3f} "
                             f"{statistics.geometric_mean(ratios):.3f} {better}/{len(ratios)}")
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
