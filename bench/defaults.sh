#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Which rule options serve most users: the bytes the node cache stores for
# each data set of bench/datasets.py and bench/mlsets.py (a series of
# versions of one file, or of one file per rank), under each candidate rule
# (chunking, chunk_size, compress), written through the shim in 1 MiB
# write()s. Prints, per data set and rule, the stored bytes as a share of
# what was written (lower is better), and per rule the geometric mean over
# the data sets.
#
#   bench/defaults.sh [--mib MIB] [--versions N] [--dir DIR]
#     --mib: about how large each version is (default 64)
#     --versions: versions per data set (default 4)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mib=64
versions=4
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--mib) mib=$2; shift 2 ;;
	--versions) versions=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	-h|--help) sed -n '3,13p' "$0"; exit 0 ;;
	*) echo "defaults.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
SHIM="$root/build/preload/libstagehand.so"
[ -f "$SHIM" ] || { echo "defaults.sh: build first (./demo.sh or meson compile -C build)" >&2; exit 1; }
PY=/usr/bin/python3
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)/defaults
rm -rf "$dir"
mkdir -p "$dir/data"
trap 'rm -rf "$dir"' EXIT

rules=("fixed 1M lz4" "fixed 1M auto" "cdc 64K lz4" "cdc 64K auto" "cdc 256K lz4"
	"cdc 256K auto" "cdc 1M lz4" "cdc 1M auto")
sets=(images particles tensors zip finetune ranks)

echo "making the data sets ($versions versions of about $mib MiB each)" >&2
for s in "${sets[@]}"; do mkdir -p "$dir/data/$s"; done
"$PY" "$here/datasets.py" images "$dir/data/images" "$versions" "$mib" 1
"$PY" "$here/datasets.py" particles "$dir/data/particles" "$versions" $((mib * 1048576 / 48)) 2
"$PY" "$here/datasets.py" tensors "$dir/data/tensors" "$versions" "$mib" 3
for s in zip finetune ranks; do
	"$PY" "$here/mlsets.py" "$s" "$dir/data/$s" "$versions" "$mib" 4
done


# versions_of SET V: FILE SOURCES... lines, the files version V writes.
versions_of() {
	local d="$dir/data/$1" v="$2" r
	case "$1" in
	tensors) echo "f $d/head$v $d/body" ;;
	ranks) for r in 0 1 2 3; do echo "r$r $d/$v.$r"; done ;;
	*) echo "f $d/$v" ;;
	esac
}

# stored SET CHUNKING SIZE COMPRESS: bytes of the cache's packs after every
# version of SET was written under that rule.
stored() {
	rm -rf "$dir/cache" "$dir/ckpt"
	mkdir -p "$dir/ckpt"
	printf '[cache]\ndir = %s/cache\n[path %s/ckpt/*]\nchunking = %s\nchunk_size = %s\ncompress = %s\nkeep = 100\n' \
		"$dir" "$dir" "$2" "$3" "$4" >"$dir/policy.conf"
	local v name srcs
	for ((v = 1; v <= versions; v++)); do
		while read -r name srcs; do
			# shellcheck disable=SC2086
			LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$PY" "$here/put.py" \
				"$dir/ckpt/$name" $srcs >/dev/null
		done < <(versions_of "$1" "$v")
	done
	cat "$dir"/cache/packs/*.pack | wc -c
}

written() {
	local v name srcs total=0
	for ((v = 1; v <= versions; v++)); do
		while read -r name srcs; do
			# shellcheck disable=SC2086
			total=$((total + $(cat $srcs | wc -c)))
		done < <(versions_of "$1" "$v")
	done
	echo "$total"
}

printf '%-15s' rule
for s in "${sets[@]}"; do printf ' %9s' "$s"; done
printf ' %9s\n' geomean
declare -A total
for s in "${sets[@]}"; do total[$s]=$(written "$s"); done
for rule in "${rules[@]}"; do
	read -r chunking size compress <<<"$rule"
	printf '%-15s' "$rule"
	shares=()
	for s in "${sets[@]}"; do
		share=$(awk -v a="$(stored "$s" "$chunking" "$size" "$compress")" -v b="${total[$s]}" \
			'BEGIN {printf "%.3f", a / b}')
		shares+=("$share")
		printf ' %9s' "$share"
	done
	printf ' %9s\n' "$(printf '%s\n' "${shares[@]}" | awk '{s += log($1)} END {printf "%.3f", exp(s / NR)}')"
done
echo "(stored bytes / written bytes in the node cache, $versions versions of about $mib MiB per data set)"
