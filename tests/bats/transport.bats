#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Choosing the transport: transport = rdma where RDMA is impossible is a clear
# error at start, and auto falls back to TCP, saying so in the flusher's log
# and in `stagehand status`, and loses nothing. (The cluster tests run over
# RDMA itself in an emulated guest: tests/rdma/.)

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

have_rdma_device() {
	compgen -G "/sys/class/infiniband/*" >/dev/null
}

# set_transport POLICY VALUE: the [cluster] transport of a policy.
set_transport() {
	sed -i -e '/^transport = /d' -e "/^\[cluster\]/a transport = $2" "$1"
}

@test "transport = rdma on a node without an RDMA device: the flusher refuses to start and says why" {
	have_rdma_device && skip "this node has an RDMA device"
	start_servers 1
	cluster_default_policy cluster.replicas=1
	set_transport "$POLICY" rdma
	run "$FLUSHER" --policy "$POLICY" --once
	[ "$status" -ne 0 ] || fail "the flusher started: $output"
	[[ "$output" == *"transport = rdma, but this node has no RDMA device; use tcp or auto"* ]] ||
		fail "no clear reason: $output"
	# the tools say the same for every server
	run "$STAGEHAND" ls --policy "$POLICY"
	[[ "$output" == *"server ${SRV_HOST[0]}:${SRV_PORT[0]}: "*"no RDMA device"* ]] ||
		fail "ls: $output"
}

@test "stagehand-server --transport rdma without an RDMA device refuses to start; a bad --transport is a usage error" {
	have_rdma_device && skip "this node has an RDMA device"
	run "$SERVER" --listen 127.0.0.1:0 --store "$T/srv" --secret-file "$SECRET" --transport rdma
	[ "$status" -eq 1 ] || fail "status $status: $output"
	[[ "$output" == *"--transport rdma: this node has no RDMA device"* ]] || fail "$output"
	run "$SERVER" --listen 127.0.0.1:0 --store "$T/srv" --secret-file "$SECRET" --transport udp
	[ "$status" -eq 2 ] && [[ "$output" == *"bad --transport 'udp' (tcp, rdma or auto)"* ]] ||
		fail "status $status: $output"
}

@test "transport = auto where RDMA is impossible: TCP, the log and status say why, every version restores" {
	# Servers that accept TCP only: auto must fall back even on a node that
	# has a device.
	start_servers 2 --transport tcp
	cluster_default_policy
	set_transport "$POLICY" auto
	mkdir -p "$CKPT"
	random_file "$REF/f.1" 300000
	mutate "$REF/f.1" "$REF/f.2"
	shim cp "$REF/f.1" "$CKPT/f"
	shim cp "$REF/f.2" "$CKPT/f"
	run "$STAGEHAND" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	local i s
	for ((i = 0; i < 2; i++)); do
		s="${SRV_HOST[$i]}:${SRV_PORT[$i]}"
		grep -q "server $s: rdma unavailable (.*); using tcp" "$CACHE/flusher.log" ||
			fail "no fallback notice for $s: $(cat "$CACHE/flusher.log")"
		grep -q "server $s: connected over tcp" "$CACHE/flusher.log" || fail "$s: not over tcp"
	done
	run "$STAGEHAND" status --policy "$POLICY"
	[ "$status" -eq 0 ]
	[ "$(grep -c " over tcp (not rdma: .*)\$" <<<"$output")" -eq 2 ] || fail "status: $output"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	for v in 1 2; do
		restore_to "$POLICY" "$v" "$T/r$v" "$CKPT/f"
		cmp "$REF/f.$v" "$T/r$v$CKPT/f" || fail "version $v differs"
	done
}

@test "transport = tcp: no attempt at RDMA, nothing said about it" {
	start_servers 1
	cluster_default_policy cluster.replicas=1
	set_transport "$POLICY" tcp
	mkdir -p "$CKPT"
	random_file "$REF/f" 100000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	grep -q "connected over tcp" "$CACHE/flusher.log"
	! grep -q "rdma" "$CACHE/flusher.log" || fail "$(cat "$CACHE/flusher.log")"
	run "$STAGEHAND" status --policy "$POLICY"
	[[ "$output" == *" over tcp"* && "$output" != *"not rdma"* ]] || fail "$output"
}

