#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Processes and threads: concurrent writers, fork, exec, vfork, posix_spawn,
# threads, commit points (close, fsync), renames, and processes that end
# without closing.

load lib/common
load lib/capture

setup() {
	common_setup
}

@test "4 processes writing 4 files at once (two of them identical)" {
	for d in "$REF" "$CKPT"; do
		pids=()
		for i in 1 2 3 4; do
			seed=$((i <= 2 ? 1 : i))
			mode=seq
			[ "$i" -eq 4 ] && mode=pwrite
			if [ "$d" = "$CKPT" ]; then
				tshim "$WRITER" "$mode" "$d/f$i" - "$seed" &
			else
				"$WRITER" "$mode" "$d/f$i" - "$seed" &
			fi
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p"; done
	done
	cmp "$REF/f1" "$REF/f2"
	for i in 1 2 3 4; do check_file "f$i" 1; done
}

@test "4 processes each writing 4 files, all at once, with several modes" {
	modes=(seq pwritev stdio ftrunc)
	for d in "$REF" "$CKPT"; do
		pids=()
		for i in 1 2 3 4; do
			(
				for m in "${modes[@]}"; do
					if [ "$d" = "$CKPT" ]; then
						tshim "$WRITER" "$m" "$d/p$i-$m" - "$i"
					else
						"$WRITER" "$m" "$d/p$i-$m" - "$i"
					fi
				done
			) &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p"; done
	done
	for i in 1 2 3 4; do
		for m in "${modes[@]}"; do check_file "p$i-$m" 1; done
	done
}

@test "fork: the child writes its own file; closing the inherited fd does not commit" {
	twice "$WRITER" fork @D@/x
	check_file x 1
	check_file x.child 1
}

@test "fork + exec: a child program appends through an inherited descriptor" {
	make_source "$T/src"
	twice "$WRITER" fork-exec @D@/x "$T/src"
	check_file x
}

@test "vfork + exec (Python's subprocess): a child program appends through an inherited descriptor" {
	make_source "$T/src"
	twice "$WRITER" vfork-exec @D@/x "$T/src"
	check_file x
}

@test "posix_spawn with a dup2 file action: a child program appends through an inherited descriptor" {
	make_source "$T/src"
	twice "$WRITER" posix-spawn @D@/x "$T/src"
	check_file x
}

@test "system and popen: a shell command appends through an inherited descriptor" {
	make_source "$T/src"
	twice "$WRITER" system @D@/x "$T/src"
	check_file x
	twice "$WRITER" popen @D@/y "$T/src"
	check_file y
}

@test "exec with a file still open (every exec call, and execve, execveat through syscall()): what was written is the version" {
	local how
	for how in execve execveat execv execvp execvpe execl execlp execle fexecve syscall-execve syscall-execveat; do
		twice "$WRITER" exec-over "@D@/x-$how" "$how"
		check_file "x-$how" 1
	done
}

@test "a child sharing the memory (clone CLONE_VM|CLONE_VFORK) ends with _exit: the parent's file stays the parent's" {
	twice "$WRITER" clone-vm-exit @D@/x
	check_file x 1
}

@test "threads: 8 threads pwrite disjoint regions of one descriptor, one close" {
	twice "$WRITER" threads @D@/x
	check_file x 1
}

@test "threads: 8 threads each open the same file (all open at once), pwrite their region, close" {
	twice "$WRITER" threads-open @D@/x
	# All eight descriptors are open before the first close: only the last
	# close commits, and it holds every region.
	check_file x 1
}

@test "threads (writer64): pwrite64 from 8 threads" {
	twice "$WRITER64" threads @D@/x
	check_file x 1
}

@test "close, then more writes and _exit without close: version 1 intact, no version 2" {
	"$WRITER" noclose "$REF/x" v1
	run tshim "$WRITER" noclose "$CKPT/x"
	[ "$status" -eq 0 ]
	check_file x 1
}

@test "close, then more writes and exit() without close: version 1 intact, a warning" {
	"$WRITER" noclose-exit "$REF/x" v1
	run tshim "$WRITER" noclose-exit "$CKPT/x"
	[ "$status" -eq 0 ]
	[[ "$output" == *"$CKPT/x"*"never closed"* ]] || {
		complain "no warning about the unclosed file: '$output'"
		return 1
	}
	check_file x 1
}

@test "fsync and fdatasync in the middle of writing add no version: the close makes one" {
	twice "$WRITER" fsync @D@/x
	check_file x 1
	run "$STAGEHAND" ls "$CKPT/x"
	[[ "$output" != *"not closed"* ]] || fail "still open after the close: $output"
}

@test "write a temporary name, close, rename over the final name" {
	twice "$WRITER" seq @D@/x - 3
	twice "$WRITER" tmp-rename @D@/x
	check_file x 2
	[ "$(version_count "$CKPT/x.tmp")" -eq 0 ]
	[ ! -e "$CKPT/x.tmp" ]
	run shim stat "$CKPT/x.tmp"
	[ "$status" -ne 0 ]
}

@test "rename while still open, write more, close: staged under the new name" {
	twice "$WRITER" rename-open @D@/x
	check_file x
	[ "$(version_count "$CKPT/x.tmp")" -eq 0 ]
	run shim stat "$CKPT/x.tmp"
	[ "$status" -ne 0 ]
}

@test "stagehand run -- CMD captures like LD_PRELOAD" {
	"$WRITER" pwrite "$REF/x"
	"$STAGEHAND" run --policy "$POLICY" -- "$WRITER" pwrite "$CKPT/x"
	check_file x 1
}
