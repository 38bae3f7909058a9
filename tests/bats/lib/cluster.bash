# SPDX-License-Identifier: MIT
# Helpers of cluster.bats: real staging servers (port 0 and a port file),
# node caches with a [cluster] section, flushers, and bounded waits.
# cluster_teardown kills what a test started by pid (servers, tracked
# background commands, the flusher of every cache named by a policy), then
# fails the test if any process still names its directory.
#
# The transport and the addresses come from the environment; the defaults
# are TCP on loopback:
#   STAGEHAND_TEST_TRANSPORT  tcp (default) | rdma | auto: the [cluster]
#                             transport of every policy, and the servers'
#                             --transport (not passed for tcp, their default)
#   STAGEHAND_TEST_HOSTS      listen addresses, space separated (default
#                             127.0.0.1): server I listens on host I mod count
#   STAGEHAND_TEST_WAIT       the deadline of waits that only need time ($WAIT,
#                             lib/common.bash)
#   STAGEHAND_TEST_CUT_HOST   an address for the server alone whose link a
#                             test cuts, by dropping its packets (cut_prepare)
#                             instead of downing a veth into a network
#                             namespace: what works over rdma, where a
#                             namespace would need an rxe device of its own
# Soft-RoCE cannot use lo: over rdma, the hosts are addresses of rxe devices
# (tests/rdma/guest.sh).

SERVER="$STAGEHAND_BUILD/server/stagehand-server"
[ "${STAGEHAND_INSTALLED:-}" = 1 ] && SERVER=/usr/sbin/stagehand-server
FLUSHER="$STAGEHAND_BUILD/flusher/stagehand-flusher"
WRITER="$PROGS/writer"
TRANSPORT="${STAGEHAND_TEST_TRANSPORT:-tcp}"
read -r -a HOSTS <<<"${STAGEHAND_TEST_HOSTS:-127.0.0.1}"

cluster_setup() {
	common_setup
	[ -x "$SERVER" ] && [ -x "$FLUSHER" ] || {
		echo "stagehand-server or stagehand-flusher not built in $STAGEHAND_BUILD" >&2
		return 1
	}
	case "$TRANSPORT" in
	tcp | rdma | auto) ;;
	*)
		echo "STAGEHAND_TEST_TRANSPORT='$TRANSPORT': tcp, rdma or auto" >&2
		return 1
		;;
	esac
	[ ${#HOSTS[@]} -gt 0 ] || {
		echo "STAGEHAND_TEST_HOSTS is empty" >&2
		return 1
	}
	SECRET="$T/secret"
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET"
	chmod 600 "$SECRET"
	SRV_PID=()
	SRV_PORT=()
	SRV_HOST=()
	SRV_NETNS=()
	NSERVERS=0
	BG_PIDS=()
	CACHES=()
	CUT_DEVS=()
	CUT_PID=""
	USERDIR="" NETNS="" HOSTVETH=""
	unset STAGEHAND_FLUSHER
	# durability = replicated: close() waits for the servers at most this
	# long (300 s by default)
	export STAGEHAND_REPLICATE_TIMEOUT="$WAIT"
}

# Remembers a background process of the test, for cluster_teardown. Its
# command line must name a file below $T (or $USERDIR).
track() {
	BG_PIDS+=("$1")
}

# kill_ours PID: kill -9 PID if it is still a process of this test (its
# command line names our directory: a pid that exited may have been reused).
kill_ours() {
	local pid="$1" args
	[ -n "$pid" ] || return 0
	args=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 0
	if [[ -n "${T:-}" && "$args" == *"$T/"* ]] || [[ -n "${USERDIR:-}" && "$args" == *"$USERDIR/"* ]]; then
		kill -9 "$pid" 2>/dev/null
	fi
	return 0
}

cluster_teardown() {
	local pid cache dev status=0
	# Everything the test started, by pid: servers, background commands,
	# the flusher of each cache (its pid is in the cache's flusher.lock).
	for pid in "${SRV_PID[@]}" "${BG_PIDS[@]}"; do
		kill_ours "$pid"
	done
	for cache in "${CACHES[@]}"; do
		stop_flusher "$cache" || status=1
	done
	# Then nothing may be left that names our directories.
	local dir
	for dir in "${T:+$T/}" "${USERDIR:+$USERDIR/}"; do
		[ -n "$dir" ] || continue
		if ! wait_for "$WAIT" eval "! pgrep -f -- '$dir' >/dev/null"; then
			echo "left running by the test:" >&2
			ps -o pid,args -p "$(pgrep -d, -f -- "$dir")" >&2
			for pid in $(pgrep -f -- "$dir"); do
				proc_stacks "$pid" >&2
			done
			status=1
		fi
	done
	[ -n "${USERDIR:-}" ] && rm -rf "$USERDIR"
	[ -n "${HOSTVETH:-}" ] && ip link del "$HOSTVETH" 2>/dev/null
	[ -n "${NETNS:-}" ] && ip netns del "$NETNS" 2>/dev/null
	for dev in "${CUT_DEVS[@]}"; do
		tc qdisc del dev "$dev" clsact 2>/dev/null || true
	done
	return $status
}

