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

# object_encodings DIR: the encodings of the chunk objects in the files below
# DIR (cache packs, server segments), "CODEC FILTER" a line, each once.
object_encodings() {
	python3 - "$1" <<'PY'
import os, struct, sys
found = set()
for top, _, files in os.walk(sys.argv[1]):
    for name in files:
        data = open(os.path.join(top, name), "rb").read()
        at = data.find(b"SHCK")
        while at >= 0 and at + 8 <= len(data):
            fmt, word = struct.unpack_from("<HH", data, at + 4)
            if fmt == 1:
                found.add(("lz4" if word == 1 else "raw") + " none")
            elif fmt == 2:
                found.add({0: "raw", 1: "lz4", 2: "zstd"}.get(data[at + 6], "?") + " " +
                          {0: "none", 1: "shuffle", 2: "bitshuffle"}.get(data[at + 7], "?"))
            at = data.find(b"SHCK", at + 4)
print("\n".join(sorted(found)))
PY
}

# object_codecs DIR: their codecs alone, one a line, each once.
object_codecs() {
	object_encodings "$1" | cut -d' ' -f1 | sort -u
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
	# zstd never runs where the writer waits: the cache holds lz4, and the
	# flusher recodes on the way to the server (auto too).
	! object_codecs "$CACHE/packs" | grep -qx zstd || fail "zstd in the cache ($*)"
	if [[ " $* " == *" compress=zstd "* || " $* " == *" compress=auto "* ]]; then
		object_codecs "$T/srv0" | grep -qx zstd || fail "no zstd on the server ($*)"
	else
		! object_codecs "$T/srv0" | grep -qx zstd || fail "zstd on the server ($*)"
	fi
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

# fp32 weights ~ N(0, 0.02): a shuffle before lz4 saves about 7%.
weights_file() {
	python3 - "$1" <<'PY'
import random, struct, sys
random.seed(5)
open(sys.argv[1], "wb").write(struct.pack("<%df" % (1 << 20), *(random.gauss(0, 0.02) for _ in range(1 << 20))))
PY
}

@test "compress = auto: fp32 weights are captured raw and shipped shuffled and zstd-compressed" {
	# lz4 would cost the writer about a second a GiB for 7%: auto leaves
	# the chunks raw, and the flusher finds the shuffle (none is named).
	# (1 MiB chunks: zstd codes a block of 128 KiB with one table, which the
	# shuffled planes of a 64 KiB chunk share.)
	start_servers 1
	cluster_default_policy cluster.replicas=1 compress=auto chunk_size=1M
	weights_file "$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	local size
	size=$(stat -c %s "$REF/f")
	[ "$(object_codecs "$CACHE/packs")" = raw ] || fail "the cache holds $(object_codecs "$CACHE/packs" | tr '\n' ' ')"
	[ "$(pack_bytes)" -ge "$size" ] || fail "the cache holds $(pack_bytes) bytes of $size"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	# zstd after a byte shuffle, on every chunk
	[ "$(object_encodings "$T/srv0")" = "zstd shuffle" ] ||
		fail "the server holds $(object_encodings "$T/srv0" | tr '\n' ',')"
	local served
	served=$(find "$T/srv0" -name '*.seg' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
	[ "$served" -lt $((size * 9 / 10)) ] || fail "the server keeps $served bytes of $size"
	rm -rf "$CACHE"
	run restore_to "$POLICY" 1 "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f" || fail "the restored file differs"
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

# peak_kib CMD...: the peak resident set of CMD, in KiB.
peak_kib() {
	/usr/bin/time -f '%M' -o "$T/rss" "$@" >/dev/null || return 1
	tail -n 1 "$T/rss"
}

@test "a writer's memory stays within 64 MiB more than without the shim, with the largest chunks and every codec" {
	"$PYTHON" "$BATS_TEST_DIRNAME/../progs/particles.py" "$REF/src" 80 3
	# 1 MiB write()s through the fast path, then one byte rewritten at the
	# head: what was staged goes to the shadow, which the close commits.
	cat >"$T/writer.py" <<'EOP'
import os, sys
src = open(sys.argv[1], "rb")
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
while piece := src.read(1 << 20):
    os.write(fd, piece)
os.pwrite(fd, b"\x7f", 0)
os.close(fd)
EOP
	{ printf '\x7f'; tail -c +2 "$REF/src"; } >"$REF/want"
	local plain shim opts
	plain=$(peak_kib "$PYTHON" "$T/writer.py" "$REF/src" "$T/plain")
	for opts in "chunk_size = 16M|compress = auto|filter = shuffle8" \
		"chunk_size = 16M|compress = zstd|filter = bitshuffle8" \
		"chunking = cdc|chunk_size = 4M|compress = auto|filter = shuffle8" \
		"chunking = cdc|chunk_size = 4M|compress = zstd|filter = bitshuffle8"; do
		rm -rf "$CACHE" "$CKPT/f"
		printf '[cache]\ndir = %s\n[path %s/*]\n%s\n' "$CACHE" "$CKPT" "${opts//|/$'\n'}" >"$POLICY"
		shim=$(peak_kib env LD_PRELOAD="$SHIM" "$PYTHON" "$T/writer.py" "$REF/src" "$CKPT/f") || fail "$opts: writing"
		echo "# $opts: +$(((shim - plain) / 1024)) MiB" >&3
		[ $((shim - plain)) -le $((64 << 10)) ] || fail "$opts: $((shim - plain)) KiB more"
		assert_restores "$REF/want" "$CKPT/f" || fail "$opts: restore"
	done
}

@test "restore's memory stays under 128 MiB with the largest chunks" {
	"$PYTHON" "$BATS_TEST_DIRNAME/../progs/particles.py" "$REF/src" 192 5
	printf '[cache]\ndir = %s\n[path %s/*]\nchunk_size = 16M\nchunking = fixed\ncompress = zstd\nfilter = shuffle8\n' \
		"$CACHE" "$CKPT" >"$POLICY"
	shim cp "$REF/src" "$CKPT/f"
	local peak
	peak=$(peak_kib "$STAGEHAND" restore --to "$BACK" "$CKPT/f") || fail "restore"
	echo "# restore: $((peak / 1024)) MiB" >&3
	cmp "$REF/src" "$BACK$CKPT/f"
	[ "$peak" -lt $((128 << 10)) ] || fail "restore's peak RSS: $peak KiB"
}
