#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One training run's checkpoints, as an ML framework saves them:

  mlsave.py WRITER DIR STEPS MIB [--fsync]

WRITER is orbax (orbax-checkpoint's CheckpointManager, asynchronous, through
tensorstore's threads, max_to_keep = 3), safetensors (save_file into
DIR/checkpoint-N/, the oldest beyond 3 deleted, as Hugging Face's Trainer
does) or h5py (one dataset per tensor into DIR/step_N.h5, beyond 3 deleted).
The model is MIB MiB of float32 tensors; every step changes every value a
little, as training does. Prints one line per save: the seconds it took
(orbax: until the background part finished), and with --fsync the time to
fsync each file written and its directory, counted in. Timing starts once
the libraries are imported."""
import os
import shutil
import sys
import time

import numpy as np

KEEP = 3


def model(mib, rng):
    # Layers of a few sizes, as a transformer has (embeddings, blocks, head).
    tensors, left, i = {}, mib << 20, 0
    shapes = [(1024, 1024), (4096, 1024), (1024, 4096), (1024,)]
    while left > 0:
        shape = shapes[i % len(shapes)]
        n = min(int(np.prod(shape)), left // 4)
        if n <= 0:
            break
        tensors[f"layer{i // 4}.w{i % 4}"] = rng.standard_normal(n, dtype=np.float32).reshape(
            shape if n == int(np.prod(shape)) else (n,)) * 0.02
        left -= n * 4
        i += 1
    return tensors


def fsync_tree(top):
    for d, _, files in os.walk(top):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(os.path.dirname(top.rstrip("/")) or ".", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def rotate(paths):
    while len(paths) > KEEP:
        old = paths.pop(0)
        shutil.rmtree(old) if os.path.isdir(old) else os.unlink(old)


def main():
    writer, top, steps, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sync = "--fsync" in sys.argv[5:]
    os.makedirs(top, exist_ok=True)
    state = model(mib, np.random.default_rng(1))
    saved = []
    if writer == "orbax":
        import jax.numpy as jnp
        import orbax.checkpoint as ocp
        mgr = ocp.CheckpointManager(os.path.abspath(top), options=ocp.CheckpointManagerOptions(
            max_to_keep=KEEP, enable_async_checkpointing=True))
    elif writer == "safetensors":
        from safetensors.numpy import save_file
    elif writer == "h5py":
        import h5py
    else:
        sys.exit(f"mlsave.py: unknown writer '{writer}' (orbax, safetensors or h5py)")
    for step in range(1, steps + 1):
        for v in state.values():
            v *= np.float32(1.0001)  # training moved every weight a little
        t0 = time.perf_counter()
        if writer == "orbax":
            mgr.save(step, args=ocp.args.StandardSave({k: jnp.asarray(v) for k, v in state.items()}))
            mgr.wait_until_finished()
            where = os.path.join(top, str(step))
        elif writer == "safetensors":
            where = os.path.join(top, f"checkpoint-{step}")
            os.makedirs(where)
            save_file(state, os.path.join(where, "model.safetensors"))
        else:
            where = os.path.join(top, f"step_{step}.h5")
            with h5py.File(where, "w") as f:
                for k, v in state.items():
                    f.create_dataset(k, data=v)
        if sync:
            fsync_tree(where) if os.path.isdir(where) else fsync_tree_file(where)
        print(f"{time.perf_counter() - t0:.4f}", flush=True)
        if writer != "orbax":
            saved.append(where)
            rotate(saved)
    if writer == "orbax":
        mgr.close()


def fsync_tree_file(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


if __name__ == "__main__":
    main()