# rdma_packets: the RoCE packets every RDMA device of this host has received.
rdma_packets() {
	cat /sys/class/infiniband/*/ports/*/hw_counters/rcvd_pkts 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}

# server_has_input I PACKETS: something came for server I, stopped, from its
# client: over TCP, a connection of its port holds bytes it has not read (or
# one waits to be accepted); over RDMA, where the kernel takes the packets
# without it, the devices received some since they had received PACKETS.
server_has_input() {
	local i="$1" packets="$2" via="$TRANSPORT"
	if [ "$via" = auto ]; then
		via=$(sed -n "s/.*server $(srv_re "$i"): connected over \([a-z]*\).*/\1/p" \
			"$CACHE/flusher.log" | tail -1)
	fi
	if [ "$via" = rdma ]; then
		[ "$(rdma_packets)" -gt "$packets" ]
	else
		ss -Htan "( sport = :${SRV_PORT[$i]} )" | awk '$2 > 0 { found = 1 } END { exit !found }'
	fi
}

@test "a server stopped while the flusher ships to it, and resumed: the flusher waits, nothing is lost" {
	start_servers 1
	cluster_default_policy cluster.replicas=1
	mkdir -p "$CKPT"
	random_file "$REF/f.1" 300000
	random_file "$REF/f.2" $((8 << 20))
	shim cp "$REF/f.1" "$CKPT/f"
	run "$STAGEHAND" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	# The server stops; then a version comes that only it can take. It
	# stays stopped until the flusher has sent it something (however long
	# that takes here): the flusher then waits for its answer. And 2 s
	# more: the pause itself, longer than the flusher's own wake-ups (1 s),
	# which must not make it give up on a server that has not timed out
	# (the policy's timeout is the suite's deadline). Nothing is waited
	# for during it: a slower machine changes nothing.
	local packets
	packets=$(rdma_packets)
	kill -STOP "${SRV_PID[0]}"
	shim cp "$REF/f.2" "$CKPT/f"
	wait_for "$WAIT" server_has_input 0 "$packets" ||
		fail "the flusher never sent anything to the stopped server: $(cat "$CACHE/flusher.log")"
	sleep 2
	queue_empty "$CACHE" && fail "version 2 was replicated while its only server was stopped"
	kill -CONT "${SRV_PID[0]}"
	run "$STAGEHAND" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	! grep -q "shipping failed" "$CACHE/flusher.log" || fail "$(cat "$CACHE/flusher.log")"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	for v in 1 2; do
		restore_to "$POLICY" "$v" "$T/r$v" "$CKPT/f"
		cmp "$REF/f.$v" "$T/r$v$CKPT/f" || fail "version $v differs"
	done
}

@test "over RDMA: a client naming memory it does not own, or referring to memory before it authenticates, is dropped; the server goes on" {
	have_rdma_device || skip "needs an RDMA device (this test runs in the RDMA guest: tests/rdma/run.sh)"
	[ -x "$PROGS/rdma-rogue" ] || skip "built without RDMA"
	start_servers 1 --transport rdma
	run "$PROGS/rdma-rogue" "${SRV_HOST[0]}:${SRV_PORT[0]}" "$SECRET"
	[ "$status" -eq 0 ] || fail "$output"
	[ "$(grep -c " dropped\$" <<<"$output")" -eq 3 ] || fail "$output"
	grep -q "rdma: a read of the peer's memory failed" "$T/srv0.log" ||
		fail "the server did not read, or did not say so: $(cat "$T/srv0.log")"
	# still serving, over RDMA
	cluster_default_policy cluster.replicas=1
	set_transport "$POLICY" rdma
	mkdir -p "$CKPT"
	random_file "$REF/f" 200000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	grep -q "connected over rdma" "$CACHE/flusher.log"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	restore_to "$POLICY" 1 "$T/r" "$CKPT/f"
	cmp "$REF/f" "$T/r$CKPT/f"
}
