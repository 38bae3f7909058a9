#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stripes.py PATH N STRIPE K: the N-1 pattern of an MPI job on one node.

N processes each open PATH (O_CREAT, no O_TRUNC) and, once all hold it open
(as after a collective MPI_File_open), pwrite K stripes of STRIPE bytes of
their letter ('A' + rank) at (k * N + rank) * STRIPE, then close. Exits
non-zero when a process failed."""
import multiprocessing as mp
import os
import sys

path, n, stripe, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def rank_main(rank, barrier):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    # a deadline, so that a rank that died cannot hang the others
    barrier.wait(float(os.environ.get("STAGEHAND_TEST_WAIT", "600")))
    for j in range(k):
        os.pwrite(fd, bytes([65 + rank]) * stripe, (j * n + rank) * stripe)
    os.close(fd)


if __name__ == "__main__":
    barrier = mp.Barrier(n)
    ranks = [mp.Process(target=rank_main, args=(r, barrier)) for r in range(n)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    sys.exit(any(p.exitcode != 0 for p in ranks))
