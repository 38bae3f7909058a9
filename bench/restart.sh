#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A whole job checkpointing, then restarting, on loopback, against 3
# servers (replicas = 2). Each of N simulated nodes has its own cache and
# its own file of --size KiB (distinct bytes). First the N nodes ship their
# version at the same moment (the checkpoint: `stagehand flush --wait`
# each); then, their caches gone, they restore their own file at the same
# moment (the restart). Prints, for each N, both wall times, the restart's
# against the checkpoint's (target <= 1x) and the restart's cost per node;
# then how that cost grows from the first N to the last (target <= 1.3x).
# Every restored file is compared byte for byte; none may fail.
#
# Past 128 nodes the flushers find no inotify instance left (128 per user
# by default) and look at their queues every second instead. With --wave W,
# more than W nodes go in waves of W at once, one after the other, for both
# the checkpoint and the restart (the times are the waves' sums): 5,000
# nodes at once would need about 25,000 tasks to checkpoint (a flusher's 4
# threads and a `stagehand flush` each) and 55,000 to restore (a restore's
# 11 threads), past this machine's pid_max of 32,768, which counts threads
# (docs/SCALE.md); the servers still hold every node's file, and serve the
# last wave with all of them stored.
#
#   bench/restart.sh [--clients LIST] [--wave W] [--size KIB] [--dir DIR]
#     --clients: the node counts N, comma-separated (default 100,1000)
#     --wave: the most nodes at once (default: all of them)
#   The programs: $STAGEHAND_BUILD, else the repository's build/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
clients="100,1000"
size=256
dir=""
wave=0
while [ $# -gt 0 ]; do
	case "$1" in
	--clients) clients=$(bench_value "$@"); shift 2 ;;
	--wave) wave=$(bench_value "$@"); shift 2 ;;
	--size) size=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="${STAGEHAND_BUILD:-$root/build}"
