#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# System calls made without libc (Rust's rustix, liburing, assembly) are
# trapped by Syscall User Dispatch and see captured files as libc calls do
# (docs/CAPTURE.md, "System calls made without libc"). Each program runs on
# the reference directory without the shim and on the captured one with it.

load lib/common
load lib/capture

setup() {
	common_setup
	[ -x "$PROGS/rawsys" ] || skip "rawsys is built on x86-64 only"
}

# No file below the captured directory is real: everything went to versions.
no_real_files() {
	local real
	real=$(find "$CKPT" -type f)
	[ -z "$real" ] || fail "real files below the captured directory: $real"
}

@test "raw syscalls: openat, write, renameat, newfstatat and read of a captured file" {
	twice "$PROGS/rawsys" plain @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls with every signal blocked, through libc and through rt_sigprocmask" {
	twice "$PROGS/rawsys" blocked @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls in a program with its own SIGSYS handler, which it reads back" {
	twice "$PROGS/rawsys" own-sigsys @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls from a signal handler whose mask blocks everything" {
	twice "$PROGS/rawsys" handler @D@
	check_file model 1
	check_file model-handler 1
	no_real_files
}

@test "raw syscalls from four threads at once, and from a forked child" {
	twice "$PROGS/rawsys" thread @D@
	local t
	for t in "" -t0 -t1 -t2 -t3; do check_file "model$t" 1; done
	twice "$PROGS/rawsys" fork @D@
	check_file model-child 1
	no_real_files
}

@test "STAGEHAND_SYSCALL_DISPATCH=0: raw syscalls are not seen (the test above can fail)" {
	STAGEHAND_SYSCALL_DISPATCH=0 shim "$PROGS/rawsys" plain "$CKPT"
	[ -f "$CKPT/model" ]
	run "$STAGEHAND" ls "$CKPT/model"
	[[ "$output" != *"$CKPT/model "* ]] || fail "a version was made: $output"
}
