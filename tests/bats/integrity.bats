#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Sessions that cannot be hijacked: a man in the middle (tests/progs/
# wire-proxy.py) between real clients (ls, restore, the flusher) and a real
# server injects, replays or reorders frames after the client's login; the
# server refuses the frame, says why in its log, and closes. Versions that do
# not overlap are named on both sides, a malformed frame before the login
# gets its ERROR, and a secret file others could change is refused.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

PROXY="$BATS_TEST_DIRNAME/../progs/wire-proxy.py"

setup() {
	cluster_setup
	[ "$TRANSPORT" = tcp ] || skip "the proxy relays TCP"
}

teardown() {
	cluster_teardown
}

# start_proxy [--every] MODE: a proxy in front of server 0 that tampers with
# its first connection (or every one); $PROXY_ADDR is its address,
# $T/proxy.log its account of what it did.
start_proxy() {
	local every=()
	[ "$1" != --every ] || { every=(--every) && shift; }
	"$PYTHON" "$PROXY" "${every[@]}" "$T/proxy.port" "$(srv_addr 0)" "$1" "$T/proxy.log" \
		</dev/null >/dev/null 2>"$T/proxy.err" &
	track $!
	disown $!
	wait_for "$WAIT" test -s "$T/proxy.port" || fail "proxy: $(cat "$T/proxy.err")"
	PROXY_ADDR="127.0.0.1:$(cat "$T/proxy.port")"
}

# via_proxy FILE: the policy FILE with the proxy as its only server.
via_proxy() {
	sed -i "s/^servers = .*/servers = $PROXY_ADDR/" "$1"
}

# stores $CKPT/f on server 0, directly.
store_file() {
	cluster_default_policy cluster.replicas=1
	ship_file 300000
}

# The server refused the tampered frame: it never answered it, logged the
# refusal with the proxy's address, and told the client before closing.
assert_refused() {
	local log
	log=$(cat "$T/proxy.log")
	[[ "$log" != *"answered the"* ]] || fail "the server took the frame for the client's: $log"
	[[ "$log" == *"server ERROR tag 0: "*"fails its MAC"* ]] || fail "proxy: $log"
	[[ "$log" == *"server closed"* ]] || fail "proxy: $log"
	grep -q "127\.0\.0\.1:[0-9]*: dropped: .*fails its MAC" "$T/srv0.log" ||
		fail "server log: $(cat "$T/srv0.log")"
}

@test "integrity: through a plain relaying proxy, flush, ls and restore work" {
	start_servers 1
	start_proxy relay
	cluster_default_policy cluster.replicas=1
	via_proxy "$POLICY"
	ship_file 300000
	run "$STAGEHAND" ls
	[ "$status" -eq 0 ]
	[[ "$output" == *"$CKPT/f "* ]] || fail "ls: $output"
	assert_restores "$REF/f" "$CKPT/f"
	! grep -q "MAC" "$T/srv0.log"
}

@test "integrity: a LIST injected after the client's login is refused" {
	start_servers 1
	store_file
	start_proxy --every inject-list
	via_proxy "$POLICY"
	run "$STAGEHAND" ls
	grep -q "injected LIST" "$T/proxy.log"
	assert_refused
	# the client learns why its connection ended
	[[ "$output" == *"fails its MAC"* ]] || fail "ls: $output"
	[[ "$output" != *"$CKPT/f "* ]] || fail "ls: $output"
}

@test "integrity: a GET_CHUNK injected after the login of a restore is refused" {
	start_servers 1
	store_file
	start_proxy --every inject-get
	via_proxy "$POLICY"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	grep -q "injected GET_CHUNK" "$T/proxy.log"
	assert_refused
	[ "$status" -ne 0 ] || fail "restore: $output"
	[[ "$output" == *"fails its MAC"* ]] || fail "restore: $output"
	[ ! -e "$BACK$CKPT/f" ]
}

@test "integrity: a replayed request is refused" {
	start_servers 1
	store_file
	start_proxy replay
	via_proxy "$POLICY"
	run "$STAGEHAND" ls
	grep -q "replayed LIST" "$T/proxy.log"
	assert_refused
}

@test "integrity: reordered PUT_CHUNKs are refused; the flusher reconnects and ships" {
	start_servers 1
	start_proxy reorder
	cluster_default_policy cluster.replicas=1
	via_proxy "$POLICY"
	# several chunks, streamed back to back on one connection
	ship_file 1000000
	grep -q "reordered PUT_CHUNK" "$T/proxy.log"
	assert_refused
	assert_restores "$REF/f" "$CKPT/f"
}

