#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What the shim adds to system calls on files it does not capture, side by
# side in one run: bench/raw-syscalls.c makes 4 KiB pwrites and getppid
# calls through libc and through syscall instructions of its own (as Rust's
# rustix and liburing do), without the shim, under the shim, and under the
# shim with its Syscall User Dispatch off. Prints the medians in ns per
# call and the ratios to the run without the shim (1.0: no cost).
#
#   bench/raw-syscalls.sh [--calls N] [--trials N] [--dir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
calls=200000
trials=5
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--calls) calls=$(bench_value "$@"); shift 2 ;;
	--trials) trials=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="$root/build"
B="$build/bench/raw-syscalls"
SHIM="$build/preload/libstagehand.so"
[ -x "$B" ] || { echo "raw-syscalls.sh: build first (./demo.sh or meson compile -C build; x86-64 only)" >&2; exit 1; }
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir/plain" "$dir/cache"
dir=$(cd "$dir" && pwd)
# A policy capturing another directory: the benchmark's file is not captured.
cat >"$dir/raw-syscalls.policy" <<EOP
[cache]
dir = $dir/cache
[path $dir/captured/**]
EOP
out="$dir/raw-syscalls.out"
: >"$out"
for t in $(seq "$trials"); do
	# the three setups in turn, each trial
	"$B" "$dir/plain" "$calls" | sed 's/^/none /' >>"$out"
	STAGEHAND_POLICY="$dir/raw-syscalls.policy" LD_PRELOAD="$SHIM" "$B" "$dir/plain" "$calls" |
		sed 's/^/shim /' >>"$out"
	STAGEHAND_SYSCALL_DISPATCH=0 STAGEHAND_POLICY="$dir/raw-syscalls.policy" LD_PRELOAD="$SHIM" \
		"$B" "$dir/plain" "$calls" | sed 's/^/shim-nodispatch /' >>"$out"
done
python3 - "$out" <<'EOP'
import statistics, sys
m = {}
for line in open(sys.argv[1]):
    setup, kind, ns = line.split()
    m.setdefault((setup, kind), []).append(float(ns))
med = {k: statistics.median(v) for k, v in m.items()}
kinds = ["pwrite-libc", "pwrite-raw", "getppid-libc", "getppid-raw"]
print(f"{'call':14} {'none ns':>9} {'shim ns':>9} {'ratio':>6} {'no-dispatch ns':>15} {'ratio':>6}")
for k in kinds:
    n, s, d = med[("none", k)], med[("shim", k)], med[("shim-nodispatch", k)]
    print(f"{k:14} {n:9.0f} {s:9.0f} {s / n:6.2f} {d:15.0f} {d / n:6.2f}")
EOP
rm -f "$out"
