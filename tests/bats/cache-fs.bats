#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The file system under the cache: one without O_TMPFILE (a FUSE file
# system here; 9p, NFS, Lustre and GPFS alike) cannot hold the shadows that
# several processes writing one file share, so the cache is refused there,
# with a message that names what is missing, and nothing is lost.

load lib/common

setup() {
	common_setup
	FUSE=""
	WRITER_PID=""
}

teardown() {
	[ -z "$WRITER_PID" ] || kill -9 "$WRITER_PID" 2>/dev/null || true
	if [ -n "$FUSE" ] && mountpoint -q "$FUSE"; then
		fusermount3 -u "$FUSE" 2>/dev/null || umount -l "$FUSE"
	fi
}

# A FUSE mount of a directory (bindfs) at $FUSE, which has no O_TMPFILE.
mount_fuse() {
	command -v bindfs >/dev/null || skip "bindfs is not installed (scripts/deps.sh --tests)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	mkdir -p "$T/under" "$T/fuse"
	bindfs "$T/under" "$T/fuse" || skip "cannot mount a FUSE file system here"
	FUSE="$T/fuse"
	"$PYTHON" -c "import os; os.open('$FUSE', os.O_TMPFILE | os.O_RDWR)" 2>/dev/null &&
		skip "this FUSE file system has O_TMPFILE"
	return 0
}

@test "a cache on a file system without O_TMPFILE is refused, naming it; two processes writing one file lose nothing" {
	mount_fuse
	printf '[cache]\ndir = %s/cache\n[path %s/*]\n' "$FUSE" "$CKPT" >"$POLICY"
	export STAGEHAND_LOG_FILE="$T/shim.log"
	# one process writes the file and holds it open while another appends
	shim "$PYTHON" -c "
import os, time
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'a' * 10)
open('$T/opened', 'w').close()
deadline = time.time() + $WAIT
while not os.path.exists('$T/appended') and time.time() < deadline:
    time.sleep(0.01)
os.close(fd)" &
	WRITER_PID=$!
	wait_for "$WAIT" test -e "$T/opened"
	run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_APPEND)
os.write(fd, b'b' * 5)
os.close(fd)"
	touch "$T/appended"
	wait_for "$WAIT" pid_gone "$WRITER_PID"
	[ "$status" -eq 0 ] || fail "the second writer: $output"
	# nothing captured, nothing lost: the file itself has both writes
	[ "$(cat "$CKPT/f")" = aaaaaaaaaabbbbb ] || fail "content: $(cat "$CKPT/f")"
	grep -q "cache directory '$FUSE/cache' is not usable (its file system has no O_TMPFILE" \
		"$T/shim.log" || fail "log: $(cat "$T/shim.log")"
	# and the tools refuse it too
	run "$STAGEHAND" ls
	[ "$status" -ne 0 ]
	[[ "$output" == *"cannot open the cache '$FUSE/cache': its file system has no O_TMPFILE"* ]]
}
