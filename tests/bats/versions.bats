#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# What a version is: one per checkpoint (fsync adds none), one per shared
# (N-1) file, and the same version numbers on every node.

bats_require_minimum_version 1.5.0
load lib/common
load lib/capture
load lib/cluster

# Every test gets cluster_setup: without servers it is common_setup plus an
# empty list of what to kill, and cluster_teardown then checks that nothing
# the test started (a writer it killed) is left running.
setup() {
	cluster_setup
	[ -x "$PYTHON" ] || skip "no $PYTHON"
}

teardown() {
	cluster_teardown
}

# py NAME: the test's Python script $T/NAME.py, from standard input.
py() {
	cat >"$T/$1.py"
}

# assert_versions PATH N: `stagehand ls` lists exactly N versions of PATH.
assert_versions() {
	local got
	got=$(version_count "$1")
	[ "$got" -eq "$2" ] && return 0
	"$STAGEHAND" ls "$1" >&2 || true
	fail "'$1' has $got versions, want $2"
}

# version_size PATH VERSION: the size `stagehand ls` gives that version.
version_size() {
	"$STAGEHAND" ls "$1" | awk -v p="$1" -v v="$2" '$1 == p && $2 == v { print $3 }'
}

# versions_are PATH REF...: PATH has exactly one version per REF, version N
# restoring to the Nth REF byte for byte.
versions_are() {
	local path="$1" v=0 ref
	shift
	assert_versions "$path" $# || return 1
	for ref in "$@"; do
		v=$((v + 1))
		check_version "$ref" "$path" "$v" || return 1
	done
}

# spawn PATH CMD ARGS... &: CMD in the background, under the shim when PATH
# is below $CKPT; exec'd, so that $! is CMD's pid. Only with &.
spawn() {
	local path="$1"
	shift
	[[ "$path" != "$CKPT"/* ]] || export LD_PRELOAD="$SHIM"
	exec "$@"
}

# keep_policy N: the default policy with keep = N.
keep_policy() {
	sed -i "s/^keep = .*/keep = $1/" "$POLICY"
}

# Group A: a version is a checkpoint. fsync makes what was written durable,
# it does not publish a version of its own.

# A checkpoint written to a temporary name with fsyncs along the way, closed,
# renamed over the final name (os.replace, ofstream + rename, ...).
write_tmp_fsyncs_rename() {
	py ckpt <<'EOF'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
tmp = path + ".tmp"
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, r.randbytes(300000))
os.fsync(fd)
os.write(fd, r.randbytes(100000))
os.fsync(fd)
os.close(fd)
os.rename(tmp, path)
EOF
}

@test "A1: write, fsync, write, fsync, close a temporary, rename: one version per checkpoint" {
	write_tmp_fsyncs_rename
	twice "$PYTHON" "$T/ckpt.py" @D@/c 1
	cp "$REF/c" "$T/c1"
	assert_versions "$CKPT/c" 1
	[ "$(version_size "$CKPT/c" 1)" = 400000 ] ||
		fail "version 1 of '$CKPT/c' has $(version_size "$CKPT/c" 1) bytes, want 400000"
	check_version "$T/c1" "$CKPT/c" 1
	assert_versions "$CKPT/c.tmp" 0

	twice "$PYTHON" "$T/ckpt.py" @D@/c 2
	cp "$REF/c" "$T/c2"
	versions_are "$CKPT/c" "$T/c1" "$T/c2"
	check_file c 2
}

@test "A2: write, fsync, close on the path itself, twice: two versions" {
	py ckpt <<'EOF'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, random.Random(seed).randbytes(250000 + seed))
os.fsync(fd)
os.close(fd)
EOF
	twice "$PYTHON" "$T/ckpt.py" @D@/c 1
	cp "$REF/c" "$T/c1"
	twice "$PYTHON" "$T/ckpt.py" @D@/c 2
	cp "$REF/c" "$T/c2"
	versions_are "$CKPT/c" "$T/c1" "$T/c2"
	check_file c 2
}

