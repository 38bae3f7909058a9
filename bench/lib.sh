# SPDX-License-Identifier: MIT
# What the benches share, sourced by each once it has set $here: --help and
# argument errors, dropping the page cache, the median of trials and the
# ratios they report.

bench_name=$(basename "$0")

# The bench's header comment (from its third line to `set -euo`).
bench_help() {
	sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
}

bench_die() {
	echo "$bench_name: $*" >&2
	exit 2
}

bench_unknown() {
	bench_die "unknown argument '$1' (see --help)"
}

# bench_value OPTION [VALUE...]: prints VALUE, or exits saying that OPTION
# needs one. In the argument loop: size=$(bench_value "$@"); shift 2
bench_value() {
	[ $# -ge 2 ] || bench_die "$1 needs a value"
	printf '%s\n' "$2"
}

# Cold reads for the next trial, where this user may drop the page cache.
drop_caches() {
	sync
	[ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches || true
}

# median [K]: the median of column K (default 1) of the lines read.
median() {
	awk -v k="${1:-1}" '{print $k}' | sort -g |
		awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# ratio A B: A / B, two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

now() { date +%s.%N; }

# elapsed START END: seconds between two `now`s.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }
