#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# N-1 on one node, side by side in one run: N processes write one shared file
# in strided stripes (bench/n1-writer.c): plainly with pwrite + fsync + close
# each, and through the shim (durability = local) twice: the same program,
# and the program without its fsync (with durability = local the last close
# makes the version durable). Alternating which goes first. Prints the
# medians and the ratios (plain time / shim time, > 1 is faster), the CPU
# seconds the writers spent (on a machine with few cores the CPU, not the
# disk, bounds the time), the seconds until the version was packed as well
# (a large file is packed in the background after its close), and the
# shim's peak memory per writer.
#
#   bench/n1.sh [--size MIB] [--trials N] [--dir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
size=1024
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
W="$build/bench/n1-writer"
SHIM="$build/preload/libstagehand.so"
S="$build/tools/stagehand"
[ -x "$W" ] || { echo "n1.sh: build first (meson compile -C build)" >&2; exit 1; }
[ -n "$dir" ] || dir="$root/bench/work"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
trap 'rm -rf "$dir/n1"' EXIT
mkdir -p "$dir/n1/plain" "$dir/n1/ckpt"
cat >"$dir/n1/policy.conf" <<EOP
[cache]
dir = $dir/n1/cache
[path $dir/n1/ckpt/*]
chunk_size = 1M
chunking = fixed
durability = local
keep = 3
EOP

plain() { rm -f "$dir/n1/plain/f"; drop_caches; "$W" "$dir/n1/plain/f" "$@"; }
# Prints the writers' seconds and CPU seconds, then the seconds until the
# version was packed too: a file of 32 MiB or more is packed in the
# background after its close (docs/CAPTURE.md, "Pending commits"), which
# `stagehand ls` waits for.
shimmed() {
	rm -rf "$dir/n1/cache" "$dir/n1/ckpt/f"
	drop_caches
	local out t0 t1
	out=$(LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/n1/policy.conf" "$W" "$dir/n1/ckpt/f" "$@")
	t0=$(date +%s.%N)
	STAGEHAND_POLICY="$dir/n1/policy.conf" "$S" ls "$dir/n1/ckpt/f" >/dev/null
	t1=$(date +%s.%N)
	awk -v t0="$t0" -v t1="$t1" '{printf "%s %s %.4f\n", $1, $2, $1 + t1 - t0}' <<<"$out"
}

echo "N-1 benchmark: one ${size} MiB file, $trials trials, on $(df -h "$dir" | awk 'NR==2 {print $1}')"
# the same bytes, one version
check() {
	cmp "$dir/n1/plain/f" <(LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/n1/policy.conf" cat "$dir/n1/ckpt/f")
	[ "$(STAGEHAND_POLICY="$dir/n1/policy.conf" "$S" ls "$dir/n1/ckpt/f" | tail -n +2 | wc -l)" -eq 1 ]
}

printf '\n| writers | stripe | plain pwrite+fsync | stagehand, same program | ratio | stagehand, no fsync | ratio | target | CPU s: plain, same, no fsync | packed after: same, no fsync |\n|---|---|---|---|---|---|---|---|---|---|\n'
for cfg in "4 65536" "4 1048576" "16 65536" "16 1048576"; do
	read -r n stripe <<<"$cfg"
	: >"$dir/n1/t.plain"
	: >"$dir/n1/t.shim"
	: >"$dir/n1/t.close"
	for t in $(seq 1 "$trials"); do
		if [ $((t % 2)) -eq 1 ]; then
			plain "$n" "$stripe" "$size" >>"$dir/n1/t.plain"
			shimmed "$n" "$stripe" "$size" >>"$dir/n1/t.shim"
			check
			shimmed "$n" "$stripe" "$size" nosync >>"$dir/n1/t.close"
			check
		else
			shimmed "$n" "$stripe" "$size" nosync >>"$dir/n1/t.close"
			check
			shimmed "$n" "$stripe" "$size" >>"$dir/n1/t.shim"
			check
			plain "$n" "$stripe" "$size" >>"$dir/n1/t.plain"
		fi
	done
	b=$(median <"$dir/n1/t.plain")
	s=$(median <"$dir/n1/t.shim")
	c=$(median <"$dir/n1/t.close")
	printf '| %d | %d KiB | %.2f s | %.2f s | %sx | %.2f s | %sx | >= 0.8x | %.2f, %.2f, %.2f | %.2f s, %.2f s |\n' \
		"$n" "$((stripe / 1024))" "$b" "$s" "$(ratio "$b" "$s")" "$c" "$(ratio "$b" "$c")" \
		"$(median 2 <"$dir/n1/t.plain")" "$(median 2 <"$dir/n1/t.shim")" "$(median 2 <"$dir/n1/t.close")" \
		"$(median 3 <"$dir/n1/t.shim")" "$(median 3 <"$dir/n1/t.close")"
done

# Memory: the peak RSS of one writer process, with and without the shim.
rss() {
	/usr/bin/time -f '%M' -o "$dir/n1/time.out" "$@" >/dev/null
	cat "$dir/n1/time.out"
}
m_plain=$(rss "$W" "$dir/n1/plain/f" 1 1048576 "$size")
rm -rf "$dir/n1/cache" "$dir/n1/ckpt/f"
m_shim=$(rss env LD_PRELOAD="$SHIM" STAGEHAND_POLICY="$dir/n1/policy.conf" "$W" "$dir/n1/ckpt/f" 1 1048576 "$size")
printf '| 1 | peak RSS of a writer (its %d MiB buffer included) | %d MiB | %d MiB | +%d MiB | | | <= +64 MiB | | |\n' \
	"$size" "$((m_plain / 1024))" "$((m_shim / 1024))" "$(((m_shim - m_plain) / 1024))"