# start_server I [OPTIONS...]: starts server I (0, 1, ...) with its store in
# $T/srvI, its log in $T/srvI.log; on the host and port it had before if it
# ran already, else on host I mod count of $STAGEHAND_TEST_HOSTS (or
# SRV_HOST[I] if set) and a free port. Sets SRV_PID[I], SRV_PORT[I],
# SRV_HOST[I].
start_server() {
	local i="$1" port host ns
	shift
	host="${SRV_HOST[$i]:-${HOSTS[$((i % ${#HOSTS[@]}))]}}"
	port="${SRV_PORT[$i]:-0}"
	ns="${SRV_NETNS[$i]:-}"
	local -a transport=() secret=(--secret-file "$SECRET")
	[ "$TRANSPORT" = tcp ] || transport=(--transport "$TRANSPORT")
	# a server of MUNGE credentials only holds no secret
	[[ " $* " == *" --auth munge "* ]] && secret=()
	rm -f "$T/srv$i.port"
	if [ -n "$ns" ]; then
		ip netns exec "$ns" "$SERVER" --listen "$host:$port" --store "$T/srv$i" \
			"${secret[@]}" --port-file "$T/srv$i.port" "${transport[@]}" "$@" \
			2>>"$T/srv$i.log" </dev/null >/dev/null 3>&- &
	else
		"$SERVER" --listen "$host:$port" --store "$T/srv$i" "${secret[@]}" \
			--port-file "$T/srv$i.port" "${transport[@]}" "$@" \
			2>>"$T/srv$i.log" </dev/null >/dev/null 3>&- &
	fi
	SRV_PID[$i]=$!
	# no "Killed" notices from bash when a test kills it
	disown "${SRV_PID[$i]}"
	SRV_HOST[$i]="$host"
	[ "$i" -lt "$NSERVERS" ] || NSERVERS=$((i + 1))
	wait_for "$WAIT" test -s "$T/srv$i.port" || {
		cat "$T/srv$i.log" >&2
		return 1
	}
	SRV_PORT[$i]=$(cat "$T/srv$i.port")
	[ "${SRV_PORT[$i]}" -gt 0 ]
}

# start_servers N [OPTIONS...]: servers 0 .. N-1.
start_servers() {
	local n="$1" i
	shift
	for ((i = 0; i < n; i++)); do
		start_server "$i" "$@" || return 1
	done
}

# stop_server I [SIGNAL]: kills server I (SIGTERM by default) and waits until
# it is gone. The port stays recorded, so start_server I reuses it.
stop_server() {
	local i="$1" sig="${2:-TERM}"
	kill -s "$sig" "${SRV_PID[$i]}" 2>/dev/null || true
	wait_for "$WAIT" pid_gone "${SRV_PID[$i]}" || return 1
	SRV_PID[$i]=""
}

# "HOST0:PORT0, HOST1:PORT1, ..." for the servers started.
server_list() {
	local i out=""
	for ((i = 0; i < NSERVERS; i++)); do
		out+="${out:+, }$(srv_addr "$i")"
	done
	echo "$out"
}

# srv_addr I: "HOST:PORT" of server I, as the logs and `stagehand status`
# name it.
srv_addr() {
	echo "${SRV_HOST[$1]}:${SRV_PORT[$1]}"
}

# srv_re I: the same, as a basic regular expression (grep, sed).
srv_re() {
	srv_addr "$1" | sed 's/[.*^$[]/\\&/g'
}