@test "A8: tensorstore's manifest: write, fsync, rename onto the existing path, then close; 4 rounds with keep = 2: each round closes its version under the new name, and keep counts them" {
	keep_policy 2
	py ckpt <<'EOF'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
fd = os.open(path + ".lock", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.write(fd, random.Random(seed).randbytes(90000 + seed))
os.fsync(fd)
os.rename(path + ".lock", path)
os.close(fd)
EOF
	local i
	for i in 1 2 3 4; do
		twice "$PYTHON" "$T/ckpt.py" @D@/m "$i"
		cp "$REF/m" "$T/m$i"
	done
	run "$STAGEHAND" ls "$CKPT/m"
	[[ "$output" != *"not closed"* ]] || fail "a version stayed open: $output"
	assert_versions "$CKPT/m" 2
	check_version "$T/m3" "$CKPT/m" 3
	check_version "$T/m4" "$CKPT/m" 4
	assert_versions "$CKPT/m.lock" 0
	check_file m 2
}

@test "A3: molecular dynamics: fsync'd temporary, copy ckpt to ckpt_prev, rename over ckpt; 3 rounds" {
	py md <<'EOF'
import os, random, shutil, sys
d, step = sys.argv[1], int(sys.argv[2])
ckpt, prev = d + "/ckpt", d + "/ckpt_prev"
data = random.Random(step).randbytes(200000 + 1000 * step)
fd = os.open(ckpt + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, data[:4096])
os.write(fd, data[4096:])
os.fsync(fd)
os.close(fd)
if os.path.exists(ckpt):
    shutil.copyfile(ckpt, prev)
os.rename(ckpt + ".tmp", ckpt)
EOF
	local step
	for step in 1 2 3; do
		twice "$PYTHON" "$T/md.py" @D@ "$step"
		cp "$REF/ckpt" "$T/c$step"
	done
	versions_are "$CKPT/ckpt" "$T/c1" "$T/c2" "$T/c3"
	versions_are "$CKPT/ckpt_prev" "$T/c1" "$T/c2"
	check_file ckpt 3
	check_file ckpt_prev 2
}

@test "A4: PyTorch DCP commit: pickle to .metadata.tmp, fsync, rename to .metadata: one version per round" {
	# torch.distributed.checkpoint's FileSystemWriter.finish(), which
	# calls os.fsync on the file object's descriptor before the
	# with-block's close flushes Python's buffer.
	py dcp <<'EOF'
import os, pickle, sys
d, step = sys.argv[1], int(sys.argv[2])
meta = {"step": step, "state_dict_metadata": {
    "model.layers.%d.weight" % i: {"size": (4096, 4096), "dtype": "bf16",
                                    "chunks": [((j * 256, 0), (256, 4096), "__%d_0.distcp" % (j % 4)) for j in range(16)]}
    for i in range(8 * step)}}
tmp = os.path.join(d, ".metadata.tmp")
with open(tmp, "wb") as f:
    pickle.dump(meta, f)
    os.fsync(f.fileno())
os.rename(tmp, os.path.join(d, ".metadata"))
EOF
	local step
	for step in 1 2 3; do
		twice "$PYTHON" "$T/dcp.py" @D@ "$step"
		cp "$REF/.metadata" "$T/m$step"
		assert_versions "$CKPT/.metadata" "$step"
	done
	versions_are "$CKPT/.metadata" "$T/m1" "$T/m2" "$T/m3"
	assert_versions "$CKPT/.metadata.tmp" 0
}

@test "A5: np.save to a temporary name, os.replace over the path, 2 rounds: two versions" {
	"$PYTHON" -c 'import numpy' 2>/dev/null || skip "python3 module numpy is missing"
	py save <<'EOF'
import os, sys
import numpy as np
path, step = sys.argv[1], int(sys.argv[2])
a = np.random.default_rng(step).standard_normal((300, 400))
np.save(path + ".tmp.npy", a)
os.replace(path + ".tmp.npy", path)
EOF
	twice "$PYTHON" "$T/save.py" @D@/a.npy 1
	cp "$REF/a.npy" "$T/a1"
	twice "$PYTHON" "$T/save.py" @D@/a.npy 2
	cp "$REF/a.npy" "$T/a2"
	versions_are "$CKPT/a.npy" "$T/a1" "$T/a2"
	check_file a.npy 2
}

# crash_writer PATH SEED: runs $T/ckpt.py in its crash mode on PATH (under
# the shim below $CKPT): it writes in pieces with 4 fsyncs, writes more, says
# "PID OFFSET" in $T/crash.SEED (OFFSET: the bytes written at the last fsync)
# and sleeps; once it said so, it is killed (-9). Sets CRASH_OFFSET.
crash_writer() {
	local path="$1" seed="$2" said="$T/crash.$2" pid
	rm -f "$said"
	spawn "$path" "$PYTHON" "$T/ckpt.py" "$path" "$seed" 4 "$said" >/dev/null 3>&- &
	track $!
	# no "Killed" notice from bash
	disown $!
	wait_for "$WAIT" test -s "$said"
	read -r pid CRASH_OFFSET <"$said"
	[ "$pid" -eq $! ]
	kill -9 "$pid"
	wait_for "$WAIT" pid_gone "$pid"
}

@test "A6: keep = 3, 3 checkpoints, then a writer killed after 4 fsyncs: the 3 stay, the last fsync restores" {
	keep_policy 3
	py ckpt <<'EOF'
import os, random, sys, time
path, seed, fsyncs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
said = sys.argv[4] if len(sys.argv) > 4 else None
r = random.Random(seed)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, r.randbytes(150000))
for i in range(fsyncs):
    if i:
        os.write(fd, r.randbytes(100000))
    os.fsync(fd)
if said is None:
    os.close(fd)
    sys.exit(0)
durable = os.lseek(fd, 0, os.SEEK_CUR)
os.write(fd, r.randbytes(100000))  # after the last fsync: the crash may lose it
with open(said + ".tmp", "w") as f:
    f.write("%d %d\n" % (os.getpid(), durable))
os.rename(said + ".tmp", said)
time.sleep(3600)
EOF
	local v offset ref_offset
	for v in 1 2 3; do
		twice "$PYTHON" "$T/ckpt.py" @D@/c "$v" 1
		cp "$REF/c" "$T/c$v"
	done
	crash_writer "$REF/c" 4
	ref_offset=$CRASH_OFFSET
	crash_writer "$CKPT/c" 4
	offset=$CRASH_OFFSET
	[ "$ref_offset" -eq 450000 ]
	[ "$offset" -eq 450000 ]
	# what a file system holds for sure after the crash: up to the last fsync
	head -c "$offset" "$REF/c" >"$T/durable"
	[ "$(stat -c %s "$T/durable")" -eq 450000 ]

	# every check, so that a failure says all that is wrong
	local n bad=0
	for v in 1 2 3; do
		check_version "$T/c$v" "$CKPT/c" "$v" || {
			complain "complete checkpoint $v was lost to the partial writes of a writer that never closed"
			bad=1
		}
	done
	n=$(version_count "$CKPT/c")
	[ "$n" -le 4 ] || {
		"$STAGEHAND" ls "$CKPT/c" >&2
		complain "'$CKPT/c' has $n versions, want at most 4"
		bad=1
	}
	assert_restores "$T/durable" "$CKPT/c" >&2 || {
		complain "the newest version of '$CKPT/c' is not what was written at the last fsync ($offset bytes)"
		bad=1
	}
	return "$bad"
}

@test "A7: fork after open, parent and child write a region each and close: one version, 20 rounds" {
	py fork <<'EOF'
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
head, mine, child = r.randbytes(100000), r.randbytes(100000), r.randbytes(100000)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, head)
pid = os.fork()
if pid == 0:
    os.pwrite(fd, child, 200000)
    os.close(fd)
    os._exit(0)
os.pwrite(fd, mine, 100000)
os.close(fd)
_, status = os.waitpid(pid, 0)
sys.exit(1 if status else 0)
EOF
	local round
	for ((round = 1; round <= 20; round++)); do
		twice "$PYTHON" "$T/fork.py" @D@/c "$round"
		assert_versions "$CKPT/c" "$round" || fail "(round $round)"
		assert_restores "$REF/c" "$CKPT/c" >&2 ||
			fail "round $round: the newest version of '$CKPT/c' is not the whole file"
	done
}

# Group B: one file shared by several processes of a node (N-1, PLFS).

STRIPES="$BATS_TEST_DIRNAME/../progs/stripes.py"

