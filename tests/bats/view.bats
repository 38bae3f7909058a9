#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# What the application sees of captured paths: stat, listings, rename,
# unlink, reading back; and retention.

load lib/common

setup() {
	common_setup
}

@test "stat, access and reading back report the current version" {
	shim sh -c "printf 'hello world' > '$CKPT/f'; chmod 600 '$CKPT/f' 2>/dev/null; true"
	run shim stat -c '%s %F' "$CKPT/f"
	[ "$output" = "11 regular file" ]
	run shim cat "$CKPT/f"
	[ "$output" = "hello world" ]
	run shim sh -c "test -e '$CKPT/f' && test -f '$CKPT/f' && test -s '$CKPT/f'"
	[ "$status" -eq 0 ]
	run shim "$PYTHON" -c "import os; st = os.stat('$CKPT/f'); print(st.st_size, os.path.getsize('$CKPT/f'), os.access('$CKPT/f', os.R_OK))"
	[ "$output" = "11 11 True" ]
	# without the shim there is nothing at the real path
	[ ! -e "$CKPT/f" ]
	run shim stat "$CKPT/none"
	[ "$status" -ne 0 ]
}

@test "the mode of a new file follows open()'s mode and the umask" {
	shim "$PYTHON" -c "
import os
os.umask(0o027)
fd = os.open('$CKPT/f', os.O_WRONLY | os.O_CREAT, 0o666)
os.write(fd, b'x')
os.close(fd)"
	run shim stat -c '%a' "$CKPT/f"
	[ "$output" = "640" ]
	"$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$(stat -c %a "$BACK$CKPT/f")" = 640 ]
}

@test "stat by name and fstat of an open file agree (cp and tar compare them)" {
	shim sh -c "echo data > '$CKPT/f'"
	run shim "$PYTHON" -c "
import os
a = os.stat('$CKPT/f')
fd = os.open('$CKPT/f', os.O_RDONLY)
b = os.fstat(fd)
print(a.st_ino == b.st_ino and a.st_dev == b.st_dev and a.st_size == b.st_size)"
	[ "$output" = "True" ]
}

@test "listing a directory shows captured files beside real ones" {
	touch "$CKPT/real-file"
	shim sh -c "echo a > '$CKPT/a'; echo b > '$CKPT/b'"
	run shim ls "$CKPT"
	[ "$output" = "$(printf 'a\nb\nreal-file')" ]
	run shim "$PYTHON" -c "import os; print(sorted(os.listdir('$CKPT')))"
	[ "$output" = "['a', 'b', 'real-file']" ]
	# a subdirectory lists only its own
	mkdir "$CKPT/sub"
	shim sh -c "echo c > '$CKPT/sub/c'"
	run shim ls "$CKPT/sub"
	[ "$output" = "c" ]
	# without the shim: only the real entries
	run ls "$CKPT"
	[ "$output" = "$(printf 'real-file\nsub')" ]
}

@test "write to a temporary name, then rename: one history under the final name" {
	for i in 1 2 3; do
		echo "checkpoint $i" >"$REF/v$i"
		shim sh -c "cat '$REF/v$i' > '$CKPT/.ckpt.tmp' && mv '$CKPT/.ckpt.tmp' '$CKPT/ckpt'"
	done
	[ "$(version_count "$CKPT/ckpt")" -eq 3 ]
	[ "$(version_count "$CKPT/.ckpt.tmp")" -eq 0 ]
	for i in 1 2 3; do
		assert_restores "$REF/v$i" "$CKPT/ckpt" "$i"
	done
	run shim ls -A "$CKPT"
	[ "$output" = "ckpt" ]
}

@test "rename onto a fresh name moves all versions" {
	shim sh -c "echo 1 > '$CKPT/a'; echo 2 > '$CKPT/a'"
	shim mv "$CKPT/a" "$CKPT/b"
	[ "$(version_count "$CKPT/b")" -eq 2 ]
	[ "$(version_count "$CKPT/a")" -eq 0 ]
	run shim cat "$CKPT/b"
	[ "$output" = 2 ]
	run shim cat "$CKPT/a"
	[ "$status" -ne 0 ]
}

@test "rename out of the captured area writes a real file" {
	mkdir -p "$T/elsewhere"
	shim sh -c "echo keep > '$CKPT/a'"
	shim mv "$CKPT/a" "$T/elsewhere/a"
	[ "$(cat "$T/elsewhere/a")" = keep ]
	run shim cat "$CKPT/a"
	[ "$status" -ne 0 ]
}

@test "a plain file renamed into the captured area becomes a version" {
	echo plain >"$T/plain"
	shim mv "$T/plain" "$CKPT/p"
	[ ! -e "$T/plain" ]
	[ ! -e "$CKPT/p" ]
	[ "$(version_count "$CKPT/p")" -eq 1 ]
	echo plain >"$REF/p"
	assert_restores "$REF/p" "$CKPT/p"
}

