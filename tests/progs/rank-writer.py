#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One rank of an N-1 checkpoint: writes its strided stripes of PATH (random
bytes, stripes of 64 KiB + 3 so that no stripe is chunk-aligned), once per
checkpoint, each checkpoint one open-write-close followed, when BARRIER_DIR
is given, by a barrier with the other ranks (as MPI_File_close is).
  rank-writer.py PATH RANK RANKS SEED CHECKPOINTS [BARRIER_DIR]"""
import os
import random
import sys
import time

path, rank, ranks, seed, ckpts = sys.argv[1], *map(int, sys.argv[2:6])
barrier = sys.argv[6] if len(sys.argv) > 6 else None
STRIPE, ROUNDS = 65536 + 3, 6
for c in range(ckpts):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    for k in range(ROUNDS):
        data = random.Random(f"{seed}-{c}-{rank}-{k}").randbytes(STRIPE)
        os.pwrite(fd, data, (k * ranks + rank) * STRIPE)
    os.close(fd)
    if barrier:
        open(os.path.join(barrier, f"{c}.{rank}"), "w").close()
        deadline = time.monotonic() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))
        while len([n for n in os.listdir(barrier) if n.startswith(f"{c}.")]) < ranks:
            if time.monotonic() > deadline:
                sys.exit(f"rank {rank}: the other ranks never reached checkpoint {c}'s barrier")
            time.sleep(0.01)