# stripes N STRIPE K: tests/progs/stripes.py writes DIR/f with and without
# the shim; then every stripe is checked through the shim and restored.
stripes() {
	local n="$1" stripe="$2" k="$3"
	py bad <<'EOF'
import sys
path, n, stripe, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = open(path, "rb").read()
bad = sum(data[i * stripe:(i + 1) * stripe] != bytes([65 + i % n]) * stripe for i in range(n * k))
print("%d bad stripes of %d, %d bytes (want %d)" % (bad, n * k, len(data), n * k * stripe))
EOF
	twice "$PYTHON" "$STRIPES" @D@/f "$n" "$stripe" "$k"
	local want="0 bad stripes of $((n * k)), $((n * k * stripe)) bytes (want $((n * k * stripe)))"
	[ "$("$PYTHON" "$T/bad.py" "$REF/f" "$n" "$stripe" "$k")" = "$want" ]
	# every check, so that a failure says all that is wrong
	local seen bad=0
	seen=$(shim "$PYTHON" "$T/bad.py" "$CKPT/f" "$n" "$stripe" "$k")
	[ "$seen" = "$want" ] || { complain "read through the shim: $seen"; bad=1; }
	rm -rf "$BACK"
	if "$STAGEHAND" restore --to "$BACK" "$CKPT/f" >/dev/null; then
		seen=$("$PYTHON" "$T/bad.py" "$BACK$CKPT/f" "$n" "$stripe" "$k")
		[ "$seen" = "$want" ] || { complain "restored: $seen"; bad=1; }
	else
		bad=1
	fi
	check_file f 1 || bad=1
	return "$bad"
}

@test "B1: N-1: 4 processes pwrite 16 stripes of 64 KiB each into one file: every stripe, one version" {
	stripes 4 65536 16
}

@test "B2: N-1: 16 processes pwrite 4 stripes of 1 MiB each into one file: every stripe, one version" {
	stripes 16 1048576 4
}

# Writers of one file DIR/f, each a process of its own (under the shim for
# $CKPT), synchronized through files in $T/sync.ref or $T/sync.ckpt:
#   RANK opens DIR/f with O_TRUNC, says opened.RANK, waits until all did,
#   pwrites 300000 bytes of its own at RANK * 300000, says written.RANK,
#   waits for "go" when "hold" exists, closes.
rank_script() {
	py rank <<'EOF'
import os, sys, time
path, sync, rank, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
SIZE = 300000

def say(what):
    open(os.path.join(sync, "%s.%d" % (what, rank)), "w").close()

def wait(*names):
    deadline = time.monotonic() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))
    while not all(os.path.exists(os.path.join(sync, x)) for x in names):
        if time.monotonic() > deadline:
            sys.exit("rank %d: timed out waiting for %s" % (rank, names))
        time.sleep(0.01)

try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
except OSError as e:
    sys.exit("rank %d: open: %s" % (rank, e))
say("opened")
wait(*["opened.%d" % r for r in range(n)])
os.pwrite(fd, bytes((rank * 7 + i) % 251 for i in range(SIZE)), rank * SIZE)
say("written")
if os.path.exists(os.path.join(sync, "hold")):
    wait("go")
os.close(fd)
EOF
}

# start_ranks DIR N [hold]: starts the N writers of DIR/f (RANK_PIDS).
start_ranks() {
	local d="$1" n="$2" sync r
	sync="$T/sync.$(basename "$d")"
	rm -rf "$sync"
	mkdir -p "$sync"
	[ -z "${3:-}" ] || : >"$sync/hold"
	RANK_PIDS=()
	for ((r = 0; r < n; r++)); do
		spawn "$d/f" "$PYTHON" "$T/rank.py" "$d/f" "$sync" "$r" "$n" \
			>/dev/null 2>"$T/rank$r.err" 3>&- &
		RANK_PIDS+=($!)
		track $!
	done
}

# wait_ranks: every writer exited 0.
wait_ranks() {
	local r rc
	for r in "${!RANK_PIDS[@]}"; do
		rc=0
		wait "${RANK_PIDS[$r]}" || rc=$?
		[ "$rc" -eq 0 ] || fail "writer $r exited $rc: $(cat "$T/rank$r.err")"
	done
}

@test "B3: two processes open one file with O_TRUNC at the same time, each writes its half: both" {
	rank_script
	local d
	for d in "$REF" "$CKPT"; do
		start_ranks "$d" 2
		wait_ranks
	done
	[ "$(stat -c %s "$REF/f")" -eq 600000 ]
	check_file f 1
}

@test "B4: a reader while the writers still hold the file open sees what they wrote" {
	rank_script
	local d sync rc
	for d in "$REF" "$CKPT"; do
		sync="$T/sync.$(basename "$d")"
		start_ranks "$d" 2 hold
		wait_for "$WAIT" test -e "$sync/written.0" -a -e "$sync/written.1"
		rc=0
		if [ "$d" = "$CKPT" ]; then shim cat "$d/f"; else cat "$d/f"; fi \
			>"$T/seen.$(basename "$d")" 2>"$T/cat.err" || rc=$?
		# and stat by name gives the size written so far
		if [ "$d" = "$CKPT" ]; then shim stat -c %s "$d/f"; else stat -c %s "$d/f"; fi \
			>"$T/size.$(basename "$d")" 2>>"$T/cat.err" || rc=$?
		: >"$sync/go"
		wait_ranks
		[ "$rc" -eq 0 ] || fail "cat of $d/f while the writers hold it open: $(cat "$T/cat.err")"
	done
	[ "$(stat -c %s "$T/seen.ref")" -eq 600000 ]
	[ "$(cat "$T/size.ckpt")" = "$(cat "$T/size.ref")" ] ||
		fail "stat while the writers hold it: $(cat "$T/size.ckpt") bytes, want $(cat "$T/size.ref")"
	cmp "$T/seen.ref" "$T/seen.ckpt" ||
		fail "a reader saw $(stat -c %s "$T/seen.ckpt") bytes (want 600000), not what the writers had written"
	check_file f 1
}

# mpi PROG ARGS...: PROG (a test program) on 4 ranks of this node with
# Debian's MPICH, twice: on $REF, then on $CKPT with the shim in every rank
# (@D@ stands for the directory). Skips where the program is not built.
mpi() {
	local prog="$PROGS/$1"
	shift
	[ -x "$prog" ] && command -v mpiexec.mpich >/dev/null ||
		skip "$prog or mpiexec.mpich is missing (scripts/deps.sh --tests installs mpich, libhdf5-mpich-dev)"
	twice mpiexec.mpich -launcher fork -n 4 "$prog" "$@"
}

@test "B5: MPI-IO, independent MPI_File_write_at from 4 ranks: byte-identical, one version per run" {
	mpi mpiio indep @D@/f 65536 16
	check_file f 1
	mpi mpiio indep @D@/f 65536 16
	check_file f 2
}

@test "B6: MPI-IO, collective MPI_File_write_at_all, collective buffering on and off" {
	mpi mpiio coll @D@/cb 65536 16
	check_file cb 1
	mpi mpiio coll-nocb @D@/nocb 65536 16
	check_file nocb 1
	# unaligned blocks, crossing the 64 KiB chunks
	mpi mpiio coll @D@/odd 100003 5
	check_file odd 1
}

