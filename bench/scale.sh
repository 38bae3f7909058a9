#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What one request costs on a staging server as what it holds grows: each
# figure printed beside its target (docs/SCALE.md).
#
#   files: one file of a user restored, and listed, from the servers by a
#   node with an empty cache, while the user has F files on them (2
#   servers, replicas = 2; medians of --trials runs); and `ls` of
#   everything, by a node with an empty cache and by one whose cache holds
#   the same F files. The F - 1
#   other files are copies of the first one's entry on each server (and in
#   the cache) under other paths, made while the servers are stopped: what
#   a server finds when it starts is what it would hold after F real
#   checkpoints.
#
#   chunks: a server's start over a store of C chunks (small ones, so that
#   a million fit a few GB): the time it takes to open the store, cold
#   (page cache dropped, where this user may) and warm, from its hint
#   files, against the first start of the same store without them (as an
#   older release left it: every segment scanned).
#
#   connections: a server holding C idle logged-in connections (the
#   suite's abuse tool, a thread each on its side): the server's threads
#   and memory, and a one-file restore from it meanwhile.
#
#   collection: a collection pass of a server holding F files of one user
#   (planted as for files), when nothing changed since the last pass.
#
#   restart: the restart crowd, bench/restart.sh (N nodes checkpointing,
#   then restoring their own files at once), with --clients and --wave.
#
#   bench/scale.sh [--parts LIST] [--files LIST] [--chunks LIST] [--connections LIST]
#                  [--clients LIST] [--wave W] [--trials N] [--dir DIR]
#     --parts: which, comma-separated (default
#              files,chunks,connections,collection,restart)
#     --files: the counts F, comma-separated (default 1000,10000,100000)
#     --chunks: the counts C, comma-separated (default 100000,1000000)
#     --connections: the counts C, comma-separated (default 1000,5000,10000)
#     --clients, --wave: bench/restart.sh's (default 100,1000,5000 and 1000)
#   The programs: $STAGEHAND_BUILD, else the repository's build/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
files="1000,10000,100000"
chunks="100000,1000000"
connections="1000,5000,10000"
clients="100,1000,5000"
wave=1000
parts="files,chunks,connections,collection,restart"
trials=7
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--files) files=$(bench_value "$@"); shift 2 ;;
	--chunks) chunks=$(bench_value "$@"); shift 2 ;;
	--connections) connections=$(bench_value "$@"); shift 2 ;;
	--clients) clients=$(bench_value "$@"); shift 2 ;;
	--wave) wave=$(bench_value "$@"); shift 2 ;;
	--parts) parts=$(bench_value "$@"); shift 2 ;;
	--trials) trials=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="${STAGEHAND_BUILD:-$root/build}"
S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
ID="$build/tests/progs/catalog-id"
FILL="$build/bench/store-fill"
ABUSE="$build/tests/progs/abuse"
[ -x "$SERVER" ] && [ -x "$ID" ] && [ -x "$FILL" ] && [ -x "$ABUSE" ] ||
	{ echo "scale.sh: build first (meson compile -C build)" >&2; exit 1; }
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(mktemp -d "$(cd "$dir" && pwd)/scale.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	pkill -f "stagehand-flusher --policy $dir/" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
seconds() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null
	t1=$(date +%s%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f\n", (b - a) / 1e9}'
}

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
start_servers() {
	local i
	pids=()
	for i in 0 1; do
		rm -f "$dir/port$i.new"
		"$SERVER" --listen "127.0.0.1:$(cat "$dir/port$i" 2>/dev/null || echo 0)" \
			--port-file "$dir/port$i.new" --store "$dir/store$i" \
			--secret-file "$dir/secret" 2>>"$dir/servers.log" &
		pids+=($!)
	done
	for i in 0 1; do
		# (a deadline only for a server that failed to start: its log says why)
		for _ in $(seq 6000); do [ -s "$dir/port$i.new" ] && break; sleep 0.1; done
		[ -s "$dir/port$i.new" ] || { echo "scale.sh: server $i did not start:" >&2; cat "$dir/servers.log" >&2; exit 1; }
		mv "$dir/port$i.new" "$dir/port$i"
	done
}
stop_servers() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}

