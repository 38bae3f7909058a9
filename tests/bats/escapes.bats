#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Writes that must not escape capture: glibc creating a file with a call of
# its own (mkstemp, posix_spawn's file actions), a file made without a name
# (O_TMPFILE) and linked later, and metadata set through a descriptor (cp -p
# sets the mode with fsetxattr). After each, no regular file exists below
# $CKPT on the real file system, and the shim shows the data.

load lib/common
load lib/capture

setup() {
	common_setup
	ESCAPES="$PROGS/escapes"
}

# No regular file below $CKPT on the real file system.
no_real_files() {
	local found
	found=$(find "$CKPT" -type f)
	[ -z "$found" ] || fail "real files below $CKPT: $found"
}

@test "mkstemp in a captured directory: captured files, renamed or kept, no real one" {
	twice "$ESCAPES" mkstemp @D@ >/dev/null
	no_real_files
	check_file final 1
	local kept
	kept=$(shim ls "$CKPT" | grep '^kept') || fail "no kept file: $(shim ls -A "$CKPT")"
	[[ "$kept" == kept?????? ]] || fail "name '$kept'"
	[ "$(shim ls -A "$CKPT" | sort | tr '\n' ' ')" = "final $kept " ] ||
		fail "left behind: $(shim ls -A "$CKPT")"
	[ "$(shim cat "$CKPT/$kept")" = kept ]
	[ "$(shim stat -c %a "$CKPT/$kept")" = 600 ]
	[ "$(version_count "$CKPT/$kept")" = 1 ]
}

@test "mkostemps with a suffix in a captured directory: a version under the generated name" {
	run tshim "$ESCAPES" mkostemps "$CKPT"
	[ "$status" -eq 0 ] || fail "$output"
	local name="$output"
	[[ "$name" == "$CKPT"/tmp??????.dat ]] || fail "name '$name'"
	no_real_files
	[ "$(version_count "$name")" = 1 ] || fail "$("$STAGEHAND" ls "$name")"
	[ "$(shim cat "$name")" = kept ]
	[ "$(shim stat -c %a "$name")" = 600 ]
}

@test "sort -T with a captured temporary directory: its temporary files are captured too" {
	mkdir "$CKPT/tmp"
	seq 30000 -1 1 >"$T/in"
	sort -n "$T/in" >"$T/want"
	# The compressor runs while sort's temporary files exist: it looks.
	cat >"$T/look" <<EOF
#!/bin/sh
[ "\$1" = -d ] || env -u LD_PRELOAD find "$CKPT" -type f >>"$T/seen"
exec cat
EOF
	chmod +x "$T/look"
	tshim sort -n -S 1k -T "$CKPT/tmp" --compress-program="$T/look" -o "$CKPT/sorted" "$T/in"
	[ -f "$T/seen" ] || fail "sort used no temporary file"
	[ ! -s "$T/seen" ] || fail "real temporary files: $(sort -u "$T/seen" | head)"
	no_real_files
	shim cat "$CKPT/sorted" | cmp - "$T/want"
	[ -z "$(shim ls -A "$CKPT/tmp")" ] || fail "left behind: $(shim ls -A "$CKPT/tmp")"
}

@test "open(dir, O_TMPFILE) in a captured directory fails EOPNOTSUPP: the program's fallback is a captured file" {
	twice "$ESCAPES" tmpfile @D@
	no_real_files
	check_file anon 1
	run tshim python3 -c 'import os, sys; os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR)' "$CKPT"
	[[ "$output" == *"Operation not supported"* ]] || fail "$output"
}

@test "linkat of an O_TMPFILE file made elsewhere to a captured name, through /proc/self/fd or AT_EMPTY_PATH: a version" {
	mkdir "$T/out"
	for how in proc empty; do
		"$ESCAPES" linktmp "$T/out" "$REF/$how" "$how"
		tshim "$ESCAPES" linktmp "$T/out" "$CKPT/$how" "$how"
	done
	no_real_files
	check_file proc 1
	check_file empty 1
	# onto an existing name: EEXIST, as on a file system
	run tshim "$ESCAPES" linktmp "$T/out" "$CKPT/proc" proc
	[[ "$output" == *"File exists"* ]] || fail "$output"
}

