#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Failing disks, inside the guest of scripts/rdma-vm.sh (as root): the node
# cache, or a server's store, on a device-mapper device whose table is
# switched while stagehand runs, to dm-flakey (writes that fail with EIO, or
# that are dropped while the disk says they were done) or to a table that
# maps a file's blocks to the error target (sectors that cannot be read).
# Prints one line per case, "disk-error: CASE: ok|FAIL", with what went
# wrong above it, and exits 1 when a case failed.
#
#   tests/crash/disk-errors.sh [--build DIR] [CASE...]
#
#   --build DIR   the build directory (default $STAGEHAND_BUILD, else
#                 <repo>/build)
#   CASE          (default: all)
#     cache-write-error    the cache's writes fail while the application
#                          writes a version: its close (or a write) fails,
#                          never a silent success; the versions before
#                          restore byte for byte; once the disk is good,
#                          new versions are taken
#     cache-write-dropped  the cache's disk drops writes and says they were
#                          done: the versions before restore byte for byte,
#                          no restore or read serves a wrong byte, and new
#                          versions are taken once the disk is good
#     restore-read-error   a version's pack cannot be read back: the restore
#                          takes its chunks from the servers, with a warning
#     server-write-error   the disk of the server a path prefers fails its
#                          writes: the flusher ships to the other one, and
#                          every version acknowledged restores
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
	sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

build="${STAGEHAND_BUILD:-$repo/build}"
while [ $# -gt 0 ]; do
	case "$1" in
	--build)
		[ $# -ge 2 ] || usage 2
		build=$2
		shift 2
		;;
	-h | --help) usage 0 ;;
	-*) echo "disk-errors: unknown option $1" >&2; usage 2 ;;
	*) break ;;
	esac
done
cases=("$@")
[ ${#cases[@]} -gt 0 ] ||
	cases=(cache-write-error cache-write-dropped restore-read-error server-write-error)
for c in "${cases[@]}"; do
	case "$c" in
	cache-write-error | cache-write-dropped | restore-read-error | server-write-error) ;;
	*) echo "disk-errors: unknown case '$c'" >&2; usage 2 ;;
	esac
done
build="$(cd "$build" && pwd)"
STAGEHAND="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
PATTERN="$build/tests/progs/pattern"
PLACEMENT="$build/tests/progs/placement"
for m in dm-flakey loop; do
	modprobe "$m" || { echo "disk-errors: the kernel $(uname -r) cannot load $m" >&2; exit 2; }
done
: "${TMPDIR:=/tmp}"

DEV=stagehand-disk
BYTES=$((256 << 20))
SECTORS=$((BYTES / 512))
work="" mnt="" loop="" policy="" ckpt="" cache=""
pids=()

# The device's table: linear (a good disk), flakey with a feature
# (error_writes, drop_writes: down all the time), or the blocks of a file
# (first:count in 512-byte sectors, from file_sectors) failing every I/O.
dev_set() {
	local table
	case "$1" in
	linear) table="0 $SECTORS linear $loop 0" ;;
	error_writes | drop_writes) table="0 $SECTORS flakey $loop 0 0 1 1 $1" ;;
	bad)
		local at=0 first count
		table=""
		while read -r first count; do
			[ "$first" -le "$at" ] || table+="$at $((first - at)) linear $loop $at"$'\n'
			table+="$first $count error"$'\n'
			at=$((first + count))
		done <<<"$2"
		[ "$at" -ge "$SECTORS" ] || table+="$at $((SECTORS - at)) linear $loop $at"
		;;
	esac
	# --nolockfs: no freeze, which would write back through a failing
	# table and fail.
	dmsetup suspend --nolockfs "$DEV"
	printf '%s\n' "$table" | dmsetup load "$DEV"
	dmsetup resume "$DEV"
}

# The sectors of the device that hold FILE's data: "first count" lines.
file_sectors() {
	filefrag -e -b512 "$1" | awk -F'[ .:]+' '$2 ~ /^[0-9]+$/ && NF > 6 { print $5, $6 - $5 + 1 }'
}

setup() {
	work="$TMPDIR/disk.$1" mnt="/run/disk-$1"
	rm -rf "$work"
	mkdir -p "$work" "$mnt"
	truncate -s "$BYTES" "$work/disk.img"
	loop=$(losetup -f --show "$work/disk.img")
	dmsetup create "$DEV" --table "0 $SECTORS linear $loop 0"
	mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "/dev/mapper/$DEV"
	mount "/dev/mapper/$DEV" "$mnt"
	head -c 32 /dev/urandom | base64 >"$work/secret"
	chmod 600 "$work/secret"
}

