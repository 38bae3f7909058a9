#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The command line: help, usage errors, exit statuses.

bats_require_minimum_version 1.5.0
load lib/common

setup() {
	common_setup
}

@test "every command has --help and exits 0" {
	for c in "" run ls restore status flush; do
		run "$STAGEHAND" $c --help
		[ "$status" -eq 0 ]
		[[ "$output" == *usage:* ]]
	done
	run "$STAGEHAND_BUILD/flusher/stagehand-flusher" --help
	[ "$status" -eq 0 ]
	run "$STAGEHAND_BUILD/server/stagehand-server" --help
	[ "$status" -eq 0 ]
	local o
	for o in max-connections max-handshakes max-per-user handshake-timeout idle-timeout frame-memory; do
		[[ "$output" == *"--$o "* ]] || fail "stagehand-server --help says nothing of --$o"
	done
	# a bad limit names itself
	run "$STAGEHAND_BUILD/server/stagehand-server" --idle-timeout 0
	[ "$status" -eq 2 ]
	[[ "$output" == *"bad --idle-timeout '0'"* ]]
	run "$STAGEHAND_BUILD/server/stagehand-server" --frame-memory 1M
	[ "$status" -eq 2 ]
	[[ "$output" == *"bad --frame-memory '1M' (at least 66M"* ]]
}

@test "unknown commands and options are usage errors (exit 2)" {
	run "$STAGEHAND" frobnicate
	[ "$status" -eq 2 ]
	[[ "$output" == *"unknown command 'frobnicate'"* ]]
	run "$STAGEHAND" ls --bogus
	[ "$status" -eq 2 ]
	run "$STAGEHAND" restore
	[ "$status" -eq 2 ]
	run "$STAGEHAND" restore --version abc /x
	[ "$status" -eq 2 ]
	[[ "$output" == *"--version takes a version number"* ]]
	run "$STAGEHAND" restore --version 0 /x
	[ "$status" -eq 2 ]
	run "$STAGEHAND" run
	[ "$status" -eq 2 ]
	run "$STAGEHAND"
	[ "$status" -eq 2 ]
}

@test "no policy file anywhere is a clear error" {
	unset STAGEHAND_POLICY
	cd "$T"
	run "$STAGEHAND" ls
	[ "$status" -eq 1 ]
	[[ "$output" == *"no policy file"* ]]
}

@test "ls on an empty cache lists nothing, a missing path is an error" {
	run "$STAGEHAND" ls
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	run "$STAGEHAND" ls "$CKPT/nothing"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nothing staged"* ]]
}

@test "run passes the exit status through and reports a missing command" {
	run "$STAGEHAND" run -- sh -c 'exit 7'
	[ "$status" -eq 7 ]
	run -127 "$STAGEHAND" run -- /nonexistent/program
	[ "$status" -eq 127 ]
	[[ "$output" == *"cannot run '/nonexistent/program'"* ]]
}

@test "run preloads the shim and names the policy for the child" {
	run "$STAGEHAND" run --policy "$POLICY" -- sh -c 'echo "$LD_PRELOAD|$STAGEHAND_POLICY"'
	[ "$status" -eq 0 ]
	[[ "$output" == *libstagehand.so*"|$POLICY" ]]
}

@test "restore of a version that does not exist names the versions there are" {
	shim sh -c "echo one > '$CKPT/f'; echo two > '$CKPT/f'"
	run "$STAGEHAND" restore --version 9 --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"has no version 9 (it has 1 to 2)"* ]]
	[ ! -e "$BACK$CKPT/f" ]
}

@test "status describes the cache" {
	shim sh -c "echo one > '$CKPT/f'"
	run "$STAGEHAND" status
	[ "$status" -eq 0 ]
	[[ "$output" == *"files:    1 (0 deleted by the application), 1 versions"* ]]
	[[ "$output" == *"servers:  none configured"* ]]
}

@test "every bats file of tests/bats is one of the suite's tests (tests/meson.build)" {
	local f name missing=""
	for f in "$BATS_TEST_DIRNAME"/*.bats; do
		name=$(basename "$f" .bats)
		# in the list of the bats suite, or a test of its own (package)
		grep -q -e "^    '$name',\$" -e "/ '$name.bats'\]" "$BATS_TEST_DIRNAME/../meson.build" ||
			missing="$missing $name"
	done
	[ -z "$missing" ] || { echo "not run by meson test:$missing" >&2; false; }
}

@test "the shim exports exactly the functions of hooks.def" {
	want=$(sed -n 's/^HOOK(\([A-Za-z0-9_]*\),.*/\1/p' "$BATS_TEST_DIRNAME/../../preload/hooks.def" | sort)
	got=$(nm -D --defined-only "$SHIM" | awk '$2 ~ /^[TtWwiV]$/ {print $3}' | sed 's/@.*//' | sort)
	[ "$want" = "$got" ]
	# and neither jemalloc, liburing, verbs nor libcrypto (which only the
	# daemons and tools talking to servers need) are linked into it
	run sh -c "ldd '$SHIM' | grep -E 'jemalloc|uring|ibverbs|rdmacm|crypto'"
	[ "$status" -ne 0 ]
}

@test "the tool loads libcrypto when it talks to a server, not at every start; it links no jemalloc" {
	# (each is about a third of a cold start: restoring from the node's
	# cache or listing it needs neither)
	run sh -c "ldd '$STAGEHAND' | grep -E 'jemalloc|crypto'"
	[ "$status" -ne 0 ] || fail "linked: $output"
	nm -D --undefined-only "$STAGEHAND" | grep -q ' dlopen'
}

@test "README's first command, ./demo.sh, exits 0 when it worked, non-zero when it did not" {
	local root
	root=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	[ -x "$root/build/tools/stagehand" ] || skip "not built in $root/build (demo.sh uses it)"
	# a short directory: policy globs of 45 characters and more are issue 11's
	local tmp
	tmp=$(mktemp -d /tmp/sd.XXXXXX)
	run env TMPDIR="$tmp" "$root/demo.sh"
	# what it stopped is gone soon (the suite's generous deadline, not a race)
	local pids deadline=$((SECONDS + WAIT))
	while pids=$(pgrep -f "stagehand-(server|flusher).*$tmp/") && [ "$SECONDS" -lt "$deadline" ]; do
		sleep 0.1
	done
	rm -rf "$tmp"
	[ "$status" -eq 0 ] || { echo "$output" | tail -20 >&2; false; }
	[[ "$output" == *"demo OK"* ]]
	# it leaves nothing running
	[ -z "$pids" ] || { ps -o pid,args -p "$pids" >&2; false; }
	# a failure inside is the demo's exit status, not hidden by its clean-up
	run env TMPDIR=/nonexistent/dir "$root/demo.sh"
	[ "$status" -ne 0 ]
}
