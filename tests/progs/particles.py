#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""particles.py OUT MIB SEED: writes MIB MiB of float64 particle positions
and velocities (a seeded random walk under a simple integrator), the kind of
data a simulation checkpoints."""
import sys

import numpy as np

out, mib, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(seed)
n = mib * (1 << 20) // 8 // 6  # x, y, z, vx, vy, vz per particle
pos = rng.uniform(0.0, 100.0, (n, 3))
vel = rng.normal(0.0, 1.0, (n, 3))
for _ in range(3):
    vel += rng.normal(0.0, 0.01, (n, 3))
    pos += 0.001 * vel
data = np.concatenate([pos, vel], axis=1).astype("<f8").tobytes()
with open(out, "wb") as f:
    f.write(data)
    f.write(b"\0" * (mib * (1 << 20) - len(data)))