@test "B7: parallel HDF5, one dataset written by 4 ranks, read back by a fresh job through the shim" {
	mpi phdf5 write @D@/h.h5 128
	check_file h.h5 1
	mpi phdf5 read @D@/h.h5 128
	check_file h.h5 1
}

@test "B8: every writer of a file killed before closing: nothing of that writing is published, the next starts from the last version" {
	random_file "$T/c1" 300000
	shim cp "$T/c1" "$CKPT/f"
	py die <<'EOF2'
import os, sys, time
path, said = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_WRONLY)
os.pwrite(fd, b"x" * 100000, 50000)
open(said, "w").close()
time.sleep(3600)
EOF2
	local pid
	spawn "$CKPT/f" "$PYTHON" "$T/die.py" "$CKPT/f" "$T/said" 3>&- &
	pid=$!
	track "$pid"
	wait_for "$WAIT" test -e "$T/said"
	# the writing's shadow is there, shared under the path's name
	compgen -G "$CACHE/tmp/*.shadow" >/dev/null || fail "no shared shadow: $(ls "$CACHE/tmp")"
	kill -9 "$pid"
	wait "$pid" || true
	# a reader and the next writer see the last version, not the dead writing
	shim cmp "$T/c1" "$CKPT/f" || fail "a reader after the crash sees the dead writer's bytes"
	shim "$PYTHON" -c 'import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY); os.pwrite(fd, b"y", 0); os.close(fd)' "$CKPT/f"
	{ printf y; tail -c +2 "$T/c1"; } >"$T/c2"
	versions_are "$CKPT/f" "$T/c1" "$T/c2"
	[ -z "$(compgen -G "$CACHE/tmp/*.shadow")" ] || fail "a shadow is left: $(ls "$CACHE/tmp")"
}

# two_writers: runs $T/two.py (its body on standard input) twice, on $REF and
# then on $CKPT under the shim: as process P in the background and process Q,
# which take turns through marks in a sync directory (step NAME makes one,
# await_ NAME waits for the other's). Each gets the directory as d and its
# role ("P" or "Q") as role.
two_writers() {
	{
		printf '%s\n' 'import os, sys, time' \
			'd, role, sync = sys.argv[1], sys.argv[2], sys.argv[3]' \
			'def step(name): open(os.path.join(sync, name), "w").close()' \
			'def await_(name):' \
			'    deadline = time.monotonic() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))' \
			'    while not os.path.exists(os.path.join(sync, name)):' \
			'        if time.monotonic() > deadline: sys.exit("timed out waiting for " + name)' \
			'        time.sleep(0.01)'
		cat
	} >"$T/two.py"
	local dir sync p rc
	for dir in "$REF" "$CKPT"; do
		sync="$T/sync.$(basename "$dir")"
		mkdir -p "$sync"
		local -a run=()
		[ "$dir" = "$CKPT" ] && run=(tshim)
		"${run[@]}" "$PYTHON" "$T/two.py" "$dir" P "$sync" 3>&- &
		p=$!
		rc=0
		"${run[@]}" "$PYTHON" "$T/two.py" "$dir" Q "$sync" || rc=$?
		[ "$rc" -eq 0 ] || fail "Q exited $rc in $dir"
		rc=0
		wait "$p" || rc=$?
		[ "$rc" -eq 0 ] || fail "P exited $rc in $dir"
	done
}

@test "B9: the last to close did not create the file: the version keeps the creator's mode and a chmod from the other" {
	two_writers <<'EOF'
f = os.path.join(d, "f")
if role == "P":
    fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o640)
    os.pwrite(fd, b"P" * 70000, 70000)
    step("opened"); await_("joined")
    os.fchmod(fd, 0o600)
    os.close(fd); step("closed")
else:
    await_("opened")
    fd = os.open(f, os.O_WRONLY)
    os.pwrite(fd, b"Q" * 70000, 0)
    step("joined"); await_("closed")
    os.close(fd)
EOF
	[ "$(stat -c %a "$REF/f")" = 600 ]
	check_file f 1
}

@test "B13: a process waits for another to open a file it wrote through the fast path: that open fails with EBUSY, saying why; nothing is lost" {
	# The limit of the handover (docs/CAPTURE.md): P staged data and makes
	# no call on the file until Q has opened it.
	[ "${STAGEHAND_FAST:-1}" != 0 ] || skip "the fast path is off (STAGEHAND_FAST=0): no handover"
	export STAGEHAND_SHARE_TIMEOUT=2 STAGEHAND_LOG_FILE="$T/shim.log"
	py p <<'EOF'
import os, sys, time
f, sync = sys.argv[1], sys.argv[2]
fd = os.open(f, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(fd, b"P" * 300000)
open(sync + "/written", "w").close()
while not os.path.exists(sync + "/tried"):
    time.sleep(0.01)
os.close(fd)
EOF
	mkdir -p "$T/sync"
	shim "$PYTHON" "$T/p.py" "$CKPT/f" "$T/sync" 3>&- &
	local p=$!
	track "$p"
	wait_for "$WAIT" test -e "$T/sync/written"
	run shim "$PYTHON" -c 'import os, sys; os.open(sys.argv[1], os.O_WRONLY)' "$CKPT/f"
	: >"$T/sync/tried"
	wait "$p"
	[ "$status" -ne 0 ] && [[ "$output" == *"Device or resource busy"* ]] ||
		fail "the second open: $status $output"
	grep -q "did not hand it over within 2s.*STAGEHAND_FAST=0" "$T/shim.log" ||
		fail "the log does not say why: $(cat "$T/shim.log")"
	"$PYTHON" -c 'import sys; open(sys.argv[1], "wb").write(b"P" * 300000)' "$REF/f"
	check_file f 1
}

@test "B10: unlinked while another process writes it, then created anew: the new file has none of the old writing" {
	two_writers <<'EOF'
g = os.path.join(d, "g")
if role == "P":
    with open(g, "w") as f:
        f.write("version1\n")
    fd = os.open(g, os.O_WRONLY | os.O_APPEND)
    step("writing"); await_("recreated")
    os.write(fd, b"P-appended\n")
    os.close(fd); step("closed")
else:
    await_("writing")
    os.unlink(g)
    fd = os.open(g, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"Q")
    os.close(fd)
    step("recreated"); await_("closed")
EOF
	[ "$(cat "$REF/g")" = Q ]
	check_file g
}

@test "B11: renamed while another process writes it: the writes follow the file, the old name starts afresh" {
	two_writers <<'EOF'
log = os.path.join(d, "log")
if role == "P":
    fd = os.open(log, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"first\n")
    os.fsync(fd)
    step("written"); await_("renamed")
    os.write(fd, b"after the rename\n")
    os.close(fd); step("closed")
else:
    await_("written")
    os.rename(log, log + ".1")
    fd = os.open(log, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"new\n")
    os.close(fd)
    step("renamed"); await_("closed")
EOF
	[ "$(cat "$REF/log")" = new ]
	check_file log
	check_file log.1
}

@test "B12: durability = async, 4 threads of one process writing one file in turns: no hang, the last content" {
	sed -i "s/^durability = .*/durability = async/" "$POLICY"
	py threads <<'EOF'
import os, sys, threading
path = sys.argv[1]
def w(t):
    for i in range(25):
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, bytes([65 + t]) * (4096 * (i + 1)))
        os.close(fd)
