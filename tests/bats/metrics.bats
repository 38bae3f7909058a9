#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Metrics: the flusher (metrics_file in [cache]) and the server
# (--metrics-file) write Prometheus' text format for node_exporter's textfile
# collector; Prometheus' own parser reads them, and they move as versions are
# shipped and restored. `stagehand status --json` tells the same facts.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

setup() {
	cluster_setup
}

teardown() {
	cluster_teardown
}

# prom FILE NAME: the value of sample NAME in FILE (a family's _sum or
# _count included), summed over its labels; fails when FILE does not parse
# as Prometheus' text format, when a family lacks its HELP or TYPE, or when
# there is no such sample.
prom() {
	"$PYTHON" - "$@" <<'EOP'
import sys
from prometheus_client.parser import text_string_to_metric_families
path, name = sys.argv[1], sys.argv[2]
text = open(path).read()
total, found = 0.0, False
for fam in text_string_to_metric_families(text):
    if not fam.documentation or fam.type == "unknown":
        sys.exit(f"{path}: {fam.name} has no HELP or TYPE")
    for s in fam.samples:
        if s.name == name:
            total += s.value
            found = True
if not found:
    sys.exit(f"{path}: no sample {name}")
print(int(total) if total == int(total) else total)
EOP
}

# above FILE NAME N: sample NAME of FILE is above N.
above() {
	local v
	v=$(prom "$1" "$2") || return 1
	"$PYTHON" -c 'import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))' "$v" "$3"
}

