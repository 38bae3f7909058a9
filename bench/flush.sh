#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Side-by-side benchmark of shipping checkpoints to staging servers, on
# loopback, in one run: stagehand (durability = replicated, 2 servers,
# replicas = 2) against writing the file locally + fsync and sending it with
# nc to 2 receivers that write + fsync it. Prints ratios (> 1: stagehand is
# faster) with the medians of several trials, bytes on the wire, restore
# from the servers against cp, and memory.
#
#   bench/flush.sh [--size MIB] [--trials N] [--dir DIR] [--rule 'KEY = VALUE']...
# --rule adds a line to the path rule (fixed 1 MiB chunks, durability =
# replicated, keep = 3), over the key's value there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
size=2048
trials=3
dir=""
rules=""
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$(bench_value "$@"); shift 2 ;;
	--trials) trials=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	--rule) rules+="$2"$'\n'; shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="$root/build"
[ -x "$build/bench/ckpt-writer" ] || { echo "flush.sh: build first (./demo.sh or meson compile -C build)" >&2; exit 1; }
command -v nc >/dev/null || { echo "flush.sh: nc is needed for the baseline (apt-get install netcat-openbsd)" >&2; exit 1; }
W="$build/bench/ckpt-writer"
S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	pkill -f "stagehand-flusher --policy $dir/" 2>/dev/null || true
	rm -rf "$dir/plain" "$dir/ckpt" "$dir/cache" "$dir/restored" "$dir/copy" "$dir"/store? "$dir"/recv?
}
trap cleanup EXIT


head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"

