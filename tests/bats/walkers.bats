#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# libc's directory walkers (glob, scandir, ftw/nftw, readdir_r, seekdir) and
# the tools that walk trees see captured files as a file system would show
# them: each runs on a tree below $REF without the shim and on the same tree
# below $CKPT, captured, with it, and the outputs must be equal.

load lib/common
load lib/capture

WALK="$PROGS/walk"

# The tree, on both sides: captured files at two levels beside real
# directories, a real file among captured ones, a symlink to it, a dangling
# one, and one directory with no captured file.
setup() {
	common_setup
	twice_sh '
		mkdir -p "$D/tree/sub/deep" "$D/tree/sib" "$D/tree/skipme" "$D/tree/empty" &&
		echo aa >"$D/tree/a" && printf bbbb >"$D/tree/b.txt" && chmod 640 "$D/tree/b.txt" &&
		echo c >"$D/tree/sub/c" && echo stop >"$D/tree/sub/stop" &&
		echo eeeee >"$D/tree/sub/deep/e" &&
		echo 1 >"$D/tree/sib/s1" && echo 2 >"$D/tree/sib/s2" && echo 3 >"$D/tree/sib/s3" &&
		echo x >"$D/tree/skipme/x" &&
		ln -s sub/real "$D/tree/lnk" && ln -s nowhere "$D/tree/dang"'
	echo real >"$REF/tree/sub/real"
	echo real >"$CKPT/tree/sub/real"
}

# same [-s] CMD ARGS...: CMD's output on the two trees ("@D@" in ARGS is
# $REF, then $CKPT) is equal; sorted first with -s (readdir order is the file
# system's).
same() {
	local sort=cat
	if [ "$1" = -s ]; then
		sort=sort
		shift
	fi
	twice_sh 'set -- "${@//@D@/$D}"; "$@" >"$D.out"' "$@" || return 1
	if ! diff -u <($sort "$REF.out") <($sort "$CKPT.out") >&2; then
		complain "outputs differ (- without the shim, + with it): $*"
		return 1
	fi
}

@test "the tree's files are captured: no real file where the shim wrote" {
	check_file tree/a
	check_file tree/b.txt
	check_file tree/sub/deep/e
	check_file tree/sib/s1
}

@test "glob, glob64: wildcards at two levels, a captured literal, GLOB_MARK, ONLYDIR, BRACE, NOCHECK, APPEND" {
	local g
	for g in glob glob64; do
		same "$WALK" $g @D@ - '@D@/tree/*'
		same "$WALK" $g @D@ - '@D@/tree/*/*'
		same "$WALK" $g @D@ - '@D@/tree/sub/c'
		same "$WALK" $g @D@ - '@D@/tree/s*/[cs]*'
		same "$WALK" $g @D@ mark '@D@/tree/*'
		same "$WALK" $g @D@ onlydir '@D@/tree/*'
		same "$WALK" $g @D@ brace '@D@/tree/{a,b.txt,sub/c,none}'
		same "$WALK" $g @D@ nocheck '@D@/tree/x*'
		same "$WALK" $g @D@ - '@D@/tree/sub/*' '@D@/tree/*.txt' '@D@/tree/nomatch*' '@D@/tree/sib/*'
	done
	run cat "$CKPT.out"
	[[ "$output" == *"D/tree/sib/s3"* ]] || fail "captured file missing from glob: $output"
}

@test "scandir, scandir64, scandirat, scandirat64: captured entries; ENOTDIR on a captured file, ENOENT on a missing one" {
	local s
	for s in scandir scandir64; do
		same "$WALK" $s @D@ @D@/tree
		same "$WALK" $s @D@ @D@/tree/sub
		same "$WALK" $s @D@ @D@/tree/a
		same "$WALK" $s @D@ @D@/tree/missing
	done
	for s in scandirat scandirat64; do
		same "$WALK" $s @D@ @D@ tree/sub/deep
		same "$WALK" $s @D@ @D@/tree sib
		same "$WALK" $s @D@ @D@/tree b.txt
		same "$WALK" $s @D@ @D@/tree missing
	done
	same "$WALK" scandir @D@ @D@/tree/sub/c
	grep -qx 'scandir: error ENOTDIR' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}

@test "ftw, ftw64, nftw, nftw64 visit captured files, with FTW_PHYS, FTW_DEPTH, FTW_MOUNT, FTW_CHDIR" {
	same -s "$WALK" ftw @D@ @D@/tree
	same -s "$WALK" ftw64 @D@ @D@/tree/
	local flags
	for flags in - phys depth mount chdir phys,depth,chdir depth,chdir,mount; do
		same -s "$WALK" nftw @D@ @D@/tree "$flags"
		same -s "$WALK" nftw64 @D@ @D@/tree "$flags"
	done
	grep -q '^F D/tree/sub/deep/e level=3 base=e size=6 ' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}

