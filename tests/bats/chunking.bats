#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Content-defined chunks end to end: a shifted file dedups, and every version
# of a cdc path restores byte for byte, from the cache and from the servers.
# STAGEHAND_TEST_SHIFT_CHUNKING=fixed runs the shifted-data tests with fixed
# chunks, to see them fail there.

load lib/common
load lib/cluster

PARTICLES="$BATS_TEST_DIRNAME/../progs/particles.py"
CHUNKING="${STAGEHAND_TEST_SHIFT_CHUNKING:-cdc}"

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# use_chunking KIND: the path rule of $POLICY cuts chunks so (64 KiB, or
# 64 KiB on average); default: the rule names no chunk keys at all.
use_chunking() {
	if [ "$1" = default ]; then
		sed -i '/^chunk_size =/d; /^chunking =/d' "$POLICY"
	else
		echo "chunking = $1" >>"$POLICY"
	fi
}

# put SRC DST [fsync]: copies SRC onto DST through the shim with write() in
# pieces of uneven sizes (cp would use copy_file_range, which the fast path
# leaves to the shadow); with fsync, one after the third piece, so that the
# version goes on past a commit. Unless STAGEHAND_FAST=0, checks that the
# fast path took it.
put() {
	rm -f "$T/put.log"
	STAGEHAND_LOG=debug STAGEHAND_LOG_FILE="$T/put.log" shim "$PYTHON" - "$@" <<'EOP' ||
import os, sys
src = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
at, sizes, k = 0, (1048583, 4093, 65536, 333333, 1), 0
while at < len(src):
    at += os.write(fd, src[at:at + sizes[k % len(sizes)]])
    k += 1
    if sys.argv[3:] == ["fsync"] and k == 3:
        os.fsync(fd)
os.close(fd)
EOP
		fail "writing $2"
	[ "${STAGEHAND_FAST:-1}" = 0 ] || [ ! -s "$1" ] || grep -q 'as written' "$T/put.log" ||
		fail "not staged as written: $(cat "$T/put.log")"
}

# The STORED and NEW/TOTAL columns of `stagehand ls` for a version.
ls_row() {
	"$STAGEHAND" ls "$1" | awk -v p="$1" -v v="$2" '$1 == p && $2 == v { print $4, $5 }'
}

