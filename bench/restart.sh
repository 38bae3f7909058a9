#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A whole job restarting at once, on loopback: N restore processes and M
# flushes (each a node's cache with one version to ship) start at the same
# moment against 3 servers (replicas = 2). Prints the wall time against one
# restore alone multiplied by N (ratio > 1: the crowd is served faster than
# one client after another would be), the latencies, how many failed (none
# may), and the servers' peak RSS. Every restored file is compared.
#
#   bench/restart.sh [--clients N] [--flushes M] [--size KIB] [--dir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
clients=1000
flushes=50
size=256
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--clients) clients=$2; shift 2 ;;
	--flushes) flushes=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	-h|--help) sed -n '3,10p' "$0"; exit 0 ;;
	*) echo "restart.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
build="$root/build"
S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
CROWD="$root/tests/progs/crowd.py"
[ -x "$SERVER" ] || { echo "restart.sh: build first (meson compile -C build)" >&2; exit 1; }
[ -n "$dir" ] || dir=/tmp
mkdir -p "$dir"
dir=$(mktemp -d "$(cd "$dir" && pwd)/shr.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "$dir"/cache*/flusher.lock; do
		[ -e "$p" ] && kill "$(tr -dc 0-9 <"$p")" 2>/dev/null || true
	done
	rm -rf "$dir"
}
trap cleanup EXIT
now() { date +%s.%N; }

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
servers=""
for i in 0 1 2; do
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
# policy NAME: a node's policy, its cache $dir/cacheNAME, its files $dir/ckptNAME
policy() {
	cat >"$dir/$1.conf" <<EOP
[cache]
dir = $dir/cache$1
[cluster]
servers = $servers
replicas = 2
secret_file = $dir/secret
timeout = 300
[path $dir/ckpt$1/**]
chunk_size = 64K
chunking = fixed
EOP
	mkdir -p "$dir/ckpt$1"
}

# The checkpoint every restore fetches, on the servers alone.
policy main
head -c "$((size * 1024))" /dev/urandom >"$dir/ref"
LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/main.conf" cp "$dir/ref" "$dir/ckptmain/f"
"$S" flush --policy "$dir/main.conf" --wait --timeout 300 >/dev/null
kill "$(tr -dc 0-9 <"$dir/cachemain/flusher.lock")"
rm -rf "$dir/cachemain"
# The nodes that flush with the crowd: a version each, not yet shipped.
for ((i = 0; i < flushes; i++)); do
	policy "$i"
	head -c "$((size * 1024))" /dev/urandom >"$dir/ref$i"
	LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/$i.conf" STAGEHAND_FLUSHER=/bin/true \
		cp "$dir/ref$i" "$dir/ckpt$i/f"
done

# One restore alone (the median of 3).
for k in 1 2 3; do
	rm -rf "$dir/one"
	t0=$(now)
	"$S" restore --policy "$dir/main.conf" --to "$dir/one" "$dir/ckptmain/f" >/dev/null
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
done | sort -g | sed -n 2p >"$dir/one.t"
one=$(cat "$dir/one.t")

cat >"$dir/client.sh" <<EOS
#!/bin/sh
if [ "\$1" -lt $flushes ]; then
	exec "$S" flush --policy "$dir/\$1.conf" --wait --timeout 300
fi
exec "$S" restore --policy "$dir/main.conf" --to "$dir/back\$1" "$dir/ckptmain/f"
EOS
chmod +x "$dir/client.sh"
echo "stagehand restart benchmark: $clients restores and $flushes flushes of ${size} KiB at once, 3 servers on loopback, replicas = 2, $(nproc) CPUs"
status=0
python3 "$CROWD" $((clients + flushes)) "$dir/client.sh" '{i}' >"$dir/crowd.out" || status=1
cat "$dir/crowd.out"
# from the moment they all go (not counting the start of 1,000 processes)
wall=$(sed -n 's/.*; wall \([0-9.]*\) s;.*/\1/p' "$dir/crowd.out")
bad=0
for ((i = flushes; i < clients + flushes; i++)); do
	cmp -s "$dir/ref" "$dir/back$i$dir/ckptmain/f" || bad=$((bad + 1))
done
hwm=""
for p in "${pids[@]}"; do
	hwm+="${hwm:+, }$(awk '/VmHWM/ { printf "%d MiB", $2 / 1024 }' "/proc/$p/status")"
done
awk -v n="$clients" -v one="$one" -v wall="$wall" 'BEGIN {
	printf "one restore alone: %.3f s; x %d = %.1f s; the crowd (and the flushes): %.2f s; ratio %.1f\n",
		one, n, one * n, wall, one * n / wall }'
echo "restores not byte for byte: $bad; servers' peak RSS: $hwm"
refused=$(grep -c "refused (busy)" "$dir/servers.log" || true)
echo "servers' log lines about refusals (the log keeps 20 per 10 s of each message): $refused"
[ "$status" -eq 0 ] && [ "$bad" -eq 0 ]
