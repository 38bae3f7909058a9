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

@test "--stagehand with a relative policy, a shim that is not there, or an LD_PRELOAD too long to read whole: the job fails, saying why" {
	slurm_start "required $SPANK_PLUGIN shim=$USERDIR/nobody/missing.so"
	run as_nobody srun -n 1 --stagehand=job.conf true
	[ "$status" -ne 0 ] && [[ "$output" == *"the policy must be an absolute path"* ]] ||
		fail "relative: $output"
	run as_nobody srun -n 1 --stagehand true
	[ "$status" -ne 0 ] && [[ "$output" == *"cannot read the shim '$NOBODY_DIR/missing.so'"* ]] ||
		fail "missing shim: $output $(tail "$SL/slurmd.log")"
	# an LD_PRELOAD too long to read whole is never rewritten without its tail
	echo "required $SPANK_PLUGIN $SPANK_ARGS" >"$SL/plugstack.conf"
	run as_nobody env LD_PRELOAD="$(printf ' /nonexistent/lib%04d.so' $(seq 600))" \
		srun -n 1 --stagehand true
	[ "$status" -ne 0 ] && [[ "$output" == *"cannot read the task's LD_PRELOAD"* ]] ||
		fail "long LD_PRELOAD: $output"
	run as_nobody srun --help
	[[ "$output" == *"--stagehand=[POLICY]"* ]] || fail "srun --help: $output"
	run as_nobody sbatch --help
	[[ "$output" == *"--stagehand=[POLICY]"* ]] || fail "sbatch --help: $output"
}

# bb_setup: a staging server taking MUNGE credentials from Slurm's munged,
# and nobody's policy $NOBODY_DIR/job.conf shipping to it (auth = munge);
# version 1 of $NOBODY_DIR/ckpt/state (a copy of $REF/v1) is on the server
# and nowhere else: the node lost its cache and the file.
bb_setup() {
	SLURM_BB=1 slurm_start
	start_servers 1 --auth munge --munge-socket "$SL/munge/socket"
	nobody_policy "$NOBODY_DIR/job.conf"
	cat >>"$NOBODY_DIR/job.conf" <<EOP
[cluster]
servers = $(server_list)
replicas = 1
auth = munge
munge_socket = $SL/munge/socket
timeout = $((WAIT < 3600 ? WAIT : 3600))
EOP
	random_file "$REF/v1" 300000
	random_file "$REF/v2" 200000
	chmod 644 "$REF/v1" "$REF/v2"
	cp "$REF/v1" "$REF/v2" "$NOBODY_DIR/"
	as_nobody "$STAGEHAND" run --policy "$NOBODY_DIR/job.conf" cp "$NOBODY_DIR/v1" "$NOBODY_DIR/ckpt/state"
	run as_nobody "$STAGEHAND" flush --policy "$NOBODY_DIR/job.conf" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$NOBODY_DIR/cache"
	rm -rf "$NOBODY_DIR/cache" "$NOBODY_DIR/ckpt/state"
	mkdir "$NOBODY_DIR/cache"
	chown 65534:65534 "$NOBODY_DIR/cache"
}

# server_has_v2: the server lists version 2 of the state, of $REF/v2's size.
server_has_v2() {
	as_nobody "$STAGEHAND" ls --policy "$NOBODY_DIR/job.conf" "$NOBODY_DIR/ckpt/state" |
		grep -q "^$NOBODY_DIR/ckpt/state  *2  *200000 .*[ +]1 server\$"
}

