#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# Draws the density in the plane z = 0.5 from a dump of the AMR mini-app (results.hpp), with
# the outlines of the subgrids the plane cuts.
# usage: plot_slice.py run.dump slice.png
import struct
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

data = open(sys.argv[1], "rb").read()
if data[:8] != b"AMRDUMP1":
    sys.exit(f"{sys.argv[1]} is not a dump")
step, time = struct.unpack_from("<Qd", data, 8)
n, base, max_level, problem = struct.unpack_from("<4i", data, 24)
(leaves,) = struct.unpack_from("<Q", data, 40)
at = 48
res = base * n * 2**max_level
image = np.zeros((res, res))
outlines = []
for _ in range(leaves):
    (key,) = struct.unpack_from("<Q", data, at)
    at += 8
    cells = np.frombuffer(data, dtype="<f8", count=5 * n**3, offset=at).reshape(5, n, n, n)
    at += 8 * 5 * n**3
    level = key >> 57
    x, y, z = (key >> 38) & 0x7FFFF, (key >> 19) & 0x7FFFF, key & 0x7FFFF
    extent = base * 2**level
    zc = 0.5 * extent * n - z * n  # the plane, in this subgrid's cells
    if not 0 <= zc < n:
        continue
    rho = cells[0, int(zc)]  # [y][x]
    scale = 2 ** (max_level - level)
    x0, y0 = x * n * scale, y * n * scale
    image[y0:y0 + n * scale, x0:x0 + n * scale] = np.kron(rho, np.ones((scale, scale)))
    outlines.append((x0, y0, n * scale))
fig, ax = plt.subplots(figsize=(6.4, 5.6))
im = ax.imshow(image, origin="lower", extent=(0, 1, 0, 1), cmap="viridis")
for x0, y0, w in outlines:
    ax.add_patch(plt.Rectangle((x0 / res, y0 / res), w / res, w / res, fill=False, lw=0.3,
                               ec="white", alpha=0.5))
fig.colorbar(im, ax=ax, label="density")
name = "Kelvin-Helmholtz" if problem == 1 else "Sedov-Taylor blast"
ax.set_title(f"{name}, density at z = 0.5, step {step}, t = {time:.4g}")
ax.set_xlabel("x")
ax.set_ylabel("y")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
