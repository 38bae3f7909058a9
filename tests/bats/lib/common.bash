# SPDX-License-Identifier: MIT
# Shared set-up for stagehand's integration tests: every test gets its own
# policy, cache and captured directory under $BATS_TEST_TMPDIR.

: "${STAGEHAND_BUILD:=$(cd "$BATS_TEST_DIRNAME/../../build" 2>/dev/null && pwd)}"
SHIM="$STAGEHAND_BUILD/preload/libstagehand.so"
STAGEHAND="$STAGEHAND_BUILD/tools/stagehand"
PROGS="$STAGEHAND_BUILD/tests/progs"
# With STAGEHAND_INSTALLED=1, stagehand's own files are the installed ones
# (the packages': tests/bats/package.bats); the test programs stay the
# build's.
if [ "${STAGEHAND_INSTALLED:-}" = 1 ]; then
	SHIM="/usr/lib/$(gcc -print-multiarch)/stagehand/libstagehand.so"
	STAGEHAND=/usr/bin/stagehand
fi
# Debian's interpreter, where python3-numpy and python3-h5py live.
PYTHON=/usr/bin/python3
# The deadline, in seconds, of every wait for something that only needs time
# (a background commit, a flush, a drain, a collection, a process leaving) and
# of every limit that only catches a hang: generous, so that a slow or busy
# machine (the RDMA guest runs under software emulation) fails nothing. No
# test bounds how long something takes, only whether it happens.
WAIT="${STAGEHAND_TEST_WAIT:-600}"
export STAGEHAND_TEST_WAIT="$WAIT"

# Writes the default policy: everything below $CKPT is captured, 64 KiB chunks
# so that small files still have several, all versions kept.
write_policy() {
	cat >"$POLICY" <<EOP
[cache]
dir = $CACHE
[path $CKPT/**]
chunk_size = 64K
chunking = fixed
keep = 100
durability = local
EOP
}

common_setup() {
	T="$BATS_TEST_TMPDIR"
	CKPT="$T/ckpt"
	CACHE="$T/cache"
	REF="$T/ref"
	BACK="$T/back"
	POLICY="$T/policy.conf"
	mkdir -p "$CKPT" "$REF"
	write_policy
	export STAGEHAND_POLICY="$POLICY"
	unset STAGEHAND_LOG STAGEHAND_LOG_FILE
	# A process opening a file another one writes through the fast path
	# waits for its handover at most this long (30 s by default): as long
	# as any other wait here.
	export STAGEHAND_SHARE_TIMEOUT="$WAIT"
	[ -f "$SHIM" ] || {
		echo "libstagehand.so not found at $SHIM (set STAGEHAND_BUILD)" >&2
		return 1
	}
}

# Prints a failure reason on stderr (bats shows it with the failing test).
fail() {
	echo "FAIL: $*" >&2
	return 1
}

# wait_for SECS CMD ARGS...: runs CMD every 50 ms until it succeeds; fails
# (naming CMD) when it has not after SECS seconds.
wait_for() {
	local secs="$1" deadline
	shift
	deadline=$(($(date +%s%N) + secs * 1000000000))
	until "$@"; do
		if [ "$(date +%s%N)" -ge "$deadline" ]; then
			echo "FAIL: timed out after ${secs}s waiting for: $*" >&2
			return 1
		fi
		sleep 0.05
	done
}

# Is a process gone (or a zombie)?
pid_gone() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
	[[ "$st" == Z* ]]
}

# Runs a command with the shim preloaded.
shim() {
	LD_PRELOAD="$SHIM" "$@"
}

# Restores the newest (or given) version of a captured file below $BACK and
# compares it byte for byte with a reference file.
assert_restores() {
	local ref="$1" path="$2" version="${3:-}"
	rm -rf "$BACK"
	if [ -n "$version" ]; then
		"$STAGEHAND" restore --version "$version" --to "$BACK" "$path" >/dev/null
	else
		"$STAGEHAND" restore --to "$BACK" "$path" >/dev/null
	fi
	cmp "$ref" "$BACK$path"
}

# Number of versions `stagehand ls` lists for a path.
version_count() {
	"$STAGEHAND" ls "$1" 2>/dev/null | awk -v p="$1" '$1 == p' | wc -l
}

# The newest version number of a path.
latest_version() {
	"$STAGEHAND" ls "$1" | awk -v p="$1" '$1 == p { v = $2 } END { print v }'
}

# Flips every bit of one byte of a file (a corruption that always changes it).
flip_byte() {
	local file="$1" off="$2" old
	old=$(od -An -tu1 -j "$off" -N1 "$file" | tr -d ' ')
	printf "\\x$(printf %02x $((old ^ 0xff)))" | dd of="$file" bs=1 seek="$off" conv=notrunc status=none
}
