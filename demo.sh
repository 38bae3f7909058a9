#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sets everything up and runs the main job on a built-in default: three
# staging servers start on loopback, a sample application checkpoints 4
# times through stagehand (replicas = 2), the node cache is then wiped as if
# the node had died, and every version is restored from the servers and
# checked byte for byte. With --installed, stagehand's programs are the
# installed ones (a package's), and only the sample application is built.
set -euo pipefail
cd "$(dirname "$0")"
S="build/tools/stagehand"
SERVER="build/server/stagehand-server"
if [ "${1:-}" = --installed ]; then
	S=$(command -v stagehand) || { echo "demo: stagehand is not installed" >&2; exit 1; }
	SERVER=/usr/sbin/stagehand-server
	[ -x build/examples/sample-sim ] || { scripts/deps.sh && scripts/build.sh; }
elif [ $# -gt 0 ]; then
	echo "usage: demo.sh [--installed]" >&2
	exit 2
else
	scripts/deps.sh
	scripts/build.sh
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-demo.XXXXXX")
mkdir -p "$work/ckpt"
steps=4
servers=()
# Stops what the demo started, keeping the demo's exit status (errexit is off
# here: a server or flusher already gone is no failure).
trap 'rc=$?; set +e; kill "${servers[@]}" 2>/dev/null; pkill -f "stagehand-flusher --policy $work/" 2>/dev/null; exit $rc' EXIT

echo "== stagehand: $S, $SERVER"
echo "== starting 3 staging servers on loopback"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
for i in 1 2 3; do
	"$SERVER" --listen 127.0.0.1:0 --port-file "$work/port$i" \
		--store "$work/server$i" --secret-file "$work/secret" 2>"$work/server$i.log" &
	servers+=($!)
done
# Each server writes its port once it listens: waited for while it runs, with
# a generous deadline, so that a slow or busy machine is no failure.
deadline=$((SECONDS + 600))
for i in 1 2 3; do
	until [ -s "$work/port$i" ] || ! kill -0 "${servers[$((i - 1))]}" 2>/dev/null ||
		[ "$SECONDS" -ge "$deadline" ]; do
		sleep 0.05
	done
	[ -s "$work/port$i" ] || { cat "$work/server$i.log"; exit 1; }
done
cat >"$work/policy.conf" <<EOP
[cache]
dir = $work/cache
[cluster]
servers = 127.0.0.1:$(cat "$work/port1"), 127.0.0.1:$(cat "$work/port2"), 127.0.0.1:$(cat "$work/port3")
replicas = 2
secret_file = $work/secret
[path $work/ckpt/*]
keep = 4
durability = local
EOP

echo "== running the sample application under stagehand (policy: $work/policy.conf)"
$S run --policy "$work/policy.conf" -- build/examples/sample-sim --dir "$work/ckpt" --steps $steps --size 64
echo "== what a process without stagehand sees at the real path: $(ls -A "$work/ckpt" | wc -l) files"
echo "== stagehand ls"
$S ls --policy "$work/policy.conf" "$work/ckpt"
echo "== waiting until the servers hold every version"
$S flush --policy "$work/policy.conf" --wait
echo "== the node dies: its cache is wiped; stagehand ls now asks the servers"
pkill -f "stagehand-flusher --policy $work/" || true
rm -rf "$work/cache"
$S ls --policy "$work/policy.conf" "$work/ckpt"
echo "== restoring every version from the servers and checking it"
for v in $(seq 1 $steps); do
	$S restore --policy "$work/policy.conf" --version "$v" --to "$work/restored/v$v" "$work/ckpt/field.ckpt" >/dev/null
	build/examples/sample-sim --verify "$work/restored/v$v$work/ckpt/field.ckpt" --step "$v"
done
echo "== stagehand status"
$S status --policy "$work/policy.conf"
echo "demo OK: $steps versions staged, replicated on 2 of 3 servers, and restored from them byte for byte (files in $work)"
