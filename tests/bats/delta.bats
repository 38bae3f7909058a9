#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# delta = xor end to end: the flusher ships each chunk of a version as its
# XOR with the version before's chunk at the same offset where that is
# smaller, placed on the servers holding that base; restore decodes the
# chains from the servers alone, byte for byte, even with a replica down.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# series OUT STEPS MIB: OUT.1 .. OUT.STEPS, successive checkpoints of float64
# particle positions and velocities in which every value moves a little.
series() {
	"$PYTHON" - "$@" <<'PY'
import sys
import numpy as np
out, steps, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(7)
n = mib * (1 << 20) // 48
pos = rng.uniform(0.0, 100.0, (n, 3))
vel = rng.normal(0.0, 1.0, (n, 3))
for k in range(1, steps + 1):
    vel += rng.normal(0.0, 0.01, (n, 3))
    pos += 0.001 * vel
    with open(f"{out}.{k}", "wb") as f:
        f.write(pos.astype("<f8").tobytes() + vel.astype("<f8").tobytes())
PY
}

# delta_objects DIR: how many chunk objects in the server segments below DIR
# are deltas (format 3).
delta_objects() {
	"$PYTHON" - "$1" <<'PY'
import os, struct, sys
n = 0
for top, _, files in os.walk(sys.argv[1]):
    for name in files:
        if not name.endswith(".seg"):
            continue
        data = open(os.path.join(top, name), "rb").read()
        at = data.find(b"SHCK")
        while at >= 0 and at + 6 <= len(data):
            n += struct.unpack_from("<H", data, at + 4)[0] == 3
            at = data.find(b"SHCK", at + 4)
print(n)
PY
}

# ship K: writes $REF/p.K to $CKPT/f and flushes it.
ship() {
	shim cp "$REF/p.$1" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush of version $1: $output"
}

# ships STEPS: ship 1 .. STEPS in turn; sets FIRST to the servers' bytes
# after the first.
ships() {
	local k
	for ((k = 1; k <= $1; k++)); do
		ship "$k"
		[ "$k" -gt 1 ] || FIRST=$(total_segment_bytes)
	done
}

# damage_records DIR: flips a payload byte of every chunk record in the
# segments below DIR, so that each fails its checksum when read.
damage_records() {
	local seg off len
	find "$1" -name '*.seg' -exec "$PROGS/segment-records" {} + |
		while read -r seg off len; do
			if [ "$len" -gt 200 ]; then flip_byte "$seg" $((off + 200)); fi
		done
}

@test "delta = xor: a particle series takes less room on the servers, and every version restores from them with a replica down" {
	series "$REF/p" 4 8
	start_servers 3
	cluster_default_policy chunk_size=1M compress=zstd filter=shuffle8 delta=xor
	ships 4
	local total deltas k
	total=$(total_segment_bytes)
	deltas=$(delta_objects "$T")
	echo "# first version $FIRST bytes, all four $total, $deltas delta objects" >&3
	[ "$deltas" -gt 0 ] || fail "no chunk went as a delta"
	# Versions 2-4 as deltas take less than three more of the first.
	[ "$total" -lt $((FIRST * 4 * 95 / 100)) ] || fail "$total bytes for four versions, $FIRST for one"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	# Each delta sits with its base: one replica down loses nothing.
	stop_server 0
	for ((k = 1; k <= 4; k++)); do
		run restore_to "$POLICY" "$k" "$BACK.$k" "$CKPT/f"
		[ "$status" -eq 0 ] || fail "restore of version $k: $output"
		cmp "$REF/p.$k" "$BACK.$k$CKPT/f" || fail "version $k differs"
	done
}

@test "a delta the server cannot check (its base is damaged there) goes whole, and the version restores" {
	series "$REF/p" 2 4
	start_servers 1
	cluster_default_policy cluster.replicas=1 chunk_size=1M compress=zstd filter=shuffle8 delta=xor
	ship 1
	damage_records "$T/srv0"
	ship 2
	grep -q "as a delta (.*); sending it whole" "$CACHE/flusher.log" ||
		fail "no delta was refused: $(cat "$CACHE/flusher.log")"
	[ "$(delta_objects "$T")" -eq 0 ] || fail "a delta was stored on a damaged base"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run restore_to "$POLICY" 2 "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/p.2" "$BACK$CKPT/f" || fail "version 2 differs"
}

@test "delta = off ships no delta" {
	series "$REF/p" 2 2
	start_servers 1
	cluster_default_policy cluster.replicas=1 chunk_size=1M compress=zstd filter=shuffle8
	ships 2
	[ "$(delta_objects "$T")" -eq 0 ] || fail "deltas without delta = xor"
}

@test "delta = xor wants fixed chunks, and a bad value is refused with the values it takes" {
	start_servers 1
	cluster_default_policy cluster.replicas=1 chunking=cdc delta=xor
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -ne 0 ]
	[[ "$output" == *"delta = xor needs chunking = fixed"* ]] || fail "$output"
	cluster_default_policy cluster.replicas=1 delta=yes
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -ne 0 ]
	[[ "$output" == *"delta"*"xor"*"off"* ]] || fail "$output"
}
