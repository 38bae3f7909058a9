# SPDX-License-Identifier: MIT
# Helpers of cluster.bats: real staging servers on 127.0.0.1 (port 0 and a
# port file), node caches with a [cluster] section, flushers, and bounded
# waits. cluster_teardown kills what a test started by pid (servers, tracked
# background commands, the flusher of every cache named by a policy), then
# fails the test if any process still names its directory.

SERVER="$STAGEHAND_BUILD/server/stagehand-server"
FLUSHER="$STAGEHAND_BUILD/flusher/stagehand-flusher"
WRITER="$PROGS/writer"

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

cluster_setup() {
	common_setup
	[ -x "$SERVER" ] && [ -x "$FLUSHER" ] || {
		echo "stagehand-server or stagehand-flusher not built in $STAGEHAND_BUILD" >&2
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
	USERDIR="" NETNS="" HOSTVETH=""
	unset STAGEHAND_REPLICATE_TIMEOUT STAGEHAND_FLUSHER
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
	local pid cache status=0
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
		if ! wait_for 10 eval "! pgrep -f -- '$dir' >/dev/null"; then
			echo "left running by the test:" >&2
			ps -o pid,args -p "$(pgrep -d, -f -- "$dir")" >&2
			status=1
		fi
	done
	[ -n "${USERDIR:-}" ] && rm -rf "$USERDIR"
	[ -n "${HOSTVETH:-}" ] && ip link del "$HOSTVETH" 2>/dev/null
	[ -n "${NETNS:-}" ] && ip netns del "$NETNS" 2>/dev/null
	return $status
}

# start_server I [OPTIONS...]: starts server I (0, 1, ...) with its store in
# $T/srvI, its log in $T/srvI.log; on the port it had before if it ran
# already, else a free one. Sets SRV_PID[I], SRV_PORT[I], SRV_HOST[I].
start_server() {
	local i="$1" port host ns
	shift
	host="${SRV_HOST[$i]:-127.0.0.1}"
	port="${SRV_PORT[$i]:-0}"
	ns="${SRV_NETNS[$i]:-}"
	rm -f "$T/srv$i.port"
	if [ -n "$ns" ]; then
		ip netns exec "$ns" "$SERVER" --listen "$host:$port" --store "$T/srv$i" \
			--secret-file "$SECRET" --port-file "$T/srv$i.port" "$@" \
			2>>"$T/srv$i.log" </dev/null >/dev/null 3>&- &
	else
		"$SERVER" --listen "$host:$port" --store "$T/srv$i" --secret-file "$SECRET" \
			--port-file "$T/srv$i.port" "$@" 2>>"$T/srv$i.log" </dev/null >/dev/null 3>&- &
	fi
	SRV_PID[$i]=$!
	# no "Killed" notices from bash when a test kills it
	disown "${SRV_PID[$i]}"
	SRV_HOST[$i]="$host"
	[ "$i" -lt "$NSERVERS" ] || NSERVERS=$((i + 1))
	wait_for 10 test -s "$T/srv$i.port" || {
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
	wait_for 10 pid_gone "${SRV_PID[$i]}" || return 1
	SRV_PID[$i]=""
}

# "127.0.0.1:p0, 127.0.0.1:p1, ..." for the servers started.
server_list() {
	local i out=""
	for ((i = 0; i < NSERVERS; i++)); do
		out+="${out:+, }${SRV_HOST[$i]}:${SRV_PORT[$i]}"
	done
	echo "$out"
}

# cluster_policy FILE CACHE GLOB [KEY=VALUE...]: a policy whose [cluster] lists
# every server started; KEY=VALUE pairs starting with "cluster." go to
# [cluster] (replicas, timeout, secret_file), the others to the path rule.
cluster_policy() {
	local file="$1" cache="$2" glob="$3" kv replicas=2 timeout=10 secret="$SECRET"
	shift 3
	CACHES+=("$cache")
	local rule="chunk_size = 64K
keep = 100
durability = local"
	for kv in "$@"; do
		case "$kv" in
		cluster.replicas=*) replicas="${kv#*=}" ;;
		cluster.timeout=*) timeout="${kv#*=}" ;;
		cluster.secret_file=*) secret="${kv#*=}" ;;
		*) rule="$(printf '%s\n' "$rule" | grep -v "^${kv%%=*} =")
${kv%%=*} = ${kv#*=}" ;;
		esac
	done
	cat >"$file" <<EOP
[cache]
dir = $cache
[cluster]
servers = $(server_list)
replicas = $replicas
secret_file = $secret
timeout = $timeout
[path $glob]
$rule
EOP
}

# Makes $POLICY the default one, over $CACHE and $CKPT/**.
cluster_default_policy() {
	cluster_policy "$POLICY" "$CACHE" "$CKPT/**" "$@"
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
	wait_for 10 flusher_lock_free "$cache"
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
	local i total=0
	for ((i = 0; i < NSERVERS; i++)); do
		total=$((total + $(segment_bytes "$i")))
	done
	echo "$total"
}

# Is the queue of a cache empty?
queue_empty() {
	[ -z "$(ls -A "$1/queue" 2>/dev/null)" ]
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

# restore_to POLICY VERSION DIR PATH: restores one version below DIR.
restore_to() {
	"$STAGEHAND" restore --policy "$1" --version "$2" --to "$3" "$4"
}