teardown() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	[ -z "$cache" ] || [ ! -e "$cache/flusher.lock" ] ||
		kill "$(tr -dc 0-9 <"$cache/flusher.lock")" 2>/dev/null || true
	[ -z "$mnt" ] || umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	dmsetup remove "$DEV" 2>/dev/null || true
	[ -z "$loop" ] || losetup -d "$loop" 2>/dev/null || true
	loop="" mnt="" cache=""
	[ -z "$work" ] || rm -rf "$work"
}
trap teardown EXIT

# server_start VAR STORE NAME: a server over STORE on a free port of
# 127.0.0.1, which VAR is set to.
server_start() {
	local name=$3
	"$SERVER" --listen 127.0.0.1:0 --store "$2" --secret-file "$work/secret" \
		--port-file "$work/$name.port" --scrub-rate 0 \
		</dev/null >/dev/null 2>>"$work/$name.log" &
	pids+=($!)
	local deadline=$((SECONDS + 300))
	until [ -s "$work/$name.port" ]; do
		[ "$SECONDS" -lt "$deadline" ] && kill -0 "${pids[-1]}" 2>/dev/null || return 1
		sleep 0.05
	done
	printf -v "$1" %s "$(cat "$work/$name.port")"
}

write_policy() { # CACHE [SERVERS REPLICAS]
	{
		printf '[cache]\ndir = %s\n' "$1"
		[ -z "${2:-}" ] ||
			printf '[cluster]\nservers = %s\nreplicas = %s\nsecret_file = %s\ntransport = tcp\ntimeout = 600\n' \
				"$2" "$3" "$work/secret"
		printf '[path %s/**]\nchunk_size = 64K\nchunking = fixed\nkeep = 10\ndurability = local\n' \
			"${ckpt%/*}"
	} >"$policy"
}

shim_write() { # V [MODE]
	STAGEHAND_POLICY="$policy" LD_PRELOAD="$SHIM" "$PATTERN" write "${2:-seq}" "$ckpt" "$1" \
		$((1 << 20))
}

failed=0
say() {
	echo "# $case: $*"
	failed=1
}

# restores_as N V: version N restores as pattern version V, byte for byte.
restores_as() {
	rm -rf "$work/out"
	local got
	if ! STAGEHAND_POLICY="$policy" "$STAGEHAND" restore --version "$1" --to "$work/out" \
		"$ckpt" >"$work/restore.log" 2>&1; then
		say "version $1 does not restore: $(tail -n 2 "$work/restore.log")"
		return 1
	fi
	got=$("$PATTERN" check "$work/out$ckpt" 2>&1) || {
		say "version $1 restores wrong bytes: $got"
		return 1
	}
	[ "$got" = "$2" ] || say "version $1 restores as version $got, not $2"
}

# never_wrong N: version N restores whole and right, or not at all.
never_wrong() {
	rm -rf "$work/out"
	STAGEHAND_POLICY="$policy" "$STAGEHAND" restore --version "$1" --to "$work/out" "$ckpt" \
		>/dev/null 2>&1 || return 0
	"$PATTERN" check "$work/out$ckpt" >/dev/null 2>&1 ||
		say "version $1 restores, with wrong bytes"
}

remount_good() {
	dev_set linear
	local deadline=$((SECONDS + 300))
	until umount "$mnt" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || { say "$mnt stays busy"; return 1; }
		sleep 0.1
	done
	mount "/dev/mapper/$DEV" "$mnt" 2>"$work/mount.log" ||
		{ say "the file system does not mount again: $(cat "$work/mount.log")"; return 1; }
}

case_cache_write() { # error_writes | drop_writes
	ckpt="$mnt/data/ckpt" cache="$mnt/cache" policy="$work/policy.conf"
	mkdir -p "${ckpt%/*}"
	write_policy "$cache"
	shim_write 1 && shim_write 2 shadow || { say "writing before the fault failed"; return; }
	dev_set "$1"
	local rc=0
	shim_write 3 2>"$work/write.log" || rc=$?
	if [ "$1" = error_writes ] && [ "$rc" -eq 0 ]; then
		say "version 3 was written while every write of the disk failed, and nothing said so"
	fi
	remount_good || return
	restores_as 1 1
	restores_as 2 2
	never_wrong 3
	# A read through the shim: the newest version whole, or an error.
	local got
	if got=$(STAGEHAND_POLICY="$policy" LD_PRELOAD="$SHIM" "$PATTERN" check "$ckpt" 2>&1); then
		[ "$got" = 2 ] || [ "$got" = 3 ] || say "the shim reads version $got"
	elif [[ "$got" == *differs* || "$got" == *"past"* ]]; then
		say "the shim reads wrong bytes: $got"
	fi
	# And the cache goes on: a new version is the newest, whole, even one
	# of version 3's bytes, whose chunks the disk may have lost (nothing
	# may take them as already held); and then another.
	local v
	for v in 3 4; do
		if shim_write "$v" 2>"$work/write.log"; then
			local n
			n=$(STAGEHAND_POLICY="$policy" "$STAGEHAND" ls "$ckpt" 2>/dev/null |
				awk 'END { print $2 }')
			restores_as "$n" "$v"
		else
			say "a new version once the disk is good failed: $(tail -n 2 "$work/write.log")"
		fi
	done
}

