#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sets everything up and runs the main job on a built-in default: a sample
# application checkpoints 4 times through stagehand, then every version is
# restored and checked byte for byte.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-demo.XXXXXX")
mkdir -p "$work/ckpt"
cat >"$work/policy.conf" <<EOP
[cache]
dir = $work/cache
[path $work/ckpt/*]
chunk_size = 1M
keep = 4
durability = local
EOP
S="build/tools/stagehand"
steps=4

echo "== running the sample application under stagehand (policy: $work/policy.conf)"
$S run --policy "$work/policy.conf" -- build/examples/sample-sim --dir "$work/ckpt" --steps $steps --size 64
echo "== what a process without stagehand sees at the real path: $(ls -A "$work/ckpt" | wc -l) files"
echo "== stagehand ls"
$S ls --policy "$work/policy.conf" "$work/ckpt"
echo "== restoring every version and checking it"
for v in $(seq 1 $steps); do
	$S restore --policy "$work/policy.conf" --version "$v" --to "$work/restored/v$v" "$work/ckpt/field.ckpt" >/dev/null
	build/examples/sample-sim --verify "$work/restored/v$v$work/ckpt/field.ckpt" --step "$v"
done
echo "== stagehand status"
$S status --policy "$work/policy.conf"
echo "demo OK: $steps versions staged and restored byte for byte (files in $work)"