ts = [threading.Thread(target=w, args=(t,)) for t in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(fd, b"last")
os.close(fd)
EOF
	twice "$PYTHON" "$T/threads.py" @D@/f
	# Other processes see the previous version until the background commit
	# lands (docs/POLICY.md, `durability`).
	reads_last() { [ "$(shim cat "$CKPT/f")" = last ]; }
	wait_for "$WAIT" reads_last || fail "read back: $(shim cat "$CKPT/f" | head -c 40)"
	# the newest committed version is the last content
	assert_restores "$REF/f" "$CKPT/f"
}

@test "B14: shared = job: a rank's open with O_CREAT that writes nothing (MPI-IO's create pass) adds no version to a file that has one" {
	printf 'shared = job\n' >>"$POLICY"
	export STAGEHAND_JOB=job-7 STAGEHAND_RANK=0 STAGEHAND_RANKS=1
	py ckpt <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.pwrite(fd, b"checkpoint\n", 0)
os.close(fd)
EOF
	py create <<'EOF'
import os, sys
os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644))
EOF
	mkdir -p "$CKPT"
	shim "$PYTHON" "$T/ckpt.py" "$CKPT/f"
	assert_versions "$CKPT/f" 1
	shim "$PYTHON" "$T/create.py" "$CKPT/f"
	assert_versions "$CKPT/f" 1
	[ "$(shim cat "$CKPT/f")" = checkpoint ] || fail "read back: $(shim cat "$CKPT/f")"
}

@test "B15: shared = job: two ranks of a node fsync in turn, then die before closing: the node's synced part names both" {
	printf 'shared = job\n' >>"$POLICY"
	py rank <<'EOF'
import os, sys, time
path, rank, t = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def await_(name):
    deadline = time.time() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))
    while not os.path.exists("%s/%s.%d" % (t, name, rank)):
        if time.time() > deadline:
            sys.exit("no %s" % name)
        time.sleep(0.01)
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
open("%s/opened.%d" % (t, rank), "w").close()
await_("go")
os.pwrite(fd, bytes([65 + rank]) * 4096, rank * 4096)
os.fsync(fd)
open("%s/synced.%d" % (t, rank), "w").close()
await_("never")  # killed while it holds the file
EOF
	mkdir -p "$CKPT"
	local r pids=()
	for r in 0 1; do
		STAGEHAND_JOB=job-9 STAGEHAND_RANK=$r STAGEHAND_RANKS=4 \
			shim "$PYTHON" "$T/rank.py" "$CKPT/f" "$r" "$T" &
		pids+=($!)
		track $!
	done
	wait_for "$WAIT" test -e "$T/opened.0" -a -e "$T/opened.1"
	touch "$T/go.0"
	wait_for "$WAIT" test -e "$T/synced.0"
	touch "$T/go.1"
	wait_for "$WAIT" test -e "$T/synced.1"
	pkill -9 -f -- "$T/rank.py"
	wait "${pids[@]}" 2>/dev/null || true
	# the newest version is node's open part of ranks 0 and 1, both synced
	run "$STAGEHAND" ls "$CKPT/f"
	[[ "${lines[-1]}" == *"(fsync'ed, not closed) (job job-9, 1 part, incomplete: ranks 2-3 of 4 missing)" ]] ||
		fail "ls: $output"
}

@test "B16: shared = job: ranks of a node in turn, the second appending with pwrite on O_APPEND: its range is where the bytes went" {
	printf 'shared = job\n' >>"$POLICY"
	py first <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.pwrite(fd, b"A" * 4096, 0)
os.close(fd)
EOF
	py append <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
os.pwrite(fd, b"B" * 4096, 0)  # O_APPEND: at the end, whatever the offset says
os.close(fd)
EOF
	mkdir -p "$CKPT"
	STAGEHAND_JOB=job-3 STAGEHAND_RANK=0 STAGEHAND_RANKS=2 shim "$PYTHON" "$T/first.py" "$CKPT/f"
	STAGEHAND_JOB=job-3 STAGEHAND_RANK=1 STAGEHAND_RANKS=2 shim "$PYTHON" "$T/append.py" "$CKPT/f"
	"$PYTHON" "$T/first.py" "$REF/f"
	"$PYTHON" "$T/append.py" "$REF/f"
	# one version of two parts; restored, the parts merge as the file was
	run "$STAGEHAND" ls "$CKPT/f"
	[[ "$output" == *"(job job-3, 2 parts)"* ]] || fail "ls: $output"
	assert_restores "$REF/f" "$CKPT/f"
	# moving the bytes after a range cannot be said by a part: refused
	STAGEHAND_JOB=job-3 STAGEHAND_RANK=0 STAGEHAND_RANKS=2 \
		run shim fallocate --collapse-range --offset 0 --length 4096 "$CKPT/f"
	[ "$status" -ne 0 ] && [[ "$output" == *"fallocate cannot collapse or insert a range"* ]] ||
		fail "collapse: $output"
	assert_restores "$REF/f" "$CKPT/f"
}

TURNS="$BATS_TEST_DIRNAME/../progs/turns.py"

# turns N SEED HOW [REL]: tests/progs/turns.py's N ranks write 2 stripes of
# 64 KiB each into DIR/REL (f) without and with the shim, as job
# $STAGEHAND_JOB; the captured run's status and output in $status, $output.
turns() {
	"$PYTHON" "$TURNS" "$REF/${4:-f}" "$1" 65536 2 "$2" "$3" || fail "reference run"
	run tshim "$PYTHON" "$TURNS" "$CKPT/${4:-f}" "$1" 65536 2 "$2" "$3"
}

