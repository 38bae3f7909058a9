#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The policy file as users write it: patterns as long as the paths of a
# parallel file system, and errors naming the line and what is wrong.

load lib/common

setup() {
	common_setup
	# A project directory as deep as they are on Lustre or GPFS: over 200
	# characters below the test's directory.
	DEEP="$T/lustre/orion/proj-shared/abc123/username"
	while [ ${#DEEP} -lt $((${#T} + 220)) ]; do
		DEEP="$DEEP/run-2026-11-05T04.00.00-decomposition-64x64x32"
	done
	mkdir -p "$DEEP"
}

@test "a [path ...] pattern over 200 characters long captures the files below it, with its keys" {
	cat >"$POLICY" <<EOP
[cache]
dir = $CACHE
[path $DEEP/*]   ; the run's checkpoints
chunk_size = 64K
chunking = fixed
keep = 2
EOP
	for i in 1 2 3; do
		head -c $((100000 * i)) /dev/urandom >"$T/v$i"
		shim cp "$T/v$i" "$DEEP/ckpt.h5"
	done
	[ "$(version_count "$DEEP/ckpt.h5")" -eq 2 ] || fail "keep = 2 not applied: $("$STAGEHAND" ls "$DEEP/ckpt.h5")"
	assert_restores "$T/v3" "$DEEP/ckpt.h5"
	assert_restores "$T/v2" "$DEEP/ckpt.h5" "$(($(latest_version "$DEEP/ckpt.h5") - 1))"
}

@test "a cache directory over 200 characters long, on a line longer than the parser's buffer" {
	cat >"$POLICY" <<EOP
[cache]
dir = $DEEP/cache   ; node-local
[path $CKPT/*]
EOP
	head -c 300000 /dev/urandom >"$T/v1"
	shim cp "$T/v1" "$CKPT/f"
	[ -d "$DEEP/cache" ]
	assert_restores "$T/v1" "$CKPT/f"
}

@test "a line too long for the parser, and not key = value, is an error naming its line and the limit" {
	cat >"$POLICY" <<EOP
[cache]
dir = $CACHE
[path $DEEP/*]
$DEEP/oops
EOP
	run "$STAGEHAND" ls
	[ "$status" -ne 0 ]
	[[ "$output" == *"policy.conf:4: line too long: $((${#DEEP} + 5)) characters (at most 197"* ]] ||
		fail "$output"
	run shim cp "$POLICY" "$DEEP/x"
	[ "$status" -eq 0 ]
	[[ "$output" == *"policy.conf:4: line too long"*"passing every file through untouched"* ]] ||
		fail "$output"
}

@test "a malformed [path ...] header is an error naming its own line" {
	printf '[cache]\ndir = %s\n\n[path %s/* keep = 2\nkeep = 2\n' "$CACHE" "$DEEP" >"$POLICY"
	run "$STAGEHAND" ls
	[ "$status" -ne 0 ]
	[[ "$output" == *"policy.conf:4: [path ...] has no closing ']'"* ]] || fail "$output"
}

@test "a second [cache] section is an error naming both lines, for the tool and the shim" {
	printf '[cache]\ndir = %s\n[path %s/*]\nkeep = 2\n[cache]\ndir = %s/other\n' \
		"$CACHE" "$DEEP" "$T" >"$POLICY"
	run "$STAGEHAND" ls
	[ "$status" -ne 0 ]
	[[ "$output" == *"policy.conf:5: a second [cache] section; the first is at line 1"* ]] ||
		fail "$output"
	run shim cp "$POLICY" "$DEEP/x"
	[ "$status" -eq 0 ] && cmp "$POLICY" "$DEEP/x"
	[[ "$output" == *"a second [cache] section"*"passing every file through untouched"* ]] ||
		fail "$output"
}

@test "a FIFO, a directory or a device given as the policy is refused at once, by the tool and the shim" {
	mkfifo "$T/fifo.conf"
	local p
	for p in "$T/fifo.conf" "$T" /dev/null; do
		run timeout 60 "$STAGEHAND" ls --policy "$p"
		[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "$p: status $status: $output"
		[[ "$output" == *"$p: cannot read the policy file: not a regular file"* ]] ||
			fail "$p: $output"
		run env STAGEHAND_POLICY="$p" LD_PRELOAD="$SHIM" timeout 60 cp /etc/hostname "$DEEP/y"
		[ "$status" -eq 0 ] && cmp /etc/hostname "$DEEP/y" || fail "$p: shim: $status: $output"
		[[ "$output" == *"not a regular file"* ]] || fail "$p: shim: $output"
	done
}
