#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Every way of writing through a plain descriptor is captured: the write
# family, offsets and holes, truncation, allocation, the open family under
# every name, descriptor copies, kernel-side copies and shared mappings.

load lib/common
load lib/capture

setup() {
	common_setup
}

# ---- the write family ----

@test "write: sequential writes of random sizes" {
	twice "$WRITER" seq @D@/x
	check_file x 1
}

@test "pwrite: random offsets with whole-chunk holes" {
	twice "$WRITER" pwrite @D@/x
	check_file x 1
}

@test "writev: several iovecs per call, some empty" {
	twice "$WRITER" writev @D@/x
	check_file x 1
}

@test "pwritev: random offsets with a wide hole" {
	twice "$WRITER" pwritev @D@/x
	check_file x 1
}

@test "64-bit aliases: open64, pwrite64, pwritev64, lseek64, ftruncate64 (writer64)" {
	for m in seq pwrite pwritev seekend ftrunc; do
		twice "$WRITER64" "$m" "@D@/$m"
	done
	for m in seq pwrite pwritev seekend ftrunc; do
		check_file "$m" 1
	done
}

# ---- offsets, truncation, allocation ----

@test "O_TRUNC rewrite of an existing captured file gives a shorter second version" {
	twice "$WRITER" seq @D@/x
	cp "$REF/x" "$T/v1"
	twice "$WRITER" trunc @D@/x
	check_file x 2
	check_version "$T/v1" "$CKPT/x" 1
	[ "$(stat -c %s "$REF/x")" -eq 250000 ]
}

@test "O_TRUNC without O_CREAT on a missing captured file fails with ENOENT" {
	run "$WRITER" trunc "$REF/x"
	[ "$status" -eq 1 ]
	run tshim "$WRITER" trunc "$CKPT/x"
	[ "$status" -eq 1 ]
	[[ "$output" == *"No such file or directory"* ]]
	[ ! -e "$CKPT/x" ]
	[ "$(version_count "$CKPT/x")" -eq 0 ]
}

@test "O_APPEND: writes land at the end whatever the offset, pwrite too" {
	twice "$WRITER" seq @D@/x
	cp "$REF/x" "$T/v1"
	twice "$WRITER" append @D@/x
	check_file x 2
	check_version "$T/v1" "$CKPT/x" 1
}

@test "O_APPEND creating a new file" {
	twice "$WRITER" append @D@/x
	check_file x 1
}

@test "lseek beyond the end (SEEK_SET, SEEK_END, SEEK_CUR into a hole) then write" {
	twice "$WRITER" seekend @D@/x
	check_file x 1
}

@test "ftruncate: grow, write into the grown part, shrink, grow to end in a hole" {
	twice "$WRITER" ftrunc @D@/x
	check_file x 1
	[ "$(shim stat -c %s "$CKPT/x")" -eq 777777 ]
}

@test "ftruncate grow alone on an existing file is a new version" {
	twice "$WRITER" seq @D@/x
	twice "$WRITER" grow @D@/x
	check_file x 2
	[ "$(shim stat -c %s "$CKPT/x")" -eq 1048579 ]
}

@test "ftruncate shrink alone on an existing file is a new version" {
	twice "$WRITER" seq @D@/x
	cp "$REF/x" "$T/v1"
	twice "$WRITER" shrink @D@/x
	check_file x 2
	check_version "$T/v1" "$CKPT/x" 1
	[ "$(shim stat -c %s "$CKPT/x")" -eq 123457 ]
}

@test "truncate(2) by name on a captured file: shrink, then grow" {
	twice "$WRITER" seq @D@/x
	twice "$PYTHON" -c 'import os, sys; os.truncate(sys.argv[1], 300001)' @D@/x
	check_file x 2
	twice "$PYTHON" -c 'import os, sys; os.truncate(sys.argv[1], 1200000)' @D@/x
	check_file x 3
}