@test "#BB_LUA stagehand: stage-in restores the newest version before the job starts, the job gets its policy, stage-out waits until its checkpoint is replicated" {
	bb_setup
	cat >"$NOBODY_DIR/job.sh" <<EOS
#!/bin/sh
#SBATCH --output=$NOBODY_DIR/job.out
#BB_LUA stagehand policy=$NOBODY_DIR/job.conf stage_in=$NOBODY_DIR/ckpt/state
cmp "$NOBODY_DIR/ckpt/state" "$NOBODY_DIR/v1" && echo "staged in"
echo "policy=[\$STAGEHAND_POLICY]"
"$STAGEHAND" run cp "$NOBODY_DIR/v2" "$NOBODY_DIR/ckpt/state"
EOS
	chmod 755 "$NOBODY_DIR/job.sh"
	run as_nobody sbatch --parsable "$NOBODY_DIR/job.sh"
	[ "$status" -eq 0 ] || fail "sbatch: $output"
	local job=$output
	# done once the job left the queue: stage-out is part of it
	wait_for "$WAIT" slurm_job_gone "$job" ||
		fail "job $job: $(squeue -j "$job"; tail -n 20 "$SL/slurmctld.log")"
	grep -qx "staged in" "$NOBODY_DIR/job.out" || fail "job: $(cat "$NOBODY_DIR/job.out")"
	grep -qx "policy=\[$NOBODY_DIR/job.conf\]" "$NOBODY_DIR/job.out" ||
		fail "job: $(cat "$NOBODY_DIR/job.out")"
	grep -q "job $job: stagehand restored '$NOBODY_DIR/ckpt/state'" "$SL/slurmctld.log" ||
		fail "stage-in: $(grep -i stagehand "$SL/slurmctld.log")"
	grep -q "job $job: stagehand: everything staged is replicated" "$SL/slurmctld.log" ||
		fail "stage-out: $(grep -i stagehand "$SL/slurmctld.log")"
	server_has_v2 || fail "the server: $(as_nobody "$STAGEHAND" ls --policy "$NOBODY_DIR/job.conf")"
	[ "$(stat -c %u "$NOBODY_DIR/ckpt/state")" = 65534 ]
}

@test "#BB_LUA stagehand: a bad directive is refused at submission, saying why" {
	SLURM_BB=1 slurm_start
	printf '#!/bin/sh\n#BB_LUA stagehand stage_in=relative/path\ntrue\n' >"$NOBODY_DIR/bad.sh"
	run as_nobody sbatch "$NOBODY_DIR/bad.sh"
	[ "$status" -ne 0 ] && [[ "$output" == *"'stage_in=relative/path': #BB_LUA stagehand takes policy=PATH and stage_in=PATH, absolute paths"* ]] ||
		fail "sbatch: $output"
	printf '#!/bin/sh\n#BB_LUA stagehand keep=/x\ntrue\n' >"$NOBODY_DIR/bad.sh"
	run as_nobody sbatch "$NOBODY_DIR/bad.sh"
	[ "$status" -ne 0 ] && [[ "$output" == *"unknown directive 'keep'"* ]] || fail "sbatch: $output"
}

@test "burst_buffer.lua: every hook run twice (as after a controller restart) does the same, and nothing more" {
	bb_setup
	cat >"$NOBODY_DIR/job.sh" <<EOS
#!/bin/sh
#BB_LUA stagehand policy=$NOBODY_DIR/job.conf stage_in=$NOBODY_DIR/ckpt/state
EOS
	# Slurm's side stands in as its Lua API: return codes and logging.
	STAGEHAND_TOOL="$STAGEHAND" run lua5.1 - "$BB_LUA" \
		"$NOBODY_DIR/job.sh" "$T/paths" <<'EOL'
slurm = {SUCCESS = 0, ERROR = -1}
function slurm.log_info(...) print(string.format(...)) end
function slurm.log_error(...) print(string.format(...)) end
local script, job, paths = arg[1], arg[2], arg[3]
dofile(script)
local function check(what, rc, text)
	if rc ~= slurm.SUCCESS then error(what .. ": " .. tostring(text)) end
	print(what .. " ok")
end
for i = 1, 2 do
	check("job_process", slurm_bb_job_process(job, "65534", "65534"))
	check("setup", slurm_bb_setup("7", "65534", "65534", "", "0", job))
	check("data_in", slurm_bb_data_in("7", job, "65534", "65534"))
	check("paths", slurm_bb_paths("7", job, paths, "65534", "65534"))
	check("pre_run", slurm_bb_pre_run("7", job, "65534", "65534"))
	check("post_run", slurm_bb_post_run("7", job, "65534", "65534"))
	check("data_out", slurm_bb_data_out("7", job, "65534", "65534"))
	check("teardown", slurm_bb_job_teardown("7", job, "false", "65534", "65534"))
end
EOL
	[ "$status" -eq 0 ] || fail "hooks: $output"
	[ "$(grep -c "stagehand restored" <<<"$output")" -eq 2 ] || fail "$output"
	cmp "$REF/v1" "$NOBODY_DIR/ckpt/state"
	# restored twice, still one version on the server and one in the cache
	run as_nobody "$STAGEHAND" ls --policy "$NOBODY_DIR/job.conf" "$NOBODY_DIR/ckpt/state"
	[ "$(grep -c "^$NOBODY_DIR/ckpt/state " <<<"$output")" -eq 1 ] || fail "ls: $output"
	[ "$(sort -u "$T/paths")" = "STAGEHAND_POLICY=$NOBODY_DIR/job.conf" ] || fail "$(cat "$T/paths")"
}