@test "B29: ranks of a job taking turns on one file, 4 and 16 of them, keep = 3: refused, pointing to shared = job, and the last complete version stays; opening together they make one version each time; shared = job merges the turns" {
	keep_policy 3
	mkdir -p "$CKPT"
	local n round seed=0 complete
	# a collective open: one whole version per checkpoint, within one job
	for n in 4 16; do
		export STAGEHAND_JOB="together-$n"
		for round in 1 2; do
			seed=$((seed + 17))
			turns "$n" "$seed" together
			[ "$status" -eq 0 ] || fail "together, $n ranks, round $round: $output"
			check_file f || fail "together, $n ranks, round $round"
		done
	done
	assert_versions "$CKPT/f" 3
	complete=$(latest_version "$CKPT/f")
	cp "$REF/f" "$T/complete"
	# taking turns: the second rank is refused, loudly
	for n in 4 16; do
		export STAGEHAND_JOB="apart-$n"
		seed=$((seed + 17))
		turns "$n" "$seed" apart
		[ "$status" -ne 0 ] || fail "$n ranks taking turns were let through: $("$STAGEHAND" ls "$CKPT/f")"
		[[ "$output" == *"rank 1 of job apart-$n opens it to go on writing it, but its last writing was rank 0's alone, of $n ranks"*"shared = job"* ]] ||
			fail "$n ranks taking turns: $output"
	done
	# rank 0's turns are versions of their own, which it could not know;
	# keep = 3 still holds the last whole one
	assert_versions "$CKPT/f" 3
	check_version "$T/complete" "$CKPT/f" "$complete"
	# a rank appending is not going on with another's stripes
	export STAGEHAND_JOB=log
	PMI_RANK=0 PMI_SIZE=2 shim sh -c 'echo zero >>"$1"' sh "$CKPT/log"
	PMI_RANK=1 PMI_SIZE=2 shim sh -c 'echo one >>"$1"' sh "$CKPT/log" || fail "an appending rank was refused"
	[ "$(shim cat "$CKPT/log")" = "$(printf 'zero\none')" ] || fail "log: $(shim cat "$CKPT/log")"
	# shared = node written out: every turn is a version, as asked
	sed -i 's/^keep = 3$/keep = 3\nshared = node/' "$POLICY"
	export STAGEHAND_JOB=apart-node
	turns 4 7 apart node
	[ "$status" -eq 0 ] || fail "shared = node: $output"
	check_file node 3
	# shared = job: the turns of each checkpoint are one version, whole
	sed -i 's/^shared = node$/shared = job/' "$POLICY"
	for n in 4 16; do
		for round in 1 2; do
			export STAGEHAND_JOB="apart-job-$n-$round" # a name per run (CAPTURE.md)
			seed=$((seed + 17))
			turns "$n" "$seed" apart "job$n"
			[ "$status" -eq 0 ] || fail "shared = job, $n ranks, round $round: $output"
			check_file "job$n" "$round" || fail "shared = job, $n ranks, round $round"
		done
	done
}

# Writers of one file DIR/f (tests/progs/stripes.py's pattern with random
# bytes, which do not compress): N processes pwrite K stripes of STRIPE bytes
# each at (k * N + rank) * STRIPE; with "again", rank 0 then writes 100 bytes
# into each of its stripes once more, after every other rank wrote all of
# theirs; with "fork", each rank forks after its first stripe and its child
# writes the rest; with "other", other random bytes; with "sync", each rank
# fsyncs before it closes; with "synckill", each rank fsyncs, then kills
# itself (SIGKILL) without closing; with "synchold", each rank fsyncs, then
# waits for the file $STAGEHAND_HOLD before it closes. Each process (a child too) checks that it has as
# many descriptors open after its close as before its open.
random_stripes_script() {
	py rstripes <<'EOF2'
import multiprocessing as mp, os, random, signal, sys, time
path, n, stripe, k, how = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
WAIT = float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))

def fds():
    return len(os.listdir("/proc/self/fd"))

def stripe_bytes(rank, j):
    seed = 10**6 if how == "other" else int(how[4:]) * 10**7 if how.startswith("seed") else 0
    return random.Random(rank * 1000 + j + seed).randbytes(stripe)

def rank_main(rank, opened, written):
    before = fds()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    opened.wait(WAIT)
    child = 0
    for j in range(k):
        if how == "fork" and j == 1:
            child = os.fork()
            if child:
                break
        os.pwrite(fd, stripe_bytes(rank, j), (j * n + rank) * stripe)
    if not child:  # (a parent that forked leaves the rest to its child)
        written.wait(WAIT)
    if how in ("sync", "synckill", "synchold"):
        os.fsync(fd)
    while how == "synchold" and not os.path.exists(os.environ["STAGEHAND_HOLD"]):
        time.sleep(0.01)
    if how == "synckill":
        os.kill(os.getpid(), signal.SIGKILL)  # never closes
    if how == "again" and rank == 0:
        for j in range(k):
            os.pwrite(fd, b"again" * 20, (j * n + rank) * stripe + 1000)
    os.close(fd)
    if child:
        _, status = os.waitpid(child, 0)
        if status:
            sys.exit("rank %d: its child failed" % rank)
    # (async: the last closer holds its background commit's pipe until it
    # is reaped: one more)
    if not before <= fds() <= before + (how == "async"):
        print("rank %d%s: %d descriptors open after close, %d before open"
              % (rank, " (child)" if how == "fork" and not child else "", fds(), before),
              file=sys.stderr, flush=True)
        os._exit(1)
    if how == "fork" and not child:
        os._exit(0)  # the child: not multiprocessing's to end

if __name__ == "__main__":
    opened, written = mp.Barrier(n), mp.Barrier(n)
    ranks = [mp.Process(target=rank_main, args=(r, opened, written)) for r in range(n)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    if how == "synckill":
        sys.exit(0 if all(p.exitcode == -signal.SIGKILL for p in ranks) else 1)
    sys.exit(max(p.exitcode for p in ranks))
EOF2
}