@test "coreutils truncate -s (open + ftruncate) on a captured file" {
	twice "$WRITER" seq @D@/x
	twice truncate -s 300001 @D@/x
	check_file x 2
	twice truncate -s 1200000 @D@/x
	check_file x 3
}

@test "fallocate: extend, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE, posix_fallocate" {
	twice "$WRITER" fallocate @D@/x
	check_file x 1
	[ "$(shim stat -c %s "$CKPT/x")" -eq 900000 ]
}

@test "fchmod on a new captured file before its close" {
	twice "$PYTHON" -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 200000)
os.fchmod(fd, 0o751)
os.close(fd)
' @D@/x
	check_file x 1
}

@test "fchmod alone through a read-write descriptor of an existing captured file" {
	twice "$WRITER" seq @D@/x
	twice "$PYTHON" -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.fchmod(fd, 0o600)
os.close(fd)
' @D@/x
	check_file x
}

@test "fchmod through a read-only descriptor of an existing captured file (rsync does this)" {
	twice "$WRITER" seq @D@/x
	twice "$PYTHON" -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fchmod(fd, 0o640)
os.close(fd)
' @D@/x
	check_file x
}

# ---- naming the file ----

@test "openat with a directory fd, O_CREAT mode 0640, then reopened O_RDWR" {
	twice "$WRITER" openat @D@/x
	check_file x 2
	[ "$(shim stat -c %a "$CKPT/x")" = 640 ]
}

@test "openat64 with a directory fd (writer64)" {
	twice "$WRITER64" openat @D@/x
	check_file x 2
}

@test "relative names after chdir, with ./ and ../dir/./" {
	mkdir "$REF/sub" "$CKPT/sub"
	twice "$WRITER" relative @D@/sub/x
	check_file sub/x 2
}

@test "open64 and creat/creat64 (mode 0600)" {
	twice "$WRITER" open64 @D@/a
	twice "$WRITER" creat @D@/b
	twice "$WRITER" creat64 @D@/c
	check_file a 1
	check_file b 1
	check_file c 1
	[ "$(shim stat -c %a "$CKPT/b")" = 600 ]
}

@test "O_CREAT in a directory that does not exist fails with ENOENT" {
	run tshim "$WRITER" seq "$CKPT/nodir/x"
	[ "$status" -eq 1 ]
	[[ "$output" == *"No such file or directory"* ]]
	[ ! -e "$CKPT/nodir" ]
	[ "$(version_count "$CKPT/nodir/x")" -eq 0 ]
}

@test "FORTIFY build: __open64_2/__openat64_2 (with LFS) create, modify, append" {
	nm -D "$PROGS/fortify" | grep -q ' U __open64_2@'
	nm -D "$PROGS/fortify" | grep -q ' U __openat64_2@'
	nm -D "$PROGS/fortify" | grep -q ' U __read_chk@'
	twice "$PROGS/fortify" @D@/x
	check_file x 3
}

@test "FORTIFY build: __open_2/__openat_2 (without LFS)" {
	nm -D "$PROGS/fortify-nolfs" | grep -q ' U __open_2@'
	nm -D "$PROGS/fortify-nolfs" | grep -q ' U __openat_2@'
	twice "$PROGS/fortify-nolfs" @D@/x
	check_file x 3
}

# ---- copies of the descriptor ----

@test "dup, dup2, dup3, F_DUPFD, F_DUPFD_CLOEXEC: write through copies, one version at the last close" {
	twice "$WRITER" dup @D@/x
	check_file x 1
}

@test "dup2 over a descriptor of another captured file commits that file" {
	twice "$WRITER" dup2-over @D@/x
	check_file x 1
	check_file x.other 1
}

@test "close_range closes (and commits) a captured file written through a dup2 copy" {
	twice "$WRITER" close-range @D@/x
	check_file x 1
}

# ---- kernel-side copies into the file ----

