#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Crashes, corruption, bad policies, a full cache: nothing wrong is ever
# published or restored, nothing is silently lost.

load lib/common

setup() {
	common_setup
}

# Random bytes of a given size into a file.
random_file() {
	head -c "$2" /dev/urandom >"$1"
}

# input_read PID INODE: sets READ to how far a process has read the file
# INODE on its standard input (0 before it opened it there), or to a huge
# number once it has exited (or is a zombie). Shell builtins only: no
# process started while the one watched runs.
input_read() {
	local pid="$1" ino="$2" st k v pos=0 on=""
	READ=999999999999
	{ read -r _ _ st _ <"/proc/$pid/stat"; } 2>/dev/null && [ "$st" != Z ] || return 0
	{
		while read -r k v; do
			case "$k" in
			pos:) pos=$v ;;
			ino:) on=$v ;;
			esac
		done <"/proc/$pid/fdinfo/0"
	} 2>/dev/null
	READ=0
	[ "$on" != "$ino" ] || READ=$pos
}

@test "kill -9 at 50 random points while writing version N+1: version N intact, nothing partial" {
	random_file "$REF/a" $((6 * 1024 * 1024))
	random_file "$REF/b" $((6 * 1024 * 1024 + 4321))
	shim cp "$REF/a" "$CKPT/f"
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	completed=0
	killed=0
	local size ino target deadline
	size=$(stat -c %s "$REF/b")
	ino=$(stat -c %i "$REF/b")
	for i in $(seq 1 50); do
		before=$(version_count "$CKPT/f")
		# dd reads and writes in 2 KiB pieces (its input on its standard
		# input), then close() commits. The kill lands at a random point
		# of its progress, whatever this machine's speed: once dd has read
		# a random amount of its input (up to a quarter more than there
		# is: then once it has exited), so before it writes, while it
		# writes, during the commit, or after.
		target=$(((RANDOM * 32768 + RANDOM) % (size + size / 4)))
		LD_PRELOAD="$SHIM" dd if="$REF/b" of="$CKPT/f" bs=2k status=none &
		pid=$!
		deadline=$((SECONDS + WAIT))
		until input_read "$pid" "$ino" && [ "$READ" -ge "$target" ]; do
			[ "$SECONDS" -lt "$deadline" ] || fail "dd never read $target bytes"
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" || killed=$((killed + 1))
		after=$(version_count "$CKPT/f")
		[ "$after" -eq "$before" ] || [ "$after" -eq $((before + 1)) ]
		[ "$after" -eq "$before" ] || completed=$((completed + 1))
		# version 1 is always a, the newest is a or b entire
		assert_restores "$REF/a" "$CKPT/f" 1
		[ "$after" -eq 1 ] || assert_restores "$REF/b" "$CKPT/f"
	done
	echo "# $killed killed, $completed completed" >&3
	# and every version listed after all the kills is a or b entire
	for v in $("$STAGEHAND" ls "$CKPT/f" | awk 'NR > 1 && $2 > 1 {print $2}'); do
		assert_restores "$REF/b" "$CKPT/f" "$v"
	done
	# what a reader sees is a whole version
	shim cat "$CKPT/f" >"$T/seen"
	cmp -s "$T/seen" "$REF/a" || cmp -s "$T/seen" "$REF/b"
}

@test "a process that writes and exits without closing publishes nothing new" {
	shim sh -c "printf one > '$CKPT/f'"
	# Python's os._exit skips every close: the second write is never committed.
	run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_TRUNC)
os.write(fd, b'two, never closed')
os._exit(0)"
	[ "$status" -eq 0 ]
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	printf one >"$REF/one"
	assert_restores "$REF/one" "$CKPT/f"
	# exit() without close: not committed either, and the shim says so
	run shim "$PYTHON" -c "
import os, sys
fd = os.open('$CKPT/g', os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b'data')
sys.exit(0)"
	[ "$(version_count "$CKPT/g")" -eq 0 ]
	[[ "$output" == *"'$CKPT/g' was never closed"* ]]
}

