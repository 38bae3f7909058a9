#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Everyday tools writing into the captured area: cp, dd, tar, rsync and the
# shell's redirections.

load lib/common
load lib/capture

setup() {
	common_setup
	make_source "$T/src"
}

# A small tree to copy around: files of several sizes, one with holes, one
# empty, a subdirectory.
make_tree() {
	local t="$1"
	mkdir -p "$t/sub/deeper"
	"$WRITER" seq "$t/a.bin" - 11
	"$WRITER" pwrite "$t/sub/holes.bin" - 12
	"$WRITER" stdio "$t/sub/deeper/text.txt" - 13
	printf 'small\n' >"$t/sub/small"
	: >"$t/empty"
	chmod 0600 "$t/sub/small"
	chmod 0755 "$t/a.bin"
}

TREE_FILES="a.bin sub/holes.bin sub/deeper/text.txt sub/small empty"

# No regular file may exist below the captured directory on the real file
# system (directories are real: mkdir is not captured).
assert_no_real_files() {
	local found
	found=$(find "$CKPT" -type f -o -type l)
	[ -z "$found" ] || { complain "real files below $CKPT: $found"; return 1; }
}

# ---- cp ----

@test "cp from a plain file into the captured area" {
	twice cp "$T/src" @D@/x
	check_file x 1
}

@test "cp --sparse=always of a file with holes" {
	"$WRITER" pwrite "$T/holes"
	twice cp --sparse=always "$T/holes" @D@/x
	check_file x 1
}

@test "cp over an existing captured file, then cp captured to captured" {
	twice "$WRITER" seq @D@/x - 5
	twice cp "$T/src" @D@/x
	check_file x 2
	twice cp @D@/x @D@/y
	check_file y 1
}

@test "cp -r of a tree into the captured area" {
	make_tree "$T/tree"
	twice cp -r "$T/tree" @D@/tree
	for f in $TREE_FILES; do check_file "tree/$f" 1; done
	assert_no_real_files
}

# ---- dd ----

@test "dd conv=fsync: one version (the close after the fsync changes nothing)" {
	twice dd if="$T/src" of=@D@/x bs=64k conv=fsync status=none
	check_file x 1
}

@test "dd seek= conv=notrunc into the middle of an existing captured file" {
	twice "$WRITER" seq @D@/x - 5
	twice dd if="$T/src" of=@D@/x bs=4096 seek=30 count=40 conv=notrunc status=none
	check_file x 2
}

@test "dd oflag=direct, aligned size" {
	head -c 655360 "$T/src" >"$T/aligned"
	twice dd if="$T/aligned" of=@D@/x bs=64k oflag=direct status=none
	check_file x 1
}

@test "dd oflag=direct, odd size (last block written without O_DIRECT)" {
	twice dd if="$T/src" of=@D@/x bs=64k oflag=direct status=none
	check_file x 1
}

# ---- tar ----

@test "tar -x of an archive into the captured area" {
	make_tree "$T/tree"
	tar -C "$T/tree" -cf "$T/a.tar" .
	twice tar -C @D@ -xf "$T/a.tar"
	for f in $TREE_FILES; do check_file "$f" 1; done
	assert_no_real_files
}

@test "tar -x of a sparse (--sparse) archive" {
	make_tree "$T/tree"
	tar -C "$T/tree" --sparse -cf "$T/a.tar" .
	twice tar -C @D@ -xf "$T/a.tar"
	for f in $TREE_FILES; do check_file "$f" 1; done
	assert_no_real_files
}

@test "tar -x keeps the archive's modification times (seen through the shim)" {
	make_tree "$T/tree"
	touch -d '2020-02-02 20:20:20' "$T/tree/a.bin" "$T/tree/sub/small"
	tar -C "$T/tree" -cf "$T/a.tar" .
	twice tar -C @D@ -xf "$T/a.tar"
	for f in a.bin sub/small; do
		check_file "$f" 1
		[ "$(shim stat -c %Y "$CKPT/$f")" = "$(stat -c %Y "$REF/$f")" ] || {
			complain "$f: mtime $(shim stat -c %Y "$CKPT/$f"), want $(stat -c %Y "$REF/$f")"
			return 1
		}
	done
}

@test "tar -c of the captured tree (read through the shim) equals the source" {
	make_tree "$T/tree"
	tar -C "$T/tree" -cf "$T/a.tar" .
	shim tar -C "$CKPT" -xf "$T/a.tar"
	shim tar -C "$CKPT" -cf "$T/b.tar" .
	mkdir "$T/again"
	tar -C "$T/again" -xf "$T/b.tar"
	diff -r "$T/tree" "$T/again" || {
		# ls lists with opendir(), find and tar with openat() + fdopendir().
		echo "ls -R through the shim:" >&2
		shim ls -R "$CKPT" >&2
		echo "find through the shim:" >&2
		shim find "$CKPT" >&2
		return 1
	}
}

# ---- rsync: writes .name.XXXXXX, then renames ----

@test "rsync -r of a tree (temp name, then rename)" {
	make_tree "$T/tree"
	twice rsync -r "$T/tree/" @D@/tree/
	for f in $TREE_FILES; do check_file "tree/$f" 1; done
	assert_no_real_files
	# No temporary name survives, in the cache or on disk.
	run "$STAGEHAND" ls "$CKPT"
	[[ "$output" != *"/."*"."* ]] || { complain "temporary names listed: $output"; return 1; }
}

@test "rsync -a of a tree (also sets permissions and times)" {
	make_tree "$T/tree"
	twice rsync -a "$T/tree/" @D@/tree/
	for f in $TREE_FILES; do check_file "tree/$f" 1; done
	assert_no_real_files
}

@test "rsync again after a change: delta transfer against the captured copy" {
	make_tree "$T/tree"
	twice rsync -r "$T/tree/" @D@/tree/
	dd if="$T/src" of="$T/tree/a.bin" bs=1000 count=5 seek=100 conv=notrunc status=none
	twice rsync -r --no-whole-file -I "$T/tree/" @D@/tree/
	check_file tree/a.bin 2
}

# ---- the shell ----

@test "shell > then >> with an external command: two versions" {
	twice_sh 'cat "$1" > "$D/x"; head -c 70000 "$1" >> "$D/x"' "$T/src"
	check_file x 2
	check_version "$T/src" "$CKPT/x" 1
}

@test "shell > and >> with builtins" {
	twice_sh 'for i in $(seq 1 3000); do echo "line $i"; done > "$D/x"; printf "%s\n" more >> "$D/x"'
	check_file x 2
}

@test "shell exec 3> then writes from several commands to fd 3, then exec 3>&-" {
	twice_sh 'exec 3>"$D/x"; cat "$1" >&3; echo between >&3; head -c 5000 "$1" >&3; exec 3>&-' "$T/src"
	check_file x
	[ "$(version_count "$CKPT/x")" -ge 1 ]
}

@test "shell: a pipeline writing through > in its last stage" {
	twice_sh 'cat "$1" | gzip -1 -n | gzip -d > "$D/x"' "$T/src"
	check_file x 1
}

@test "shell: a subshell redirecting its whole output" {
	twice_sh '( cat "$1"; echo tail ) > "$D/x"' "$T/src"
	check_file x 1
}