@test "sendfile into a captured file (with and without an input offset, after a hole)" {
	make_source "$T/src"
	twice "$WRITER" sendfile @D@/x "$T/src"
	check_file x 1
}

@test "copy_file_range into a captured file (appending, then at an offset past the end)" {
	make_source "$T/src"
	twice "$WRITER" copy-file-range @D@/x "$T/src"
	check_file x 1
}

@test "sendfile/copy_file_range from a captured file into another captured file" {
	make_source "$T/src"
	twice "$WRITER" seq @D@/src
	twice "$WRITER" sendfile @D@/x @D@/src
	twice "$WRITER" copy-file-range @D@/y @D@/src
	check_file src 1
	check_file x 1
	check_file y 1
}

# ---- asynchronous I/O on the descriptor ----

@test "POSIX AIO: aio_write of 12 blocks with gaps, aio_suspend, close" {
	twice "$WRITER" aio @D@/x
	check_file x 1
}

@test "io_uring: 10 writes submitted at once, backwards with gaps, close" {
	run "$WRITER" uring "$REF/x"
	[ "$status" -ne 4 ] || skip "io_uring not available: $output"
	[ "$status" -eq 0 ]
	run tshim "$WRITER" uring "$CKPT/x"
	[ "$status" -eq 0 ] || { complain "captured run exited $status: $output"; return 1; }
	check_file x 1
}

# ---- shared writable mappings: captured, or refused loudly ----

# Runs a mapping mode twice; an explicit refusal (exit 3 with the errno on
# stderr) is acceptable, silent loss is not. Sets $refused.
twice_map() {
	refused=
	"$1" "$2" "$REF/$3"
	run tshim "$1" "$2" "$CKPT/$3"
	if [ "$status" -eq 3 ]; then
		[[ "$output" == *"mmap refused: "* ]]
		refused=1
		echo "# $2 refused: $output" >&3
		return 0
	fi
	[ "$status" -eq 0 ] || { fail "captured run exited $status: $output"; return 1; }
}

@test "mmap MAP_SHARED: ftruncate, mmap, close the fd, write through the mapping, munmap" {
	twice_map "$WRITER" mmap x
	if [ -n "$refused" ]; then
		[ "$(version_count "$CKPT/x")" -le 1 ]
		return 0
	fi
	check_file x 1
}

@test "mmap64 MAP_SHARED with the fd closed before writing (writer64)" {
	twice_map "$WRITER64" mmap x
	[ -n "$refused" ] || check_file x 1
}

@test "mmap MAP_SHARED with the fd open: msync(MS_SYNC), more writes, munmap, close: one version" {
	twice_map "$WRITER" mmap-msync x
	[ -n "$refused" ] || check_file x 1
}

@test "mmap MAP_SHARED of an existing captured file, modified through the mapping only" {
	twice "$WRITER" seq @D@/x
	cp "$REF/x" "$T/v1"
	twice_map "$WRITER" mmap-existing x
	if [ -n "$refused" ]; then
		check_version "$T/v1" "$CKPT/x" 1
		return 0
	fi
	check_file x 2
	check_version "$T/v1" "$CKPT/x" 1
}

@test "mmap MAP_SHARED: fd closed, written, process exits without munmap: staged or warned" {
	"$WRITER" mmap-exit "$REF/x"
	run tshim "$WRITER" mmap-exit "$CKPT/x"
	if [ "$status" -eq 3 ]; then
		[[ "$output" == *"mmap refused: "* ]]
		return 0
	fi
	[ "$status" -eq 0 ]
	[ ! -e "$CKPT/x" ]
	if [ "$(version_count "$CKPT/x")" -ge 1 ]; then
		check_file x
	else
		# Not staged: acceptable only if the shim said so.
		[[ "$output" == *"$CKPT/x"* ]] || {
			fail "the mapping's writes were lost without a word (stderr: '$output')"
			return 1
		}
	fi
}
