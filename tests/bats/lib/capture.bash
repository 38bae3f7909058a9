# SPDX-License-Identifier: MIT
# Helpers of the capture-*.bats tests ("every way of writing is captured"):
# a program runs twice, once writing below $REF without the shim (the
# reference) and once below $CKPT with it; then the captured file must
# restore, read back and stat exactly like the reference, and stay invisible
# on the real file system.

WRITER="$PROGS/writer"
WRITER64="$PROGS/writer64"

# A program under test that hangs (a deadlock in the shim) fails its test
# after this many seconds instead of stalling the suite: only a hang
# detector, the suite's generous deadline, far above what a slow machine
# takes.
CAPTURE_TIMEOUT="$WAIT"

# tshim CMD ARGS...: shim, with the time limit; exit status 124 on timeout.
tshim() {
	shim timeout -k 5 "$CAPTURE_TIMEOUT" "$@"
}

# Explains an exit status of a run under the time limit.
why() {
	case "$1" in
	124 | 137) echo "timed out after ${CAPTURE_TIMEOUT}s (hung)" ;;
	*) echo "exited $1" ;;
	esac
}

# The same, for checks that go on after a failure.
complain() {
	echo "FAIL: $*" >&2
}

# twice CMD ARGS...: runs CMD without the shim with every "@D@" in its
# arguments replaced by $REF, then with the shim and "@D@" = $CKPT. Both runs
# must succeed.
twice() {
	local a rc
	local -a ref=() ckpt=()
	for a in "$@"; do
		ref+=("${a//@D@/$REF}")
		ckpt+=("${a//@D@/$CKPT}")
	done
	rc=0
	"${ref[@]}" || rc=$?
	[ "$rc" -eq 0 ] || { complain "reference run exited $rc: ${ref[*]}"; return 1; }
	tshim "${ckpt[@]}" || rc=$?
	[ "$rc" -eq 0 ] || { complain "captured run $(why "$rc"): ${ckpt[*]}"; return 1; }
}

# twice_sh SCRIPT ARGS...: twice, for a bash script; in the script $D is $REF
# or $CKPT. The whole bash process runs under the shim.
twice_sh() {
	local script="$1" rc=0
	shift
	D="$REF" bash -c "$script" bash "$@" || rc=$?
	[ "$rc" -eq 0 ] || { complain "reference script exited $rc: $script"; return 1; }
	D="$CKPT" tshim bash -c "$script" bash "$@" || rc=$?
	[ "$rc" -eq 0 ] || { complain "captured script $(why "$rc"): $script"; return 1; }
}

# check_file REL [VERSIONS]: $CKPT/REL against $REF/REL.
#   - no real file at $CKPT/REL (the data went to the cache, not the disk)
#   - `stagehand restore` of the newest version is byte-identical
#   - `cat` through the shim reads the same bytes
#   - `stat` through the shim reports the same size and permissions
#   - with VERSIONS: `stagehand ls` lists exactly that many versions
# Every check runs, so that a failure reports all that is wrong at once.
check_file() {
	local rel="$1" versions="${2:-}"
	local ref="$REF/$rel" path="$CKPT/$rel" bad=0 got want
	[ -f "$ref" ] || { complain "no reference file '$ref'"; return 1; }
	if [ -e "$path" ] || [ -L "$path" ]; then
		complain "'$path' exists on the real file system: written around the shim"
		ls -la "$path" >&2
		bad=1
	fi
	if ! assert_restores "$ref" "$path" >&2; then
		complain "restore of '$path' is not the reference (stagehand ls below)"
		"$STAGEHAND" ls "$path" >&2 || true
		bad=1
	elif [ "$(stat -c %a "$BACK$path")" != "$(stat -c %a "$ref")" ]; then
		complain "restored '$path' has mode $(stat -c %a "$BACK$path"), reference $(stat -c %a "$ref")"
		bad=1
	fi
	if ! shim cat "$path" >"$T/readback" 2>"$T/readback.err"; then
		complain "cat through the shim failed: $(cat "$T/readback.err")"
		bad=1
	elif ! cmp "$T/readback" "$ref" >&2; then
		complain "cat '$path' through the shim is not the reference"
		bad=1
	fi
	got=$(shim stat -c '%s %a' "$path" 2>&1) || true
	want=$(stat -c '%s %a' "$ref")
	if [ "$got" != "$want" ]; then
		complain "stat -c '%s %a' through the shim: got '$got', want '$want'"
		bad=1
	fi
	if [ -n "$versions" ]; then
		got=$(version_count "$path")
		if [ "$got" != "$versions" ]; then
			complain "'$path' has $got versions, want $versions"
			"$STAGEHAND" ls "$path" >&2 || true
			bad=1
		fi
	fi
	return "$bad"
}

# check_version REF PATH VERSION: an older version restores to REF.
check_version() {
	assert_restores "$1" "$2" "$3" >&2 || {
		complain "version $3 of '$2' is not '$1'"
		"$STAGEHAND" ls "$2" >&2 || true
		return 1
	}
}

# A source file with generated content, outside the captured area.
make_source() {
	"$WRITER" source "$1" - "${2:-99}"
}
