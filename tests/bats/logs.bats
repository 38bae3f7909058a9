#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The rate limit of every program's log (common/log.c): a flood from one
# message site stays a few lines plus a count of what was suppressed, and
# single events still appear. The test clock (STAGEHAND_TEST_CLOCK_NS) is
# fixed, so the counts do not depend on the machine's speed.

load lib/common
load lib/cluster

setup() {
	cluster_setup
	export STAGEHAND_TEST_CLOCK_NS=1000000000000
}

teardown() {
	cluster_teardown
}

@test "200000 messages from one site: 20 a window, the suppressed counted, the single error kept" {
	STAGEHAND_LOG_FILE="$T/flood.log" "$PROGS/logflood" 100000
	# each flood: 20 lines, then a count (the second flood's at exit)
	[ "$(wc -l <"$T/flood.log")" -eq 43 ] || fail "$(head -50 "$T/flood.log")"
	[ "$(grep -c 'refused connection [0-9]*: bad magic' "$T/flood.log")" -eq 40 ]
	[ "$(grep -c 'warning: 99980 similar messages suppressed ("refused connection' "$T/flood.log")" -eq 2 ]
	grep -q 'error: the one error of the run' "$T/flood.log"
	# the first flood's count comes before the second flood's first line
	grep -A1 '99980 similar' "$T/flood.log" | head -2 | tail -1 | grep -q 'refused connection 100000:'
}

@test "a server refusing 300 garbage connections logs a bounded few lines and the count" {
	start_server 0
	"$PYTHON" - "${SRV_HOST[0]}" "${SRV_PORT[0]}" <<'EOP'
import socket, sys
for i in range(300):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    s.sendall(b"GARBAGE!" * 64)
    try:
        while s.recv(4096):  # until the server has dealt with it
            pass
    except ConnectionResetError:
        pass
    s.close()
EOP
	stop_server 0
	local lines suppressed
	lines=$(wc -l <"$T/srv0.log")
	suppressed=$(sed -n 's/.*warning: \([0-9]*\) similar messages suppressed.*/\1/p' "$T/srv0.log" |
		awk '{ n += $1 } END { print n + 0 }')
	[ "$lines" -le 45 ] || fail "$lines lines: $(head -60 "$T/srv0.log")"
	[ "$suppressed" -ge 250 ] || fail "$suppressed suppressed: $(cat "$T/srv0.log")"
}
