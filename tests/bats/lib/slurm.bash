# SPDX-License-Identifier: MIT
# A single-node Slurm started by the test: Debian's slurmctld and slurmd
# (run by their real names, in the foreground) on loopback, with their
# configuration and state in $USERDIR/slurm and a munged of their own. Jobs
# are submitted as nobody (Slurm refuses burst buffers to root), through
# as_nobody. Needs lib/cluster (USERDIR, track, teardown).

# The SPANK plugin and the burst buffer script: the build's, or with
# STAGEHAND_INSTALLED=1 the installed ones, which find the installed shim
# and tool by themselves.
SPANK_PLUGIN="$STAGEHAND_BUILD/slurm/spank_stagehand.so"
BB_LUA="$STAGEHAND_BUILD/slurm/burst_buffer.lua"
SPANK_ARGS="shim=$SHIM"
if [ "${STAGEHAND_INSTALLED:-}" = 1 ]; then
	SPANK_PLUGIN="/usr/lib/$(gcc -print-multiarch)/slurm-wlm/spank_stagehand.so"
	BB_LUA=/usr/share/stagehand/slurm/burst_buffer.lua
	SPANK_ARGS=""
fi

# Two free TCP ports on loopback, below the kernel's range of ephemeral
# ports: no outgoing connection takes one before the daemon binds it.
free_ports() {
	"$PYTHON" - <<'EOP'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
ports = []
while len(ports) < 2:
    p = random.randrange(10000, low)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    if p not in ports:
        ports.append(p)
print(*ports)
EOP
}

# slurm_node_idle: the node is up and takes jobs.
slurm_node_idle() {
	[ "$(sinfo -h -o %t 2>/dev/null)" = idle ]
}

# slurm_job_gone ID: the job left the queue (stage-out included).
slurm_job_gone() {
	[ -z "$(squeue -h -j "$1" 2>/dev/null)" ]
}

# slurm_start [PLUGSTACK-LINE...]: starts it; plugstack.conf holds the lines
# given (default: the SPANK plugin, preloading $SHIM). With SLURM_BB=1,
# burst buffers are $BB_LUA's, which runs $STAGEHAND.
# Sets SL (its directory), SLURM_CONF (exported) and NOBODY_DIR (a directory
# of nobody's, the jobs' working directory).
slurm_start() {
	SL="$USERDIR/slurm"
	NOBODY_DIR="$USERDIR/nobody"
	mkdir -p "$SL/state" "$SL/spool" "$SL/munge" "$NOBODY_DIR"
	chmod 755 "$SL" "$SL/munge"
	chown 65534:65534 "$NOBODY_DIR"
	dd if=/dev/urandom of="$SL/munge/key" bs=1024 count=1 status=none
	chmod 600 "$SL/munge/key"
	munged --force --foreground --socket="$SL/munge/socket" --key-file="$SL/munge/key" \
		--pid-file="$SL/munge/pid" --log-file="$SL/munge/log" --seed-file="$SL/munge/seed" \
		</dev/null >/dev/null 2>&1 3>&- &
	track $!
	disown $!
	wait_for "$WAIT" test -S "$SL/munge/socket" || fail "munged: $(cat "$SL/munge/log")"
	local ports node
	ports=$(free_ports)
	node=$(hostname -s)
	cat >"$SL/slurm.conf" <<EOC
ClusterName=stagehandtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports% *}
SlurmdPort=${ports#* }
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SL/munge/socket
CredType=cred/munge
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool
SlurmctldPidFile=$SL/slurmctld.pid
SlurmdPidFile=$SL/slurmd.pid
SlurmctldLogFile=$SL/slurmctld.log
SlurmdLogFile=$SL/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Scheduling passes every second (not every 30-60): a job whose stage-in is
# done starts soon.
SchedulerParameters=sched_interval=1,bf_interval=1
PlugStackConfig=$SL/plugstack.conf
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOC
	if [ "${SLURM_BB:-}" = 1 ]; then
		echo "BurstBufferType=burst_buffer/lua" >>"$SL/slurm.conf"
		cp "$BB_LUA" "$SL/burst_buffer.lua"
	fi
	if [ $# -eq 0 ]; then
		echo "required $SPANK_PLUGIN $SPANK_ARGS" >"$SL/plugstack.conf"
	else
		printf '%s\n' "$@" >"$SL/plugstack.conf"
	fi
	export SLURM_CONF="$SL/slurm.conf"
	local -a tool=(env STAGEHAND_TOOL="$STAGEHAND")
	[ "${STAGEHAND_INSTALLED:-}" = 1 ] && tool=()
	"${tool[@]}" /usr/sbin/slurmctld -D -f "$SLURM_CONF" \
		</dev/null >"$SL/slurmctld.out" 2>&1 3>&- &
	SLURMCTLD_PID=$!
	track $!
	disown $!
	/usr/sbin/slurmd -D -f "$SLURM_CONF" </dev/null >"$SL/slurmd.out" 2>&1 3>&- &
	SLURMD_PID=$!
	track $!
	disown $!
	wait_for "$WAIT" slurm_up && kill -0 "$SLURMCTLD_PID" "$SLURMD_PID" 2>/dev/null ||
		fail "Slurm did not come up: $(tail -n 20 "$SL"/*.log "$SL"/*.out)"
}

# slurm_up: the node takes jobs, or a daemon died (no use waiting).
slurm_up() {
	slurm_node_idle || ! kill -0 "$SLURMCTLD_PID" "$SLURMD_PID" 2>/dev/null
}

# as_nobody CMD...: runs CMD as nobody in $NOBODY_DIR, with the Slurm
# configuration and nothing of root's stagehand environment.
as_nobody() {
	(cd "$NOBODY_DIR" && setpriv --reuid=65534 --regid=65534 --clear-groups \
		env -u STAGEHAND_POLICY HOME="$NOBODY_DIR" SLURM_CONF="$SLURM_CONF" "$@")
}

# nobody_policy FILE: a node-local policy of nobody's capturing
# $NOBODY_DIR/ckpt/**, its cache in $NOBODY_DIR/cache.
nobody_policy() {
	mkdir -p "$NOBODY_DIR/ckpt" "$NOBODY_DIR/cache"
	chown 65534:65534 "$NOBODY_DIR/ckpt" "$NOBODY_DIR/cache"
	cat >"$1" <<EOP
[cache]
dir = $NOBODY_DIR/cache
[path $NOBODY_DIR/ckpt/**]
chunk_size = 64K
chunking = fixed
keep = 100
EOP
	chmod 644 "$1"
}
