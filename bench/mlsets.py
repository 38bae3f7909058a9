#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The ML data sets of bench/defaults.sh, made from a seed (numpy): a series
of checkpoints of one training run, as three kinds of writers leave them.

  mlsets.py zip DIR VERSIONS MIB SEED
      DIR/1 ..: a torch.save-style zip (stored, not deflated): a pickle of
      the tensors' names and shapes first, which grows a little each
      version, then one entry per tensor; all weights move a little.
  mlsets.py finetune DIR VERSIONS MIB SEED
      DIR/1 ..: a safetensors file of a model fine-tuned with most layers
      frozen: a quarter of the tensors change between versions.
  mlsets.py ranks DIR VERSIONS MIB SEED
      DIR/<v>.<r> for 4 ranks r: each rank's optimizer state (two moments
      per weight, float32) of its shard; the first moment moves everywhere,
      the second in a tenth of the values."""
import io
import os
import pickle
import struct
import sys
import zipfile

import numpy as np


def tensors(mib, rng):
    out, left, i = {}, mib << 20, 0
    while left > 0:
        n = min(1 << 20, left // 4)
        out[f"layer{i}.weight"] = (rng.standard_normal(n, dtype=np.float32) * 0.02)
        left -= n * 4
        i += 1
    return out


def write_zip(path, state, version):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        meta = {k: (v.shape, str(v.dtype)) for k, v in state.items()}
        meta["step"] = version
        meta["history"] = list(range(version * 8))  # the header grows
        z.writestr("archive/data.pkl", pickle.dumps(meta))
        for i, v in enumerate(state.values()):
            z.writestr(f"archive/data/{i}", v.tobytes())


def write_safetensors(path, state):
    header, off = {}, 0
    for k, v in state.items():
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
    import json
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for v in state.values():
            f.write(v.tobytes())


def main():
    kind, d, versions, mib, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    if kind == "zip":
        state = tensors(mib, rng)
        for v in range(1, versions + 1):
            for t in state.values():
                t += rng.standard_normal(t.size, dtype=np.float32) * 1e-4
            write_zip(os.path.join(d, str(v)), state, v)
    elif kind == "finetune":
        state = tensors(mib, rng)
        names = list(state)
        for v in range(1, versions + 1):
            for k in names[:: 4] if v > 1 else []:
                state[k] += rng.standard_normal(state[k].size, dtype=np.float32) * 1e-4
            write_safetensors(os.path.join(d, str(v)), state)
    elif kind == "ranks":
        shard = (mib << 20) // 4 // 8
        m = [rng.standard_normal(shard, dtype=np.float32) * 1e-3 for _ in range(4)]
        s = [np.abs(rng.standard_normal(shard, dtype=np.float32)) * 1e-6 for _ in range(4)]
        for v in range(1, versions + 1):
            for r in range(4):
                if v > 1:
                    m[r] = m[r] * np.float32(0.9) + rng.standard_normal(shard, dtype=np.float32) * 1e-4
                    idx = rng.choice(shard, shard // 10, replace=False)
                    s[r][idx] *= np.float32(1.01)
                with open(os.path.join(d, f"{v}.{r}"), "wb") as f:
                    f.write(m[r].tobytes())
                    f.write(s[r].tobytes())
    else:
        sys.exit(f"mlsets.py: unknown kind '{kind}' (zip, finetune or ranks)")


if __name__ == "__main__":
    main()