@test "linkat of a captured file's own descriptor through /proc/self/fd: the new name is captured" {
	twice "$ESCAPES" linkopen @D@
	no_real_files
	check_file a 1
	check_file b 1
}

@test "cp -p and cp -a into a captured directory keep the modes (cp sets them with fsetxattr, an ACL)" {
	printf 'run me\n' >"$T/x755"
	printf 'read me\n' >"$T/x644"
	chmod 755 "$T/x755"
	chmod 644 "$T/x644"
	for opt in -p -a; do
		for f in x755 x644; do
			cp $opt "$T/$f" "$REF/$f$opt"
			tshim cp $opt "$T/$f" "$CKPT/$f$opt"
			check_file "$f$opt" 1
		done
	done
	no_real_files
	run tshim python3 -c '
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
assert os.listxattr(fd) == []
for call in (lambda: os.setxattr(fd, "user.k", b"v"), lambda: os.getxattr(fd, "user.k"),
             lambda: os.removexattr(fd, "user.k")):
    try:
        call()
        sys.exit("succeeded")
    except OSError as e:
        assert e.errno in (errno.ENOTSUP, errno.ENODATA), e
' "$CKPT/x644-p"
	[ "$status" -eq 0 ] || fail "$output"
}

@test "tar -xpf into a captured directory keeps the modes" {
	mkdir "$T/src"
	printf 'a\n' >"$T/src/a755"
	printf 'b\n' >"$T/src/b600"
	chmod 755 "$T/src/a755"
	chmod 600 "$T/src/b600"
	tar -C "$T/src" -cf "$T/x.tar" a755 b600
	twice tar -C @D@ -xpf "$T/x.tar"
	no_real_files
	check_file a755 1
	check_file b600 1
}

@test "fchown of a captured file: to its owner a no-op, to another EPERM (it has no owner of its own)" {
	tshim sh -c 'echo x >"$1"' sh "$CKPT/f"
	run tshim python3 -c '
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
st = os.fstat(fd)
os.fchown(fd, st.st_uid, st.st_gid)
os.fchown(fd, -1, -1)
try:
    os.fchown(fd, st.st_uid + 1234, -1)
    sys.exit("fchown to another owner succeeded")
except OSError as e:
    assert e.errno == errno.EPERM, e
assert os.fstat(fd).st_uid == st.st_uid
os.close(fd)
' "$CKPT/f"
	[ "$status" -eq 0 ] || fail "$output"
	no_real_files
}

@test "posix_spawn with an open action on a captured path: the child's output is captured" {
	local script='
import os, sys
d = sys.argv[1]
path = d + "/out"
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "echo hello"], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)])
assert os.waitpid(pid, 0)[1] == 0
# and a captured file read as the standard input of another child
r, w = os.pipe()
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "tr a-z A-Z"], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 0, path, os.O_RDONLY, 0),
                                   (os.POSIX_SPAWN_DUP2, w, 1)])
os.close(w)
got = os.read(r, 100)
assert os.waitpid(pid, 0)[1] == 0
assert got == b"HELLO\n", got
'
	python3 -c "$script" "$REF"
	tshim python3 -c "$script" "$CKPT"
	no_real_files
	check_file out
	# no descriptor of it stays open in the parent
	run tshim python3 -c '
import os, sys
n = len(os.listdir("/proc/self/fd"))
for i in range(20):
    pid = os.posix_spawn("/bin/true", ["true"], os.environ,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, sys.argv[1], os.O_RDONLY, 0)])
    os.waitpid(pid, 0)
assert len(os.listdir("/proc/self/fd")) == n, os.listdir("/proc/self/fd")
' "$CKPT/out"
	[ "$status" -eq 0 ] || fail "$output"
}

@test "posix_spawn open action, and the program exits without destroying the actions: the child's output is committed" {
	twice "$PROGS/escapes" spawnkeep @D@
	no_real_files
	check_file spawned 1
}