start_servers() {
	for i in 1 2; do
		rm -f "$dir/port$i"
		"$SERVER" --listen 127.0.0.1:0 --port-file "$dir/port$i" --store "$dir/store$i" \
			--secret-file "$dir/secret" 2>>"$dir/servers.log" &
		pids+=($!)
	done
	for i in 1 2; do
		for _ in $(seq 100); do [ -s "$dir/port$i" ] && break; sleep 0.05; done
	done
	cat >"$dir/policy.conf" <<EOP
[cache]
dir = $dir/cache
[cluster]
servers = 127.0.0.1:$(cat "$dir/port1"), 127.0.0.1:$(cat "$dir/port2")
replicas = 2
secret_file = $dir/secret
timeout = 60
[path $dir/ckpt/*]
chunk_size = 1M
chunking = fixed
durability = replicated
keep = 3
$rules
EOP
}

# The baseline: write + fsync locally, then nc to two receivers at once,
# each writing + fsyncing. Prints the total seconds.
baseline() {
	local version=$1
	# below the ephemeral range, so no connection of the run holds them
	local p1=$((20000 + RANDOM % 6000)) p2=$((26000 + RANDOM % 6000)) t0 t1 i
	# the receivers listen before the clock starts
	(nc -l 127.0.0.1 "$p1" >"$dir/recv1/f.dat" && sync "$dir/recv1/f.dat") &
	local r1=$!
	(nc -l 127.0.0.1 "$p2" >"$dir/recv2/f.dat" && sync "$dir/recv2/f.dat") &
	local r2=$!
	for i in $(seq 100); do
		[ "$(ss -Hltn "( sport = :$p1 or sport = :$p2 )" | wc -l)" -eq 2 ] && break
		sleep 0.05
	done
	t0=$(now)
	"$W" -s "$size" -v "$version" "$dir/plain/f.dat" >/dev/null
	nc -N 127.0.0.1 "$p1" <"$dir/plain/f.dat" &
	local s1=$!
	nc -N 127.0.0.1 "$p2" <"$dir/plain/f.dat"
	wait "$s1" "$r1" "$r2"
	t1=$(now)
	elapsed "$t0" "$t1"
	echo
	cmp -s "$dir/plain/f.dat" "$dir/recv1/f.dat" && cmp -s "$dir/plain/f.dat" "$dir/recv2/f.dat" ||
		{ echo "flush.sh: the baseline's receivers did not get the file" >&2; exit 1; }
}

bytes_sent() { awk '$1 == "bytes_sent" {print $2}' "$dir/cache/flusher.state" 2>/dev/null || echo 0; }

echo "stagehand flush benchmark: ${size} MiB file, 2 servers on loopback, replicas = 2, $trials trials, on $(df -h "$dir" | awk 'NR==2 {print $1}')"
: >"$dir/t.base1"; : >"$dir/t.shim1"; : >"$dir/t.base2"; : >"$dir/t.shim2"
: >"$dir/t.cp"; : >"$dir/t.restore"; : >"$dir/wire2"
: >"$dir/servers.log"
for t in $(seq 1 "$trials"); do
	cleanup
	pids=()
	mkdir -p "$dir/plain" "$dir/ckpt" "$dir/recv1" "$dir/recv2"
	start_servers
	export STAGEHAND_LOG_FILE="$dir/flusher.log"
	drop_caches
	baseline 1 >>"$dir/t.base1"
	drop_caches
	# stagehand: the writer's own open..close time; close returns once both
	# servers hold the version.
	LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$W" -s "$size" "$dir/ckpt/f.dat" >>"$dir/t.shim1"
	drop_caches
	baseline 2 >>"$dir/t.base2"
	drop_caches
	before=$(bytes_sent)
	LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$W" -s "$size" -v 2 "$dir/ckpt/f.dat" >>"$dir/t.shim2"
	echo $(( $(bytes_sent) - before )) >>"$dir/wire2"
	# restore from the servers with an empty cache, against cp + sync
	pid=$(cat "$dir/cache/flusher.lock" 2>/dev/null || true)
	[ -n "$pid" ] && rss_flusher=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
	pkill -f "stagehand-flusher --policy $dir/" 2>/dev/null || true
	rm -rf "$dir/cache"
	drop_caches
	/usr/bin/time -f '%e' -o "$dir/time.out" sh -c "cp '$dir/plain/f.dat' '$dir/copy' && sync '$dir/copy'"
	cat "$dir/time.out" >>"$dir/t.cp"
	drop_caches
	/usr/bin/time -f '%e %M' -o "$dir/time.out" "$S" restore --policy "$dir/policy.conf" --to "$dir/restored" "$dir/ckpt/f.dat" >/dev/null
	awk '{print $1}' "$dir/time.out" >>"$dir/t.restore"
	rss_restore=$(awk '{print $2}' "$dir/time.out")
	cmp "$dir/restored$dir/ckpt/f.dat" "$dir/plain/f.dat"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
done

changed=$(( $("$W" -s "$size" -v 2 -c x) * 1024 * 1024 ))
b1=$(median <"$dir/t.base1"); s1=$(median <"$dir/t.shim1")
b2=$(median <"$dir/t.base2"); s2=$(median <"$dir/t.shim2")
bc=$(median <"$dir/t.cp"); sr=$(median <"$dir/t.restore")
w2=$(median <"$dir/wire2")
index=$("$build/tests/test-server-index" 2>/dev/null | awk '/bytes per entry/ {print $6 " (" $13}' || true)

printf '\n| # | what | baseline | stagehand | ratio | target |\n|---|---|---|---|---|---|\n'
printf '| 1 | first version, %d MiB, open until 2 servers hold it | %.2f s | %.2f s | %sx | >= 1x |\n' "$size" "$b1" "$s1" "$(ratio "$b1" "$s1")"
printf '| 2 | 10%% of 1 MiB chunks changed, open until 2 servers hold it | %.2f s | %.2f s | %sx | >= 5x |\n' "$b2" "$s2" "$(ratio "$b2" "$s2")"
printf '| 2 | bytes on the wire for it vs changed bytes x 2 replicas | %d | %d | %sx | <= 1.1x |\n' "$((changed * 2))" "$w2" "$(ratio "$w2" "$((changed * 2))")"
printf '| 3 | restore from the servers (empty cache) vs cp + sync | %.2f s | %.2f s | %sx | >= 0.8x |\n' "$bc" "$sr" "$(ratio "$bc" "$sr")"
printf '| 4 | peak RSS of the flusher | | %d MiB | | < 256 MiB |\n' "$((${rss_flusher:-0} / 1024))"
printf '| 4 | peak RSS of restore from the servers | | %d MiB | | |\n' "$((${rss_restore:-0} / 1024))"
printf '| 4 | server index, bytes of RAM per chunk (1M chunks; worst after growth) | | %s | | <= 64 |\n' "${index:-?}"
