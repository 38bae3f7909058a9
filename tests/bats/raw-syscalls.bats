#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# System calls made without libc (Rust's rustix with its linux_raw backend,
# under the tempfile crate and safetensors; liburing; assembly) are trapped
# by Syscall User Dispatch and see captured files as libc calls do
# (docs/CAPTURE.md, "System calls made without libc"). Each program runs on
# the reference directory without the shim and on the captured one with it.

load lib/common
load lib/capture

# Debian 12 has no safetensors: scripts/deps.sh --tests installs it in this venv,
# over Debian's numpy.
VENV_PYTHON=/opt/stagehand-test-venv/bin/python
RAWFS_SRC="$BATS_TEST_DIRNAME/../rust/rawfs"
RAWFS_TARGET="$STAGEHAND_BUILD/tests/rust"
RAWFS="$RAWFS_TARGET/release/rawfs"

setup() {
	common_setup
}

need_rawsys() {
	[ -x "$PROGS/rawsys" ] || skip "rawsys is built on x86-64 only"
}

# Builds tests/rust/rawfs once into the build directory (cargo fetches the
# locked crates the first time); a later run finds it up to date.
build_rawfs() {
	local -a vars=(CARGO_TARGET_DIR="$RAWFS_TARGET")
	command -v cargo >/dev/null || skip "cargo not found (scripts/deps.sh --tests installs it)"
	# Debian 12's cargo (1.65) reads crates.io's git index, which is not
	# reachable here, unless told to use the sparse one (stable from 1.68).
	case "$(cargo -V)" in
	"cargo 1.6"[0-7].*)
		vars+=(RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_SPARSE_REGISTRY=true
			CARGO_REGISTRIES_CRATES_IO_PROTOCOL=sparse) ;;
	esac
	env "${vars[@]}" cargo build --release --locked --quiet \
		--manifest-path "$RAWFS_SRC/Cargo.toml" >&2 || fail "cargo build of $RAWFS_SRC"
}

# No real file below $CKPT: a temporary name left behind shows there too.
no_real_files() {
	local real
	real=$(find "$CKPT" -type f -o -type l)
	[ -z "$real" ] || fail "real files below $CKPT: $real"
}

@test "raw syscalls: openat, write, renameat, newfstatat and read of a captured file" {
	need_rawsys
	twice "$PROGS/rawsys" plain @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls with every signal blocked, through libc and through rt_sigprocmask" {
	need_rawsys
	twice "$PROGS/rawsys" blocked @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls in a program with its own SIGSYS handler, which it reads back" {
	need_rawsys
	twice "$PROGS/rawsys" own-sigsys @D@
	check_file model 1
	no_real_files
}

@test "raw syscalls from a signal handler whose mask blocks everything" {
	need_rawsys
	twice "$PROGS/rawsys" handler @D@
	check_file model 1
	check_file model-handler 1
	no_real_files
}

@test "raw syscalls from four threads at once, and from a forked child" {
	need_rawsys
	twice "$PROGS/rawsys" thread @D@
	local t
	for t in "" -t0 -t1 -t2 -t3; do check_file "model$t" 1; done
	twice "$PROGS/rawsys" fork @D@
	check_file model-child 1
	no_real_files
}

@test "raw pwritev2 on a captured file's descriptor, and newfstatat/statx of the descriptor (AT_EMPTY_PATH)" {
	need_rawsys
	twice "$PROGS/rawsys" fdcalls @D@
	check_file model 1
	no_real_files
}

@test "a raw sigaltstack is kept past the trap; a raw exit_group commits the captured standard output" {
	need_rawsys
	twice "$PROGS/rawsys" altstack @D@
	check_file model 1
	twice_sh '"$1" exit "$D" >"$D/out"' "$PROGS/rawsys"
	check_file out 1
	no_real_files
}

@test "STAGEHAND_SYSCALL_DISPATCH=0: raw syscalls are not seen (the test above can fail)" {
	need_rawsys
	STAGEHAND_SYSCALL_DISPATCH=0 shim "$PROGS/rawsys" plain "$CKPT"
	[ -f "$CKPT/model" ]
	run "$STAGEHAND" ls "$CKPT/model"
	[[ "$output" != *"$CKPT/model "* ]] || fail "a version was made: $output"
}

@test "Rust std::fs and tempfile (persist through a raw renameat, persist_noclobber) on captured files" {
	build_rawfs
	twice_sh '"$1" "$D" >"$D.out"' "$RAWFS"
	[ "$(cat "$REF.out")" = "$(printf 'model.bin 307200\nnotes.old 21')" ] ||
		fail "reference run listed: $(cat "$REF.out")"
	diff "$REF.out" "$CKPT.out" >&2 || fail "the captured run listed other files"
	check_file model.bin 1
	check_file notes.old
	no_real_files
}

@test "safetensors save_file (a .tmp file persisted with a raw renameat), then load_file" {
	[ -x "$VENV_PYTHON" ] || fail "no $VENV_PYTHON: run scripts/deps.sh --tests"
	twice "$VENV_PYTHON" -c '
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
path = sys.argv[1] + "/model.safetensors"
w = np.arange(1000, dtype=np.float32)
save_file({"w": w}, path)
assert np.array_equal(load_file(path)["w"], w)
' @D@
	check_file model.safetensors 1
	no_real_files
}

@test "a Go program (cgo, so the shim is loaded) runs: the dispatch is off for Go, whose raw calls stay unseen" {
	command -v go >/dev/null || skip "go not found (scripts/deps.sh --tests installs golang-go)"
	local bin="$STAGEHAND_BUILD/tests/go/cgowrite"
	(cd "$BATS_TEST_DIRNAME/../go/cgowrite" &&
		GOTOOLCHAIN=local GOFLAGS=-mod=mod GOCACHE="$STAGEHAND_BUILD/tests/go/cache" \
			go build -o "$bin" .) || fail "go build"
	run shim "$bin" "$CKPT"
	[ "$status" -eq 0 ] || fail "exited $status: $output"
	[ "$output" = "written by go" ]
	# documented (docs/CAPTURE.md): Go's own calls write the real file
	[ -f "$CKPT/go.out" ]
}