@test "a corrupt chunk: restore fails naming file, version and chunk, writes nothing" {
	random_file "$REF/a" $((300 * 1024))
	shim cp "$REF/a" "$CKPT/f"
	pack=$(find "$CACHE/packs" -type f)
	# a byte of the third record's payload (records are 64 KiB + 4 KiB)
	flip_byte "$pack" $((2 * 69632 + 1000))
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"'$CKPT/f' version 1: chunk 2 is corrupt (packs/"*".pack at offset 139264)"* ]]
	[ ! -e "$BACK$CKPT/f" ]
	[ -z "$(find "$BACK" -type f)" ]
}

@test "a truncated or missing pack fails the restore too" {
	random_file "$REF/a" $((300 * 1024))
	shim cp "$REF/a" "$CKPT/f"
	pack=$(find "$CACHE/packs" -type f)
	truncate -s $(($(stat -c %s "$pack") - 8000)) "$pack"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"version 1: chunk 4 is corrupt"* ]]
	[ -z "$(find "$BACK" -type f 2>/dev/null)" ]
	rm "$pack"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"version 1: chunk 0 is missing"* ]]
	[ -z "$(find "$BACK" -type f 2>/dev/null)" ]
}

@test "a corrupt manifest: ls and restore report it, restore exits non-zero" {
	random_file "$REF/a" 100000
	shim cp "$REF/a" "$CKPT/f"
	random_file "$REF/b" 100000
	shim cp "$REF/b" "$CKPT/f"
	# the newest of the two (names sort in version order)
	mf=$(find "$CACHE/files" -name 'v*.mf' | sort | tail -n 1)
	flip_byte "$mf" 20
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"'$CKPT/f' version 2: the manifest is corrupt"* ]]
	[ ! -e "$BACK$CKPT/f" ]
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"manifest corrupt"* ]]
	# version 1 is still good
	assert_restores "$REF/a" "$CKPT/f" 1
	# the application reading the file gets an error, not wrong bytes
	run shim cat "$CKPT/f"
	[ "$status" -ne 0 ]
}

# A disk that dropped the writes of the newest version (its manifest
# reads back as zeros) must not wedge the path: what does not need the
# damaged bytes goes on, what needs them fails.

# Versions 1 ($REF/a) and 2 ($REF/b) of $CKPT/f, version 2's manifest then
# zeroed.
newest_damaged() {
	random_file "$REF/a" 100000
	shim cp "$REF/a" "$CKPT/f"
	random_file "$REF/b" 100000
	shim cp "$REF/b" "$CKPT/f"
	local mf
	mf=$(find "$CACHE/files" -name 'v*.mf' | sort | tail -n 1)
	dd if=/dev/zero of="$mf" bs="$(stat -c %s "$mf")" count=1 conv=notrunc status=none
}

@test "a damaged newest manifest: a new whole version is taken, an append or a read fails" {
	newest_damaged
	run shim sh -c "echo more >> '$CKPT/f'"
	[ "$status" -ne 0 ]
	[[ "$output" == *"version 2 of '$CKPT/f' is damaged in the cache"* ]]
	run shim cat "$CKPT/f"
	[ "$status" -ne 0 ]
	random_file "$REF/c" 100000
	run shim cp "$REF/c" "$CKPT/f"
	[ "$status" -eq 0 ]
	[[ "$output" == *"version 2 of '$CKPT/f' is damaged in the cache (its manifest is corrupt); the new version replaces it"* ]]
	assert_restores "$REF/c" "$CKPT/f" 3
	assert_restores "$REF/a" "$CKPT/f" 1
	# and the path reads again, as the new version
	shim cmp "$REF/c" "$CKPT/f"
}

@test "a damaged newest manifest: rename fails saying so, nothing moves; rm deletes the file" {
	newest_damaged
	run shim mv "$CKPT/f" "$CKPT/g"
	[ "$status" -ne 0 ]
	[[ "$output" == *"version 2 of '$CKPT/f' is damaged in the cache: it cannot be renamed"* ]]
	run shim ls "$CKPT"
	[ "$output" = f ]
	assert_restores "$REF/a" "$CKPT/f" 1
	run shim rm "$CKPT/f"
	[ "$status" -eq 0 ]
	run shim ls "$CKPT"
	[ -z "$output" ]
	# (the deleted versions are there for restore, the good one whole)
	assert_restores "$REF/a" "$CKPT/f" 1
}

