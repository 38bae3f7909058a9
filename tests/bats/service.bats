#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Running the server as a system service: it tells the service manager that
# started it (systemd, Type=notify, through $NOTIFY_SOCKET, no libsystemd)
# when it is ready and when it stops.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# ready_then_stopping ADDRESS: starts a server told to notify ADDRESS, checks
# it says READY=1 once its port is known, then STOPPING=1 when stopped.
ready_then_stopping() {
	listen_notify "$1"
	NOTIFY_SOCKET="$1" start_server 0
	wait_for "$WAIT" grep -q '^READY=1$' "$T/notify"
	grep -q "^STATUS=listening on .*:${SRV_PORT[0]}\$" "$T/notify" || fail "$(cat "$T/notify")"
	grep -q "^MAINPID=${SRV_PID[0]}\$" "$T/notify" || fail "$(cat "$T/notify")"
	stop_server 0
	wait_for "$WAIT" grep -q '^STOPPING=1$' "$T/notify"
}

@test "the server tells the service manager it is ready once it listens, and that it stops (a socket path)" {
	ready_then_stopping "$T/notify.sock"
}

@test "the server tells the service manager it is ready once it listens, and that it stops (an abstract socket)" {
	ready_then_stopping "@stagehand-test-$$-$BATS_TEST_NUMBER"
}

@test "without NOTIFY_SOCKET the server starts as ever; a bad one is a warning, not a failure" {
	start_server 0
	stop_server 0
	NOTIFY_SOCKET="relative/path" start_server 1
	grep -q 'cannot tell the service manager it is ready' "$T/srv1.log" || fail "$(cat "$T/srv1.log")"
}
