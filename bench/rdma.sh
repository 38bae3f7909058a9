#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# RDMA against TCP, side by side in one emulated guest with two soft-RoCE
# devices (scripts/rdma-vm.sh boots it): a flusher on one device ships a
# checkpoint to a server on the other, then the file is restored from that
# server, once over each transport. Reports bytes moved per second, the
# server's CPU seconds per GB, and the messages per chunk, with RDMA/TCP
# ratios. Soft-RoCE in an emulated guest is a functional test bed: the
# absolute figures say nothing of real hardware (docs/RDMA.md).
#
#   bench/rdma.sh [--size MIB] [--chunk SIZE]     (on the host: boots a guest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
size=128
chunk=1M
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$(bench_value "$@"); shift 2 ;;
	--chunk) chunk=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="$root/build"
[ -x "$build/server/stagehand-server" ] || { echo "rdma.sh: build first (scripts/build.sh)" >&2; exit 1; }
if [ -z "${RXE_IP0:-}" ]; then
	# On the host: the same script, inside the guest.
	exec "$root/scripts/rdma-vm.sh" -- "$0" --size "$size" --chunk "$chunk"
fi

S="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
work=/run/stagehand-bench
mkdir -p "$work"
mountpoint -q "$work" || mount -t tmpfs -o size=75% tmpfs "$work"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
head -c "$((size << 20))" /dev/urandom >"$work/src"

# CPU seconds (user + system) a process has used.
cpu_of() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }

# run TRANSPORT: prints "MBps_flush cpu_per_GB msgs_per_chunk MBps_restore".
run() {
	local t=$1 d="$work/$1"
	rm -rf "$d"
	mkdir -p "$d/ckpt"
	"$SERVER" --listen "$RXE_IP0:0" --port-file "$d/port" --transport "$t" --store "$d/store" \
		--secret-file "$work/secret" 2>"$d/server.log" >/dev/null </dev/null &
	local spid=$!
	for _ in $(seq 100); do [ -s "$d/port" ] && break; sleep 0.1; done
	cat >"$d/policy.conf" <<EOP
[cache]
dir = $d/cache
[cluster]
servers = $RXE_IP0:$(cat "$d/port")
replicas = 1
transport = $t
secret_file = $work/secret
[path $d/ckpt/*]
chunk_size = $chunk
chunking = fixed
compress = off
keep = 2
durability = local
EOP
	# Staged with no flusher started, so that the timed one below ships it all.
	STAGEHAND_FLUSHER=/bin/true "$S" run --policy "$d/policy.conf" -- cp "$work/src" "$d/ckpt/f"
	local cpu0 t0 t1 cpu1
	cpu0=$(cpu_of "$spid")
	t0=$(now)
	"$build/flusher/stagehand-flusher" --policy "$d/policy.conf" --once 2>"$d/flusher.log" \
		>/dev/null </dev/null
	t1=$(now)
	cpu1=$(cpu_of "$spid")
	grep -q "connected over $t" "$d/flusher.log" || { cat "$d/flusher.log" >&2; exit 1; }
	local line chunks msgs
	line=$(grep "chunks sent" "$d/flusher.log")
	chunks=$(sed 's/.*: \([0-9]*\) chunks sent.*/\1/' <<<"$line")
	msgs=$(sed 's/.* \([0-9]*\) messages out, \([0-9]*\) in.*/\1 \2/' <<<"$line")
	rm -rf "$d/cache"
	local r0 r1
	r0=$(now)
	"$S" restore --policy "$d/policy.conf" --to "$d/restored" "$d/ckpt/f" >/dev/null 2>&1
	r1=$(now)
	cmp -s "$work/src" "$d/restored$d/ckpt/f" || { echo "rdma.sh: $t: restored file differs" >&2; exit 1; }
	kill "$spid"
	wait "$spid" 2>/dev/null || true
	awk -v s="$size" -v a="$t0" -v b="$t1" -v c0="$cpu0" -v c1="$cpu1" -v n="$chunks" \
	    -v m="$msgs" -v ra="$r0" -v rb="$r1" 'BEGIN {
		split(m, mm, " ");
		printf "%.1f %.2f %.2f %.1f\n", s / (b - a), (c1 - c0) / (s / 1024),
		       (mm[1] + mm[2]) / n, s / (rb - ra) }'
}

trap 'pkill -f "$SERVER" 2>/dev/null || true' EXIT
echo "== $size MiB of random data, chunk $chunk, one server, in the guest ($(nproc) vCPUs)"
tcp=$(run tcp) && rdma=$(run rdma) || { echo "rdma.sh: a run failed" >&2; exit 1; }
read -r tf tc tm tr <<<"$tcp"
read -r rf rc rm rr <<<"$rdma"
printf '%-34s %10s %10s %12s\n' "" "tcp" "rdma" "rdma/tcp"
printf '%-34s %10s %10s %11.2fx\n' "flush, MB/s" "$tf" "$rf" "$(awk -v a="$rf" -v b="$tf" 'BEGIN{print a/b}')"
printf '%-34s %10s %10s %11.2fx\n' "server CPU s per GB received" "$tc" "$rc" "$(awk -v a="$rc" -v b="$tc" 'BEGIN{print b ? a/b : 0}')"
printf '%-34s %10s %10s %11.2fx\n' "messages per chunk (both ways)" "$tm" "$rm" "$(awk -v a="$rm" -v b="$tm" 'BEGIN{print a/b}')"
printf '%-34s %10s %10s %11.2fx\n' "restore from the server, MB/s" "$tr" "$rr" "$(awk -v a="$rr" -v b="$tr" 'BEGIN{print a/b}')"
