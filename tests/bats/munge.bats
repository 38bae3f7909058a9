#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# auth = munge: real munged daemons started by the test (one for the node,
# one for the server, sharing a key as a cluster's do). Clients hold no
# secret; the server takes the uid from the credential, refuses a credential
# that is expired, replayed, made for another connection or by a munged of
# another key, and keeps serving when its munged restarts.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
	# Outside $T, whose parents only root may enter: nobody talks to the
	# node's munged too. Removed, its processes killed, by teardown.
	USERDIR=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-munge.XXXXXX")
	chmod 755 "$USERDIR"
	M="$USERDIR/munge"
	mkdir -m 700 "$M"
	dd if=/dev/urandom of="$M/cluster.key" bs=1024 count=1 status=none
	dd if=/dev/urandom of="$M/other.key" bs=1024 count=1 status=none
	chmod 600 "$M"/*.key
	start_munged node cluster.key
	start_munged server cluster.key
	NODE_SOCK="$M/node/socket" SERVER_SOCK="$M/server/socket"
}

teardown() {
	cluster_teardown
}

# start_munged NAME KEY: a munged with key $M/KEY, its socket
# $M/NAME/socket (reachable by every user), its log $M/NAME/log.
start_munged() {
	local d="$M/$1"
	mkdir -p "$d"
	chmod 755 "$M" "$d"
	rm -f "$d/socket"
	munged --force --foreground --socket="$d/socket" --key-file="$M/$2" \
		--pid-file="$d/pid" --log-file="$d/log" --seed-file="$d/seed" \
		</dev/null >/dev/null 2>&1 3>&- &
	track $!
	disown $! # no "Killed" notice from bash at teardown
	wait_for "$WAIT" test -S "$d/socket" || fail "munged $1: $(cat "$d/log")"
}

# stop_munged NAME: stops it and waits until it is gone.
stop_munged() {
	local pid
	pid=$(cat "$M/$1/pid")
	kill "$pid"
	wait_for "$WAIT" pid_gone "$pid"
}

# munge_ship_one NAME: one server taking MUNGE credentials, the default
# policy with auth = munge, and $CKPT/NAME (a copy of $REF/NAME, 100000
# random bytes) shipped to it.
munge_ship_one() {
	start_servers 1 --auth munge --munge-socket "$SERVER_SOCK"
	cluster_default_policy cluster.auth=munge cluster.munge_socket="$NODE_SOCK" cluster.replicas=1
	random_file "$REF/$1" 100000
	shim cp "$REF/$1" "$CKPT/$1"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
}

@test "auth = munge: no secret on the node; the server takes the uid from the credential; ls and restore from the servers" {
	start_servers 2 --auth munge --munge-socket "$SERVER_SOCK"
	cluster_default_policy cluster.auth=munge cluster.munge_socket="$NODE_SOCK"
	! grep -q secret_file "$POLICY"
	random_file "$REF/f" 300000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output $(cat "$CACHE/flusher.log")"
	grep -q "version 1 of '$CKPT/f' (uid $(id -u))" "$T/srv0.log" "$T/srv1.log" ||
		fail "the servers: $(cat "$T/srv0.log" "$T/srv1.log")"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -eq 0 ] && [[ "$output" == *" 2 servers"* ]] || fail "ls: $output"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
}

@test "auth = munge: one user can neither list nor restore another's files" {
	munge_ship_one f
	# nobody: the same kind of policy, its own cache, no secret at all
	cluster_policy "$USERDIR/policy.conf" "$USERDIR/cache" "$USERDIR/ckpt/**" \
		cluster.auth=munge cluster.munge_socket="$NODE_SOCK" cluster.replicas=1
	mkdir "$USERDIR/cache" "$USERDIR/ckpt"
	chown 65534:65534 "$USERDIR/cache" "$USERDIR/ckpt"
	local as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env -u STAGEHAND_POLICY)
	run "${as_nobody[@]}" "$STAGEHAND" ls --policy "$USERDIR/policy.conf" "$CKPT/f"
	[[ "$output" != *"$CKPT/f "* ]] || fail "nobody lists root's file: $output"
	run "${as_nobody[@]}" "$STAGEHAND" restore --policy "$USERDIR/policy.conf" \
		--to "$USERDIR/back" "$CKPT/f"
	[ "$status" -ne 0 ] && [ ! -e "$USERDIR/back$CKPT/f" ] || fail "nobody restored it: $output"
	# nobody's own file ships under nobody's uid, which root does not see
	head -c 50000 /dev/urandom >"$USERDIR/mine"
	chmod 644 "$USERDIR/mine"
	run "${as_nobody[@]}" STAGEHAND_POLICY="$USERDIR/policy.conf" LD_PRELOAD="$SHIM" \
		cp "$USERDIR/mine" "$USERDIR/ckpt/mine"
	[ "$status" -eq 0 ] || fail "nobody's copy: $output"
	run "${as_nobody[@]}" "$STAGEHAND" flush --policy "$USERDIR/policy.conf" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "nobody's flush: $output"
	grep -q "version 1 of '$USERDIR/ckpt/mine' (uid 65534)" "$T/srv0.log" ||
		fail "the server: $(cat "$T/srv0.log")"
	run "$STAGEHAND" ls "$USERDIR/ckpt/mine"
	[[ "$output" != *"$USERDIR/ckpt/mine "* ]] || fail "root lists nobody's file: $output"
}

@test "auth = munge: expired, replayed, foreign and misdirected credentials are refused, and the server serves on" {
	start_munged other other.key
	start_servers 1 --auth munge --munge-socket "$SERVER_SOCK"
	local login="$PROGS/munge-login" addr
	addr=$(srv_addr 0)
	run "$login" "$addr" "$NODE_SOCK" expired
	[ "$status" -eq 0 ] && [[ "$output" == "refused: MUNGE credential refused: "*xpired* ]] ||
		fail "expired: $output"
	run "$login" "$addr" "$NODE_SOCK" replayed
	[ "$status" -eq 0 ] && [[ "$output" == *"refused: MUNGE credential refused: "*eplayed* ]] ||
		fail "replayed: $output"
	run "$login" "$addr" "$NODE_SOCK" other-conn
	[ "$status" -eq 0 ] && [[ "$output" == *"made for another connection"* ]] ||
		fail "another connection's: $output"
	run "$login" "$addr" "$NODE_SOCK" foreign "$M/other/socket"
	[ "$status" -eq 0 ] && [[ "$output" == "refused: MUNGE credential refused: "* ]] ||
		fail "another key's: $output"
	run "$login" "$addr" "$NODE_SOCK" old
	[ "$status" -eq 0 ] && [[ "$output" == *"refused: "*"older client"*"upgrade the client"* ]] ||
		fail "an older client's AUTH_MUNGE: $output"
	# each refusal is in the server's log, with the peer
	[ "$(grep -c "MUNGE credential refused" "$T/srv0.log")" -ge 3 ] || fail "$(cat "$T/srv0.log")"
	# and an honest client still logs in
	cluster_default_policy cluster.auth=munge cluster.munge_socket="$NODE_SOCK" cluster.replicas=1
	run "$STAGEHAND" status
	[[ "$output" == *"$addr "*" up "* ]] || fail "status: $output"
}

@test "auth = munge against a server of secrets, and a secret against a server of MUNGE: refused, saying what to change" {
	start_server 0
	start_server 1 --auth munge --munge-socket "$SERVER_SOCK"
	cluster_policy "$T/m.conf" "$T/cacheM" "$CKPT/**" cluster.auth=munge \
		cluster.munge_socket="$NODE_SOCK" cluster.replicas=1
	run "$STAGEHAND" status --policy "$T/m.conf"
	[[ "$output" == *"$(srv_addr 0) "*"down: "*"--auth munge"* ]] || fail "status: $output"
	[[ "$output" == *"$(srv_addr 1) "*" up "* ]] || fail "status: $output"
	cluster_policy "$T/s.conf" "$T/cacheS" "$CKPT/**" cluster.replicas=1
	run "$STAGEHAND" status --policy "$T/s.conf"
	[[ "$output" == *"$(srv_addr 1) "*"down: "*"auth = munge"* ]] || fail "status: $output"
	[[ "$output" == *"$(srv_addr 0) "*" up "* ]] || fail "status: $output"
	# a server may take both
	start_server 2 --auth secret,munge --munge-socket "$SERVER_SOCK"
	cluster_policy "$T/m.conf" "$T/cacheM" "$CKPT/**" cluster.auth=munge \
		cluster.munge_socket="$NODE_SOCK" cluster.replicas=1
	cluster_policy "$T/s.conf" "$T/cacheS" "$CKPT/**" cluster.replicas=1
	run "$STAGEHAND" status --policy "$T/m.conf"
	[[ "$output" == *"$(srv_addr 2) "*" up "* ]] || fail "munge: $output"
	run "$STAGEHAND" status --policy "$T/s.conf"
	[[ "$output" == *"$(srv_addr 2) "*" up "* ]] || fail "secret: $output"
}

@test "auth = munge: the server's munged restarts while a node ships; the flush completes" {
	munge_ship_one f1
	stop_flusher "$CACHE"
	# munged gone: a login is told to try again, and tries
	stop_munged server
	random_file "$REF/f2" 100000
	STAGEHAND_FLUSHER=/bin/true shim cp "$REF/f2" "$CKPT/f2"
	"$STAGEHAND" flush --wait --timeout "$WAIT" >"$T/flush.out" 2>&1 3>&- &
	local flush=$!
	track $flush
	wait_for "$WAIT" grep -q "cannot use MUNGE credentials" "$T/srv0.log" ||
		fail "the server: $(cat "$T/srv0.log")"
	start_munged server cluster.key
	local rc=0
	wait "$flush" || rc=$?
	[ "$rc" -eq 0 ] || fail "flush: $(cat "$T/flush.out" "$CACHE/flusher.log")"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f2"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f2" "$BACK$CKPT/f2"
}

# relay_as_nobody MODE: the relay of lib/munge-relay.py, run by nobody, in
# front of server 0; its files in $USERDIR/relay, its address in RELAY,
# its pid in RELAY_PID.
relay_as_nobody() {
	local d="$USERDIR/relay"
	rm -rf "$d"
	mkdir -m 700 "$d"
	chown 65534:65534 "$d"
	setpriv --reuid=65534 --regid=65534 --clear-groups \
		/usr/bin/python3 "$BATS_TEST_DIRNAME/lib/munge-relay.py" "${SRV_PORT[0]}" "$NODE_SOCK" "$d" "$1" \
		</dev/null >"$T/relay.log" 2>&1 3>&- &
	RELAY_PID=$!
	track $!
	disown $!
	wait_for "$WAIT" eval "test -s $d/port || pid_gone $RELAY_PID"
	[ -s "$d/port" ] || fail "the relay: $(cat "$T/relay.log")"
	RELAY="127.0.0.1:$(cat "$d/port")"
}

@test "auth = munge: another user who relays a login can decode neither credential's secret nor act as the user" {
	munge_ship_one f
	stop_flusher "$CACHE"
	sed "s/^servers = .*/servers = RELAY/" "$POLICY" >"$T/relay.conf.in"
	local d="$USERDIR/relay"
	# Through a relay that only forwards, the login and the listing work.
	relay_as_nobody pass
	sed "s/RELAY/$RELAY/" "$T/relay.conf.in" >"$T/relay.conf"
	run "$STAGEHAND" ls --policy "$T/relay.conf" "$CKPT/f"
	[ "$status" -eq 0 ] && [[ "$output" == *"$CKPT/f "* ]] || fail "ls through the relay: $output"
	# The relay holds both credentials. The client's is for the server's
	# uid alone: nobody's munged will not decode it.
	[ -s "$d/client.cred" ] && [ -s "$d/server.cred" ] || fail "the relay saw no credentials"
	grep -q "^exit [1-9]" "$d/unmunge" && grep -qi "unauthorized" "$d/unmunge" ||
		fail "nobody decoded the client's credential: $(cat "$d/unmunge")"
	# The server's is public (munged says it was decoded already, by the
	# client, and gives it anyway), and carries no key: only the exchange
	# it vouches for.
	setpriv --reuid=65534 --regid=65534 --clear-groups unmunge --socket "$NODE_SOCK" \
		--metadata /dev/null --input "$d/server.cred" --output "$d/server.payload" 2>/dev/null || true
	[[ "$(head -c 25 "$d/server.payload")" == "stagehand v2 munge server" ]] ||
		fail "the server's payload: $(od -c "$d/server.payload" | head -3)"
	# A relay that takes over once the login is done: its LIST, with the
	# best MAC it can make, ends the connection, and it lists nothing.
	kill "$RELAY_PID"
	wait_for "$WAIT" pid_gone "$RELAY_PID"
	relay_as_nobody hijack
	sed "s/RELAY/$RELAY/" "$T/relay.conf.in" >"$T/relay.conf"
	run "$STAGEHAND" ls --policy "$T/relay.conf" "$CKPT/f"
	wait_for "$WAIT" test -s "$d/result" || fail "the relay: $(cat "$T/relay.log")"
	[[ "$(cat "$d/result")" != listed* ]] || fail "the relay listed root's files: $(cat "$d/result")"
	wait_for "$WAIT" grep -q "fails its MAC" "$T/srv0.log" || fail "the server: $(cat "$T/srv0.log")"
	# and the server serves the user on
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -eq 0 ] && [[ "$output" == *"$CKPT/f "* ]] || fail "ls: $output"
}

