#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Restore against hostile input and bad luck: a crafted cache, another
# user's cache, symbolic links, a corrupt local chunk with good copies on
# the servers; and what `ls` tells a script.

load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# forge_entry FROM TO: a copy of FROM's cache entry that says it is TO's.
forge_entry() {
	local from to
	from=$("$PROGS/catalog-id" "$1")
	to=$("$PROGS/catalog-id" "$2")
	cp -a "$CACHE/files/$from" "$CACHE/files/$to"
	printf %s "$2" >"$CACHE/files/$to/path"
	echo "$to"
}

needs_root() {
	[ "$(id -u)" -eq 0 ] || skip "needs root (to hand the cache to another uid)"
}

@test "a cache entry whose recorded path climbs with '..' is refused by restore and ls" {
	echo data >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	local up evil id
	up=$(printf '../%.0s' {1..40})
	evil="$CKPT/$up${T#/}/escaped"
	id=$(forge_entry "$CKPT/f" "$evil")
	run "$STAGEHAND" restore --to "$BACK" "$CKPT"
	[ "$status" -eq 1 ] || fail "restore: $output"
	[[ "$output" == *"cache entry 'files/$id'"*"not an absolute, normalized path"* ]] ||
		fail "restore: $output"
	[ ! -e "$T/escaped" ] || fail "written outside --to"
	# the good entry is still restored
	cmp "$REF/f" "$BACK$CKPT/f"
	run "$STAGEHAND" ls
	[ "$status" -eq 1 ] || fail "ls: $output"
	[[ "$output" == *"cache entry 'files/$id'"* ]] || fail "ls: $output"
	[[ "$output" != *escaped* ]] || fail "ls: $output"
}

@test "root restoring a cache owned by another user: refused unless --allow-foreign-cache" {
	needs_root
	echo data >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	chown -R 1000 "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 1 ] || fail "restore: $output"
	[[ "$output" == *"'$CACHE' belongs to uid 1000"*"--allow-foreign-cache"* ]] ||
		fail "restore: $output"
	[ ! -e "$BACK$CKPT/f" ]
	run "$STAGEHAND" restore --allow-foreign-cache --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore --allow-foreign-cache: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
	"$STAGEHAND" restore --help | grep -q -- --allow-foreign-cache
}

@test "a server refuses a store owned by another user unless --allow-foreign-store" {
	needs_root
	mkdir -p "$T/srv0"
	chown 1000 "$T/srv0"
	run "$SERVER" --listen 127.0.0.1:0 --store "$T/srv0" --secret-file "$SECRET"
	[ "$status" -eq 1 ] || fail "server: $output"
	[[ "$output" == *"'$T/srv0' belongs to uid 1000"*"--allow-foreign-store"* ]] ||
		fail "server: $output"
	[ ! -e "$T/srv0/segments" ] && [ -z "$(ls -A "$T/srv0")" ] || fail "the store was opened"
	start_server 0 --allow-foreign-store
	echo data >"$REF/f"
	cluster_default_policy cluster.replicas=1
	shim cp "$REF/f" "$CKPT/f"
	"$STAGEHAND" flush --wait --timeout "$WAIT" >/dev/null
	rm -rf "$CACHE"
	assert_restores "$REF/f" "$CKPT/f"
	"$SERVER" --help | grep -q -- --allow-foreign-store
}

@test "setuid, setgid and sticky bits are dropped unless --keep-special-bits" {
	needs_root
	echo data >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	shim chmod 7755 "$CKPT/f"
	chown -R 1000 "$CACHE"
	run "$STAGEHAND" restore --allow-foreign-cache --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	[ "$(stat -c %a "$BACK$CKPT/f")" = 755 ] || fail "mode $(stat -c %a "$BACK$CKPT/f")"
	run "$STAGEHAND" restore --allow-foreign-cache --keep-special-bits --to "$BACK.k" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore --keep-special-bits: $output"
	[ "$(stat -c %a "$BACK.k$CKPT/f")" = 7755 ]
	cmp "$REF/f" "$BACK.k$CKPT/f"
	"$STAGEHAND" restore --help | grep -q -- --keep-special-bits
}

