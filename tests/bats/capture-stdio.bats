#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Buffered I/O is captured: glibc's stdio (which opens and writes through its
# own internal calls), libstdc++'s ofstream and libgfortran's stream I/O.

load lib/common
load lib/capture

setup() {
	common_setup
}

@test "stdio: fopen w, fwrite, fprintf, fputs, fseek back, fflush, fseek past the end, fclose" {
	twice "$WRITER" stdio @D@/x
	check_file x 1
}

@test "stdio: fopen64 and the same calls (writer64)" {
	twice "$WRITER64" stdio @D@/x
	check_file x 1
}

@test "stdio: fopen r+ then a on an existing file, one version per fclose" {
	twice "$WRITER" stdio @D@/x
	cp "$REF/x" "$T/v1"
	twice "$WRITER" stdio-rplus @D@/x
	cp "$REF/x" "$T/v2"
	twice "$WRITER" stdio-append @D@/x
	check_file x 3
	check_version "$T/v1" "$CKPT/x" 1
	check_version "$T/v2" "$CKPT/x" 2
}

@test "stdio: fopen a creating a new file" {
	twice "$WRITER" stdio-append @D@/x
	check_file x 1
}

@test "stdio: fopen w+ writes, reads back through the stream, writes again" {
	twice "$WRITER" stdio-wplus @D@/x
	check_file x 1
}

@test "stdio: fdopen on a descriptor already written to, fclose closes both" {
	twice "$WRITER" fdopen @D@/x
	check_file x 1
}

@test "stdio: freopen of stdout onto a captured file" {
	twice "$WRITER" freopen @D@/x
	check_file x 1
}

@test "C++: std::ofstream write, operator<<, seekp back and past the end, then ios::app" {
	[ -x "$PROGS/ofstream" ] || skip "no C++ compiler: ofstream not built"
	twice "$PROGS/ofstream" @D@/x
	check_file x 2
}

@test "Fortran: unformatted stream writes, pos= past the end and back, position=append" {
	[ -x "$PROGS/stream" ] || skip "no Fortran compiler: stream not built"
	twice "$PROGS/stream" @D@/x
	check_file x 2
	# 480000 + 240000 bytes, a 100000-byte hole, 160000 bytes, 8000 appended
	[ "$(shim stat -c %s "$CKPT/x")" -eq 988000 ]
}
