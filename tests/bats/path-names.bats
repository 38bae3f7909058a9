#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Calls that resolve, describe or make names give on a captured file the
# answer a file system gives on a real one: realpath and readlink, statfs
# and pathconf, chown, and names that collide with a captured file. Each runs
# on a real file below $REF without the shim and on a captured one below
# $CKPT with it.

load lib/common
load lib/capture

setup() {
	common_setup
	twice_sh 'echo content >"$D/f"'
}

# same CMD ARGS...: CMD on $REF without the shim and on $CKPT with it (each
# "@D@" in its arguments replaced) prints the same (stdout and stderr, the
# directory written @D@) and exits the same.
same() {
	local a rs=0 cs=0 rout cout
	local -a ref=() ckpt=()
	for a in "$@"; do
		ref+=("${a//@D@/$REF}")
		ckpt+=("${a//@D@/$CKPT}")
	done
	rout=$("${ref[@]}" 2>&1) || rs=$?
	cout=$(tshim "${ckpt[@]}" 2>&1) || cs=$?
	rout="${rout//$REF/@D@}"
	cout="${cout//$CKPT/@D@}"
	if [ "$rs" != "$cs" ] || [ "$rout" != "$cout" ]; then
		complain "$*: reference exited $rs: '$rout'; captured $(why "$cs"): '$cout'"
		return 1
	fi
}

@test "realpath -e, readlink -e, readlink -f, os.path.realpath on a captured file, and on names below it (ENOTDIR)" {
	local p
	for p in @D@/f @D@/f/ @D@/f/x @D@/f/. @D@/missing; do
		same realpath -e "$p"
		same readlink -e "$p"
		same readlink -f "$p"
		same realpath "$p"
	done
	same sh -c 'cd "$1" && realpath -e f && readlink -e ./f' sh @D@
	same python3 -c '
import os, pathlib, sys
f = sys.argv[1] + "/f"
print(os.path.realpath(f), os.path.realpath(f, strict=True), pathlib.Path(f).resolve(strict=True))
' @D@
	check_file f
}

@test "realpath(), canonicalize_file_name() and FORTIFY's __realpath_chk on a captured file" {
	local prog call p
	for prog in pathcalls pathcalls-fortify; do
		for call in realpath realpath-alloc canonicalize; do
			for p in @D@/f @D@/f/ @D@/f/x @D@/missing; do
				same "$PROGS/$prog" "$call" "$p"
			done
		done
	done
	check_file f
}

@test "readlink of a captured file is EINVAL (not a link): readlink(1), readlinkat, __readlink_chk, syscall, os.readlink" {
	local call
	for call in pathcalls pathcalls-fortify; do
		same "$PROGS/$call" readlink @D@/f
		same "$PROGS/$call" readlinkat @D@/f
	done
	same "$PROGS/pathcalls" sys-readlink @D@/f
	same readlink @D@/f
	same python3 -c '
import errno, os, sys
try:
    os.readlink(sys.argv[1] + "/f")
except OSError as e:
    print(errno.errorcode[e.errno])
' @D@
}

@test "df, stat -f, os.statvfs, statfs(), statvfs() and syscall(SYS_statfs) answer for the captured file's file system" {
	same df --output=source,target @D@/f
	same stat -f -c '%T %s %l' @D@/f
	same python3 -c 'import os, sys; s = os.statvfs(sys.argv[1] + "/f"); print(s.f_bsize, s.f_namemax)' @D@
	local call
	for call in statfs statvfs sys-statfs; do
		same "$PROGS/pathcalls" "$call" @D@/f
	done
}

@test "pathconf: os.pathconf and getconf NAME_MAX of a captured file are its directory's" {
	same python3 -c 'import os, sys; print(os.pathconf(sys.argv[1] + "/f", "PC_NAME_MAX"))' @D@
	same getconf NAME_MAX @D@/f
	same getconf PATH_MAX @D@/f
}

@test "chown to the owner a captured file has is a no-op; to any other fails with EPERM, loudly" {
	twice chown "$(id -u)" @D@/f
	twice chown "$(id -u):$(id -g)" @D@/f
	twice chgrp "$(id -g)" @D@/f
	twice python3 -c '
import os, shutil, sys
f = sys.argv[1] + "/f"
os.chown(f, os.getuid(), os.getgid())
os.chown(f, -1, -1)
os.lchown(f, os.getuid(), -1)
os.chown("f", os.getuid(), -1, dir_fd=os.open(sys.argv[1], os.O_RDONLY))
shutil.chown(f, user=os.getuid(), group=os.getgid())
' @D@
	same "$PROGS/pathcalls" sys-chown @D@/f
	run tshim chown "$(($(id -u) + 1))" "$CKPT/f"
	[ "$status" -ne 0 ] || fail "chown to another owner succeeded"
	[[ "$output" == *"keeps no owner"* ]] || fail "not said in the log: $output"
	[[ "$output" == *"Operation not permitted"* ]] || fail "$output"
	run tshim python3 -c '
import errno, os, sys
try:
    os.chown(sys.argv[1], os.getuid() + 1, -1)
    sys.exit("chown succeeded")
except OSError as e:
    assert e.errno == errno.EPERM, e
' "$CKPT/f"
	[ "$status" -eq 0 ] || fail "$output"
	run tshim "$PROGS/pathcalls" sys-chown-other "$CKPT/f"
	[[ "$output" == *EPERM* ]] || fail "$output"
	check_file f 1
}