# packs_hold CHUNKS PACKS: the cache holds exactly CHUNKS chunks of random
# bytes (64 KiB chunks: 68 KiB records), each once, in PACKS packs.
packs_hold() {
	local packs bytes
	packs=$(ls "$CACHE"/packs | wc -l)
	bytes=$(cat "$CACHE"/packs/*.pack | wc -c)
	[ "$packs" -eq "$2" ] || fail "$packs packs, want $2 (one per writer)"
	[ "$bytes" -eq $(($1 * 69632)) ] || fail "$bytes bytes of packs, want $1 records of 69632"
}

@test "B17: N-1 in stripes of whole chunks: each writer stages its chunks as it writes them, the commit stores none again, no descriptor is left" {
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 16 plain
	check_file f 1
	# a pack per writer, each holding its chunks; the committer stored
	# nothing more
	packs_hold 64 4
	# and ls counts them as the version's own
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$(echo "$output" | awk '$2 == 1 {print $4, $5}')" = "$((64 * 69632)) 64/64" ] ||
		fail "ls: $output"
}

@test "B17b: one process writing whole chunks out of order, alone (as HDF5 does): nothing is staged ahead while it writes, the close commits every chunk" {
	py lone <<'EOF'
import os, random, sys, time
path, t = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for k in reversed(range(8)):  # whole 64 KiB chunks, the last first
    os.pwrite(fd, random.Random(k).randbytes(65536), k * 65536)
open(os.path.join(t, "written"), "w").close()
deadline = time.monotonic() + float(os.environ.get("STAGEHAND_TEST_WAIT", "600"))
while not os.path.exists(os.path.join(t, "go")):
    if time.monotonic() > deadline:
        sys.exit("never told to close")
    time.sleep(0.01)
os.close(fd)
EOF
	mkdir -p "$T/ref.sync" "$T/sync"
	: >"$T/ref.sync/go"
	"$PYTHON" "$T/lone.py" "$REF/f" "$T/ref.sync"
	STAGEHAND_FAST=0 spawn "$CKPT/f" "$PYTHON" "$T/lone.py" "$CKPT/f" "$T/sync" &
	local pid=$! packs
	track "$pid"
	wait_for "$WAIT" test -e "$T/sync/written" || fail "the writer never wrote"
	# staging ahead would hold a pack of the cache open in the writer
	packs=$(ls -l "/proc/$pid/fd" 2>/dev/null | grep -c '/packs/.*\.pack') || true
	: >"$T/sync/go"
	wait "$pid" || fail "the writer failed"
	[ "$packs" -eq 0 ] || fail "a lone writer staged chunks ahead ($packs packs open)"
	check_file f 1
	packs_hold 8 1
}

@test "B18: a chunk staged by its writer, then written again in part: the version has the later bytes, and the staged one is collected" {
	random_stripes_script
	keep_policy 1
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 8 again
	check_file f 1
	# the next version, of other bytes, prunes this one: what no version
	# holds goes, the chunks rank 0 staged and wrote again included
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 8 other
	check_file f 1
	packs_hold 32 4
}

@test "B19: N-1 in whole chunks, each writer forking after its first stripe: the children write the rest; one version, nothing staged twice" {
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 8 fork
	check_file f 1
	# a pack per parent (its first stripe) and per child (the rest): the
	# child wrote none into its parent's, nor took it away
	packs_hold 32 8
}

@test "B20: a file written out of order is renamed, while open, to a path with larger chunks, and written on: the new chunks are staged as the new rule says" {
	# the first matching rule wins: 1 MiB chunks below big/
	{
		printf '[cache]\ndir = %s\n' "$CACHE"
		printf '[path %s/big/**]\nchunk_size = 1M\nchunking = fixed\nkeep = 100\ndurability = local\n' "$CKPT"
		printf '[path %s/**]\nchunk_size = 64K\nchunking = fixed\nkeep = 100\ndurability = local\n' "$CKPT"
	} >"$POLICY"
	mkdir -p "$CKPT/big" "$REF/big"
	py renamed <<'EOF2'
import os, random, sys
d = sys.argv[1]
r = random.Random(7)
fd = os.open(d + "/t.tmp", os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, r.randbytes(65536), 65536)  # not from the start: no fast path
os.pwrite(fd, r.randbytes(65536), 0)
os.rename(d + "/t.tmp", d + "/big/f")
os.pwrite(fd, r.randbytes(1 << 20), 1 << 20)
os.pwrite(fd, r.randbytes(1 << 20), 2 << 20)
os.close(fd)
EOF2
	twice "$PYTHON" "$T/renamed.py" @D@
	check_file big/f 1
}

@test "B21: N-1 in whole chunks, every rank fsyncing before its close: the syncs commit while chunks are staged; one version, byte-identical, counted as stored by it" {
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 16 sync
	check_file f 1
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$(echo "$output" | awk '$2 == 1 {print $5}')" = "64/64" ] || fail "ls: $output"
}

@test "B22: N-1 in whole chunks with durability = async: the background commit counts the chunks its writers staged as stored by the version" {
	sed -i "s/^durability = .*/durability = async/" "$POLICY"
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 16 async
	# the commit runs after the last close returned
	counted() {
		run "$STAGEHAND" ls "$CKPT/f"
		[ "$(echo "$output" | awk '$2 == 1 {print $4, $5}')" = "$((64 * 69632)) 64/64" ]
	}
	wait_for "$WAIT" counted || fail "ls: $output"
	check_file f 1
	packs_hold 64 4
}

# Group B, pending commits: with durability = local, the last close of a
# file of 32 MiB or more written through its shadow makes the shadow durable
# as a pending commit and hands the packing to a helper (docs/CAPTURE.md,
# "Pending commits").

# pending_left: the pending commits the cache's tmp/ holds (records, contents).
pending_left() {
	echo "$(find "$CACHE/tmp" -name '*.commit' | wc -l) $(find "$CACHE/tmp" -name '*.content' | wc -l)"
}

# held_open PID FILE: process PID has a descriptor of FILE (a name in tmp/) open.
held_open() {
	ls -l "/proc/$1/fd" 2>/dev/null | grep -q -- "/tmp/$2\$"
}

@test "B23: N-1 of 32 MiB, durability = local: the close leaves a pending commit that a helper packs; a reader in another process waits for it and reads the version" {
	random_stripes_script
	# the helper waits for "go" first: the close has returned, the packing
	# has not happened yet
	cat >"$T/slowtool" <<EOT
#!/bin/bash
while [ ! -e "$T/go" ]; do sleep 0.05; done
exec "$STAGEHAND" "\$@"
EOT
	chmod +x "$T/slowtool"
	STAGEHAND_TOOL="$T/slowtool" twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 plain
	[ "$(pending_left)" = "1 1" ] || fail "pending: $(ls "$CACHE/tmp")"
	# a reader opening it now waits on the path's lock, which the helper holds
	LD_PRELOAD="$SHIM" cat "$CKPT/f" >"$T/early" 2>"$T/early.err" 3>&- &
	local reader=$! id
	track $reader
	id=$(basename "$(ls "$CACHE"/tmp/*.commit)" .commit)
	wait_for "$WAIT" held_open "$reader" "$id.open" || {
		: >"$T/go"
		fail "the reader never waited for the lock"
	}
	: >"$T/go"
	wait "$reader" || fail "the reader failed: $(cat "$T/early.err")"
	cmp "$T/early" "$REF/f" || fail "the reader did not read the version just closed"
	check_file f 1
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
	# a second checkpoint over it, started from the first one's version
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 other
	check_file f 2
}

# helper_dies: the captured runs' background helper exits at once, as one
# killed (or a node that failed) before it packed.
helper_dies() {
	export STAGEHAND_TOOL=/bin/true
}

@test "B23b: a file of 32 MiB written out of order under a temporary name, renamed while open (as safetensors does), then closed: the close leaves a pending commit of the new name" {
	cat >"$T/slowtool" <<EOT
#!/bin/bash
while [ ! -e "$T/go" ]; do sleep 0.05; done
exec "$STAGEHAND" "\$@"
EOT
	chmod +x "$T/slowtool"
	head -c $((33 << 20)) /dev/urandom >"$REF/f"
	STAGEHAND_TOOL="$T/slowtool" shim "$PYTHON" - "$REF/f" "$CKPT/f" <<'EOP'
import os, sys
data = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2] + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.pwrite(fd, data[32 << 20:], 32 << 20)  # the tail first: through the shadow
at = 0
while at < 32 << 20:
    at += os.pwrite(fd, data[at:min(at + (1 << 20), 32 << 20)], at)
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
os.close(fd)
EOP
	[ "$(pending_left)" = "1 1" ] || fail "packed inside the close: $(ls "$CACHE/tmp")"
	: >"$T/go"
	assert_restores "$REF/f" "$CKPT/f"
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
	[ "$(version_count "$CKPT/f.tmp")" -eq 0 ] || fail "$("$STAGEHAND" ls "$CKPT")"
}

