#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""put.py DST SRC...: writes the sources' bytes to DST in 1 MiB write()s,
as a checkpoint writer does (with fsync when PUT_SYNC=1); prints the seconds
from open to close."""
import os
import sys
import time

dst, srcs = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for src in srcs:
    with open(src, "rb", buffering=0) as f:
        while piece := f.read(1 << 20):
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view):]
if os.environ.get("PUT_SYNC") == "1":
    os.fsync(fd)
os.close(fd)
print(f"{time.monotonic() - t0:.4f}")
