#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The save time of ML checkpoint writers under stagehand, side by side with
# the same saves without it, in one run (bench/RESULTS.md, "ML checkpoint writers").
#
#   bench/mlsave.sh [--writers LIST] [--mib MIB] [--steps N] [--trials N] [--dir DIR]
#                   [--rule 'KEY = VALUE']...
#
# Writers (bench/mlsave.py): orbax, safetensors, h5py (default: all three),
# installed into DIR/venv at the versions below on first use (PyPI). Each
# trial runs, one after another and in a rotating order, a training run of
# N saves (default 3) of a model of MIB MiB (default 256) four ways:
#   plain   the writer alone;
#   fsync   the writer, then fsync of each file it wrote and of their
#           directories: what durability = local promises, without stagehand;
#   async   under the shim, durability = async;
#   local   under the shim, durability = local.
# Every run starts from an empty directory and an empty cache. Prints the
# median over the trials of the saves' mean time (and the range), and the ratios
# async / plain (target <= 1.15) and local / fsync (target <= 1.1). --rule
# adds a line to the captured path's rule (default: none, the defaults).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
writers="orbax safetensors h5py"
mib=256
steps=3
trials=5
dir=""
rules=""
while [ $# -gt 0 ]; do
	case "$1" in
	--writers) writers=${2//,/ }; shift 2 ;;
	--mib) mib=$(bench_value "$@"); shift 2 ;;
	--steps) steps=$(bench_value "$@"); shift 2 ;;
	--trials) trials=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	--rule) rules+="$2"$'\n'; shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
SHIM="$root/build/preload/libstagehand.so"
[ -f "$SHIM" ] || { echo "mlsave.sh: build first (./demo.sh or meson compile -C build)" >&2; exit 1; }
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
work="$dir/mlsave"
trap 'rm -rf "$work"' EXIT

venv="$dir/venv"
pins=(orbax-checkpoint==0.12.8 jax==0.10.2 jaxlib==0.10.2 tensorstore==0.1.86
	safetensors==0.8.0 h5py==3.16.0 numpy==2.4.6)
if ! "$venv/bin/python" -c 'import orbax.checkpoint, safetensors, h5py' 2>/dev/null; then
	echo "mlsave.sh: installing ${pins[*]} into $venv" >&2
	python3 -m venv "$venv"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
fi
PY="$venv/bin/python"

policy() {
	cat >"$work/$1.conf" <<EOP
[cache]
dir = $work/cache
[path $work/ckpt/**]
durability = $1
$rules
EOP
}

# run WRITER MODE: one training run; prints the mean seconds of its saves.
run() {
	local w="$1" mode="$2" out
	rm -rf "$work/plain" "$work/ckpt" "$work/cache"
	mkdir -p "$work"
	sync
	case "$mode" in
	plain) out=$("$PY" "$here/mlsave.py" "$w" "$work/plain" "$steps" "$mib" 2>"$work/err") ;;
	fsync) out=$("$PY" "$here/mlsave.py" "$w" "$work/plain" "$steps" "$mib" --fsync 2>"$work/err") ;;
	async | local)
		policy "$mode"
		out=$(LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$work/$mode.conf" \
			"$PY" "$here/mlsave.py" "$w" "$work/ckpt" "$steps" "$mib" 2>"$work/err")
		# commits still in the background finish before the next run
		while pgrep -f -- "^stagehand __commit" >/dev/null; do sleep 0.05; done ;;
	esac || { echo "mlsave.sh: $w $mode failed:" >&2; cat "$work/err" >&2; exit 1; }
	echo "$out" | awk '/^[0-9.]+$/ { s += $1; n++ } END { printf "%.4f\n", s / n }'
}


modes=(plain fsync async local)
printf '%-12s %8s %8s %8s %8s %14s %14s\n' writer plain fsync async local async/plain local/fsync
for w in $writers; do
	declare -A times=()
	for ((t = 0; t < trials; t++)); do
		for ((i = 0; i < 4; i++)); do
			m=${modes[$(((i + t) % 4))]}
			times[$m]+="$(run "$w" "$m") "
		done
	done
	declare -A med=()
	for m in "${modes[@]}"; do
		med[$m]=$(tr ' ' '\n' <<<"${times[$m]}" | grep . | median)
	done
	printf '%-12s %8.3f %8.3f %8.3f %8.3f %13sx %13sx\n' "$w" "${med[plain]}" "${med[fsync]}" \
		"${med[async]}" "${med[local]}" "$(ratio "${med[async]}" "${med[plain]}")" \
		"$(ratio "${med[local]}" "${med[fsync]}")"
	printf '%-12s' "  (range)"
	for m in "${modes[@]}"; do
		printf ' %s' "$(tr ' ' '\n' <<<"${times[$m]}" | grep . | sort -g | sed -n '1p;$p' | paste -sd- -)"
	done
	echo
	unset times med
done
echo "($trials trials of $steps saves of $mib MiB, medians of each run's mean save; seconds)"