@test "B24: the pending commit's helper dies before packing: the record stays, the next stat through the shim packs it; one version, byte-identical" {
	random_stripes_script
	helper_dies
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 plain
	[ "$(pending_left)" = "1 1" ] || fail "pending: $(ls "$CACHE/tmp")"
	[ "$(shim stat -c %s "$CKPT/f")" = $((32 << 20)) ]
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
	check_file f 1
}

@test "B24b: the pending commit's helper killed -9 at random points, 8 versions: the next reader settles each, every one restores byte for byte, none twice" {
	random_stripes_script
	# The helper runs as it would, and is killed at a random point of its
	# work (or after it).
	cat >"$T/killtool" <<EOT
#!/bin/bash
"$STAGEHAND" "\$@" &
pid=\$!
sleep "\$(printf '0.%03d' \$((RANDOM % 500)))"
kill -9 \$pid 2>/dev/null
wait \$pid
exit 0
EOT
	chmod +x "$T/killtool"
	local k
	for k in 1 2 3 4 5 6 7 8; do
		STAGEHAND_TOOL="$T/killtool" twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 "seed$k"
		# the next reader through the shim settles what the helper left
		[ "$(shim stat -c %s "$CKPT/f")" = $((32 << 20)) ] || fail "round $k: stat"
		[ "$(pending_left)" = "0 0" ] || fail "round $k: left in tmp/: $(ls "$CACHE/tmp")"
		assert_versions "$CKPT/f" "$k"
		check_file f "$k"
	done
}

@test "B25: the pending commit's helper dies: stagehand ls packs it and lists it; the next writing, whose helper packs, starts from it" {
	random_stripes_script
	helper_dies
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 plain
	[ "$(pending_left)" = "1 1" ] || fail "pending: $(ls "$CACHE/tmp")"
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -eq 0 ] || fail "ls: $output"
	[ "$(echo "$output" | awk '$2 == 1 {print $3}')" = $((32 << 20)) ] || fail "ls: $output"
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
	unset STAGEHAND_TOOL
	# the next writing writes only rank 0's stripes again: the rest must come from the first
	py rank0 <<'EOF'
import os, random, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
for j in range(128):
    os.pwrite(fd, random.Random(j + 7).randbytes(65536), j * 4 * 65536)
os.close(fd)
EOF
	twice "$PYTHON" "$T/rank0.py" @D@/f
	check_file f 2
}

@test "B26: N-1 of 32 MiB, every rank fsyncing before its close: the syncs leave a pending commit, the close one version, byte-identical" {
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 sync
	check_file f 1
	run "$STAGEHAND" ls "$CKPT/f"
	[[ "$output" != *"not closed"* ]] || fail "ls: $output"
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
}

@test "B27: N-1 of 32 MiB, every rank killed after its fsync: an open version with all they wrote, once no process holds the file" {
	random_stripes_script
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 synckill
	# what the syncs left: the shadow, durable, and a record that says so
	[ "$(pending_left)" = "1 1" ] || fail "pending: $(ls "$CACHE/tmp")"
	[ "$(od -An -tu4 -j20 -N4 "$CACHE"/tmp/*.commit | tr -d ' ')" = 1 ] || fail "not an open record"
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -eq 0 ] && [ "${#lines[@]}" -eq 2 ] && [[ "${lines[1]}" == *"(fsync'ed, not closed)" ]] ||
		fail "ls: $output"
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
	assert_restores "$REF/f" "$CKPT/f"
	# the next writing starts from it and closes a version over it
	twice "$PYTHON" "$T/rstripes.py" @D@/f 4 65536 128 other
	check_file f 1
}

@test "B28: N-1 of 32 MiB, every rank fsyncs and then waits: the sync's pending commit is left alone while they hold the file; their close makes one version" {
	random_stripes_script
	export STAGEHAND_HOLD="$T/hold"
	: >"$STAGEHAND_HOLD"
	"$PYTHON" "$T/rstripes.py" "$REF/f" 4 65536 128 synchold
	rm -f "$STAGEHAND_HOLD"
	LD_PRELOAD="$SHIM" "$PYTHON" "$T/rstripes.py" "$CKPT/f" 4 65536 128 synchold >"$T/ranks.out" 2>&1 3>&- &
	local ranks=$!
	track $ranks
	wait_for "$WAIT" eval '[ "$(pending_left)" = "1 1" ]' || fail "no sync left a record"
	# a look meanwhile, from a tool and from another process: nothing published
	run "$STAGEHAND" ls "$CKPT/f"
	[ "$status" -ne 0 ] && [[ "$output" == *"nothing staged"* ]] || fail "ls while written: $output"
	run shim stat -c %s "$CKPT/f"
	[ "$(pending_left)" = "1 1" ] || fail "the sync's record went: $(ls "$CACHE/tmp")"
	: >"$STAGEHAND_HOLD"
	wait "$ranks" || fail "ranks: $(cat "$T/ranks.out")"
	check_file f 1
	run "$STAGEHAND" ls "$CKPT/f"
	[[ "$output" != *"not closed"* ]] || fail "ls: $output"
	[ "$(pending_left)" = "0 0" ] || fail "left in tmp/: $(ls "$CACHE/tmp")"
}