# cluster_policy FILE CACHE GLOB [KEY=VALUE...]: a policy whose [cluster] lists
# every server started; KEY=VALUE pairs starting with "cluster." go to
# [cluster] (replicas, timeout, secret_file, auth=munge: no secret_file, then
# munge_socket), the others to the path rule.
# The timeout, the seconds a server may take to answer before it counts as
# down, is the suite's generous deadline (at most the 3600 the policy allows)
# unless a test sets a shorter one: a busy server is not a dead one.
cluster_policy() {
	local file="$1" cache="$2" glob="$3" kv replicas=2 secret="$SECRET" auth=""
	local timeout=$((WAIT < 3600 ? WAIT : 3600))
	shift 3
	CACHES+=("$cache")
	local rule="chunk_size = 64K
chunking = fixed
keep = 100
durability = local"
	for kv in "$@"; do
		case "$kv" in
		cluster.replicas=*) replicas="${kv#*=}" ;;
		cluster.timeout=*) timeout="${kv#*=}" ;;
		cluster.secret_file=*) secret="${kv#*=}" ;;
		cluster.auth=munge) auth="auth = munge" secret="" ;;
		cluster.munge_socket=*) auth+="
munge_socket = ${kv#*=}" ;;
		*) rule="$(printf '%s\n' "$rule" | grep -v "^${kv%%=*} =")
${kv%%=*} = ${kv#*=}" ;;
		esac
	done
	cat >"$file" <<EOP
[cache]
dir = $cache
[cluster]
servers = $(server_list)
transport = $TRANSPORT
replicas = $replicas
${secret:+secret_file = $secret}
${auth}
timeout = $timeout
[path $glob]
$rule
EOP
}

# Makes $POLICY the default one, over $CACHE and $CKPT/**.
cluster_default_policy() {
	cluster_policy "$POLICY" "$CACHE" "$CKPT/**" "$@"
}

# assert_transport_used CACHE: the flusher of CACHE connected to every server
# over $STAGEHAND_TEST_TRANSPORT, as its log says ("server HOST:PORT:
# connected over rdma"); over rdma, it never fell back ("using tcp"), so
# that a silent fallback fails the run. With auto, either transport will do.
# Not checked for tcp, today's default transport.
assert_transport_used() {
	local log="$1/flusher.log" i
	[ "$TRANSPORT" != tcp ] || return 0
	[ -f "$log" ] || fail "no flusher log $log"
	for ((i = 0; i < NSERVERS; i++)); do
		if [ "$TRANSPORT" = auto ]; then
			grep -qF -e "server $(srv_addr "$i"): connected over rdma" \
				-e "server $(srv_addr "$i"): connected over tcp" "$log"
		else
			grep -qF "server $(srv_addr "$i"): connected over $TRANSPORT" "$log"
		fi || fail "$log never says 'server $(srv_addr "$i"): connected over $TRANSPORT': $(cat "$log")"
	done
	if [ "$TRANSPORT" = rdma ] && grep -qF "using tcp" "$log"; then
		fail "the flusher fell back to TCP: $(grep -F "using tcp" "$log")"
	fi
}