@test "a malformed policy: file:line named, everything passed through, commands fail" {
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 3M\n' "$CACHE" "$CKPT" >"$POLICY"
	run shim sh -c "echo data > '$CKPT/f'"
	[ "$status" -eq 0 ]
	[[ "$output" == *"$POLICY:4: chunk_size '3M' must be a power of two"* ]]
	# nothing lost: the real file was written
	[ "$(cat "$CKPT/f")" = data ]
	run "$STAGEHAND" ls
	[ "$status" -eq 1 ]
	[[ "$output" == *"$POLICY:4:"* ]]
	run "$STAGEHAND" run -- true
	[ "$status" -eq 1 ]
}

@test "a missing cache directory is created" {
	rm -rf "$CACHE"
	printf '[cache]\ndir = %s/deep/er\n[path %s/*]\n' "$CACHE" "$CKPT" >"$POLICY"
	shim sh -c "echo data > '$CKPT/f'"
	[ -d "$CACHE/deep/er/packs" ]
	[ ! -e "$CKPT/f" ]
	echo data >"$REF/f"
	assert_restores "$REF/f" "$CKPT/f"
}

@test "an unusable cache directory: passthrough with a warning" {
	touch "$T/file"
	printf '[cache]\ndir = %s/file/cache\n[path %s/*]\n' "$T" "$CKPT" >"$POLICY"
	run shim sh -c "echo data > '$CKPT/f'"
	[ "$status" -eq 0 ]
	[[ "$output" == *"cache directory '$T/file/cache' is not usable"* ]]
	[ "$(cat "$CKPT/f")" = data ]
}

@test "a read-only cache directory: passthrough with a warning" {
	[ "$(id -u)" -eq 0 ] || skip "needs root to mount a read-only file system"
	mkdir -p "$T/ro"
	mount -t tmpfs -o ro,size=1m tmpfs "$T/ro" || skip "cannot mount tmpfs here"
	printf '[cache]\ndir = %s/ro\n[path %s/*]\n' "$T" "$CKPT" >"$POLICY"
	run shim sh -c "echo data > '$CKPT/f'"
	umount "$T/ro"
	[ "$status" -eq 0 ]
	[[ "$output" == *"is not usable"* ]]
	[ "$(cat "$CKPT/f")" = data ]
}

@test "capacity reached: close fails with ENOSPC, older versions intact" {
	printf '[cache]\ndir = %s\ncapacity = 1M\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\ncompress = off\n' "$CACHE" "$CKPT" >"$POLICY"
	random_file "$REF/small" 300000
	shim cp "$REF/small" "$CKPT/f"
	random_file "$REF/big" 2000000
	# Staged as written (the fast path), the write fails, and so does the
	# close; through the shadow file, the close does.
	run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_TRUNC)
try:
    data = open('$REF/big', 'rb').read()
    while data:
        data = data[os.write(fd, data):]
    print('written')
except OSError as e:
    print('write failed:', e.strerror)
try:
    os.close(fd)
except OSError as e:
    print('close failed:', e.strerror)"
	if [ "${STAGEHAND_FAST:-1}" != 0 ]; then
		[[ "$output" == *"write failed: No space left on device"* ]]
	fi
	[[ "$output" == *"close failed: No space left on device"* ]]
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	STAGEHAND_FAST=0 run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_TRUNC)
os.write(fd, open('$REF/big', 'rb').read())
try:
    os.close(fd)
