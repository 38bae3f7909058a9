#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# libc calls that name a path, beyond open and stat, see captured files as a
# file system would show them (docs/CAPTURE.md, "Hooked calls"): each runs
# on the reference directory without the shim and on the captured one with
# it, and must give the same result.

load lib/common
load lib/capture

setup() {
	common_setup
}

@test "sort -o F F sorts a captured file in place (glibc's euidaccess)" {
	twice_sh 'printf "pear\napple\nfig\n" >"$D/f" && sort -o "$D/f" "$D/f" && sort "$D/f" >/dev/null'
	check_file f
	[ "$(shim cat "$CKPT/f")" = "$(printf 'apple\nfig\npear')" ]
}

@test "test -r / -w and /usr/bin/test on a captured file, and on a missing one" {
	twice_sh 'echo x >"$D/f" && [ -r "$D/f" ] && [ -w "$D/f" ] && /usr/bin/test -r "$D/f" &&
		! /usr/bin/test -r "$D/missing" && ! [ -x "$D/f" ]'
	check_file f
}

@test "syscall(): openat, write, statx, renameat2 NOREPLACE, linkat and read, as Rust code makes them" {
	twice "$PROGS/rawcalls" @D@
	check_file model 1
	check_file model.link 1
	run shim stat "$CKPT/.tmpXk3q9"
	[ "$status" -ne 0 ]
}

@test "link: a second name gets the content; onto an existing name EEXIST; out of the captured area EXDEV" {
	local script='
import errno, os, sys
d, out = sys.argv[1], sys.argv[2]
with open(d + "/a", "wb") as f:
    f.write(b"first" * 1000)
os.link(d + "/a", d + "/b")
for dst, want in ((d + "/b", errno.EEXIST), (out + "/c", errno.EXDEV if "ckpt" in d else None)):
    try:
        os.link(d + "/a", dst)
        assert want is None, dst
    except OSError as e:
        assert e.errno == want, (dst, e)
os.unlink(d + "/a")
assert open(d + "/b", "rb").read() == b"first" * 1000
'
	mkdir -p "$T/out-ref" "$T/out-ckpt"
	python3 -c "$script" "$REF" "$T/out-ref"
	tshim python3 -c "$script" "$CKPT" "$T/out-ckpt"
	check_file b 1
	run shim stat "$CKPT/a"
	[ "$status" -ne 0 ]
}

@test "link of a file still being written: the new name holds what was written, closed; later writes stay with the old name" {
	tshim python3 -c '
import os, sys
d = sys.argv[1]
f = open(d + "/a", "wb")
f.write(b"X" * 1000)
f.flush()
os.link(d + "/a", d + "/b")
f.write(b"Y" * 10)
f.close()
assert open(d + "/b", "rb").read() == b"X" * 1000
assert open(d + "/a", "rb").read() == b"X" * 1000 + b"Y" * 10
' "$CKPT"
	run "$STAGEHAND" ls "$CKPT/"
	[ "$status" -eq 0 ] || fail "ls: $output"
	[[ "$output" != *"not closed"* ]] || fail "a version left open: $output"
	[ "$(version_count "$CKPT/b")" = 1 ] || fail "$("$STAGEHAND" ls "$CKPT/b")"
}

@test "extended attributes: a captured file has none, and setting one fails (ENOTSUP) rather than being lost" {
	echo x >"$T/plain"
	if ! python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.k", b"v")' "$T/plain" 2>/dev/null; then
		skip "the file system here has no user xattrs"
	fi
	tshim sh -c 'echo x >"$1"' sh "$CKPT/f"
	run tshim python3 -c '
import errno, os, sys
assert os.listxattr(sys.argv[1]) == []
try:
    os.setxattr(sys.argv[1], "user.k", b"v")
    sys.exit("setxattr succeeded")
except OSError as e:
    assert e.errno == errno.ENOTSUP, e
' "$CKPT/f"
	[ "$status" -eq 0 ] || fail "$output"
}

@test "statx with a NULL path (how Rust before 1.64 probes for it) gives EFAULT, as without the shim" {
	local probe='
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.statx(0, None, 0, 0xfff, None)
print(r, os.strerror(ctypes.get_errno()))'
	run python3 -c "$probe"
	local want="$output"
	[ "$want" = "-1 Bad address" ] || fail "without the shim: $want"
	run shim python3 -c "$probe"
	[ "$status" -eq 0 ] || fail "exited $status: $output"
	[ "$output" = "$want" ]
}
