#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# A server nobody can lock out: a whole job restarting at once, and hostile
# clients (tests/progs/abuse.c) that open connections by the hundred without
# logging in, trickle bytes, sit idle once logged in or send oversized
# frames. Through each, real restores from real servers on loopback succeed
# byte for byte; their latencies are printed (bats --tap shows them as
# comments), never bounded: timings belong in bench/restart.sh.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

CROWD="$BATS_TEST_DIRNAME/../progs/crowd.py"
# Not the test's own uid: the attacker logs in as another user.
ATTACKER_UID=4242

setup() {
	cluster_setup
	ATTACKS=()
}

teardown() {
	stop_attacks
	cluster_teardown
}

# staged N [KEY=VALUE...]: N servers (further options in SERVER_OPTS), and
# $REF/f (256 KiB, 4 chunks) on them alone: flushed, the cache removed.
staged() {
	start_servers "$1" "${SERVER_OPTS[@]}"
	shift
	cluster_default_policy "$@"
	ship_file 262144
}

# attack MODE N [ARGS...]: starts tests/progs/abuse against server 0 and
# waits until each of its N connections has been tried.
attack() {
	local mode="$1" n="$2" k=${#ATTACKS[@]}
	shift 2
	"$PROGS/abuse" "$mode" "$(srv_addr 0)" "$n" --ready "$T/attack$k.ready" "$@" \
		>"$T/attack$k.out" 2>&1 3>&- &
	ATTACKS+=("$!")
	track "$!"
	wait_for "$WAIT" test -e "$T/attack$k.ready" || fail "attack $mode: $(cat "$T/attack$k.out")"
}

# Stops the attacks (they print what they did).
stop_attacks() {
	local k
	for k in "${!ATTACKS[@]}"; do
		kill -TERM "${ATTACKS[$k]}" 2>/dev/null || true
		wait_for "$WAIT" pid_gone "${ATTACKS[$k]}"
		echo "# $(cat "$T/attack$k.out")" >&3
	done
	ATTACKS=()
}

# restore_during WHAT: three restores of $CKPT/f, one after the other, each
# byte for byte; prints their latencies.
restore_during() {
	local k t0 ms
	for k in 1 2 3; do
		rm -rf "$BACK"
		t0=$(date +%s%N)
		run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
		ms=$((($(date +%s%N) - t0) / 1000000))
		[ "$status" -eq 0 ] || fail "restore $k during $1: $output"
		cmp "$REF/f" "$BACK$CKPT/f" || fail "restore $k during $1 differs"
		echo "# restore during $1: $ms ms" >&3
	done
}

# kib PID FIELD: a memory figure of /proc/PID/status (VmRSS, VmHWM) in KiB.
kib() {
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

# threads PID: how many threads the process runs.
threads() {
	awk '$1 == "Threads:" { print $2 }' "/proc/$1/status"
}

# connection_threads PID: the threads of the server PID that serve
# connections: all but the store's own (named seal, collect, scrub,
# metrics, and the kernel's io_uring workers of its writes, iou-*).
connection_threads() {
	cat /proc/"$1"/task/*/comm 2>/dev/null | grep -cvx 'seal\|collect\|scrub\|metrics\|iou-.*'
}

# few_threads PID WHAT: the server PID comes down to a few threads (the
# loops, one worker per core, the store's own; workers started for a crowd
# end once idle), and says how many; fails naming WHAT if it does not.
few_threads() {
	local pid=$1
	wait_for "$WAIT" eval '[ "$(threads "$pid")" -le $((2 * $(nproc) + 8)) ]' ||
		fail "$(threads "$pid") threads for $2"
	echo "# server threads for $2: $(threads "$pid")" >&3
}

@test "a whole job restarts at once: 950 restores and 50 flushes, separate processes, 3 servers, all byte for byte" {
	SERVER_OPTS=()
	staged 3
	# 50 nodes with a version each, not yet shipped: their flushers start
	# with the crowd
	local i NODES=50
	for ((i = 0; i < NODES; i++)); do
		mkdir -p "$T/ckpt$i"
		cluster_policy "$T/node$i.conf" "$T/cache$i" "$T/ckpt$i/**"
		random_file "$REF/g$i" 100000
		STAGEHAND_POLICY="$T/node$i.conf" STAGEHAND_FLUSHER=/bin/true shim cp "$REF/g$i" "$T/ckpt$i/g"
	done
	cat >"$T/client.sh" <<EOS
#!/bin/sh
if [ "\$1" -lt $NODES ]; then
	exec "$STAGEHAND" flush --policy "$T/node\$1.conf" --wait --timeout "$WAIT"
fi
exec "$STAGEHAND" restore --policy "$POLICY" --to "$T/back\$1" "$CKPT/f"
EOS
	chmod +x "$T/client.sh"
	run "$PYTHON" "$CROWD" 1000 "$T/client.sh" '{i}'
	echo "# $output" | head -1 >&3
	[ "$status" -eq 0 ] || fail "$output"
	for ((i = NODES; i < 1000; i++)); do
		cmp "$REF/f" "$T/back$i$CKPT/f" || fail "restore $i differs"
	done
	# every node's version is on the servers: restored without its cache
	for ((i = 0; i < NODES; i++)); do
		stop_flusher "$T/cache$i"
		rm -rf "$T/cache$i" "$BACK"
		run "$STAGEHAND" restore --policy "$T/node$i.conf" --to "$BACK" "$T/ckpt$i/g"
		[ "$status" -eq 0 ] || fail "restore of node $i's version: $output"
		cmp "$REF/g$i" "$BACK$T/ckpt$i/g"
	done
}

@test "hundreds of connections that never log in, reopened at any rate: restores go on" {
	SERVER_OPTS=()
	staged 1 cluster.replicas=1
	restore_during "no attack"
	# from another address: what a stranger is
	attack preauth 300 --from 127.0.0.2
	restore_during "300 connections that never log in"
}

@test "slowloris, before and after logging in: restores go on" {
	# the attacker's uid may hold 75 of the 100 connections
	SERVER_OPTS=(--max-connections 100)
	staged 1 cluster.replicas=1
	attack slowloris 300 --from 127.0.0.2
	attack slowloris 100 --secret "$SECRET" --uid "$ATTACKER_UID"
	restore_during "400 connections trickling a byte a second"
	# a frame arriving a byte at a time waits in the server's loop, not in
	# a thread (the old server: one for each of the 139 it held)
	few_threads "${SRV_PID[0]}" "400 trickling connections"
}

@test "hundreds of idle logged-in connections: restores go on" {
	# the attacker's uid may hold every connection: idle ones make room
	SERVER_OPTS=(--max-connections 100 --max-per-user 100)
	staged 1 cluster.replicas=1
	attack idle 300 --secret "$SECRET" --uid "$ATTACKER_UID"
	restore_during "300 idle logged-in connections"
}

@test "3000 idle logged-in connections at the default limits: all held, by a few threads, a few KiB each" {
	# (the old server: 1024 at most, and a thread of its own for each)
	SERVER_OPTS=()
	staged 1 cluster.replicas=1
	local pid="${SRV_PID[0]}" rss0 rss
	rss0=$(kib "$pid" VmRSS)
	attack idle 3000 --secret "$SECRET" --uid "$ATTACKER_UID"
	# the workers that logged them in end once idle
	few_threads "$pid" "3000 idle connections"
	# at rest: one loop per core, and the listener
	wait_for "$WAIT" eval '[ "$(connection_threads "$pid")" -le $((2 + $(nproc))) ]' ||
		fail "$(connection_threads "$pid") threads serve connections, more than 2 + cores"
	rss=$(kib "$pid" VmRSS)
	echo "# 3000 idle connections: $(((rss - rss0) / 3)) bytes each" >&3
	[ $(((rss - rss0) / 3000)) -le 16 ] || fail "$((rss - rss0)) KiB for 3000 connections"
	restore_during "3000 idle logged-in connections"
	stop_attacks
	# (some refused while logging in: 64 at once from one address)
	grep -q ", 3000 authenticated," "$T/attack0.out" ||
		fail "not all held: $(cat "$T/attack0.out")"
}

@test "clients that send requests and never read the replies hold no thread of the server: restores go on" {
	SERVER_OPTS=()
	staged 1 cluster.replicas=1
	attack deaf 24 --secret "$SECRET" --uid "$ATTACKER_UID"
	restore_during "24 connections that never read a reply"
	# (the old server: a thread blocked in each reply for --timeout)
	few_threads "${SRV_PID[0]}" "24 connections that do not read"
}

@test "connections that always have requests at hand take turns with the others: restores go on" {
	SERVER_OPTS=()
	staged 1 cluster.replicas=1
	# as many as the server has threads, and more: each thread, done with
	# one's turn, finds the next at hand (before, none ever waited for the
	# other connections again)
	attack flood $((2 * $(nproc))) --secret "$SECRET" --uid "$ATTACKER_UID"
	restore_during "$((2 * $(nproc))) connections flooding requests"
	stop_attacks
	grep -q ", [1-9][0-9]* frames" "$T/attack0.out" || fail "$(cat "$T/attack0.out")"
}

# memory_attack MODE WHAT: 12 connections of abuse MODE against one server
# while restores go on; the server's peak RSS stays under its bound:
# docs/PROTOCOL.md, "Timeouts and limits": frame buffers and decoding hold
# at most --frame-memory (256 MiB) in all; the rest, 64 MiB at most here.
# Sets PID, the server's.
memory_attack() {
	SERVER_OPTS=()
	staged 1 cluster.replicas=1
	PID="${SRV_PID[0]}"
	echo "# server RSS before: $(kib "$PID" VmRSS) KiB" >&3
	attack "$1" 12 --secret "$SECRET" --uid "$ATTACKER_UID"
	restore_during "12 connections sending $2"
	local hwm
	hwm=$(kib "$PID" VmHWM)
	echo "# server peak RSS: $hwm KiB" >&3
	[ "$hwm" -le $(((256 + 64) * 1024)) ] || fail "peak RSS $hwm KiB"
}

@test "oversized frames: restores go on, the server's memory stays under its bound and is given back" {
	# each connection sends a 64 MiB frame, then stays
	memory_attack oversized "64 MiB frames"
	# the frames were answered: their buffers are given back while the
	# connections stay
	wait_for "$WAIT" eval '[ "$(kib "$PID" VmRSS)" -le $((64 * 1024)) ]' ||
		fail "RSS $(kib "$PID" VmRSS) KiB with the attacker's connections idle"
	echo "# server RSS, the attacker idle: $(kib "$PID" VmRSS) KiB" >&3
}

@test "decompression bombs: small frames expanding to 64 MiB each keep the server's memory under its bound" {
	# each connection sends chunks of 64 MiB of zeros in frames of a few
	# hundred KiB, over and over: checking one decodes it whole
	memory_attack bomb "decompression bombs"
	grep -q "rejected a chunk that fails verification" "$T/srv0.log" ||
		fail "no bomb was checked: $(tail -5 "$T/srv0.log")"
}

@test "headers of large frames from one user hold no memory another user needs: a flush of 1 MiB chunks goes through, and the stalled frames are dropped, saying why" {
	start_servers 1
	# (a deadline shorter than the server's wait for frame memory, 60 s)
	cluster_default_policy cluster.replicas=1 cluster.timeout=30 chunk_size=1M
	# 8 headers of 64 MiB frames, with nothing after them
	attack headers 8 --secret "$SECRET" --uid "$ATTACKER_UID"
	random_file "$REF/f" $((8 << 20))
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output $(cat "$CACHE/flusher.log")"
	grep -q "dropped: uid $ATTACKER_UID: its frame of [0-9]* bytes arrived at 0 KiB/s .* while others waited for frame memory" "$T/srv0.log" ||
		fail "the server: $(tail -20 "$T/srv0.log")"
	! grep "dropped: uid $(id -u):" "$T/srv0.log" || fail "the flush's frames were dropped"
	stop_attacks
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
}

# all_get_in N WHAT: N clients (`stagehand ls` of $CKPT/f) at once, each
# within the policy's timeout; fails unless all N list the file.
all_get_in() {
	local k ok=0 pids=()
	for ((k = 0; k < $1; k++)); do
		"$STAGEHAND" ls "$CKPT/f" >"$T/ls$k.out" 2>&1 3>&- &
		pids+=("$!")
	done
	for k in "${!pids[@]}"; do
		if wait "${pids[$k]}" && grep -q "$CKPT/f " "$T/ls$k.out"; then
			ok=$((ok + 1))
		fi
	done
	echo "# $2: $ok of $1 clients got in" >&3
	[ "$ok" -eq "$1" ] || fail "$2: $ok of $1 clients got in; they said: $(cat "$T"/ls*.out | grep -v "^PATH\\|$CKPT/f " | sort | uniq -c)"
}

@test "connections logging in from a node's address fill its share: 20 of 20 clients from that address get in" {
	# (a deadline shorter than the attack's: the attacker's connections
	# never log in, and are reopened at once)
	SERVER_OPTS=()
	staged 1 cluster.replicas=1 cluster.timeout=30
	# the attacker shares the clients' address, 127.0.0.1, and fills its
	# quarter of --max-handshakes (256)
	attack preauth 64
	all_get_in 20 "64 silent connections from the same address"
}

@test "two users keeping frames in flight on every slot: 20 of 20 clients of a third get in" {
	SERVER_OPTS=(--max-connections 16 --max-per-user 16)
	staged 1 cluster.replicas=1 cluster.timeout=30
	attack slowloris 16 --secret "$SECRET" --uid "$ATTACKER_UID"
	attack slowloris 16 --secret "$SECRET" --uid $((ATTACKER_UID + 1))
	all_get_in 20 "two uids trickling requests on all 16 slots"
}

@test "hostile PUT_MANIFEST frames: refused, the server serves on, and every manifest it serves names only chunks it holds" {
	SERVER_OPTS=()
	start_servers 1
	cluster_default_policy cluster.replicas=1
	random_file "$REF/f" 300000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	run "$PROGS/manifest-fuzz" "$(srv_addr 0)" "$SECRET" "$(id -u)" "$CKPT/f" 2000
	echo "# $output" >&3
	[ "$status" -eq 0 ] || fail "manifest-fuzz: $output"
	[[ "$output" == *"every chunk of each held"* ]] || fail "manifest-fuzz: $output"
	kill -0 "${SRV_PID[0]}" || fail "the server is gone: $(tail -5 "$T/srv0.log")"
	# and the real version still restores, from the server alone
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
}

@test "another user's chunks, known by hash and bytes: not held, not served, not claimable in a manifest, no base for a delta; sent by that user, taken as one copy, and its own after a restart" {
	SERVER_OPTS=()
	start_servers 1
	cluster_default_policy cluster.replicas=1 compress=off
	random_file "$REF/f" 300000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	run "$PROGS/chunk-scope" "$(srv_addr 0)" "$SECRET" "$(id -u)" "$CKPT/f" "$ATTACKER_UID" attack
	echo "# $output" >&3
	[ "$status" -eq 0 ] || fail "chunk-scope attack: $output"
	run "$PROGS/chunk-scope" "$(srv_addr 0)" "$SECRET" "$(id -u)" "$CKPT/f" "$ATTACKER_UID" prove
	echo "# $output" >&3
	[ "$status" -eq 0 ] || fail "chunk-scope prove: $output"
	# After a restart, the pairs come back from the held maps: the same
	# answers, and a third user is still refused.
	stop_server 0
	start_server 0
	run "$PROGS/chunk-scope" "$(srv_addr 0)" "$SECRET" "$(id -u)" "$CKPT/f" "$ATTACKER_UID" check
	echo "# $output" >&3
	[ "$status" -eq 0 ] || fail "chunk-scope check: $output"
	run "$PROGS/chunk-scope" "$(srv_addr 0)" "$SECRET" "$(id -u)" "$CKPT/f" 4343 attack
	[ "$status" -eq 0 ] || fail "chunk-scope attack after the restart: $output"
	# and the owner's version still restores, from the server alone
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
}