@test "in place, a file captured through a symbolic link to a directory is restored through it" {
	mkdir -p "$T/lustre/run"
	ln -s "$T/lustre" "$T/scratch"
	printf '[cache]\ndir = %s\n[path %s/**]\nchunk_size = 64K\nchunking = fixed\n' "$CACHE" "$T/scratch" >"$POLICY"
	random_file "$REF/f" 200000
	shim cp "$REF/f" "$T/scratch/run/f"
	[ ! -e "$T/lustre/run/f" ]
	run "$STAGEHAND" restore "$T/scratch/run/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	[ -L "$T/scratch" ]
	cmp "$REF/f" "$T/lustre/run/f"
	# a symbolic link at the file's own name is still in the way...
	shim cp "$REF/f" "$T/scratch/run/g"
	ln -s "$T/elsewhere" "$T/lustre/run/g"
	run "$STAGEHAND" restore "$T/scratch/run/g"
	[ "$status" -eq 1 ] || fail "restore over a symbolic link: $output"
	[[ "$output" == *"'$T/scratch/run/g': a symbolic link is in the way"* ]] || fail "$output"
	[ -L "$T/lustre/run/g" ] && [ ! -e "$T/elsewhere" ]
}

@test "in place, as root, a symbolic link in the path that another user owns is in the way" {
	needs_root
	mkdir -p "$T/lustre/run" "$T/evil"
	ln -s "$T/lustre" "$T/scratch"
	printf '[cache]\ndir = %s\n[path %s/**]\nchunk_size = 64K\nchunking = fixed\n' "$CACHE" "$T/scratch" >"$POLICY"
	echo data >"$REF/f"
	shim cp "$REF/f" "$T/scratch/run/f"
	# uid 1000 redirects the link meanwhile
	rm "$T/scratch"
	ln -s "$T/evil" "$T/scratch"
	chown -h 1000 "$T/scratch"
	run "$STAGEHAND" restore "$T/scratch/run/f"
	[ "$status" -eq 1 ] || fail "restore: $output"
	[[ "$output" == *"a symbolic link is in the way ('$T/scratch' belongs to uid 1000)"* ]] ||
		fail "restore: $output"
	[ -z "$(find "$T/evil" -mindepth 1)" ]
}

@test "a corrupt local chunk is fetched from the servers, with a warning, byte-identical" {
	start_servers 2
	cluster_default_policy
	random_file "$REF/a" $((300 * 1024))
	shim cp "$REF/a" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	pack=$(find "$CACHE/packs" -type f)
	# a byte of the third record's payload (records are 64 KiB + 4 KiB)
	flip_byte "$pack" $((2 * 69632 + 1000))
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	[[ "$output" == *"'$CKPT/f' version 1: chunk 2 is corrupt in the cache (packs/"*"); fetched it from the servers"* ]] ||
		fail "restore: $output"
	cmp "$REF/a" "$BACK$CKPT/f"
}

@test "ls exits 3 when the servers did not answer or refused the key" {
	start_servers 2
	cluster_default_policy
	echo data >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	run "$STAGEHAND" ls
	[ "$status" -eq 0 ] || fail "ls: $output"
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/wrong-secret"
	chmod 600 "$T/wrong-secret"
	cluster_policy "$T/wrong.conf" "$CACHE" "$CKPT/**" cluster.secret_file="$T/wrong-secret"
	run "$STAGEHAND" ls --policy "$T/wrong.conf"
	[ "$status" -eq 3 ] || fail "ls with a refused key: $status: $output"
	[[ "$output" == *"0 of 2 servers answered"* ]] || fail "ls: $output"
	# one of two down, replicas = 2: the other one lists every version
	stop_server 0
	run "$STAGEHAND" ls
	[ "$status" -eq 0 ] || fail "ls with one server of two: $status: $output"
	[[ "$output" == *"1 of 2 servers answered"* ]] || fail "ls: $output"
	cluster_policy "$T/one.conf" "$CACHE" "$CKPT/**" cluster.replicas=1
	run "$STAGEHAND" ls --policy "$T/one.conf"
	[ "$status" -eq 3 ] || fail "ls with replicas = 1 and a server down: $status: $output"
	stop_server 1
	run "$STAGEHAND" ls
	[ "$status" -eq 3 ] || fail "ls with no server: $status: $output"
	"$STAGEHAND" ls --help | grep -q "3 when"
}