except OSError as e:
    print('close failed:', e.strerror)"
	[[ "$output" == *"close failed: No space left on device"* ]]
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	assert_restores "$REF/small" "$CKPT/f"
	# the failed attempt left nothing behind beyond the capacity
	used=$(cat "$CACHE"/packs/* | wc -c)
	[ "$used" -lt $((1024 * 1024 + 65536)) ]
}

@test "a full disk (ENOSPC from the file system): the write or close fails, nothing lost silently" {
	[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small file system"
	mkdir -p "$T/small"
	mount -t tmpfs -o size=4m tmpfs "$T/small" || skip "cannot mount tmpfs here"
	printf '[cache]\ndir = %s/small/cache\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\ncompress = off\n' "$T" "$CKPT" >"$POLICY"
	random_file "$REF/small" 500000
	shim cp "$REF/small" "$CKPT/f"
	random_file "$REF/big" $((6 * 1024 * 1024))
	run shim cp "$REF/big" "$CKPT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	assert_restores "$REF/small" "$CKPT/f"
	umount "$T/small"
}

@test "the application closing every descriptor it does not know cannot break the shim" {
	head -c 300000 /dev/urandom >"$REF/a"
	# a daemon-style loop of close() and a close_range(), while the file is open:
	# the shim's own descriptors (cache, holders) must survive both
	run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
data = open('$REF/a', 'rb').read()
os.write(fd, data[:100000])
for other in range(3, 4096):
    if other != fd:
        try:
            os.close(other)
        except OSError:
            pass
os.write(fd, data[100000:200000])
os.closerange(fd + 1, 65536)
os.write(fd, data[200000:])
os.close(fd)
print('ok')"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
	assert_restores "$REF/a" "$CKPT/f"
	# and dup2 over one of its numbers moves it out of the way
	run shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/g', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
src = os.open('$REF/a', os.O_RDONLY)
for n in range(800, 830):
    os.dup2(src, n)
os.write(fd, open('$REF/a', 'rb').read())
os.close(fd)
print('ok')"
	[ "$output" = ok ]
	assert_restores "$REF/a" "$CKPT/g"
}

# has_versions PATH N: PATH has at least N versions.
has_versions() {
	[ "$(version_count "$1")" -ge "$2" ]
}

# Waits until a path has n versions (a background commit), before the
# suite's generous deadline.
wait_versions() {
	wait_for "$WAIT" has_versions "$1" "$2"
}

@test "durability = async: close returns, the commit completes in the background after exit" {
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\ndurability = async\n' "$CACHE" "$CKPT" >"$POLICY"
	head -c 3000000 /dev/urandom >"$REF/a"
	# written with a seek back (so staged from its shadow file at close), then
	# the process dies at once
	STAGEHAND_LOG=debug run shim "$PYTHON" -c "
import os, signal
children = []
signal.signal(signal.SIGCHLD, lambda *a: children.append(1))
data = open('$REF/a', 'rb').read()
with open('$CKPT/f', 'wb') as f:
    f.write(data)
    f.seek(0)
    f.write(data[:10])
# this process reads what it wrote, at once
assert open('$CKPT/f', 'rb').read() == open('$REF/a', 'rb').read()
# and never sees the committer: no SIGCHLD, nothing to wait for
try:
    os.waitpid(-1, os.WNOHANG)
    print('a child')
except ChildProcessError:
    print('no child', len(children))
os.kill(os.getpid(), signal.SIGKILL)"
	[[ "$output" == *"no child 0"* ]]
	[[ "$output" == *"committing '$CKPT/f' in the background"* ]]
	wait_versions "$CKPT/f" 1
	assert_restores "$REF/a" "$CKPT/f"
}

@test "the shim leaks neither descriptors nor threads into the application" {
	run shim "$PYTHON" -c "
import os
def fds():
    return len(os.listdir('/proc/self/fd'))
def write(i):
    with open('$CKPT/f%d' % (i % 7), 'wb') as f:
        f.write(os.urandom(100000))
        if i % 3 == 0:
            f.seek(0)           # the shadow path too
            f.write(b'x')
    with open('$CKPT/f%d' % (i % 7), 'rb') as f:
        f.read()
write(0)
before = fds()
for i in range(1, 200):
    write(i)
print('fds', before, fds(), 'threads', len(os.listdir('/proc/self/task')))"
	[ "$status" -eq 0 ]
	read -r _ before after _ threads <<<"$output"
	[ "$before" -eq "$after" ]
	[ "$threads" -eq 1 ]
}

@test "durability = async: what tracks the background commits stays bounded" {
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\ndurability = async\n' "$CACHE" "$CKPT" >"$POLICY"
	run shim "$PYTHON" -c "
import os
def fds():
    return len(os.listdir('/proc/self/fd'))
def write(i):
    with open('$CKPT/g%d' % i, 'wb') as f:
        f.write(os.urandom(70000))
        f.seek(0)               # staged from the shadow: a background commit
        f.write(b'x')
write(0)
before = fds()
for i in range(1, 150):
    write(i)
print('fds', before, fds(), 'threads', len(os.listdir('/proc/self/task')))"
	[ "$status" -eq 0 ]
	read -r _ before after _ threads <<<"$output"
	[ "$after" -le $((before + 64)) ]
	[ "$threads" -eq 1 ]
	# every one of them lands
	for i in $(seq 0 149); do
		wait_versions "$CKPT/g$i" 1
	done
}
