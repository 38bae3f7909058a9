#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Which rule options serve most users: the bytes the node cache stores for
# each data set of bench/datasets.py and bench/mlsets.py (a series of
# versions of one file, or of one file per rank), under each candidate rule
# (chunking, chunk_size, compress), written through the shim in 1 MiB
# write()s. Prints, per data set and rule, the stored bytes as a share of
# what was written (lower is better), per rule the geometric mean over the
# data sets, and the time the writing took under the rule (durability =
# local), first versions (into an empty cache) and later ones apart, over
# the time of the same writes with an fsync of each file and no stagehand,
# run just before them.
#
#   bench/defaults.sh [--mib MIB] [--versions N] [--dir DIR]
#     --mib: about how large each version is (default 64)
#     --versions: versions per data set (default 4)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
mib=64
versions=4
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--mib) mib=$(bench_value "$@"); shift 2 ;;
	--versions) versions=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
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

# stored SET CHUNKING SIZE COMPRESS: "BYTES FIRST LATER": the bytes of the
# cache's packs after every version of SET was written under that rule, and
# the seconds the writing of the first version and of the later ones took.
stored() {
	rm -rf "$dir/cache" "$dir/ckpt"
	mkdir -p "$dir/ckpt"
	printf '[cache]\ndir = %s/cache\n[path %s/ckpt/*]\nchunking = %s\nchunk_size = %s\ncompress = %s\nkeep = 100\n' \
		"$dir" "$dir" "$2" "$3" "$4" >"$dir/policy.conf"
	local v name srcs secs=(0 0)
	for ((v = 1; v <= versions; v++)); do
		while read -r name srcs; do
			# shellcheck disable=SC2086
			secs[v > 1]=$(awk -v a="${secs[v > 1]}" -v b="$(LD_PRELOAD="$SHIM" \
				STAGEHAND_POLICY="$dir/policy.conf" "$PY" "$here/put.py" "$dir/ckpt/$name" $srcs)" \
				'BEGIN {print a + b}')
		done < <(versions_of "$1" "$v")
	done
	echo "$(cat "$dir"/cache/packs/*.pack | wc -c) ${secs[*]}"
}

# plain SET: "FIRST LATER", the seconds of writing the first version of SET
# and the later ones with an fsync of each file, without stagehand.
plain() {
	rm -rf "$dir/plain"
	mkdir -p "$dir/plain"
	local v name srcs secs=(0 0)
	for ((v = 1; v <= versions; v++)); do
		while read -r name srcs; do
			# shellcheck disable=SC2086
			secs[v > 1]=$(awk -v a="${secs[v > 1]}" \
				-v b="$(PUT_SYNC=1 "$PY" "$here/put.py" "$dir/plain/$name" $srcs)" 'BEGIN {print a + b}')
		done < <(versions_of "$1" "$v")
	done
	echo "${secs[*]}"
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
printf ' %9s %9s %9s\n' geomean first later
declare -A total
for s in "${sets[@]}"; do total[$s]=$(written "$s"); done
for rule in "${rules[@]}"; do
	read -r chunking size compress <<<"$rule"
	printf '%-15s' "$rule"
	shares=() shim1=0 shim2=0 base1=0 base2=0
	for s in "${sets[@]}"; do
		read -r p1 p2 < <(plain "$s")
		read -r bytes s1 s2 < <(stored "$s" "$chunking" "$size" "$compress")
		read -r base1 base2 shim1 shim2 < <(awk -v a="$base1 $base2 $shim1 $shim2" \
			-v b="$p1 $p2 $s1 $s2" 'BEGIN {split(a, x); split(b, y)
				print x[1] + y[1], x[2] + y[2], x[3] + y[3], x[4] + y[4]}')
		share=$(awk -v a="$bytes" -v b="${total[$s]}" 'BEGIN {printf "%.3f", a / b}')
		shares+=("$share")
		printf ' %9s' "$share"
	done
	printf ' %9s' "$(printf '%s\n' "${shares[@]}" | awk '{s += log($1)} END {printf "%.3f", exp(s / NR)}')"
	awk -v a="$shim1 $shim2" -v b="$base1 $base2" \
		'BEGIN {split(a, x); split(b, y); printf " %8.2fx %8.2fx\n", x[1] / y[1], x[2] / y[2]}'
done
echo "(stored bytes / written bytes in the node cache, $versions versions of about $mib MiB per data set;"
echo " first, later: the writing of the first versions, into an empty cache, and of the later ones"
echo " under the rule, durability = local, over the same plain writes + fsync just before)"