@test "on a tree with nothing captured, the shim's ftw, nftw and scandir give glibc's output, in its order" {
	local flags
	# $REF is not captured, but the shim is on: its own walks run.
	for flags in - phys depth chdir mount actionretval phys,depth,chdir,actionretval; do
		"$WALK" nftw "$REF" "$REF/tree" "$flags" >"$T/glibc"
		tshim "$WALK" nftw "$REF" "$REF/tree" "$flags" >"$T/shim"
		diff -u "$T/glibc" "$T/shim" >&2 || fail "nftw $flags differs (+ the shim's)"
	done
	"$WALK" ftw "$REF" "$REF/tree/" >"$T/glibc"
	tshim "$WALK" ftw "$REF" "$REF/tree/" >"$T/shim"
	diff -u "$T/glibc" "$T/shim" >&2 || fail "ftw differs (+ the shim's)"
	"$WALK" scandirat "$REF" "$REF" tree/sub >"$T/glibc"
	tshim "$WALK" scandirat "$REF" "$REF" tree/sub >"$T/shim"
	diff -u "$T/glibc" "$T/shim" >&2 || fail "scandirat differs (+ the shim's)"
}

@test "nftw, ftw of a captured file visit it as FTW_F; of a missing one fail with ENOENT" {
	same "$WALK" nftw @D@ @D@/tree/a -
	same "$WALK" nftw64 @D@ @D@/tree/sub/c chdir
	same "$WALK" ftw @D@ @D@/tree/b.txt
	same "$WALK" nftw @D@ @D@/tree/missing -
	same "$WALK" nftw @D@ @D@/tree/dang -
	same "$WALK" nftw @D@ @D@/tree/a -
	grep -qx 'F D/tree/a level=0 base=a size=3 mode=644' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}

@test "nftw FTW_ACTIONRETVAL: FTW_SKIP_SUBTREE, FTW_SKIP_SIBLINGS and FTW_STOP" {
	same -s "$WALK" nftw @D@ @D@/tree actionretval
	same -s "$WALK" nftw @D@ @D@/tree actionretval,depth
	same -s "$WALK" nftw64 @D@ @D@/tree actionretval,chdir
	same "$WALK" nftw @D@ @D@/tree/sub actionretval,stop
	grep -qx 'nftw returned 1, 0 calls after FTW_STOP' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}

@test "readdir_r, readdir64_r list captured entries" {
	same -s "$WALK" readdir_r @D@ @D@/tree/sib
	same -s "$WALK" readdir64_r @D@ @D@/tree/sub
	grep -qx stop "$CKPT.out" || fail "captured entry missing: $(cat "$CKPT.out")"
}

@test "telldir, seekdir: every told position gives its entry back, captured ones too" {
	same "$WALK" seekdir @D@ @D@/tree/sib
	same "$WALK" seekdir @D@ @D@/tree/sub
	grep -q ', 0 positions wrong$' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}

@test "python glob.glob (recursive **, a wildcard, a captured literal) and os.walk list like the reference" {
	same python3 -c '
import glob, os, sys
d = sys.argv[1]
for pattern in ("tree/**", "tree/*/*", "tree/sub/c", "tree/s*/[cs]*"):
    print(pattern, sorted(os.path.relpath(p, d) for p in glob.glob(d + "/" + pattern, recursive=True)))
for top, dirs, files in sorted(os.walk(d + "/tree")):
    print(os.path.relpath(top, d), sorted(dirs), sorted(files))' @D@
}

@test "tar -cf of a captured tree lists like the reference (tar -tvf: modes, sizes, names)" {
	same -s bash -c 'cd "$1" && tar -cf "$1.tar" tree && tar -tvf "$1.tar" | awk "{print \$1, \$3, \$6, \$7, \$8}"' bash @D@
}

@test "cp -r and python shutil.copytree out of the captured tree copy every file" {
	twice_sh 'cp -r "$D/tree" "$D.cp" && python3 -c "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2], symlinks=True)" "$D/tree" "$D.py"'
	diff -r --no-dereference "$REF/tree" "$CKPT.cp" >&2
	diff -r --no-dereference "$REF/tree" "$CKPT.py" >&2
	diff -r --no-dereference "$REF.cp" "$CKPT.cp" >&2
}

@test "find -newer, du -ab and ls -l on the captured tree match the reference" {
	twice_sh 'find "$D/tree" -type f -exec touch -d "2019-01-01 00:00:00" {} + &&
		touch -d "2020-01-01 00:00:00" "$D/tree/sub/real" &&
		touch -d "2021-01-01 00:00:00" "$D/tree/b.txt" "$D/tree/sub/deep/e"'
	same -s find @D@/tree -type f -newer @D@/tree/sub/real -printf '%P\n'
	[ "$(sort "$CKPT.out" | tr '\n' ' ')" = "b.txt sub/deep/e " ] || fail "$(cat "$CKPT.out")"
	same -s bash -c 'cd "$1" && du -ab tree' bash @D@
	grep -qx '6	tree/sub/deep/e' "$CKPT.out" || fail "$(cat "$CKPT.out")"
	same -s bash -c 'ls -lR "$1/tree" | awk "/^[-l]/ {print \$1, \$5, \$9}"' bash @D@
	grep -qx -- '-rw-r----- 4 b.txt' "$CKPT.out" || fail "$(cat "$CKPT.out")"
}