@test "lchmod of a captured file sets its mode, as chmod" {
	twice "$PROGS/pathcalls" lchmod @D@/f
	[ "$(stat -c %a "$REF/f")" = 640 ]
	check_file f
}

@test "name_to_handle_at on a captured file: EOPNOTSUPP, said in the log (no handle can name it)" {
	run "$PROGS/pathcalls" handle "$REF/f"
	[ "$status" -eq 0 ] || skip "no file handles on this file system: $output"
	local call
	for call in handle sys-handle; do
		run tshim "$PROGS/pathcalls" "$call" "$CKPT/f"
		[ "$status" -eq 1 ] || fail "$call: $output"
		[[ "$output" == *EOPNOTSUPP* && "$output" == *"no file handle"* ]] || fail "$call: $output"
	done
}

@test "mkdir, mkfifo, mknod, ln -s onto a captured file's name: File exists, and nothing real is made" {
	same mkdir @D@/f
	same mkfifo @D@/f
	same mknod @D@/f p
	same ln -s x @D@/f
	same python3 -c '
import errno, os, sys
f = sys.argv[1] + "/f"
for make in (os.mkdir, os.mkfifo, lambda p: os.symlink("x", p),
             lambda p: os.mkdir("f", dir_fd=os.open(sys.argv[1], os.O_RDONLY))):
    try:
        make(f)
    except OSError as e:
        print(errno.errorcode[e.errno])
' @D@
	local call
	for call in xmknod mknodat mkfifoat symlinkat mkdirat sys-mkdir sys-mknodat sys-symlink; do
		same "$PROGS/pathcalls" "$call" @D@/f
	done
	same "$PROGS/pathcalls" mkdirat @D@/f/sub
	check_file f 1
}

@test "the stat entry points of binaries built before glibc 2.33 (__xstat, __lxstat, __fxstatat and their 64-bit names) and statx on a captured file, and below it (ENOTDIR)" {
	local call p
	for call in xstat xstat64 lxstat lxstat64 fxstatat fxstatat64; do
		for p in @D@/f @D@/f/x @D@/missing; do
			same "$PROGS/pathcalls" "$call" "$p"
		done
	done
	# and statx (coreutils' stat), below the captured file
	same stat -c %s @D@/f/x
	check_file f 1
}

@test "remove() of a captured file deletes it; of a directory holding one: Directory not empty" {
	twice_sh 'mkdir "$D/d" && echo a >"$D/d/a" && echo b >"$D/g"'
	same "$PROGS/pathcalls" remove @D@/d
	same "$PROGS/pathcalls" remove @D@/g
	same "$PROGS/pathcalls" remove @D@/g
	same ls @D@
	same ls @D@/d
	check_file d/a 1
}

@test "utime, utimes, lutimes and futimesat set a captured file's times" {
	local call
	for call in utime utimes lutimes futimesat; do
		twice_sh 'echo content >"$D/$1"' "t-$call"
		same "$PROGS/pathcalls" "$call" "@D@/t-$call"
		same "$PROGS/pathcalls" "$call" "@D@/t-$call/x"
		same stat -c %Y "@D@/t-$call"
	done
}

@test "rmdir of a directory holding captured files: Directory not empty, then after rm it goes; rmdir and cd of a captured file: Not a directory" {
	twice_sh 'mkdir "$D/d" && echo a >"$D/d/a"'
	same rmdir @D@/d
	same python3 -c '
import errno, os, sys
for rm in (lambda: os.rmdir(sys.argv[1] + "/d"), lambda: os.rmdir("d", dir_fd=os.open(sys.argv[1], os.O_RDONLY))):
    try:
        rm()
    except OSError as e:
        print(errno.errorcode[e.errno])
' @D@
	same "$PROGS/pathcalls" sys-rmdir @D@/d
	same rmdir @D@/f
	same "$PROGS/pathcalls" sys-rmdir @D@/f
	same bash -c 'cd "$1"' bash @D@/f
	same python3 -c 'import os, sys; os.chdir(sys.argv[1])' @D@/f
	same "$PROGS/pathcalls" sys-chdir @D@/f
	check_file d/a
	twice_sh 'rm "$D"/d/* && rmdir "$D/d" && ! [ -e "$D/d" ]'
	twice_sh 'mkdir "$D/e" && echo a >"$D/e/a" && rm -r "$D/e" && ! [ -e "$D/e" ]'
}