# shifted KIND: version 1 of $CKPT/f is 64 MiB of float64 particles, version
# 2 the same with 64 bytes inserted at its head; sets NEW, TOTAL, STORED of
# version 2.
shifted() {
	use_chunking "$1"
	"$PYTHON" "$PARTICLES" "$REF/v1" 64 42
	{ head -c 64 /dev/urandom; cat "$REF/v1"; } >"$REF/v2"
	put "$REF/v1" "$CKPT/f"
	put "$REF/v2" "$CKPT/f"
	"$STAGEHAND" ls "$CKPT/f" >&2
	local row
	row=$(ls_row "$CKPT/f" 2)
	STORED=${row%% *}
	NEW=${row#* }
	TOTAL=${NEW#*/}
	NEW=${NEW%/*}
	assert_restores "$REF/v2" "$CKPT/f"
	assert_restores "$REF/v1" "$CKPT/f" 1
}

@test "shifted data, written through the fast path: content-defined chunks store only the few chunks around the insertion" {
	shifted "$CHUNKING"
	[ "$NEW" -le 4 ] || fail "$NEW of $TOTAL chunks stored anew"
	[ "$STORED" -le $((1 << 20)) ] || fail "$STORED bytes stored for 64 bytes inserted"
	# the fast path cuts where a commit from the shadow does
	[ "$CHUNKING" = cdc ] || return 0
	local fast
	fast=$(chunk_lengths)
	STAGEHAND_FAST=0 put "$REF/v2" "$CKPT/f"
	[ "$(chunk_lengths)" = "$fast" ] || fail "the shadow's chunks differ from the fast path's"
}

@test "shifted data, committed from the shadow: content-defined chunks store only the few chunks around the insertion" {
	export STAGEHAND_FAST=0
	shifted "$CHUNKING"
	[ "$NEW" -le 4 ] || fail "$NEW of $TOTAL chunks stored anew"
	[ "$STORED" -le $((1 << 20)) ] || fail "$STORED bytes stored for 64 bytes inserted"
}

@test "a rule without chunk keys cuts by content, 1 MiB on average: shifted data stores only the chunks around the insertion" {
	shifted default
	# 64 MiB: about 64 chunks of 1 MiB on average (1024 of 64 KiB)
	[ "$TOTAL" -ge 32 ] && [ "$TOTAL" -le 128 ] || fail "$TOTAL chunks"
	[ "$NEW" -le 4 ] || fail "$NEW of $TOTAL chunks stored anew"
	# (fixed 1 MiB chunks store all 64 MiB again)
	[ "$STORED" -le $((8 << 20)) ] || fail "$STORED bytes stored for 64 bytes inserted"
}

@test "shifted data with fixed chunks: almost every chunk is stored anew" {
	shifted fixed
	[ "$TOTAL" -eq 1025 ] || fail "$TOTAL chunks"
	[ "$NEW" -ge 1000 ] || fail "only $NEW of $TOTAL chunks stored anew"
}

# The lengths of the chunks of the newest manifest of $CKPT/f, one a line;
# fails unless it has content-defined chunks (format 4).
chunk_lengths() {
	"$PYTHON" - "$CACHE"/files/*/v*.mf <<'EOP'
import struct, sys
mf = open(sorted(sys.argv[1:])[-1], "rb").read()
if struct.unpack_from("<H", mf, 4)[0] != 4:
    sys.exit("not a format 4 manifest")
n = struct.unpack_from("<I", mf, 48)[0]
for i in range(n):
    print(struct.unpack_from("<I", mf, 64 + 48 * i + 16)[0])
EOP
}

# make_versions: writes versions of $CKPT/f (cdc, 64 KiB on average: chunks
# of 16 KiB .. 256 KiB) through the fast path and the shadow, version N kept
# as $REF/N: what the chunker's limits and cut points make tricky. (The
# empty one comes second: a file created empty is provisional.)
make_versions() {
	use_chunking cdc
	N=0
	"$PYTHON" "$PARTICLES" "$REF/data" 4 7
	local sizes=(1 0 1000 16383 16384 16385 262143 262144 262145 4194304) s
	for s in "${sizes[@]}"; do
		N=$((N + 1))
		head -c "$s" "$REF/data" >"$REF/$N"
		put "$REF/$N" "$CKPT/f" $([ "$s" -lt 262144 ] || echo fsync)
	done
	# Sizes exactly at the cut points of the version before, and one byte
	# either side.
	local cuts=() at=0 len k lens
	lens=$(chunk_lengths) || fail "no content-defined chunks"
	for len in $lens; do
		at=$((at + len))
		cuts+=("$at")
	done
	[ "${#cuts[@]}" -ge 8 ] || fail "only ${#cuts[@]} chunks in 4 MiB"
	for k in 0 5; do
		for s in $((cuts[k] - 1)) "${cuts[k]}" $((cuts[k] + 1)); do
			N=$((N + 1))
			head -c "$s" "$REF/data" >"$REF/$N"
			STAGEHAND_FAST=0 put "$REF/$N" "$CKPT/f"
		done
	done
	# Holes: a sparse file written with seeks (the shadow commits it), and
	# zeros longer than the largest chunk.
	N=$((N + 1))
	for s in 0 3 11; do
		dd if="$REF/data" of="$REF/$N" bs=100000 count=1 seek="$s" conv=notrunc status=none
	done
	truncate -s 3000000 "$REF/$N"
	shim dd if="$REF/$N" of="$CKPT/f" bs=100000 conv=sparse status=none
	N=$((N + 1))
	head -c 300000 "$REF/data" >"$REF/$N"
	head -c 1000000 /dev/zero >>"$REF/$N"
	head -c 300000 "$REF/data" >>"$REF/$N"
	put "$REF/$N" "$CKPT/f"
	[ "$(version_count "$CKPT/f")" -eq "$N" ] || fail "$(version_count "$CKPT/f") versions, not $N"
}

@test "every version of a cdc path restores byte for byte: empty, below the minimum, at the bounds, at cut points, with holes" {
	make_versions
	local v=0 id
	for id in $("$STAGEHAND" ls "$CKPT/f" | awk -v p="$CKPT/f" '$1 == p { print $2 }'); do
		assert_restores "$REF/$((++v))" "$CKPT/f" "$id" || fail "version $v ($id)"
	done
}

@test "every version of a cdc path restores byte for byte from the servers after a flush" {
	start_servers 2
	cluster_default_policy
	make_versions
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	# An older stagehand would collect what it cannot read: it refuses a
	# cache of format 2, a store of format 2 or more (a new store is format
	# 4 from its first segment, docs/STORE.md).
	[ "$(cat "$CACHE/FORMAT")" = "stagehand-cache 2" ] || fail "cache: $(cat "$CACHE/FORMAT")"
	[ "$(cat "$T/srv0/FORMAT")" = "stagehand-store 4" ] || fail "store: $(cat "$T/srv0/FORMAT")"
	local ids
	ids=$("$STAGEHAND" ls "$CKPT/f" | awk -v p="$CKPT/f" '$1 == p { print $2 }')
	rm -rf "$CACHE"
	local v=0 id
	for id in $ids; do
		rm -rf "$BACK"
		restore_to "$POLICY" "$id" "$BACK" "$CKPT/f" >/dev/null || fail "restore $id"
		cmp "$REF/$((++v))" "$BACK$CKPT/f" || fail "version $v ($id)"
	done
}

@test "a sparse cdc file commits from the shadow without reading its holes, cut as written" {
	use_chunking cdc
	# 1 GiB and a bit: data, a hole, data, a hole to the end. The writer
	# counts what its close() read (the commit runs inside it).
	"$PYTHON" "$PARTICLES" "$REF/data" 4 7
	shim "$PYTHON" - "$CKPT/f" "$REF/data" "$REF/f" <<'EOP' >"$T/read" || fail "writing the sparse file"
import os, sys
data = open(sys.argv[2], "rb").read()[:300000]
size, at = (1 << 30) + 777, (1 << 29) + 12345
for path in sys.argv[1], sys.argv[3]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, size)
    os.pwrite(fd, data, at)
    if path == sys.argv[1]:
        before = int(dict(l.split(": ") for l in open("/proc/self/io"))["rchar"])
    os.close(fd)
    if path == sys.argv[1]:
        print(int(dict(l.split(": ") for l in open("/proc/self/io"))["rchar"]) - before)
EOP
	local read
	read=$(cat "$T/read")
	[ "$read" -le $((64 << 20)) ] || fail "the commit read $read bytes of a file of 1 GiB of holes"
	assert_restores "$REF/f" "$CKPT/f"
	# The same bytes through the fast path: the same chunks.
	local shadow
	shadow=$(chunk_lengths)
	put "$REF/f" "$CKPT/f"
	[ "$(chunk_lengths)" = "$shadow" ] || fail "the fast path cut the bytes elsewhere"
}