@test "names with a newline, a tab or a backslash are escaped in ls and restore output" {
	echo data >"$REF/f"
	shim cp "$REF/f" "$CKPT/a"$'\n'"b"
	shim cp "$REF/f" "$CKPT/c"$'\t'"d\\e"
	run "$STAGEHAND" ls "$CKPT"
	[ "$status" -eq 0 ] || fail "ls: $output"
	[ "${#lines[@]}" -eq 3 ] || fail "ls: $output"
	[[ "${lines[1]}" == "$CKPT/a\\nb "* ]] || fail "ls: $output"
	[[ "${lines[2]}" == "$CKPT/c\\td\\\\e "* ]] || fail "ls: $output"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT"
	[ "$status" -eq 0 ] || fail "restore: $output"
	[ "${#lines[@]}" -eq 2 ] || fail "restore: $output"
	[[ "$output" == *"restored $CKPT/a\\nb version 1"* ]] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/a"$'\n'"b"
	cmp "$REF/f" "$BACK$CKPT/c"$'\t'"d\\e"
}

@test "a cache owned by another user, or that others may write, is refused by every program: the shim passes through, saying so once; ls, status, flush and the pending-commit helper refuse it; the flusher does not start" {
	needs_root
	echo v1 >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	stop_flusher "$CACHE" 2>/dev/null || true
	chown -R 1000 "$CACHE"
	# The shim: the application's bytes go to the real file, uncaptured,
	# and the refusal is said once for the whole program.
	printf 'v2 of root\n' >"$REF/g"
	run shim tee "$CKPT/f" "$CKPT/h" <"$REF/g"
	[ "$status" -eq 0 ] || fail "shim: $output"
	[ "$(grep -c "cache directory refused: '$CACHE' belongs to uid 1000" <<<"$output")" -eq 1 ] ||
		fail "shim: $output"
	cmp "$REF/g" "$CKPT/f" && cmp "$REF/g" "$CKPT/h"
	local what
	for what in ls status; do
		run "$STAGEHAND" "$what"
		[ "$status" -ne 0 ] && [[ "$output" == *"the cache is refused: '$CACHE' belongs to uid 1000"*"--allow-foreign-cache"* ]] ||
			fail "$what: $output"
		"$STAGEHAND" "$what" --help | grep -q -- --allow-foreign-cache
	done
	# Nothing of the shim's run was staged: one version of f, none of h.
	run "$STAGEHAND" ls --allow-foreign-cache
	[ "$status" -eq 0 ] && [ "$(grep -c "^$CKPT/f " <<<"$output")" -eq 1 ] &&
		[[ "$output" != *"$CKPT/h "* ]] || fail "ls --allow-foreign-cache: $output"
	# flush ships what the cache holds, so it takes no override.
	run "$STAGEHAND" flush --wait --timeout 5
	[ "$status" -ne 0 ] && [[ "$output" == *"the cache is refused: '$CACHE' belongs to uid 1000"* ]] &&
		[[ "$output" != *--allow-foreign-cache* ]] || fail "flush: $output"
	run "$STAGEHAND" __commit --pending "$CKPT/f"
	[ "$status" -ne 0 ] && [[ "$output" == *"the cache is refused"* ]] || fail "__commit: $output"
	# The flusher refuses it, whoever starts it.
	printf '[cluster]\nservers = 127.0.0.1:9\nreplicas = 1\nsecret_file = %s\n' "$SECRET" |
		cat "$POLICY" - >"$T/cluster.conf"
	run "$FLUSHER" --policy "$T/cluster.conf"
	[ "$status" -ne 0 ] && [[ "$output$(cat "$CACHE/flusher.log" 2>/dev/null)" == *"the cache is refused: '$CACHE' belongs to uid 1000"* ]] ||
		fail "flusher: $output"
	# Ours again, but its tmp/ may be written by every user: refused too.
	chown -R 0 "$CACHE"
	chmod 1777 "$CACHE/tmp"
	run "$STAGEHAND" ls
	[ "$status" -ne 0 ] && [[ "$output" == *"'$CACHE/tmp' may be written by every user (mode 1777)"* ]] ||
		fail "ls: $output"
	chmod 700 "$CACHE/tmp"
	run "$STAGEHAND" ls
	[ "$status" -eq 0 ] || fail "ls: $output"
}