@test "a directory rename carries its captured files (write step.tmp/, rename to step/)" {
	mkdir "$CKPT/step.tmp"
	shim sh -c "echo r0 > '$CKPT/step.tmp/rank0'; echo r1 > '$CKPT/step.tmp/rank1'"
	shim mv "$CKPT/step.tmp" "$CKPT/step"
	[ -d "$CKPT/step" ]
	run shim cat "$CKPT/step/rank0" "$CKPT/step/rank1"
	[ "$output" = "$(printf 'r0\nr1')" ]
	[ "$(version_count "$CKPT/step.tmp/rank0")" -eq 0 ]
}

@test "unlink hides a file, its versions stay restorable and are shown deleted" {
	shim sh -c "echo gone > '$CKPT/f'"
	shim rm "$CKPT/f"
	run shim cat "$CKPT/f"
	[ "$status" -ne 0 ]
	run shim ls "$CKPT"
	[ -z "$output" ]
	run "$STAGEHAND" ls "$CKPT/f"
	[[ "$output" == *"(deleted)"* ]]
	echo gone >"$REF/f"
	assert_restores "$REF/f" "$CKPT/f"
	# writing it again brings it back as the next version
	shim sh -c "echo back > '$CKPT/f'"
	run shim cat "$CKPT/f"
	[ "$output" = back ]
	[ "$(latest_version "$CKPT/f")" -eq 2 ]
}

@test "an existing real file is the starting point of a captured one" {
	printf 'base-content' >"$CKPT/pre"
	shim sh -c "printf -- '-more' >> '$CKPT/pre'"
	run shim cat "$CKPT/pre"
	[ "$output" = "base-content-more" ]
	# the real file is untouched
	[ "$(cat "$CKPT/pre")" = base-content ]
}

@test "O_EXCL on an existing captured file fails with EEXIST; missing parent ENOENT" {
	shim sh -c "echo x > '$CKPT/f'"
	run shim "$PYTHON" -c "
import os
try:
    os.open('$CKPT/f', os.O_WRONLY | os.O_CREAT | os.O_EXCL)
except FileExistsError:
    print('EEXIST')
try:
    os.open('$CKPT/nodir/f', os.O_WRONLY | os.O_CREAT)
except FileNotFoundError:
    print('ENOENT')
try:
    os.open('$CKPT/missing', os.O_WRONLY)
except FileNotFoundError:
    print('ENOENT')"
	[ "$output" = "$(printf 'EEXIST\nENOENT\nENOENT')" ]
}

@test "keep = 2 over 6 versions: older versions and their chunks are freed" {
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\nkeep = 2\ncompress = off\n' "$CACHE" "$CKPT" >"$POLICY"
	for i in 1 2 3 4 5 6; do
		head -c 200000 /dev/urandom >"$REF/v$i"
		shim cp "$REF/v$i" "$CKPT/f"
	done
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$(echo "$output" | awk 'NR > 1 {print $2}' | tr '\n' ' ')" = "5 6 " ]
	assert_restores "$REF/v5" "$CKPT/f" 5
	assert_restores "$REF/v6" "$CKPT/f" 6
	# 2 versions of 4 chunks each, nothing shared: their 2 packs remain, and
	# the collector's count of the live records matches the packs' size
	[ "$(ls "$CACHE/packs" | wc -l)" -eq 2 ]
	[ "$(cat "$CACHE"/packs/* | wc -c)" -eq $((2 * (3 * (65536 + 4096) + 4096))) ]
}

@test "unchanged chunks are stored once: 10% changed, about 10% stored" {
	head -c $((64 * 65536)) /dev/urandom >"$REF/a"
	shim cp "$REF/a" "$CKPT/f"
	cp "$REF/a" "$REF/b"
	for blk in 3 17 40 41 60 63; do
		printf 'changed' | dd of="$REF/b" bs=1 seek=$((blk * 65536 + 100)) conv=notrunc status=none
	done
	shim cp "$REF/b" "$CKPT/f"
	run "$STAGEHAND" ls "$CKPT/f"
	line=$(echo "$output" | awk '$2 == 2')
	[ "$(echo "$line" | awk '{print $5}')" = "6/64" ]
	assert_restores "$REF/b" "$CKPT/f" 2
	assert_restores "$REF/a" "$CKPT/f" 1
}

