#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Data reduction side by side with restic (Debian's, a version 2 repository:
# content-defined chunks and zstd), in one run. Each data set of
# bench/datasets.py is a series of versions of one file: each version is
# written through the shim (durability = local, 1 MiB write()s) and flushed
# to a staging server on loopback, and, beside it, written plainly and taken
# in by `restic backup`. Prints the bytes each stored (stagehand: its cache,
# and the server, which keeps the versions: zstd is applied on the way
# there), the seconds each took to take the versions in (stagehand: the
# writes themselves, and apart the flushes; restic: the backups of the
# written files), and the newest version's restore against cp + sync
# (medians of 3, alternating). Then
# the first version of a large file of float64 noise (cdc, compress = auto)
# against plain write + fsync. Ratios > 1 favour stagehand; targets as in
# bench/RESULTS.md.
#
#   bench/reduction.sh [--quick] [--only SET] [--dir DIR]
#     --quick: small data sets (a check that it runs, not a measurement)
#     --only SET: one data set: images, particles, tensors or noise
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
quick=0
only=""
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1; shift ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	--only)
		case "$2" in
		images|particles|tensors|noise) only=$(bench_value "$@"); shift 2 ;;
		*) echo "reduction.sh: --only '$2': images, particles, tensors or noise" >&2; exit 2 ;;
		esac ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="$root/build"
S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
PY=/usr/bin/python3
[ -x "$S" ] || { echo "reduction.sh: build first (meson compile -C build)" >&2; exit 1; }
command -v restic >/dev/null || { echo "reduction.sh: restic is missing (scripts/deps.sh --tests installs it)" >&2; exit 1; }
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)/reduction
rm -rf "$dir"
mkdir -p "$dir"
server_pid=""
stop_server() {
	[ -z "$server_pid" ] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true; }
	server_pid=""
}
trap 'stop_server; rm -rf "$dir"' EXIT
export RESTIC_PASSWORD=bench RESTIC_CACHE_DIR="$dir/restic-cache"

if [ "$quick" = 1 ]; then
	img_mib=40 particles=200000 tensor_mib=256 noise_mib=256 versions=3
else
	img_mib=200 particles=1000000 tensor_mib=2048 noise_mib=2048 versions=5
fi

