#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Chunk codecs end to end: a file staged through the shim under each
# compress and filter setting is stored encoded in the cache, flushed to a
# real server, and restored from the server alone, byte for byte.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# float_file FILE: a smooth float64 field (what filters are for), text (what
# lz4 alone compresses), and an odd tail that is no whole element.
float_file() {
	python3 - "$1" <<'PY'
import math, struct, sys
field = struct.pack("<50000d", *(300.0 + 20.0 * math.sin(i * 0.01) for i in range(50000)))
text = b"checkpoint restart particle solver mesh rank step " * 2000
open(sys.argv[1], "wb").write(field + text + b"\x01\x02\x03\x04\x05")
PY
}

# Bytes of the cache's packs.
pack_bytes() {
	find "$CACHE/packs" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'
}

# stages_and_restores KEY=VALUE...: stages $CKPT/f under the path rule's
# settings, checks the cache holds it in fewer bytes (more with compress =
# off), flushes it, drops the cache and restores it from the server.
stages_and_restores() {
	start_servers 1
	cluster_default_policy cluster.replicas=1 "$@"
	float_file "$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	local size packed
	size=$(stat -c %s "$REF/f")
	[ -d "$CACHE/packs" ] || fail "nothing was staged"
	packed=$(pack_bytes)
	if [ "$1" = compress=off ]; then
		[ "$packed" -ge "$size" ] || fail "compress = off stored $packed bytes of $size"
	else
		[ "$packed" -lt $((size * 9 / 10)) ] || fail "$* stored $packed bytes of $size"
	fi
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run restore_to "$POLICY" 1 "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f" || fail "the restored file differs ($*)"
}

@test "compress = off: stored raw, restored from a server" {
	stages_and_restores compress=off
}

@test "compress = lz4: restored from a server" {
	stages_and_restores compress=lz4
}

@test "compress = zstd: restored from a server" {
	stages_and_restores compress=zstd
}

@test "compress = auto: restored from a server" {
	stages_and_restores compress=auto
}

@test "compress = lz4, filter = shuffle8: restored from a server" {
	stages_and_restores compress=lz4 filter=shuffle8
}

@test "compress = zstd, filter = shuffle4: restored from a server" {
	stages_and_restores compress=zstd filter=shuffle4
}

@test "compress = zstd, filter = bitshuffle8: restored from a server" {
	stages_and_restores compress=zstd filter=bitshuffle8
}

@test "compress = lz4, filter = bitshuffle2: restored from a server" {
	stages_and_restores compress=lz4 filter=bitshuffle2
}

@test "compress = auto, filter = shuffle2: restored from a server" {
	stages_and_restores compress=auto filter=shuffle2
}

@test "a bad compress or filter value is refused with the values it takes" {
	start_servers 1
	cluster_default_policy cluster.replicas=1 compress=gzip
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -ne 0 ]
	[[ "$output" == *"compress 'gzip' must be lz4, zstd, auto or off"* ]] || fail "$output"
	cluster_default_policy cluster.replicas=1 filter=shuffle
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -ne 0 ]
	[[ "$output" == *"filter 'shuffle' must be none, or shuffle or bitshuffle followed by"* ]] ||
		fail "$output"
}