case_restore_read_error() {
	ckpt="$mnt/data/ckpt" cache="$mnt/cache" policy="$work/policy.conf"
	mkdir -p "${ckpt%/*}" "$work/s0" "$work/s1"
	local p0 p1
	server_start p0 "$work/s0" s0 && server_start p1 "$work/s1" s1 ||
		{ say "the servers do not start"; return; }
	write_policy "$cache" "127.0.0.1:$p0, 127.0.0.1:$p1" 2
	shim_write 1 && STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 >/dev/null ||
		{ say "writing and shipping version 1 failed"; return; }
	local pack sectors
	pack=$(ls "$cache"/packs/*.pack | head -n 1)
	sectors=$(file_sectors "$pack")
	[ -n "$sectors" ] || { say "no extent found for $pack"; return; }
	dev_set bad "$sectors"
	echo 3 >/proc/sys/vm/drop_caches
	rm -rf "$work/out"
	if ! STAGEHAND_POLICY="$policy" "$STAGEHAND" restore --version 1 --to "$work/out" "$ckpt" \
		>"$work/restore.log" 2>&1; then
		say "the restore failed: $(tail -n 3 "$work/restore.log")"
		return
	fi
	grep -q "could not be read in the cache.*fetched it from the servers" "$work/restore.log" ||
		say "no warning that chunks came from the servers: $(cat "$work/restore.log")"
	local got
	got=$("$PATTERN" check "$work/out$ckpt" 2>&1) || say "wrong bytes: $got"
}

case_server_write_error() {
	# The node's cache on the scratch disk; server 0's store on the device.
	ckpt="$work/data/ckpt" cache="$work/cache" policy="$work/policy.conf"
	mkdir -p "$work/data" "$mnt/s0" "$work/s1"
	local p0 p1 i
	server_start p0 "$mnt/s0" s0 && server_start p1 "$work/s1" s1 ||
		{ say "the servers do not start"; return; }
	# A path that prefers server 0, so that its disk is the one that fails.
	for ((i = 0; i < 64; i++)); do
		[ "$("$PLACEMENT" "$work/data/ckpt.$i" "127.0.0.1:$p0" "127.0.0.1:$p1" |
			cut -d' ' -f1)" = 0 ] && break
	done
	ckpt="$work/data/ckpt.$i"
	write_policy "$cache" "127.0.0.1:$p0, 127.0.0.1:$p1" 1
	shim_write 1 && STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 >/dev/null ||
		{ say "writing and shipping version 1 failed"; return; }
	dev_set error_writes
	local v
	for v in 2 3; do
		shim_write "$v" || { say "writing version $v failed"; return; }
	done
	STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 >"$work/flush.log" 2>&1 ||
		say "the flusher did not ship past the failing server: $(tail -n 3 "$work/flush.log")"
	# From the servers alone: every version acknowledged.
	kill "$(tr -dc 0-9 <"$cache/flusher.lock")" 2>/dev/null || true
	cache="$work/cache2"
	write_policy "$cache" "127.0.0.1:$p0, 127.0.0.1:$p1" 1
	for v in 1 2 3; do restores_as "$v" "$v"; done
}

status=0
for case in "${cases[@]}"; do
	failed=0
	setup "$case"
	# (what fails is said and counted in $failed)
	case "$case" in
	cache-write-error) case_cache_write error_writes || true ;;
	cache-write-dropped) case_cache_write drop_writes || true ;;
	restore-read-error) case_restore_read_error || true ;;
	server-write-error) case_server_write_error || true ;;
	esac
	teardown
	if [ "$failed" = 0 ]; then
		echo "disk-error: $case: ok"
	else
		echo "disk-error: $case: FAIL"
		status=1
	fi
done
exit "$status"