S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
CROWD="$root/tests/progs/crowd.py"
[ -x "$SERVER" ] || { echo "restart.sh: build first (meson compile -C build)" >&2; exit 1; }
[ -n "$dir" ] || dir=/tmp
mkdir -p "$dir"
dir=$(mktemp -d "$(cd "$dir" && pwd)/shr.XXXXXX")
pids=()
# The flushers of the nodes, by their lock files, which go with them: pids
# wrap (pid_max) over thousands of nodes, so that a stale lock's pid may be
# anyone's by the next wave, a server's included; only a flusher is killed.
stop_flushers() {
	local p pid
	for p in "$dir"/n*/cache/flusher.lock; do
		[ -e "$p" ] || continue
		pid=$(tr -dc 0-9 <"$p")
		if [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q stagehand-flusher; then
			kill "$pid" 2>/dev/null || true
		fi
		rm -f "$p"
	done
}
stop_servers() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
cleanup() {
	stop_flushers
	stop_servers
	rm -rf "$dir"
}
trap cleanup EXIT
field() { sed -n "s/.*; $1 \\([0-9.]*\\) s;.*/\\1/p"; }

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
start_servers() {
	local i
	servers=""
	for i in 0 1 2; do
		rm -rf "$dir/store$i" "$dir/port$i"
		"$SERVER" --listen 127.0.0.1:0 --port-file "$dir/port$i" --store "$dir/store$i" \
			--secret-file "$dir/secret" 2>>"$dir/servers.log" &
		pids+=($!)
	done
	for i in 0 1 2; do
		# (a deadline only for a server that failed to start: its log says why)
		for _ in $(seq 6000); do [ -s "$dir/port$i" ] && break; sleep 0.1; done
		[ -s "$dir/port$i" ] || { echo "restart.sh: server $i did not start:" >&2; cat "$dir/servers.log" >&2; exit 1; }
		servers+="${servers:+, }127.0.0.1:$(cat "$dir/port$i")"
	done
}

# node I: node I's policy, cache and checkpoint directory under $dir/nI,
# and its version captured in its cache, not shipped.
node() {
	local n="$dir/n$1"
	mkdir -p "$n/ckpt"
	cat >"$n/policy.conf" <<-EOP
	[cache]
	dir = $n/cache
	[cluster]
	servers = $servers
	replicas = 2
	secret_file = $dir/secret
	timeout = 600
	[path $n/ckpt/**]
	EOP
	head -c "$((size * 1024))" /dev/urandom >"$n/ref"
	LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$n/policy.conf" STAGEHAND_FLUSHER=/bin/true \
		cp "$n/ref" "$n/ckpt/f"
}

# Copy {i} of a wave starting at node \$1 is node \$1 + {i}.
cat >"$dir/checkpoint.sh" <<EOS
#!/bin/sh
exec "$S" flush --policy "$dir/n\$((\$1 + \$2))/policy.conf" --wait --timeout 600
EOS
cat >"$dir/restart.sh" <<EOS
#!/bin/sh
n="$dir/n\$((\$1 + \$2))"
exec "$S" restore --policy "\$n/policy.conf" --to "\$n/back" "\$n/ckpt/f"
EOS
chmod +x "$dir/checkpoint.sh" "$dir/restart.sh"

echo "stagehand restart benchmark: N nodes, a file of ${size} KiB each, 3 servers on loopback, replicas = 2, $(nproc) CPUs"
printf '| nodes | checkpoint, s | restart, s | restart / checkpoint (target <= 1x) | restart per node, ms | restore latency median, p95, s |\n|---|---|---|---|---|---|\n'
status=0
first_per="" first_n=""
for n in ${clients//,/ }; do
	stop_flushers
	stop_servers
	rm -rf "$dir"/n*
	start_servers
	for ((i = 0; i < n; i++)); do node "$i"; done
	w=$n
	[ "$wave" -gt 0 ] && [ "$wave" -lt "$n" ] && w=$wave
	: >"$dir/checkpoint.out"
	for ((i = 0; i < n; i += w)); do
		python3 "$CROWD" "$((n - i < w ? n - i : w))" "$dir/checkpoint.sh" "$i" '{i}' \
			>>"$dir/checkpoint.out" || { status=1; cat "$dir/checkpoint.out" >&2; }
		stop_flushers
	done
	rm -rf "$dir"/n*/cache
	: >"$dir/restart.out"
	for ((i = 0; i < n; i += w)); do
		python3 "$CROWD" "$((n - i < w ? n - i : w))" "$dir/restart.sh" "$i" '{i}' \
			>>"$dir/restart.out" || { status=1; cat "$dir/restart.out" >&2; }
	done
	bad=0
	for ((i = 0; i < n; i++)); do
		cmp -s "$dir/n$i/ref" "$dir/n$i/back$dir/n$i/ckpt/f" || bad=$((bad + 1))
	done
	[ "$bad" -eq 0 ] || { status=1; echo "restart.sh: $bad of $n restores are not byte for byte" >&2; }
	ck=$(field wall <"$dir/checkpoint.out" | awk '{ s += $1 } END { print s }')
	rs=$(field wall <"$dir/restart.out" | awk '{ s += $1 } END { print s }')
	# (of the last wave)
	lat=$(sed -n 's/.*median \([0-9.]*\) p95 \([0-9.]*\) .*/\1, \2/p' "$dir/restart.out" | tail -1)
	per=$(awk -v w="$rs" -v n="$n" 'BEGIN { printf "%.2f", w * 1000 / n }')
	nw=$n
	[ "$w" -lt "$n" ] && nw="$n ($(((n + w - 1) / w)) waves of $w)"
	awk -v n="$nw" -v c="$ck" -v r="$rs" -v p="$per" -v l="$lat" \
		'BEGIN { printf "| %s | %.2f | %.2f | %.2fx | %s | %s |\n", n, c, r, r / c, p, l }'
	[ -n "$first_per" ] || { first_per=$per; first_n=$n; }
	last_per=$per last_n=$n
done
awk -v a="$first_per" -v b="$last_per" -v m="$first_n" -v n="$last_n" 'BEGIN {
	printf "restart per node, %d -> %d nodes: %.2fx (target <= 1.3x)\n", m, n, b / a }'
hwm=""
for p in "${pids[@]}"; do
	hwm+="${hwm:+, }$(awk '/VmHWM/ { printf "%d MiB", $2 / 1024 }' "/proc/$p/status")"
done
echo "servers' peak RSS (the last N): $hwm; restores failed or not byte for byte: see above ($status)"
exit "$status"