# cut_prepare ADDR: readies cut_when_stored to drop every packet to or from
# ADDR as it arrives (tc filters on the ingress of lo, of the device holding
# ADDR and of the one routing to it): a peer there then stops answering as
# if its link were cut, whatever crosses it, TCP or RoCE (UDP). Only on
# arrival: a packet dropped as it leaves is a send error to soft-RoCE, which
# then fails its management queue pair for every connection of the device,
# where a cut link fails none. cluster_teardown lifts it.
cut_prepare() {
	local addr="$1" dev dir
	local -A devs=([lo]=1)
	dev=$(ip -o -4 addr show | awk -v a="$addr" '{ split($4, p, "/") } p[1] == a { sub(/@.*/, "", $2); print $2 }')
	[ -z "$dev" ] || devs[$dev]=1
	dev=$(ip -o route get "$addr" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
	[ -z "$dev" ] || devs[$dev]=1
	: >"$T/cut.tc"
	for dev in "${!devs[@]}"; do
		tc qdisc add dev "$dev" clsact || return 1
		CUT_DEVS+=("$dev")
		for dir in ingress; do
			echo "filter add dev $dev $dir protocol ip prio 1 u32 match ip dst $addr/32 action drop"
			echo "filter add dev $dev $dir protocol ip prio 2 u32 match ip src $addr/32 action drop"
		done >>"$T/cut.tc"
	done
	# The first such filter loads kernel modules (cls_u32, act_gact), slow
	# under emulation: now, not at the cut.
	tc filter add dev lo ingress protocol ip prio 9 u32 match ip dst 127.255.255.254/32 action drop &&
		tc filter del dev lo ingress protocol ip prio 9
}

# cut_lift: lets the packets of the address cut_prepare names through again.
cut_lift() {
	local dev
	for dev in "${CUT_DEVS[@]}"; do
		tc filter del dev "$dev" ingress 2>/dev/null
	done
	return 0
}

# cut_again: drops them again, after cut_lift.
cut_again() {
	tc -batch "$T/cut.tc"
}

# cut_when_stored I: starts a watcher in the background (CUT_PID) that, as
# soon as server I has stored data past its segment header, stops server I
# (SIGSTOP: from then on it answers nothing, and the flush cannot be over
# before the flusher gave up on it, however long tc takes), checks that the
# cache's queue still holds work, applies the cut cut_prepare readied and
# lets server I go on (SIGCONT), silent behind the cut. It fails if the flush
# was over first, or server I received nothing before the suite's deadline.
# Returns once the watcher runs. One process polling every 5 ms, with tc
# already started (and its kernel modules loaded by cut_prepare), instead of
# a loop of commands in the shell: under emulation (the RDMA guest) starting
# a process takes up to a second while a flush runs, and the whole flush
# about 3 s.
cut_when_stored() {
	rm -f "$T/cut.ready"
	"$PYTHON" - "$T/srv$1/segments" "$CACHE/queue" "$T/cut.tc" "$T/cut.ready" \
		"${SRV_PID[$1]}" "$WAIT" <<'EOP' 3>&- &
import os, signal, subprocess, sys, time

segments, queue, batch, ready = sys.argv[1:5]
server, wait = int(sys.argv[5]), float(sys.argv[6])
commands = open(batch, 'rb').read()
tc = subprocess.Popen(['tc', '-batch', '-'], stdin=subprocess.PIPE)
open(ready, 'w').close()


def cut(what):
    tc.stdin.write(what)
    tc.stdin.close()
    return tc.wait()


deadline = time.monotonic() + wait
while time.monotonic() < deadline:
    try:
        stored = sum(e.stat().st_size for e in os.scandir(segments) if e.name.endswith('.seg'))
    except FileNotFoundError:
        stored = 0
    if stored > 4096:
        os.kill(server, signal.SIGSTOP)
        if not os.listdir(queue):
            os.kill(server, signal.SIGCONT)
            cut(b'')
            sys.exit('the flush was over before the link was cut')
        rc = cut(commands)
        os.kill(server, signal.SIGCONT)
        sys.exit(rc)
    time.sleep(0.005)
cut(b'')
sys.exit('the server never received anything')
EOP
	CUT_PID=$!
	track "$CUT_PID"
	wait_for "$WAIT" test -e "$T/cut.ready"
}

# manifest_count I: how many manifests server I holds.
manifest_count() {
	find "$T/srv$1/files" -type f ! -name path ! -name '*.tmp.*' 2>/dev/null | wc -l
}

# stop_when_stored I BYTES MANIFESTS: stops server I (SIGSTOP) as soon as its
# segments hold BYTES, and prints "early" when it held no more than
# MANIFESTS manifests then (the flush needs its new one still), "late" when
# it did. One process polling every
# 2 ms: starting a process for each look takes up to a second under
# emulation, while a server stores a few MiB in milliseconds. Fails when
# server I stores nothing before the suite's deadline.
stop_when_stored() {
	"$PYTHON" - "$T/srv$1" "${SRV_PID[$1]}" "$2" "$3" "$WAIT" <<'EOP' 3>&-
import os, signal, sys, time

store, server, want, had = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
wait = float(sys.argv[5])


def stored():
    try:
        return sum(e.stat().st_size for e in os.scandir(store + '/segments') if e.name.endswith('.seg'))
    except FileNotFoundError:
        return 0


def manifests():
    return sum(1 for d, _, files in os.walk(store + '/files') for f in files
               if f != 'path' and '.tmp.' not in f)


deadline = time.monotonic() + wait
while time.monotonic() < deadline:
    if stored() >= want:
        os.kill(server, signal.SIGSTOP)
        print('late' if manifests() > had else 'early')
        sys.exit(0)
    time.sleep(0.002)
sys.exit('the server stored nothing')
EOP
}

# proc_stacks PID: what each thread of PID waits on in the kernel, for a
# process that does not go away.
proc_stacks() {
	local t
	for t in /proc/"$1"/task/*; do
		echo "thread ${t##*/} ($(cat "$t/comm" 2>/dev/null)): state $(awk '{ print $3 }' "$t/stat" 2>/dev/null), wchan $(cat "$t/wchan" 2>/dev/null)"
		sed 's/^/    /' "$t/stack" 2>/dev/null
	done
}

