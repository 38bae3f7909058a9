#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Slurm's SPANK plugin on a real single-node Slurm (lib/slurm.bash): `srun
# --stagehand=POLICY` and `#SBATCH --stagehand=POLICY` preload the shim into
# every task of a step, once, and pass the policy; the batch step is left
# alone; a bad policy or a missing shim fails loudly.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster
load lib/slurm

setup() {
	cluster_setup
	USERDIR=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-slurm.XXXXXX")
	chmod 755 "$USERDIR"
}

teardown() {
	cluster_teardown
}

# The task's view: its LD_PRELOAD and STAGEHAND_POLICY, then a checkpoint.
TASK='echo "task $SLURM_PROCID ld=[$LD_PRELOAD] policy=[$STAGEHAND_POLICY]"
echo "rank $SLURM_PROCID" >"$CKPT_DIR/rank$SLURM_PROCID"'

@test "srun --stagehand=POLICY: every task writes through the shim, preloaded once, with the policy" {
	slurm_start
	nobody_policy "$NOBODY_DIR/job.conf"
	run as_nobody env CKPT_DIR="$NOBODY_DIR/ckpt" srun -n 2 --stagehand="$NOBODY_DIR/job.conf" sh -c "$TASK"
	[ "$status" -eq 0 ] || fail "srun: $output"
	[ "$(grep -c "ld=\[$SHIM\] policy=\[$NOBODY_DIR/job.conf\]" <<<"$output")" -eq 2 ] ||
		fail "srun: $output"
	run as_nobody "$STAGEHAND" ls --policy "$NOBODY_DIR/job.conf"
	[ "$(grep -c "^$NOBODY_DIR/ckpt/rank[01] .* cache\$" <<<"$output")" -eq 2 ] || fail "ls: $output"
	# a user who preloads it already does not get it twice
	run as_nobody env LD_PRELOAD="$SHIM" CKPT_DIR="$NOBODY_DIR/ckpt" \
		srun -n 1 --stagehand="$NOBODY_DIR/job.conf" sh -c "$TASK"
	[ "$status" -eq 0 ] || fail "srun: $output"
	[[ "$output" == *"ld=[$SHIM] "* ]] || fail "preloaded twice: $output"
	# and without the option, nothing is preloaded
	run as_nobody env CKPT_DIR="$NOBODY_DIR" srun -n 1 sh -c "$TASK"
	[ "$status" -eq 0 ] && [[ "$output" == *"ld=[] policy=[]"* ]] || fail "srun: $output"
}

@test "#SBATCH --stagehand=POLICY: the job's srun steps are preloaded, the batch step is left alone" {
	slurm_start
	nobody_policy "$NOBODY_DIR/job.conf"
	cat >"$NOBODY_DIR/job.sh" <<EOS
#!/bin/sh
#SBATCH --stagehand=$NOBODY_DIR/job.conf
#SBATCH --ntasks=2
#SBATCH --output=$NOBODY_DIR/job.out
echo "batch ld=[\$LD_PRELOAD]"
CKPT_DIR=$NOBODY_DIR/ckpt srun sh -c '$TASK'
EOS
	chmod 755 "$NOBODY_DIR/job.sh"
	run as_nobody sbatch --wait "$NOBODY_DIR/job.sh"
	[ "$status" -eq 0 ] || fail "sbatch: $output $(cat "$NOBODY_DIR/job.out")"
	grep -qx 'batch ld=\[\]' "$NOBODY_DIR/job.out" || fail "batch step: $(cat "$NOBODY_DIR/job.out")"
	[ "$(grep -c "ld=\[$SHIM\] policy=\[$NOBODY_DIR/job.conf\]" "$NOBODY_DIR/job.out")" -eq 2 ] ||
		fail "job: $(cat "$NOBODY_DIR/job.out")"
	run as_nobody "$STAGEHAND" ls --policy "$NOBODY_DIR/job.conf"
	[ "$(grep -c "^$NOBODY_DIR/ckpt/rank[01] " <<<"$output")" -eq 2 ] || fail "ls: $output"
}

@test "--stagehand with a relative policy, or a shim that is not there: the job fails, saying why" {
	slurm_start "required $STAGEHAND_BUILD/slurm/spank_stagehand.so shim=$USERDIR/nobody/missing.so"
	run as_nobody srun -n 1 --stagehand=job.conf true
	[ "$status" -ne 0 ] && [[ "$output" == *"the policy must be an absolute path"* ]] ||
		fail "relative: $output"
	run as_nobody srun -n 1 --stagehand true
	[ "$status" -ne 0 ] && [[ "$output" == *"cannot read the shim '$NOBODY_DIR/missing.so'"* ]] ||
		fail "missing shim: $output $(tail "$SL/slurmd.log")"
	run as_nobody srun --help
	[[ "$output" == *"--stagehand=[POLICY]"* ]] || fail "srun --help: $output"
	run as_nobody sbatch --help
	[[ "$output" == *"--stagehand=[POLICY]"* ]] || fail "sbatch --help: $output"
}