# put DST SRC...: bench/put.py, without and with the shim.
put() { "$PY" "$here/put.py" "$@"; }
shim_put() { LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$PY" "$here/put.py" "$@"; }

add() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a + b}'; }
seconds() { local s; s=$(date +%s.%N); "$@" >/dev/null; awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN {printf "%.4f", b - a}'; }
bytes() { du -sb --apparent-size "$@" | awk '{s += $1} END {print s + 0}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"

# start_server: a staging server with an empty store on loopback.
start_server() {
	stop_server
	rm -rf "$dir/store" "$dir/port"
	"$SERVER" --listen 127.0.0.1:0 --port-file "$dir/port" --store "$dir/store" \
		--secret-file "$dir/secret" 2>>"$dir/server.log" &
	server_pid=$!
	until [ -s "$dir/port" ]; do
		kill -0 "$server_pid" 2>/dev/null || { echo "reduction.sh: the server did not start: $(cat "$dir/server.log")" >&2; exit 1; }
		sleep 0.05
	done
}

# policy LINE...: the captured path's rule, with the server of start_server
# while one runs.
policy() {
	{
		printf '[cache]\ndir = %s/cache\n' "$dir"
		[ -z "$server_pid" ] ||
			printf '[cluster]\nservers = 127.0.0.1:%s\nreplicas = 1\nsecret_file = %s/secret\ntimeout = 60\n' \
				"$(cat "$dir/port")" "$dir"
		printf '[path %s/ckpt/*]\ndurability = local\nkeep = 100\n' "$dir"
		printf '%s\n' "$@"
	} >"$dir/policy.conf"
}

# Stops the flusher the shim started for the cache, if any.
stop_flusher() {
	local pid
	pid=$(cat "$dir/cache/flusher.lock" 2>/dev/null) || return 0
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

# series NAME SOURCES_FN: takes in versions 1..$versions of file NAME, whose
# sources SOURCES_FN V prints; sets STORED (stagehand's cache), SERVED (the
# server's store), RSTORED (restic), INGEST, FLUSH, RINGEST (seconds),
# RESTORE, CP (seconds), TOTAL (bytes of all versions), FIRST (the
# server's bytes after version 1).
series() {
	local name=$1 fn=$2 v srcs t
	stop_flusher
	rm -rf "$dir/cache" "$dir/ckpt" "$dir/plain" "$dir/repo" "$dir/back" "$dir/copy"
	mkdir -p "$dir/ckpt" "$dir/plain"
	restic init --quiet --repository-version 2 -r "$dir/repo" >/dev/null
	INGEST=0 FLUSH=0 RINGEST=0 TOTAL=0 FIRST=0
	for v in $(seq 1 "$versions"); do
		srcs=$("$fn" "$v")
		# shellcheck disable=SC2086
		t=$(shim_put "$dir/ckpt/$name" $srcs)
		INGEST=$(add "$INGEST" "$t")
		t=$(seconds "$S" flush --policy "$dir/policy.conf" --wait --timeout 600)
		FLUSH=$(add "$FLUSH" "$t")
		# shellcheck disable=SC2086
		PUT_SYNC=1 put "$dir/plain/$name" $srcs >/dev/null
		t=$(seconds restic backup --quiet -r "$dir/repo" "$dir/plain")
		RINGEST=$(add "$RINGEST" "$t")
		TOTAL=$((TOTAL + $(stat -c %s "$dir/plain/$name")))
		[ "$v" -gt 1 ] || FIRST=$(bytes "$dir/store/segments" "$dir/store/files")
	done
	STORED=$(bytes "$dir/cache/packs" "$dir/cache/files")
	SERVED=$(bytes "$dir/store/segments" "$dir/store/files")
	stop_flusher
	RSTORED=$(bytes "$dir/repo")
	# Restore against cp, alternating which goes first, medians of 3: a
	# small file takes a tenth of a second, where the disk's moods show.
	: >"$dir/t.restore"
	: >"$dir/t.cp"
	for t in 1 2 3; do
		order="restore cp"
		[ $((t % 2)) = 1 ] || order="cp restore"
		for side in $order; do
			rm -rf "$dir/back" "$dir/copy"
			drop_caches
			if [ "$side" = restore ]; then
				echo "$(seconds "$S" restore --policy "$dir/policy.conf" \
					--to "$dir/back" "$dir/ckpt/$name")" >>"$dir/t.restore"
				cmp "$dir/back$dir/ckpt/$name" "$dir/plain/$name"
			else
				echo "$(seconds sh -c "cp '$dir/plain/$name' '$dir/copy' &&
					sync '$dir/copy'")" >>"$dir/t.cp"
			fi
		done
	done
	RESTORE=$(median <"$dir/t.restore")
	CP=$(median <"$dir/t.cp")
}

row() {
	printf '| %s | %d x %s | %s | %s | %s | %sx | %.2f s (+ %.2f s) | %.2f s | %sx | %.2f s | %.2f s | %sx | %s |\n' \
		"$1" "$versions" "$(mib $((TOTAL / versions)))" "$(mib "$STORED")" "$(mib "$SERVED")" \
		"$(mib "$RSTORED")" "$(ratio "$SERVED" "$RSTORED")" "$INGEST" "$FLUSH" "$RINGEST" \
		"$(ratio "$RINGEST" "$INGEST")" "$RESTORE" "$CP" "$(ratio "$CP" "$RESTORE")" "$2"
}

echo "Data reduction against $(restic version | cut -d' ' -f1-2), on $(df -h "$dir" | awk 'NR==2 {print $1}')$([ "$quick" = 0 ] || echo ', --quick')"
# wanted SET: is SET measured in this run?
wanted() { [ -z "$only" ] || [ "$only" = "$1" ]; }
echo "making the data sets..."
mkdir -p "$dir/images" "$dir/particles" "$dir/tensors"
! wanted images || "$PY" "$here/datasets.py" images "$dir/images" "$versions" "$img_mib" 1
! wanted particles || "$PY" "$here/datasets.py" particles "$dir/particles" "$versions" "$particles" 2
! wanted tensors || "$PY" "$here/datasets.py" tensors "$dir/tensors" "$versions" "$tensor_mib" 3
! wanted noise || "$PY" "$here/datasets.py" noise "$dir/noise" "$noise_mib" 4

printf '\n| data set | versions | stagehand: cache | server | restic stored | server / restic (target <= 1) | stagehand ingest (+ flush) | restic ingest | ratio (target >= 3) | restore newest | cp + sync | ratio (target >= 1) | its own target |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'

images_v() { echo "$dir/images/$1"; }
if wanted images; then
	start_server
	policy "chunking = cdc" "chunk_size = 64K"
	series image images_v
	row "process images (cdc 64K, lz4)" \
		"cache $(awk -v s="$STORED" -v t="$TOTAL" 'BEGIN {printf "%.1f%%", 100 * s / t}') of the series (<= 30%)"
fi

particles_v() { echo "$dir/particles/$1"; }
if wanted particles; then
	start_server
	policy "compress = zstd" "filter = shuffle8" "delta = xor"
	series particles particles_v
	row "float64 particles, $particles (zstd, shuffle8, delta xor)" \
		"$(ratio "$SERVED" "$RSTORED")x restic's bytes (<= 0.85x)"
fi

tensors_v() { echo "$dir/tensors/head$1 $dir/tensors/body"; }
if wanted tensors; then
	start_server
	policy "chunking = cdc" "chunk_size = 1M" "compress = auto" "filter = shuffle4"
	series tensors tensors_v
	# Ideal: versions 2.. store their headers only.
	later=$((TOTAL - TOTAL / versions))
	row "fp32 tensors, header +64 B a version (cdc 1M, auto, shuffle4)" \
		"versions 2-$versions: $(awk -v s="$((SERVED - FIRST))" -v l="$later" 'BEGIN {printf "%.1f%%", 100 * (1 - s / l)}') deduplicated, of the ideal 100% (>= 95%)"
fi
wanted noise || exit 0

# The first version of noise: cdc + auto against plain write + fsync,
# alternating, medians of 3; nothing shipped meanwhile.
stop_server
policy "chunking = cdc" "chunk_size = 1M" "compress = auto"
: >"$dir/t.plain"
: >"$dir/t.shim"
for t in 1 2 3; do
	order="plain shim"
	[ $((t % 2)) = 1 ] || order="shim plain"
	for side in $order; do
		rm -rf "$dir/cache" "$dir/ckpt" "$dir/plain"
		mkdir -p "$dir/ckpt" "$dir/plain"
		drop_caches
		cat "$dir/noise" >/dev/null # the source warm, as an application's memory
		if [ "$side" = plain ]; then
			PUT_SYNC=1 put "$dir/plain/noise" "$dir/noise" >>"$dir/t.plain"
		else
			shim_put "$dir/ckpt/noise" "$dir/noise" >>"$dir/t.shim"
		fi
	done
done
b=$(median <"$dir/t.plain")
s=$(median <"$dir/t.shim")
printf '\n| first version of %s of float64 noise | plain write + fsync | stagehand (cdc, auto) | ratio | target |\n|---|---|---|---|---|\n' "$(mib $((noise_mib << 20)))"
printf '| | %.2f s | %.2f s | %sx | >= 0.9x |\n' "$b" "$s" "$(ratio "$b" "$s")"