# Is no flusher holding the flusher lock of a cache?
flusher_lock_free() {
	[ ! -e "$1/flusher.lock" ] || flock -n "$1/flusher.lock" true
}

# stop_flusher CACHE: kills (-9) the flusher of a cache, found through the
# pid it writes into its lock, and waits until the lock is free.
stop_flusher() {
	local cache="$1" pid
	[ -e "$cache/flusher.lock" ] || return 0
	pid=$(tr -dc 0-9 <"$cache/flusher.lock" 2>/dev/null)
	# only if that process does hold this lock open (pids are reused)
	if [ -n "$pid" ] && ls -l "/proc/$pid/fd" 2>/dev/null | grep -q -- "-> $cache/flusher.lock\$"; then
		kill -9 "$pid" 2>/dev/null
	fi
	wait_for "$WAIT" flusher_lock_free "$cache" || {
		echo "the flusher $pid of $cache does not go away:" >&2
		[ -z "$pid" ] || proc_stacks "$pid" >&2
		return 1
	}
}

# Bytes of segment files in a server's store (apparent sizes).
segment_bytes() {
	local d="$T/srv$1/segments" total=0 s
	[ -d "$d" ] || {
		echo 0
		return
	}
	for s in $(find "$d" -name '*.seg' -printf '%s\n'); do
		total=$((total + s))
	done
	echo "$total"
}

# Sum of segment_bytes over the servers started.
total_segment_bytes() {
	local i dirs=()
	for ((i = 0; i < NSERVERS; i++)); do
		[ ! -d "$T/srv$i/segments" ] || dirs+=("$T/srv$i/segments")
	done
	[ ${#dirs[@]} -gt 0 ] || {
		echo 0
		return
	}
	find "${dirs[@]}" -name '*.seg' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'
}

# Has the flusher of a cache ended its pass over the queue with nothing left
# (what it does after shipping, eviction included, is done)?
flusher_idle() {
	grep -qx 'activity idle' "$1/flusher.state" 2>/dev/null
}

# Has a cache nothing left to ship: its queue empty, and no pending commit
# (a large file's close packs it in the background, and queues it then)?
queue_empty() {
	[ -z "$(ls -A "$1/queue" 2>/dev/null)" ] && [ -z "$(find "$1/tmp" -name '*.commit' 2>/dev/null)" ]
}

# random_file FILE BYTES
random_file() {
	head -c "$2" /dev/urandom >"$1"
}

# mutate SRC DST: a copy of SRC with a few 64 KiB-aligned regions of fresh
# random bytes (about a quarter of the chunks change), the rest unchanged.
mutate() {
	local src="$1" dst="$2" size chunks k n
	cp "$src" "$dst"
	size=$(stat -c %s "$src")
	chunks=$(((size + 65535) / 65536))
	n=$((chunks / 4 + 1))
	for ((k = 0; k < n; k++)); do
		dd if=/dev/urandom of="$dst" bs=65536 count=1 seek=$((RANDOM % chunks)) \
			conv=notrunc status=none
	done
	# dd may have written a whole chunk past a partial tail
	truncate -s "$size" "$dst"
}

# ship_file SIZE: writes $CKPT/f (a copy of $REF/f, SIZE random bytes) and
# flushes it to the servers of $POLICY; then drops the cache, so that what
# follows reads from the servers.
ship_file() {
	random_file "$REF/f" "$1"
	shim cp "$REF/f" "$CKPT/f"
	run "$STAGEHAND" flush --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
}

# restore_to POLICY VERSION DIR PATH: restores one version below DIR.
restore_to() {
	"$STAGEHAND" restore --policy "$1" --version "$2" --to "$3" "$4"
}

# listen_notify ADDRESS: a service manager's end of the notify protocol at
# ADDRESS (a path, or @name for an abstract socket), in the background,
# appending each datagram to $T/notify, then a line "--".
listen_notify() {
	rm -f "$T/notify"
	"$PYTHON" - "$1" "$T/notify" "$WAIT" <<'EOP' &
import socket, sys
addr, out, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
open(out + ".bound", "w").close()
s.settimeout(wait)
try:
    while True:
        msg = s.recv(4096).decode()
        with open(out, "a") as f:
            f.write(msg + "\n--\n")
        if "STOPPING=1" in msg:
            break
except socket.timeout:
    pass
EOP
	track $!
	wait_for "$WAIT" test -e "$T/notify.bound"
}
