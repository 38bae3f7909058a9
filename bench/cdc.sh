#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Content-defined chunking against XXH3 over the same bytes, in memory, on
# float64 particles, fp32 and bf16 weights, a process image and random
# bytes: speeds and their ratio, the chunk-size distribution at 64 KiB and
# 1 MiB averages, and what survives an insertion near the head (fixed vs
# cdc). Prints a markdown table (bench/RESULTS.md, "Content-defined chunking").
#
#   bench/cdc.sh [--mib N] [--trials N] [--portable]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
case "${1:-}" in -h | --help) bench_help ;; esac
B="$root/build/bench/cdc"
[ -x "$B" ] || { echo "cdc.sh: build first (./demo.sh or meson compile -C build)" >&2; exit 1; }
exec "$B" "$@"