@test "auth = munge: a client logs in only to a server whose credential is root's or munge_server_user's" {
	munge_ship_one f
	stop_flusher "$CACHE"
	# Another user answers as a server would, with a credential of its
	# own that vouches for the exchange.
	relay_as_nobody impostor
	sed "s/^servers = .*/servers = $RELAY/" "$POLICY" >"$T/impostor.conf"
	run "$STAGEHAND" status --policy "$T/impostor.conf"
	[[ "$output" == *"$RELAY "*"down: "*"uid 65534, which is neither root nor munge_server_user (stagehand"* ]] ||
		fail "status: $output"
	wait_for "$WAIT" test -s "$USERDIR/relay/result"
	[ "$(cat "$USERDIR/relay/result")" = closed ] || fail "the impostor: $(cat "$USERDIR/relay/result")"
	# Named as the servers' user, that uid is taken for a server: the
	# exchange goes on (and the impostor, which holds no key, gets the
	# client's credential and proof only).
	# A relay of its own, whose result is again its first connection's
	# (that of a retry cut short when the client is stopped is not kept).
	kill "$RELAY_PID"
	wait_for "$WAIT" pid_gone "$RELAY_PID"
	relay_as_nobody impostor
	sed -e "s/^servers = .*/servers = $RELAY/" -e "s/^\[cluster\]\$/&\nmunge_server_user = 65534/" \
		"$POLICY" >"$T/impostor2.conf"
	# The client keeps trying the server that dropped it: stopped once the
	# impostor has its answer.
	"$STAGEHAND" status --policy "$T/impostor2.conf" >"$T/status.out" 2>&1 3>&- &
	local status_pid=$!
	track $status_pid
	wait_for "$WAIT" test -s "$USERDIR/relay/result"
	kill "$status_pid"
	[ "$(cat "$USERDIR/relay/result")" = "the client answered type 26" ] ||
		fail "the impostor: $(cat "$USERDIR/relay/result") status: $(cat "$T/status.out")"
}