PEER="$BATS_TEST_DIRNAME/../progs/wire-peer.py"

@test "protocol: a client whose versions do not overlap the server's names both ranges" {
	local range
	for range in "1 1" "3 4"; do
		rm -f "$T/peer.port"
		# shellcheck disable=SC2086
		"$PYTHON" "$PEER" server "$T/peer.port" $range </dev/null >/dev/null 2>&1 &
		track $!
		disown $!
		wait_for "$WAIT" test -s "$T/peer.port"
		cat >"$T/old.conf" <<EOP
[cache]
dir = $T/cache
[cluster]
servers = 127.0.0.1:$(cat "$T/peer.port")
secret_file = $SECRET
EOP
		run "$STAGEHAND" ls --policy "$T/old.conf"
		[[ "$output" == *"the server speaks protocol versions ${range/ /..}, this client 2..2"* ]] ||
			fail "ls against a server of versions $range: $output"
	done
}

@test "protocol: a version-1 client is refused with an ERROR naming both versions, or served with --accept-v1" {
	start_servers 1
	store_file
	run "$PYTHON" "$PEER" v1-client "$(srv_addr 0)" "$SECRET" "$(id -u)"
	[ "$output" = "ERROR 5 the client speaks protocol version 1, this server 2..2 (1..2 when started with --accept-v1): upgrade the client" ] ||
		fail "v1 client: $output"
	grep -q "127\.0\.0\.1:[0-9]*: dropped: authentication failed: the client speaks protocol version 1, this server 2\.\.2" "$T/srv0.log" ||
		fail "server log: $(cat "$T/srv0.log")"
	stop_server 0
	start_server 0 --accept-v1
	run "$PYTHON" "$PEER" v1-client "$(srv_addr 0)" "$SECRET" "$(id -u)"
	[ "$output" = "AUTH_OK
LIST_REPLY 1" ] || fail "v1 client with --accept-v1: $output"
	grep -q "uid $(id -u) speaks protocol version 1: its frames carry no MAC" "$T/srv0.log"
}

@test "protocol: a malformed frame before authentication gets an ERROR before the close" {
	start_servers 1
	local kind
	for kind in magic long auth; do
		run "$PYTHON" "$PEER" garbage "$(srv_addr 0)" "$kind"
		[[ "$output" == "ERROR 5 malformed "*" before authentication" ]] || fail "$kind: $output"
	done
	[ "$(grep -c "dropped: authentication failed: malformed" "$T/srv0.log")" -eq 3 ] ||
		fail "server log: $(cat "$T/srv0.log")"
}

# gave_up_or_listens PID: has the server PID exited, or written its port?
gave_up_or_listens() {
	pid_gone "$1" || [ -s "$T/gw.port" ]
}

@test "secret: a secret or key file its group may write is refused, naming the file and its mode" {
	cp "$SECRET" "$T/shared-secret"
	chmod 660 "$T/shared-secret"
	# the server gives up, or (wrongly) starts listening
	"$SERVER" --listen 127.0.0.1:0 --store "$T/store" --secret-file "$T/shared-secret" \
		--port-file "$T/gw.port" </dev/null >/dev/null 2>"$T/gw.err" 3>&- &
	local pid=$!
	track "$pid"
	disown "$pid"
	wait_for "$WAIT" gave_up_or_listens "$pid"
	[ ! -s "$T/gw.port" ] || fail "the server started with a secret its group may write"
	grep -q "secret file '$T/shared-secret': writable by its group (mode 0660)" "$T/gw.err" ||
		fail "server: $(cat "$T/gw.err")"
	start_servers 1
	chmod 620 "$T/shared-secret"
	cluster_policy "$T/gw.conf" "$T/cache" "$CKPT/**" cluster.replicas=1 cluster.secret_file="$T/shared-secret"
	run "$STAGEHAND" ls --policy "$T/gw.conf"
	[ "$status" -ne 0 ]
	[[ "$output" == *"secret file '$T/shared-secret': writable by its group (mode 0620)"* ]] ||
		fail "ls: $output"
	# readable by the group (a service group sharing it) is fine
	chmod 640 "$T/shared-secret"
	run "$STAGEHAND" ls --policy "$T/gw.conf"
	[ "$status" -eq 0 ] || fail "ls with mode 0640: $output"
}