# ship_and_copy BYTES N: $CKPT/f of BYTES random bytes shipped to server 0
# (with metrics), which is then stopped, and its entry copied under N other
# paths, $CKPT/d/f1 to f<N>.
ship_and_copy() {
	start_server 0 --metrics-file "$T/server.prom" --metrics-interval 1
	cluster_default_policy cluster.replicas=1
	head -c "$1" /dev/urandom >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_server 0
	local user="$T/srv0/files/$(id -u)" entry i p
	entry=$(echo "$user"/*)
	[ -f "$entry/path" ] || fail "no single entry: $entry"
	for i in $(seq "$2"); do
		p="$CKPT/d/f$i"
		cp -a "$entry" "$user/$("$PROGS/catalog-id" "$p")"
		printf '%s' "$p" >"$user/$("$PROGS/catalog-id" "$p")/path"
	done
}

@test "the flusher's and the server's metrics parse and move as a version ships and restores" {
	start_server 0 --metrics-file "$T/server.prom" --metrics-interval 1
	cluster_default_policy cluster.replicas=1
	sed -i "s|^\[cache\]|[cache]\nmetrics_file = $T/node.prom|" "$POLICY"
	wait_for "$WAIT" test -s "$T/server.prom" || fail "no server metrics: $(cat "$T/srv0.log")"
	[ "$(prom "$T/server.prom" stagehand_server_up)" = 1 ]
	[ "$(prom "$T/server.prom" stagehand_server_chunks_received_total)" = 0 ]

	# a file of 16 chunks, twice the same bytes (deduplicated) and half of
	# them compressible (compressed)
	"$PYTHON" -c "
import os, sys
half = os.urandom(256 << 10)
sys.stdout.buffer.write(half + bytes(256 << 10) + half + b'x' * (256 << 10))" >"$REF/f"
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	# the node: what it holds, and what its flusher did
	wait_for "$WAIT" above "$T/node.prom" stagehand_flusher_versions_shipped_total 0 ||
		fail "$(cat "$T/node.prom")"
	[ "$(prom "$T/node.prom" stagehand_cache_versions)" = 1 ]
	[ "$(prom "$T/node.prom" stagehand_cache_logical_bytes)" = $((1 << 20)) ]
	above "$T/node.prom" stagehand_cache_dedup_ratio 2 || fail "$(cat "$T/node.prom")"
	above "$T/node.prom" stagehand_cache_compression_ratio 1.1 || fail "$(cat "$T/node.prom")"
	above "$T/node.prom" stagehand_flusher_bytes_sent_total 0
	above "$T/node.prom" stagehand_flusher_server_ship_seconds_count 0
	[ "$(prom "$T/node.prom" stagehand_queue_versions)" = 0 ]
	[ "$(prom "$T/node.prom" stagehand_flusher_server_errors_total)" = 0 ]
	grep -q "^stagehand_cache_files{cache=\"$CACHE\"} 1\$" "$T/node.prom" ||
		fail "not labelled with its cache: $(cat "$T/node.prom")"
	# the server: what it received
	wait_for "$WAIT" above "$T/server.prom" stagehand_server_manifests_stored_total 0 ||
		fail "$(cat "$T/server.prom")"
	above "$T/server.prom" stagehand_server_chunks_received_total 0
	above "$T/server.prom" stagehand_server_store_chunks 0
	above "$T/server.prom" stagehand_server_requests_total 0

	# status --json: the same facts, as JSON
	run "$STAGEHAND" status --json
	[ "$status" -eq 0 ] || fail "status --json: $output"
	"$PYTHON" - "$output" "$CACHE" <<'EOP' || fail "status --json: $output"
import json, sys
s = json.loads(sys.argv[1])
c = s["cache"]
assert c["dir"] == sys.argv[2] and c["versions"] == 1 and c["logical_bytes"] == 1 << 20, c
assert c["chunk_raw_bytes"] < c["logical_bytes"] and c["chunk_stored_bytes"] < c["chunk_raw_bytes"], c
assert s["queue"]["versions"] == 0, s["queue"]
assert len(s["servers"]) == 1 and s["servers"][0]["up"] and s["servers"][0]["chunks"] > 0, s["servers"]
EOP

	# a restore from the server alone: it serves chunks
	# the flusher stopped (as when it leaves idle): its metrics say so
	kill -TERM "$(tr -dc 0-9 <"$CACHE/flusher.lock")"
	wait_for "$WAIT" flusher_lock_free "$CACHE"
	[ "$(prom "$T/node.prom" stagehand_flusher_up)" = 0 ] ||
		fail "the flusher left, its metrics say otherwise: $(cat "$T/node.prom")"
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
	wait_for "$WAIT" above "$T/server.prom" stagehand_server_chunks_served_total 0 ||
		fail "$(cat "$T/server.prom")"

	# stopped, the server says it is down
	stop_server 0
	[ "$(prom "$T/server.prom" stagehand_server_up)" = 0 ]
}

@test "a server that cannot write its metrics says so once and serves on" {
	start_server 0 --metrics-file "$T/missing/server.prom" --metrics-interval 1
	cluster_default_policy cluster.replicas=1
	wait_for "$WAIT" grep -q "cannot write the metrics to '$T/missing/server.prom'" "$T/srv0.log"
	random_file "$REF/f" 100000
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	[ "$(grep -c "cannot write the metrics" "$T/srv0.log")" -eq 1 ] || fail "$(cat "$T/srv0.log")"
}

@test "metrics_file must be an absolute path" {
	printf '[cache]\ndir = %s\nmetrics_file = node.prom\n' "$CACHE" >"$T/bad.conf"
	run "$STAGEHAND" status --policy "$T/bad.conf"
	[ "$status" -ne 0 ]
	[[ "$output" == *"metrics_file must be an absolute path"* ]] || fail "$output"
}

@test "temporary names planted beside the metrics file do not keep the server from writing it" {
	mkdir "$T/m"
	start_server 0 --metrics-file "$T/m/server.prom" --metrics-interval 1
	wait_for "$WAIT" test -s "$T/m/server.prom"
	# Every name a temporary of the server's could have had when it was
	# made of the pid and a count (another user who may write to the
	# directory would plant them).
	local pid="${SRV_PID[0]}" n
	for ((n = 0; n < 3000; n++)); do
		printf '%s\n' "$T/m/server.prom.tmp.$pid.$n"
	done | xargs touch
	rm "$T/m/server.prom"
	wait_for "$WAIT" test -s "$T/m/server.prom" || fail "no metrics: $(tail -3 "$T/srv0.log")"
	! grep "cannot write the metrics" "$T/srv0.log" || fail "the server could not write them"
}

@test "a restore of one file reads that path's entry on the server, not every entry of its user (the path index)" {
	# 300 more paths of the user on the server, found when it starts again
	ship_and_copy 100000 300
	start_server 0 --metrics-file "$T/server.prom" --metrics-interval 1
	wait_for "$WAIT" grep -q '^stagehand_server_paths 301$' "$T/server.prom" ||
		fail "$(grep paths "$T/server.prom")"
	# the entries changed while it was stopped: their path files were read
	[ "$(prom "$T/server.prom" stagehand_server_start_paths_read)" -eq 301 ] ||
		fail "$(grep paths "$T/server.prom")"
	# from an empty node
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
	# the server writes its counters as it stops
	stop_server 0
	[ "$(prom "$T/server.prom" stagehand_server_list_entries_read_total)" -le 2 ] ||
		fail "$(grep list_entries "$T/server.prom") of 301 paths read for one"
	# a directory's listing reads its paths, found from the index the
	# server wrote as it stopped (no path file read at the start)
	start_server 0 --metrics-file "$T/server.prom" --metrics-interval 1
	[ "$("$STAGEHAND" ls "$CKPT/d" | grep -c "^$CKPT/d/f")" -eq 300 ] ||
		fail "$("$STAGEHAND" ls "$CKPT/d")"
	stop_server 0
	[ "$(prom "$T/server.prom" stagehand_server_list_entries_read_total)" -eq 300 ] ||
		fail "$(grep list_entries "$T/server.prom")"
	[ "$(prom "$T/server.prom" stagehand_server_start_paths_read)" -eq 0 ] ||
		fail "$(grep paths "$T/server.prom")"
	[ "$(prom "$T/server.prom" stagehand_server_paths)" -eq 301 ]
}

@test "a collection pass with nothing changed reads no manifest and looks at no chunk, over 301 paths (reference counts)" {
	# 300 more paths naming the same chunks, counted when the server starts
	ship_and_copy 300000 300
	start_server 0 --metrics-file "$T/server.prom" --metrics-interval 1 --gc-interval 1
	passes() {
		cp "$T/server.prom" "$T/snap.prom" 2>/dev/null &&
			[ "$(prom "$T/snap.prom" stagehand_server_collections_total)" -ge "$1" ]
	}
	wait_for "$WAIT" passes 3 || fail "$(grep collection "$T/server.prom")"
	[ "$(prom "$T/snap.prom" stagehand_server_collection_manifests)" -eq 0 ] ||
		fail "$(grep collection "$T/snap.prom")"
	[ "$(prom "$T/snap.prom" stagehand_server_collection_candidates)" -eq 0 ] ||
		fail "$(grep collection "$T/snap.prom")"
	# and the chunks, counted 301 times each, are all there
	rm -rf "$CACHE"
	run "$STAGEHAND" restore --to "$BACK" "$CKPT/f" "$CKPT/d/f300"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
	cmp "$REF/f" "$BACK$CKPT/d/f300"
}