@test "compressible data is stored compressed, incompressible raw" {
	yes 'checkpoint data line' | head -c 1000000 >"$REF/text"
	shim cp "$REF/text" "$CKPT/text"
	stored=$("$STAGEHAND" ls "$CKPT/text" | awk '$2 == 1 {print $4}')
	[ "$stored" -lt 100000 ]
	head -c 1000000 /dev/urandom >"$REF/noise"
	shim cp "$REF/noise" "$CKPT/noise"
	stored=$("$STAGEHAND" ls "$CKPT/noise" | awk '$2 == 1 {print $4}')
	# raw: 15 records of 64 KiB + the 16960-byte tail, each with its 4 KiB-
	# aligned header
	[ "$stored" -eq $((15 * (65536 + 4096) + 20480)) ]
	assert_restores "$REF/text" "$CKPT/text"
	assert_restores "$REF/noise" "$CKPT/noise"
}

@test "holes are kept as holes" {
	shim "$PYTHON" -c "
import os
fd = os.open('$CKPT/sparse', os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, b'end', 10 * 1024 * 1024)
os.close(fd)"
	"$STAGEHAND" restore --to "$BACK" "$CKPT/sparse"
	[ "$(stat -c %s "$BACK$CKPT/sparse")" -eq $((10 * 1024 * 1024 + 3)) ]
	# nearly nothing stored, and the restored file is sparse too
	stored=$("$STAGEHAND" ls "$CKPT/sparse" | awk '$2 == 1 {print $4}')
	[ "$stored" -lt 70000 ]
	[ "$(du -k "$BACK$CKPT/sparse" | cut -f1)" -lt 1024 ]
}

@test "restore never writes outside --to, even through a symbolic link" {
	shim sh -c "echo secret > '$CKPT/f'"
	mkdir -p "$(dirname "$BACK/${T#/}")" "$T/outside"
	ln -s "$T/outside" "$BACK/${T#/}"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ]
	[[ "$output" == *"symbolic link"* ]]
	[ -z "$(find "$T/outside" -type f)" ]
}

@test "restore without --to rewrites the real path atomically" {
	shim sh -c "echo staged > '$CKPT/f'"
	"$STAGEHAND" restore "$CKPT/f"
	[ "$(cat "$CKPT/f")" = staged ]
	[ -z "$(ls -A "$CKPT" | grep stagehand-restore)" ]
}

@test "restore of a directory restores every file below it" {
	mkdir -p "$CKPT/d"
	shim sh -c "echo 1 > '$CKPT/d/one'; echo 2 > '$CKPT/d/two'; echo 3 > '$CKPT/other'"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/d"
	[ "$status" -eq 0 ]
	[ "$(cat "$BACK$CKPT/d/one")" = 1 ]
	[ "$(cat "$BACK$CKPT/d/two")" = 2 ]
	[ ! -e "$BACK$CKPT/other" ]
}

@test "restore shows its progress on a terminal, and only there" {
	head -c $((80 * 1024 * 1024)) /dev/urandom >"$REF/big"
	shim cp "$REF/big" "$CKPT/big"
	# script(1) gives the restore a terminal
	run script -qec "'$STAGEHAND' restore --to '$BACK' '$CKPT/big'" /dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *"restoring $CKPT/big: 100% (80.0 MiB of 80.0 MiB)"* ]]
	cmp "$REF/big" "$BACK$CKPT/big"
	run "$STAGEHAND" restore --to "$BACK/again" "$CKPT/big"
	[ "$status" -eq 0 ]
	[[ "$output" != *"restoring $CKPT"* ]]
}

@test "a version pruned by keep frees what only it used, even inside a shared pack" {
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 64K\nchunking = fixed\nkeep = 1\ncompress = off\n' "$CACHE" "$CKPT" >"$POLICY"
	head -c $((64 * 65536)) /dev/urandom >"$REF/a"
	shim cp "$REF/a" "$CKPT/f"
	# the next version changes 48 of its 64 chunks: version 1 goes, and of
	# its pack only the 16 chunks version 2 still uses may remain
	cp "$REF/a" "$REF/b"
	head -c $((48 * 65536)) /dev/urandom | dd of="$REF/b" conv=notrunc status=none
	shim cp "$REF/b" "$CKPT/f"
	[ "$(version_count "$CKPT/f")" -eq 1 ]
	assert_restores "$REF/b" "$CKPT/f"
	[ "$(cat "$CACHE"/packs/* | wc -c)" -eq $((64 * (65536 + 4096))) ]
}

@test "renaming onto a file this process still has open: the rename wins" {
	run shim "$PYTHON" -c "
import os
old = open('$CKPT/out', 'w')
old.write('old')
old.flush()
with open('$CKPT/out.tmp', 'w') as new:
    new.write('new')
os.rename('$CKPT/out.tmp', '$CKPT/out')
old.close()
print(open('$CKPT/out').read())"
	[ "$output" = new ]
	echo -n new >"$REF/new"
	assert_restores "$REF/new" "$CKPT/out"
}
