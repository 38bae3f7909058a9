#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The data sets of bench/reduction.sh, made from a seed (numpy):

  datasets.py images DIR VERSIONS MIB SEED
      DIR/1 .. DIR/VERSIONS: images of a process's memory, 4 KiB pages (30%
      zero, 40% pointers and small integers, 20% text, 10% float arrays);
      between two images about 5% of the pages are rewritten, in runs of
      4 KiB to 64 KiB at random places.
  datasets.py particles DIR VERSIONS PARTICLES SEED
      DIR/1 ..: float64 positions then velocities of PARTICLES particles,
      one step of a simple integrator with a random force apart: every value
      moves a little.
  datasets.py tensors DIR VERSIONS MIB SEED
      DIR/body: MIB MiB of fp32 weights ~ N(0, 0.02); DIR/head1 ..: the
      header written before them, 4 KiB growing by 64 bytes each version (as
      torch.save writes its pickle first). Version v is head<v> + body.
  datasets.py noise FILE MIB SEED
      MIB MiB of uniform random float64.
Large arrays are made and written in pieces of 64 MiB."""
import os
import sys

import numpy as np

PAGE = 4096
PIECE = 64 << 20


def write_pieces(path, pieces):
    with open(path, "wb") as f:
        for p in pieces:
            f.write(p)


def page_kinds(rng, n):
    return rng.choice(4, size=n, p=[0.3, 0.4, 0.2, 0.1])


WORDS = (b"checkpoint restart rank step mesh solver particle field halo exchange "
         b"timestep energy pressure velocity boundary iteration residual converged "
         b"config path /scratch/ckpt/run-042 INFO WARN DEBUG 0x7f3a error=0 ok ").split()


def pages(rng, kinds):
    """The bytes of pages of the given kinds, new content each call."""
    n = len(kinds)
    out = np.zeros((n, PAGE), dtype=np.uint8)
    ptr = np.flatnonzero(kinds == 1)
    if len(ptr):
        v = np.where(rng.random((len(ptr), PAGE // 8)) < 0.5,
                     0x7F0000000000 + (rng.integers(0, 1 << 24, (len(ptr), PAGE // 8)) << 4),
                     rng.integers(0, 1000, (len(ptr), PAGE // 8)))
        out[ptr] = v.astype("<u8").view(np.uint8).reshape(len(ptr), PAGE)
    txt = np.flatnonzero(kinds == 2)
    if len(txt):
        words = rng.choice(len(WORDS), size=(len(txt), PAGE // 4))
        for k, row in zip(txt, words):
            line = b" ".join(WORDS[i] for i in row)[:PAGE]
            out[k, :len(line)] = np.frombuffer(line, dtype=np.uint8)
    flt = np.flatnonzero(kinds == 3)
    if len(flt):
        v = np.cumsum(rng.normal(0.0, 0.01, (len(flt), PAGE // 8)), axis=1) + 1.0
        out[flt] = v.astype("<f8").view(np.uint8).reshape(len(flt), PAGE)
    return out


def images(d, versions, mib, seed):
    rng = np.random.default_rng(seed)
    n = mib * (1 << 20) // PAGE
    kinds = page_kinds(rng, n)
    img = pages(rng, kinds)
    for v in range(1, versions + 1):
        if v > 1:
            changed = 0
            while changed < n // 14:  # ~5% differ: the zero ones stay zero
                run = int(rng.integers(1, 17))
                at = int(rng.integers(0, n - run))
                img[at:at + run] = pages(rng, kinds[at:at + run])
                changed += run
        write_pieces(os.path.join(d, str(v)), [img.tobytes()])


def particles(d, versions, count, seed):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0.0, 100.0, (count, 3))
    vel = rng.normal(0.0, 1.0, (count, 3))
    for v in range(1, versions + 1):
        if v > 1:
            vel += rng.normal(0.0, 0.01, (count, 3))
            pos += 0.001 * vel
        write_pieces(os.path.join(d, str(v)), [pos.astype("<f8").tobytes(),
                                               vel.astype("<f8").tobytes()])


def tensors(d, versions, mib, seed):
    rng = np.random.default_rng(seed)
    total = mib << 20

    def body():
        for at in range(0, total, PIECE):
            n = min(PIECE, total - at) // 4
            yield (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).astype("<f4").tobytes()
    write_pieces(os.path.join(d, "body"), body())
    head = rng.integers(0, 256, 4096 + 64 * versions, dtype=np.uint8).tobytes()
    for v in range(1, versions + 1):
        write_pieces(os.path.join(d, "head%d" % v), [head[:4096 + 64 * (v - 1)]])


def noise(path, mib, seed):
    rng = np.random.default_rng(seed)
    total = mib << 20
    write_pieces(path, (rng.random(min(PIECE, total - at) // 8).astype("<f8").tobytes()
                        for at in range(0, total, PIECE)))


def main(argv):
    kind = argv[1] if len(argv) > 1 else ""
    try:
        if kind == "images":
            images(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        elif kind == "particles":
            particles(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        elif kind == "tensors":
            tensors(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        elif kind == "noise":
            noise(argv[2], int(argv[3]), int(argv[4]))
        else:
            raise IndexError
    except (IndexError, ValueError):
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
