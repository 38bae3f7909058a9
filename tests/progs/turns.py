#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""turns.py PATH N STRIPE K SEED together|apart: the N ranks of a parallel job
(PMI_RANK and PMI_SIZE set, each a process of its own, the job named by
STAGEHAND_JOB from the caller) write one file PATH, opened without O_TRUNC:
rank r pwrites K stripes of STRIPE bytes of byte (SEED + r) % 256 at
(k * N + r) * STRIPE, then closes.
  together: every rank opens before any writes (a collective open);
  apart:    rank r opens once rank r - 1 has closed (ranks taking turns).
Exits non-zero when a rank failed; its error is on standard error."""
import os
import shutil
import subprocess
import sys
import tempfile
import time


def rank_main(path, n, stripe, k, seed, rank, sync):
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    except OSError as e:
        sys.exit(f"rank {rank}: open: {e}")
    if sync:
        open(os.path.join(sync, f"opened.{rank}"), "w").close()
        deadline = time.monotonic() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))
        while len(os.listdir(sync)) < n:
            if time.monotonic() > deadline:
                sys.exit(f"rank {rank}: the other ranks never opened the file")
            time.sleep(0.01)
    for j in range(k):
        os.pwrite(fd, bytes([(seed + rank) % 256]) * stripe, (j * n + rank) * stripe)
    os.close(fd)


def main():
    if sys.argv[1] == "--rank":
        path, n, stripe, k, seed, rank = sys.argv[2], *map(int, sys.argv[3:8])
        rank_main(path, n, stripe, k, seed, rank, sys.argv[8] if len(sys.argv) > 8 else None)
        return 0
    path, n, stripe, k, seed, how = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
    sync = None
    if how == "together":
        sync = tempfile.mkdtemp(prefix="turns.")
    args = [sys.executable, sys.argv[0], "--rank", path, str(n), str(stripe), str(k), str(seed)]
    env = lambda r: dict(os.environ, PMI_RANK=str(r), PMI_SIZE=str(n))
    failed = 0
    if how == "apart":
        for r in range(n):
            failed += subprocess.call(args + [str(r)], env=env(r)) != 0
    else:
        ranks = [subprocess.Popen(args + [str(r), sync], env=env(r)) for r in range(n)]
        failed = sum(p.wait() != 0 for p in ranks)
        shutil.rmtree(sync)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