# plant N [NAME STORE...]: the user has N files in each STORE (default:
# both servers'): the entry of $dir/NAME.ckpt/f (default node) copied under
# $dir/NAME.ckpt/d<k>/f<k> (its manifests and held maps).
plant() {
	local n=$1 name=${2:-node}
	shift
	[ $# -gt 0 ] && shift
	[ $# -gt 0 ] || set -- "$dir/store0" "$dir/store1"
	python3 - "$dir/$name.ckpt" "$(id -u)" "$n" "$ID" "$@" <<'EOP'
import os, shutil, subprocess, sys
top, uid, want, idprog = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
for store in sys.argv[5:]:
    user = os.path.join(store, "files", uid)
    entries = sorted(os.listdir(user))
    first = os.path.join(user, [e for e in entries
                                if open(os.path.join(user, e, "path")).read() == top + "/f"][0])
    have = len(entries)
    paths = [f"{top}/d{k % 1000}/f{k}" for k in range(have, want)]
    ids = subprocess.run([idprog, "-"], input="\n".join(paths) + "\n", capture_output=True,
                         text=True, check=True).stdout.split()
    names = [n for n in os.listdir(first) if n != "path"]
    for p, i in zip(paths, ids):
        d = os.path.join(user, i)
        os.mkdir(d, 0o700)
        for n in names:
            shutil.copyfile(os.path.join(first, n), os.path.join(d, n))
        with open(os.path.join(d, "path"), "w") as f:
            f.write(p)
EOP
}

# plant_cache N: the node's cache as it was after the first file's flush
# ($dir/cache.keep), with N files: the first one's entry copied under
# $dir/node.ckpt/d<k>/f<k>, as on the servers.
plant_cache() {
	rm -rf "$dir/node.cache"
	cp -a "$dir/cache.keep" "$dir/node.cache"
	python3 - "$dir" "$1" "$ID" <<'EOP'
import os, shutil, subprocess, sys
top, want, idprog = sys.argv[1], int(sys.argv[2]), sys.argv[3]
files = os.path.join(top, "node.cache", "files")
first = [e for e in os.listdir(files)
         if open(os.path.join(files, e, "path")).read() == top + "/node.ckpt/f"][0]
paths = [f"{top}/node.ckpt/d{k % 1000}/f{k}" for k in range(1, want)]
ids = subprocess.run([idprog, "-"], input="\n".join(paths) + "\n", capture_output=True,
                     text=True, check=True).stdout.split()
for p, i in zip(paths, ids):
    d = os.path.join(files, i)
    shutil.copytree(os.path.join(files, first), d)
    with open(os.path.join(d, "path"), "w") as f:
        f.write(p)
EOP
}

# start_one NAME ARGS...: a server on $dir/NAME.store with ARGS, listening
# on a port of its own ($dir/NAME.port), its log $dir/NAME.log; sets pid.
# (No deadline but the server's own end: a large store may take long.)
start_one() {
	local name=$1
	shift
	rm -f "$dir/$name.port"
	"$SERVER" --listen 127.0.0.1:0 --port-file "$dir/$name.port" --store "$dir/$name.store" \
		--secret-file "$dir/secret" "$@" 2>"$dir/$name.log" &
	pid=$!
	while [ ! -s "$dir/$name.port" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	[ -s "$dir/$name.port" ] ||
		{ echo "scale.sh: the server did not start:" >&2; cat "$dir/$name.log" >&2; exit 1; }
}

# ship_one NAME SERVERS REPLICAS: a node's policy $dir/NAME.conf (cache
# $dir/NAME.cache, files below $dir/NAME.ckpt), and a file of 1 MiB
# ($dir/NAME.ref) written to $dir/NAME.ckpt/f and shipped; the flusher is
# gone when it returns.
ship_one() {
	local n="$dir/$1"
	mkdir -p "$n.ckpt"
	cat >"$n.conf" <<-EOP
	[cache]
	dir = $n.cache
	[cluster]
	servers = $2
	replicas = $3
	secret_file = $dir/secret
	timeout = 600
	[path $n.ckpt/**]
	EOP
	head -c $((1 << 20)) /dev/urandom >"$n.ref"
	LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$n.conf" cp "$n.ref" "$n.ckpt/f"
	"$S" flush --policy "$n.conf" --wait --timeout 600 >/dev/null
	pkill -f "stagehand-flusher --policy $n.conf" 2>/dev/null || true
	while [ -e "$n.cache/flusher.lock" ] && ! flock -n "$n.cache/flusher.lock" true; do sleep 0.1; done
}

files_part() {
	start_servers
	ship_one node "127.0.0.1:$(cat "$dir/port0"), 127.0.0.1:$(cat "$dir/port1")" 2
	mv "$dir/node.cache" "$dir/cache.keep"

	printf '| files of the user | one-file restore, ms | one-file ls, ms | ls of everything, empty cache, ms | ls of everything, cache and servers, ms |\n|---|---|---|---|---|\n'
	first_restore="" first_ls=""
	for n in ${files//,/ }; do
		stop_servers
		plant "$n"
		start_servers
		: >"$dir/t.restore"
		: >"$dir/t.ls"
		: >"$dir/t.empty"
		for ((t = 0; t < trials; t++)); do
			rm -rf "$dir/node.cache" "$dir/back"
			seconds "$S" restore --policy "$dir/node.conf" --to "$dir/back" "$dir/node.ckpt/f" >>"$dir/t.restore"
			cmp -s "$dir/node.ref" "$dir/back$dir/node.ckpt/f" || { echo "scale.sh: the restored file differs" >&2; exit 1; }
			rm -rf "$dir/node.cache"
			seconds "$S" ls --policy "$dir/node.conf" "$dir/node.ckpt/f" >>"$dir/t.ls"
			rm -rf "$dir/node.cache"
			seconds "$S" ls --policy "$dir/node.conf" >>"$dir/t.empty"
		done
		r=$(median <"$dir/t.restore")
		l=$(median <"$dir/t.ls")
		plant_cache "$n"
		: >"$dir/t.all"
		for ((t = 0; t < trials; t++)); do
			seconds "$S" ls --policy "$dir/node.conf" >>"$dir/t.all"
		done
		rm -rf "$dir/node.cache"
		a=$(median <"$dir/t.all")
		e=$(median <"$dir/t.empty")
		printf '| %s | %.1f | %.1f | %.1f | %.1f |\n' "$n" "$(awk -v x="$r" 'BEGIN {print x * 1000}')" \
			"$(awk -v x="$l" 'BEGIN {print x * 1000}')" "$(awk -v x="$e" 'BEGIN {print x * 1000}')" \
			"$(awk -v x="$a" 'BEGIN {print x * 1000}')"
		[ -n "$first_restore" ] || { first_restore=$r; first_ls=$l; first_all=$a; first_empty=$e; first_n=$n; }
		last_restore=$r last_ls=$l last_all=$a last_empty=$e last_n=$n
	done
	awk -v a="$first_restore" -v b="$last_restore" -v c="$first_ls" -v d="$last_ls" \
		-v e="$first_all" -v f="$last_all" -v g="$first_empty" -v h="$last_empty" \
		-v m="$first_n" -v n="$last_n" 'BEGIN {
		printf "one-file restore, %d -> %d files: %.2fx (target <= 1.2x)\n", m, n, b / a
		printf "one-file ls, %d -> %d files: %.2fx (target <= 1.2x)\n", m, n, d / c
		printf "ls of everything, %d -> %d files: %.2fx per file with an empty cache, %.2fx with the cache (target: linear, 1x)\n", m, n, h / g * m / n, f / e * m / n }'
}

# open_time: starts a server on $dir/big, waits until it listens, stops it;
# prints the seconds its store took to open (its log says).
open_time() {
	local pid
	start_one big
	kill "$pid"
	wait "$pid" || true
	sed -n 's/.*(opened in \([0-9.]*\) s: .*/\1/p' "$dir/big.log"
}

chunks_part() {
	printf '| chunks | start from hints, cold s | warm s | first start without hints (scan), cold s |\n|---|---|---|---|\n'
	local c scan cold warm
	for c in ${chunks//,/ }; do
		"$FILL" "$dir/big.store" "$c" 256 >/dev/null
		# As an older release left it: the first start scans every
		# segment and writes the hints.
		rm -f "$dir/big.store/segments/"*.hint "$dir/big.store/segments/"*.hlog
		drop_caches
		scan=$(open_time)
		: >"$dir/t.cold"
		: >"$dir/t.warm"
		for ((t = 0; t < trials; t++)); do
			drop_caches
			open_time >>"$dir/t.cold"
			open_time >>"$dir/t.warm"
		done
		cold=$(median <"$dir/t.cold")
		warm=$(median <"$dir/t.warm")
		printf '| %s | %.2f | %.2f | %.2f |\n' "$c" "$cold" "$warm" "$scan"
		last_c=$c last_cold=$cold last_scan=$scan
	done
	awk -v c="$last_c" -v a="$last_cold" -v s="$last_scan" 'BEGIN {
	printf "start from hints, %d chunks: %.2f s per million chunks cold (target <= 2); %.1fx faster than a scan\n", c, a * 1e6 / c, s / a }'
}

# metric NAME: the server's metric NAME from its metrics file (0 before).
metric() {
	awk -v m="stagehand_server_$1" '$1 == m { print $2 }' "$dir/conn.prom" 2>/dev/null | tail -1 |
		grep . || echo 0
}

# collection: the collector's pass over F files of the user when nothing
# changed since the last one (each file one version): its time against the
# target, and what it read and looked at.
collection_part() {
	local n p passes
	start_one gc --gc-interval 1 --metrics-file "$dir/gc.prom" --metrics-interval 1
	p=$pid
	pids+=("$p")
	ship_one gc "127.0.0.1:$(cat "$dir/gc.port")" 1
	printf '| files of the user | a pass with nothing changed, ms (target < 10) | manifests it read | chunks it looked at |\n|---|---|---|---|\n'
	for n in ${files//,/ }; do
		kill "$p"
		wait "$p" || true
		plant "$n" gc "$dir/gc.store"
		rm -f "$dir/gc.prom"
		start_one gc --gc-interval 1 --metrics-file "$dir/gc.prom" --metrics-interval 1
		p=$pid
		pids+=("$p")
		# the passes after the first (which follows the start)
		passes=0
		while [ "$passes" -lt 3 ]; do
			sleep 0.5
			passes=$(awk '$1 == "stagehand_server_collections_total" { print $2 }' "$dir/gc.prom" 2>/dev/null | grep . || echo 0)
		done
		awk -v n="$n" '$1 == "stagehand_server_collection_seconds" { s = $2 }
			$1 == "stagehand_server_collection_manifests" { m = $2 }
			$1 == "stagehand_server_collection_candidates" { c = $2 }
			END { printf "| %d | %.2f | %d | %d |\n", n, s * 1000, m, c }' "$dir/gc.prom"
	done
}

connections_part() {
	local p c a t pid
	start_one conn \
		--metrics-file "$dir/conn.prom" --metrics-interval 1
	p=$pid
	pids+=("$p")
	local addr="127.0.0.1:$(cat "$dir/conn.port")"
	ship_one c "$addr" 1
	restore_ms() {
		: >"$dir/t.crestore"
		for ((t = 0; t < trials; t++)); do
			rm -rf "$dir/c.cache" "$dir/cback"
			seconds "$S" restore --policy "$dir/c.conf" --to "$dir/cback" "$dir/c.ckpt/f" >>"$dir/t.crestore"
			cmp -s "$dir/c.ref" "$dir/cback$dir/c.ckpt/f" || { echo "scale.sh: the restored file differs" >&2; exit 1; }
		done
		awk -v x="$(median <"$dir/t.crestore")" 'BEGIN { printf "%.1f", x * 1000 }'
	}
	echo "one-file restore with no other connection: $(restore_ms) ms"
	printf '| idle connections | threads serving connections (target <= %d) | all server threads | server RSS, MiB | per connection, KiB (target <= 16) | one-file restore meanwhile, ms |\n|---|---|---|---|---|---|\n' $((2 + $(nproc)))
	for c in ${connections//,/ }; do
		local base_rss
		base_rss=$(awk '/VmRSS/ { print $2 }' "/proc/$p/status")
		"$ABUSE" idle "$addr" "$c" --secret "$dir/secret" --uid "$(id -u)" >"$dir/abuse.out" 2>&1 &
		a=$!
		# Until all are in, or the count stops growing for 30 s (the
		# server holds no more: the table says how many it held).
		local held=0 still=0
		while [ "$held" -lt "$c" ] && [ "$still" -lt 60 ] && kill -0 "$a" 2>/dev/null; do
			sleep 0.5
			local now
			now=$(metric connections)
			if [ "$now" -gt "$held" ]; then held=$now still=0; else still=$((still + 1)); fi
		done
		kill -0 "$a" 2>/dev/null || { echo "scale.sh: the abuse tool stopped:" >&2; cat "$dir/abuse.out" >&2; exit 1; }
		[ "$held" -ge "$c" ] || echo "scale.sh: the server held $held of $c connections ($(grep -c 'refused\|evict' "$dir/conn.log") log lines of refusals)"
		local threads serving rss ms i
		rss=$(awk '/VmRSS/ { print $2 }' "/proc/$p/status")
		ms=$(restore_ms)
		# The threads started for the crowd logging in end 10 s after
		# it; the store's own threads are named (seal, collect, scrub,
		# metrics, and the kernel's io_uring workers of its writes).
		for ((i = 0; i < 60; i++)); do
			serving=$(cat /proc/"$p"/task/*/comm | grep -cvx 'seal\|collect\|scrub\|metrics\|iou-.*')
			[ "$serving" -le $((1 + $(nproc))) ] && break
			sleep 0.5
		done
		threads=$(awk '/^Threads/ { print $2 }' "/proc/$p/status")
		awk -v c="$c" -v h="$held" -v s="$serving" -v t="$threads" -v r="$rss" -v b="$base_rss" -v m="$ms" \
			'BEGIN { printf "| %d%s | %d | %d | %.0f | %.1f | %s |\n", c,
				h < c ? sprintf(" (%d held)", h) : "", s, t, r / 1024, (r - b) / h, m }'
		kill "$a"
		wait "$a" || true
		while [ "$(metric connections)" -gt 1 ]; do sleep 0.5; done
	done
}

for part in ${parts//,/ }; do
	case "$part" in
	files) files_part ;;
	chunks) chunks_part ;;
	connections) connections_part ;;
	collection) collection_part ;;
	restart) "$here/restart.sh" --clients "$clients" --wave "$wave" --dir "$dir" ;;
	*) echo "scale.sh: unknown part '$part'" >&2; exit 2 ;;
	esac
done
