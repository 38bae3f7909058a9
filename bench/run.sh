#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Side-by-side benchmark of stagehand against what a user would otherwise do,
# on the same disk, in one run. Prints ratios (stagehand / baseline speed,
# > 1 is faster) with the medians of several alternating trials: absolute
# times drift on shared machines, ratios hold better.
#
#   bench/run.sh [--size MIB] [--trials N] [--dir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
size=2048
trials=3
dir=""
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$(bench_value "$@"); shift 2 ;;
	--trials) trials=$(bench_value "$@"); shift 2 ;;
	--dir) dir=$(bench_value "$@"); shift 2 ;;
	-h | --help) bench_help ;;
	*) bench_unknown "$1" ;;
	esac
done
build="$root/build"
[ -x "$build/bench/ckpt-writer" ] || { echo "run.sh: build first (./demo.sh or meson compile -C build)" >&2; exit 1; }
W="$build/bench/ckpt-writer"
S="$build/tools/stagehand"
SHIM="$build/preload/libstagehand.so"
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
trap 'rm -rf "$dir/plain" "$dir/ckpt" "$dir/cache" "$dir/restored" "$dir/copy" "$dir/other"' EXIT

policy() {
	cat >"$dir/policy.conf" <<EOP
[cache]
dir = $dir/cache
[path $dir/ckpt/*]
chunk_size = 1M
chunking = fixed
durability = local
keep = 3
EOP
}


shimmed() { LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$@"; }

# Peak resident set size in KiB of a command, from GNU time.
peak_kib() {
	/usr/bin/time -f '%M' -o "$dir/time.out" "$@" >/dev/null
	cat "$dir/time.out"
}

policy
echo "stagehand benchmark: ${size} MiB file, 1 MiB write() calls, $trials trials, on $(df -h "$dir" | awk 'NR==2 {print $1}')"
: >"$dir/t.base1"; : >"$dir/t.shim1"; : >"$dir/t.base2"; : >"$dir/t.shim2"
: >"$dir/t.cp"; : >"$dir/t.restore"; : >"$dir/t.small.base"; : >"$dir/t.small.shim"
: >"$dir/t.null.base"; : >"$dir/t.null.shim"
stored2=0
for t in $(seq 1 "$trials"); do
	rm -rf "$dir/plain" "$dir/ckpt" "$dir/cache" "$dir/restored" "$dir/copy"
	mkdir -p "$dir/plain" "$dir/ckpt"
	drop_caches
	# 1. first version: plain write + fsync vs through the shim (durability = local)
	"$W" -s "$size" "$dir/plain/f.dat" >>"$dir/t.base1"
	drop_caches
	shimmed "$W" -s "$size" "$dir/ckpt/f.dat" >>"$dir/t.shim1"
	drop_caches
	# 2. the same file rewritten with 10% of its 1 MiB blocks changed
	"$W" -s "$size" -v 2 "$dir/plain/f.dat" >>"$dir/t.base2"
	drop_caches
	shimmed "$W" -s "$size" -v 2 "$dir/ckpt/f.dat" >>"$dir/t.shim2"
	stored2=$(STAGEHAND_POLICY="$dir/policy.conf" "$S" ls "$dir/ckpt/f.dat" | awk '$2 == 2 {print $4}')
	# 4. restore of the file vs cp of the same file (both made durable)
	drop_caches
	/usr/bin/time -f '%e' -o "$dir/time.out" sh -c "cp '$dir/plain/f.dat' '$dir/copy' && sync '$dir/copy'"
	cat "$dir/time.out" >>"$dir/t.cp"
	drop_caches
	/usr/bin/time -f '%e' -o "$dir/time.out" "$S" restore --policy "$dir/policy.conf" --to "$dir/restored" "$dir/ckpt/f.dat" >/dev/null
	cat "$dir/time.out" >>"$dir/t.restore"
	cmp "$dir/restored$dir/ckpt/f.dat" "$dir/plain/f.dat"
	# 3. 4 KiB writes to a path the policy does not match (256 MiB, no fsync),
	# each run to a fresh file, alternating which goes first
	mkdir -p "$dir/other"
	for k in $(seq 1 10); do
		rm -f "$dir/other/a" "$dir/other/b"
		sync
		if [ $((k % 2)) -eq 0 ]; then
			"$W" -s 256 -b 4096 -n "$dir/other/a" >>"$dir/t.small.base"
			shimmed "$W" -s 256 -b 4096 -n "$dir/other/b" >>"$dir/t.small.shim"
		else
			shimmed "$W" -s 256 -b 4096 -n "$dir/other/b" >>"$dir/t.small.shim"
			"$W" -s 256 -b 4096 -n "$dir/other/a" >>"$dir/t.small.base"
		fi
		# the same calls to /dev/null: only the system call and the hook
		"$W" -s 64 -b 4096 -r 64 -n /dev/null >>"$dir/t.null.base"
		shimmed "$W" -s 64 -b 4096 -r 64 -n /dev/null >>"$dir/t.null.shim"
	done
done

changed=$(( $("$W" -s "$size" -v 2 -c x) * 1024 * 1024 ))
b1=$(median <"$dir/t.base1"); s1=$(median <"$dir/t.shim1")
b2=$(median <"$dir/t.base2"); s2=$(median <"$dir/t.shim2")
bc=$(median <"$dir/t.cp"); sr=$(median <"$dir/t.restore")
# the fastest run: the overhead of a few nanoseconds per call drowns in the
# page cache's noise otherwise
bs=$(sort -g "$dir/t.small.base" | head -n 1); ss=$(sort -g "$dir/t.small.shim" | head -n 1)
bn=$(sort -g "$dir/t.null.base" | head -n 1); sn=$(sort -g "$dir/t.null.shim" | head -n 1)

# 5. memory: peak RSS of the writer with and without the shim, and of restore
rm -rf "$dir/cache" "$dir/ckpt" "$dir/restored"; mkdir -p "$dir/ckpt"
m_base=$(peak_kib "$W" -s "$size" "$dir/plain/f.dat")
m_shim=$(peak_kib env LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/policy.conf" "$W" -s "$size" "$dir/ckpt/f.dat")
m_rest=$(peak_kib "$S" restore --policy "$dir/policy.conf" --to "$dir/restored" "$dir/ckpt/f.dat")
manifest=$(stat -c %s "$dir"/cache/files/*/v*.mf) # the one version there is

printf '\n| # | what | baseline | stagehand | ratio | target |\n|---|---|---|---|---|---|\n'
printf '| 1 | first version, %d MiB, write+fsync+close | %.2f s | %.2f s | %sx | >= 0.9x |\n' "$size" "$b1" "$s1" "$(ratio "$b1" "$s1")"
printf '| 2 | rewrite, 10%% of 1 MiB blocks changed | %.2f s | %.2f s | %sx | >= 3x |\n' "$b2" "$s2" "$(ratio "$b2" "$s2")"
printf '| 2 | stored bytes for that version vs changed bytes + manifest | %d | %d | %sx | <= 1.1x |\n' "$((changed + manifest))" "$stored2" "$(ratio "$stored2" "$((changed + manifest))")"
printf '| 3 | 4 KiB writes, unmatched path, 256 MiB (fastest of %d) | %.4f s | %.4f s | %s%% overhead | <= 2%% |\n' "$((10 * trials))" "$bs" "$ss" "$(awk -v a="$bs" -v b="$ss" 'BEGIN {printf "%.1f", (b / a - 1) * 100}')"
printf '| 3 | the same calls to /dev/null, 1M calls: the hook alone (fastest of %d) | %.4f s | %.4f s | %s%% overhead | (reference) |\n' "$((10 * trials))" "$bn" "$sn" "$(awk -v a="$bn" -v b="$sn" 'BEGIN {printf "%.1f", (b / a - 1) * 100}')"
printf '| 4 | restore vs cp + sync of the file | %.2f s | %.2f s | %sx | >= 1x |\n' "$bc" "$sr" "$(ratio "$bc" "$sr")"
printf '| 5 | peak RSS of the writer (shim adds) | %d MiB | %d MiB | +%d MiB | <= +64 MiB |\n' "$((m_base / 1024))" "$((m_shim / 1024))" "$(((m_shim - m_base) / 1024))"
printf '| 5 | peak RSS of stagehand restore | | %d MiB | | < 128 MiB |\n' "$((m_rest / 1024))"
