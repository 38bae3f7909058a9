#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Power-cut tests, inside the guest of scripts/rdma-vm.sh (as root, with the
# kernel's dm-log-writes and dm-snapshot): for each workload and file system,
# records the workload's writes to a device below the file system with
# dm-log-writes, then replays the log up to each flush (FLUSH or FUA entry,
# the points a power cut may leave on the disk), mounts that state through
# a throw-away snapshot (the journal replays) and checks stagehand's
# invariants there. Prints one line per workload and file system:
#   crash: WORKLOAD FS: N marks checked, V violations
# with each violation above it, and exits 1 when there was any.
#
#   tests/crash/guest.sh [OPTIONS] [WORKLOAD...]
#
#   --build DIR    the build directory (default $STAGEHAND_BUILD, else
#                  <repo>/build)
#   --fs LIST      file systems, comma-separated (default ext4,xfs)
#   --marks N      check an evenly spread sample of N flushes of each log
#                  (default 12; the last flush is always among them)
#   --full         check every flush
#   --versions N   versions each workload writes (default 48, 96 for
#                  shim-async, which flushes less, 24 for server, which
#                  flushes more: more than 200 flushes each, on either file
#                  system)
#   --keep-logs    keep the logs and images (in $TMPDIR/crash.*) to look into
#   WORKLOAD[:FS]  shim-local, shim-async, flusher, server, and
#                  disk-errors: tests/crash/disk-errors.sh, failing disks
#                  (default: all); with :FS, on that file system alone
#
# The workloads:
#   shim-local   the shim writes successive versions of a file with
#                durability = local into a cache on the logged file system:
#                through the fast path, through the shadow, and large ones
#                through the shadow as pending commits; a mark "vN" once the
#                close of version N returned;
#   shim-async   the same with durability = async; a mark "vN" once the
#                close of version N returned, which promises nothing durable:
#                only that a power cut loses the newest versions, never an
#                older one while a newer one stays;
#   flusher      shim-local's cache, with a [cluster] of one server whose
#                store is on the same file system (a node and its server
#                losing power together), within a capacity that makes the
#                flusher evict shipped versions; 6 versions kept, each 1 MiB;
#                a mark "vN" once `stagehand flush --wait` said version N was
#                replicated;
#   server       a staging server with its store on the logged file system
#                stores 1 MiB versions as a flusher ships them (the cache
#                elsewhere, not logged), retires all but the newest 3 and
#                collects and compacts its 1 MiB segments; a mark "vN" once
#                `stagehand flush --wait` said version N was replicated.
#
# The invariants, at every mark checked (N: the newest "vN" before it):
#   * the versions kept up to N restore byte for byte, from the cache or
#     from the restarted server; with async, only the newest versions may
#     be missing: those present are the newest ones written, without a gap;
#   * no restore, and no read of the file through the shim, returns bytes
#     that differ from the version they claim to be (pattern check);
#   * the cache (or the server) takes new versions afterwards without a
#     human; the cache's usage count then matches its packs on disk.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
	sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}
die() {
	echo "crash: $*" >&2
	exit 2
}

build="${STAGEHAND_BUILD:-$repo/build}"
fs_list=ext4,xfs
marks=12
versions_asked=""
keep_logs=0
while [ $# -gt 0 ]; do
	case "$1" in
	--build | --fs | --marks | --versions)
		[ $# -ge 2 ] || die "$1 needs a value"
		case "$1" in
		--build) build=$2 ;;
		--fs) fs_list=$2 ;;
		--marks) marks=$2 ;;
		--versions) versions_asked=$2 ;;
		esac
		shift 2
		;;
	--full) marks=0; shift ;;
	--keep-logs) keep_logs=1; shift ;;
	-h | --help) usage 0 ;;
	-*) echo "crash: unknown option $1" >&2; usage 2 ;;
	*) break ;;
	esac
done
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(shim-local shim-async flusher server disk-errors)
[[ "$marks" =~ ^[0-9]+$ ]] || die "--marks must be a whole number"
[[ "$versions_asked" =~ ^[0-9]*$ ]] && [ "${versions_asked:-1}" -ge 1 ] ||
	die "--versions must be 1 or more"
valid_fs() {
	case "$1" in ext4 | xfs) ;; *) die "unknown file system '$1' (ext4, xfs)" ;; esac
}
for w in "${workloads[@]}"; do
	case "${w%%:*}" in
	shim-local | shim-async | flusher | server) [ "$w" = "${w%%:*}" ] || valid_fs "${w#*:}" ;;
	disk-errors) [ "$w" = disk-errors ] || die "disk-errors takes no file system" ;;
	*) die "unknown workload '$w'" ;;
	esac
done
IFS=, read -r -a filesystems <<<"$fs_list"
for fs in "${filesystems[@]}"; do valid_fs "$fs"; done
[ "$(id -u)" -eq 0 ] || die "needs root: it makes devices (tests/crash/run.sh boots a guest)"
build="$(cd "$build" && pwd)" || die "no build directory '$build'"
STAGEHAND="$build/tools/stagehand"
SERVER="$build/server/stagehand-server"
SHIM="$build/preload/libstagehand.so"
PATTERN="$build/tests/progs/pattern"
REPLAY="$build/tests/progs/replay-log"
for f in "$STAGEHAND" "$SERVER" "$SHIM" "$PATTERN" "$REPLAY"; do
	[ -e "$f" ] || die "no $f (build first, or --build)"
done
for m in dm-log-writes dm-snapshot loop xfs; do
	modprobe "$m" 2>/dev/null || [ "$m" = xfs ] || die "the kernel $(uname -r) cannot load $m"
done
for c in dmsetup losetup mkfs.ext4 mkfs.xfs; do
	command -v "$c" >/dev/null || die "$c is not installed (scripts/deps.sh --tests)"
done

# The file system under test: 512 MiB (XFS wants 300 MiB at least).
FS_BYTES=$((512 << 20))
SECTORS=$((FS_BYTES / 512))
LW=stagehand-crash-lw
SNAP=stagehand-crash-snap

mnt="" cache="" port="" placeholder=""
loops=()
loop_new() { # VAR FILE SIZE: sets VAR to a loop device over a new sparse FILE
	rm -f "$2"
	truncate -s "$3" "$2"
	local dev
	dev=$(losetup -f --show "$2")
	loops+=("$dev")
	printf -v "$1" %s "$dev"
}
teardown() {
	server_stop
	[ -z "$mnt" ] || umount "$mnt" 2>/dev/null || true
	[ -z "$placeholder" ] || umount "$placeholder" 2>/dev/null || true
	dmsetup remove "$SNAP" 2>/dev/null || true
	dmsetup remove "$LW" 2>/dev/null || true
	local d
	for d in "${loops[@]}"; do losetup -d "$d" 2>/dev/null || true; done
	loops=()
}
trap teardown EXIT

mkfs_fs() { # FS DEV
	case "$1" in
	# No lazy initialisation: it would write in the background during the
	# workload. No discard: nothing to discard on a fresh device.
	ext4) mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$2" ;;
	xfs) mkfs.xfs -q -f -K "$2" ;;
	esac
}
mount_fs() { # FS DEV DIR
	case "$1" in
	ext4) mount -t ext4 "$2" "$3" ;;
	# nouuid: the replay device holds the same file system.
	xfs) mount -t xfs -o nouuid "$2" "$3" ;;
	esac
}

lw_mark() {
	dmsetup message "$LW" 0 mark "$1"
}

# write_policy FILE CACHE DURABILITY [PORT]: the rule over $ckpt, with the
# server listening on PORT as its [cluster].
write_policy() {
	{
		printf '[cache]\ndir = %s\n' "$2"
		[ -z "$capacity" ] || printf 'capacity = %s\n' "$capacity"
		[ -z "${4:-}" ] ||
			printf '[cluster]\nservers = 127.0.0.1:%s\nreplicas = 1\nsecret_file = %s\ntransport = tcp\ntimeout = 600\n' \
				"$4" "$work/secret"
		printf '[path %s/**]\nchunk_size = 64K\nchunking = fixed\nkeep = %s\ndurability = %s\n' \
			"${ckpt%/*}" "$keep" "$3"
	} >"$1"
}

# server_start STORE: a server over STORE on 127.0.0.1, port $port (a free
# one, set, the first time); its log in $work/server.log. The same port
# each time: the cache names the servers a version was placed on.
server_pid=""
server_start() {
	rm -f "$work/port"
	"$SERVER" --listen "127.0.0.1:${port:-0}" --store "$1" --secret-file "$work/secret" \
		--port-file "$work/port" --gc-interval 1 --segment-size 1M --scrub-rate 0 \
		</dev/null >/dev/null 2>>"$work/server.log" &
	server_pid=$!
	local deadline=$((SECONDS + 300))
	until [ -s "$work/port" ]; do
		if ! kill -0 "$server_pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
			server_pid=""
			return 1
		fi
		sleep 0.05
	done
	port=$(cat "$work/port")
}
server_stop() {
	[ -n "$server_pid" ] || return 0
	kill "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
}

# Version v of the shim workloads: the fast path, the shadow, and every
# eighth one a large file through the shadow (a pending commit with
# durability = local).
version_args() { # V: prints MODE SIZE
	# The flusher's capacity counts 1 MiB versions; the server syncs each
	# chunk it takes (a flush per 64 KiB: large files make long logs).
	if [ "$workload" = flusher ] || [ "$workload" = server ]; then
		[ $(($1 % 2)) = 0 ] && echo "shadow $((1 << 20))" || echo "seq $((1 << 20))"
		return
	fi
	case $(($1 % 8)) in
	0) echo "shadow $((33 << 20))" ;;
	1 | 5) echo "seq $((1 << 20))" ;;
	3 | 7) echo "seq $((256 << 10))" ;;
	*) echo "shadow $((1 << 20))" ;;
	esac
}

shim_write() { # V [MODE SIZE]
	local mode size
	if [ $# -ge 3 ]; then
		mode=$2 size=$3
	else
		read -r mode size <<<"$(version_args "$1")"
	fi
	STAGEHAND_POLICY="$policy" LD_PRELOAD="$SHIM" "$PATTERN" write "$mode" "$ckpt" "$1" "$size"
}

# Stops the flusher of $cache (the shim starts one with a [cluster]): found
# through the pid it writes into its lock, waited for until the lock is free.
stop_flusher() {
	local pid deadline=$((SECONDS + 300))
	[ -e "$cache/flusher.lock" ] || return 0
	pid=$(tr -dc 0-9 <"$cache/flusher.lock" 2>/dev/null)
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	until flock -n "$cache/flusher.lock" true; do
		[ "$SECONDS" -lt "$deadline" ] || die "the flusher $pid of $cache does not stop"
		sleep 0.05
	done
}

# Waits until the cache's packs are at most 80% of its capacity (5 MiB).
wait_evicted() {
	local deadline=$((SECONDS + 300))
	until [ "$(od -An -tu8 -N8 "$cache/usage" | tr -d ' ')" -le $((4 << 20)) ]; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

# The versions, each marked once its close returned (shim-*) or once its
# server held it (flusher, server).
workload_versions() {
	local v
	for ((v = 1; v <= versions; v++)); do
		shim_write "$v" || return 1
		if [ -n "$port" ]; then
			STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 >/dev/null ||
				return 1
		fi
		lw_mark "v$v"
		# Past 80% of the capacity, the flusher evicts shipped versions
		# down to 60%: the next version needs that room.
		[ "$workload" != flusher ] || wait_evicted || return 1
	done
}

violations=0
violation() {
	echo >&2 "# violation at entry $entry ($workload $fs, $closed versions closed): $*"
	violations=$((violations + 1))
}

# Restores every version stagehand lists and checks its bytes; prints the
# pattern versions found, oldest first. Any failure is a violation: call it
# with its output redirected, not in a subshell, so that they are counted.
restored_versions() {
	local out n k
	out=$(STAGEHAND_POLICY="$policy" "$STAGEHAND" ls "$ckpt" 2>&1) || {
		# Nothing staged yet is the only acceptable failure (with async,
		# whatever was closed).
		[ "$closed" -eq 0 ] ||
			{ [ "$workload" = shim-async ] && [[ "$out" == *"nothing staged"* ]]; } ||
			violation "stagehand ls failed: $out"
		return 0
	}
	for n in $(awk 'NR > 1 { print $2 }' <<<"$out"); do
		rm -rf "$work/out"
		if ! STAGEHAND_POLICY="$policy" "$STAGEHAND" restore --version "$n" \
			--to "$work/out" "$ckpt" >"$work/restore.log" 2>&1; then
			violation "version $n is listed but does not restore: $(tail -n 3 "$work/restore.log")"
			continue
		fi
		if ! k=$("$PATTERN" check "$work/out$ckpt" 2>&1); then
			violation "version $n restores wrong bytes: $k"
			continue
		fi
		echo "$k"
	done
}

# The versions restored, oldest first, against the $closed written:
# consecutive, the newest kept; with local (or a server's acknowledgement)
# every one of the newest kept up to $closed too. Sets $newest, $count.
check_versions() { # local|async
	local -a ks
	restored_versions >"$work/ks"
	mapfile -t ks <"$work/ks"
	local i want
	count=${#ks[@]} newest=0
	[ "$count" -eq 0 ] || newest=${ks[count - 1]}
	# In order and without a gap: never an older version lost while a
	# newer one stays.
	for ((i = 1; i < count; i++)); do
		[ "${ks[i]}" -eq $((ks[i - 1] + 1)) ] ||
			violation "versions ${ks[*]}: not consecutive"
	done
	# One more than keep: a crash between a publish and its pruning.
	[ "$count" -le $((keep + 1)) ] || violation "$count versions kept, keep = $keep"
	[ "$newest" -le $((closed + 1)) ] || violation "version $newest is there, only $closed were written"
	if [ "$1" = local ]; then
		[ "$newest" -ge "$closed" ] ||
			violation "version $closed was closed, the newest restored is $newest"
		want=$((closed < keep ? closed : keep))
		[ "$count" -ge "$want" ] ||
			violation "versions ${ks[*]} restore, $want of those up to $closed should"
	else
		want=$((newest < keep ? newest : keep))
		[ "$count" -ge "$want" ] ||
			violation "versions ${ks[*]}: an older one of the newest $keep is missing"
	fi
}

# New versions after recovery (enough for one to prune an old one, whose
# collection sets the cache's usage count): the newest restores. With a
# server, each is shipped to it first.
check_goes_on() {
	local v=$((newest + 1)) last=$((newest + 1 + (count < keep ? keep - count : 0)))
	# The application's directory, made again where the power cut took
	# its creation: the application would.
	mkdir -p "${ckpt%/*}"
	for ((; v <= last; v++)); do
		shim_write "$v" seq $((64 << 10)) 2>"$work/write.log" ||
			violation "a new version after recovery failed: $(tail -n 3 "$work/write.log")"
		if [ -n "$port" ] &&
			! STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 \
				>"$work/flush.log" 2>&1; then
			violation "a new version after recovery was not shipped: $(tail -n 3 "$work/flush.log")"
		fi
	done
	if [ "$workload" = server ]; then
		stop_flusher
		rm -rf "$cache"
	fi
	local closed=$last
	check_versions local
	[ "$newest" -eq "$last" ] || violation "after recovery, version $last written, $newest restores"
}

check_shim() { # local|async
	if [ "$workload" = flusher ]; then
		if ! server_start "$mnt/store"; then
			violation "the server does not start: $(tail -n 3 "$work/server.log")"
			return
		fi
		write_policy "$policy" "$cache" local "$port"
		# What was not shipped when the power went is shipped now.
		STAGEHAND_POLICY="$policy" "$STAGEHAND" flush --wait --timeout 600 >"$work/flush.log" 2>&1 ||
			violation "the flusher does not ship after recovery: $(tail -n 3 "$work/flush.log")"
	fi
	check_versions "$1"
	# A read through the shim sees the newest version, whole.
	if [ "$count" -gt 0 ]; then
		local got
		got=$(STAGEHAND_POLICY="$policy" LD_PRELOAD="$SHIM" "$PATTERN" check "$ckpt" 2>&1) ||
			violation "reading the file through the shim: $got"
		[ "$got" = "$newest" ] || violation "the shim reads version $got, the newest is $newest"
	fi
	check_goes_on
	local usage packs
	# (the flusher's evictions collect too)
	stop_flusher
	usage=$(od -An -tu8 -N8 "$cache/usage" | tr -d ' ')
	packs=$(find "$cache/packs" -name '*.pack' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
	[ "$usage" = "$packs" ] || violation "usage says $usage bytes, the packs hold $packs"
	server_stop
}

# The server restarts over the store as the power cut left it and serves
# every acknowledged version to a node with an empty cache.
check_server() {
	if ! server_start "$mnt/store"; then
		violation "the server does not start: $(tail -n 3 "$work/server.log")"
		return
	fi
	rm -rf "$cache"
	write_policy "$policy" "$cache" local "$port"
	check_versions local
	check_goes_on
	server_stop
}

# Records WORKLOAD on FS, then checks the sampled flushes; prints the line.
run_one() {
	workload=$1 fs=$2
	work="$TMPDIR/crash.$workload.$fs"
	mnt="/run/crash-$workload-$fs"
	rm -rf "$work"
	mkdir -p "$work" "$mnt"
	local data log replay cow t0=$SECONDS
	loop_new data "$work/data.img" "$FS_BYTES"
	loop_new log "$work/log.img" 8G
	loop_new replay "$work/replay.img" "$FS_BYTES"
	loop_new cow "$work/cow.img" "$FS_BYTES"
	dmsetup create "$LW" --table "0 $SECTORS log-writes $data $log"
	mkfs_fs "$fs" "/dev/mapper/$LW" >/dev/null
	lw_mark mkfs
	mount_fs "$fs" "/dev/mapper/$LW" "$mnt"
	policy="$work/policy.conf" port="" capacity="" keep=3
	local durability=local
	[ "$workload" != shim-async ] || durability=async
	versions=${versions_asked:-48}
	if [ -z "$versions_asked" ]; then
		case "$workload" in
		shim-async) versions=96 ;;
		server) versions=24 ;;
		esac
	fi
	head -c 32 /dev/urandom | base64 >"$work/secret"
	chmod 600 "$work/secret"
	if [ "$workload" = flusher ]; then
		ckpt="$mnt/data/ckpt" cache="$mnt/cache" capacity=5M keep=6
		mkdir -p "$mnt/store"
		server_start "$mnt/store" || die "the server does not start: $(cat "$work/server.log")"
		write_policy "$policy" "$cache" local "$port"
	elif [ "$workload" = server ]; then
		# The store on the logged file system, the node's cache beside.
		ckpt="$work/data/ckpt" cache="$work/cache"
		mkdir -p "$mnt/store"
		server_start "$mnt/store" || die "the server does not start: $(cat "$work/server.log")"
		write_policy "$policy" "$cache" local "$port"
	else
		ckpt="$mnt/data/ckpt" cache="$mnt/cache"
		write_policy "$policy" "$cache" "$durability"
	fi
	mkdir -p "${ckpt%/*}"
	workload_versions || die "the $workload workload failed on $fs"
	stop_flusher
	server_stop
	# The flusher, a background commit may still hold the file system.
	local deadline=$((SECONDS + 300))
	until umount "$mnt" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || die "$mnt stays busy after the workload: $(fuser -vm "$mnt" 2>&1)"
		sleep 0.1
	done
	dmsetup remove "$LW" || die "cannot remove $LW"
	# A power cut reboots, and stagehand tells what a new boot must count
	# again by the boot's id and the mount's, which kernels before 6.8
	# give again to the next mount once one is unmounted: the workload's,
	# kept taken here, so that the checks' mounts are new ones, as after
	# the reboot that cannot be made here.
	placeholder="$work/placeholder"
	mkdir -p "$placeholder"
	mount -t tmpfs none "$placeholder"
	"$REPLAY" list "$log" >"$work/entries"
	# The flushes after mkfs, and the user marks with their entries.
	local -a flushes picks
	mapfile -t flushes < <(awk '$3 == "M" && $6 == "mkfs" { on = 1 }
		on && $3 ~ /[FU]/ { print $1 }' "$work/entries")
	local total=${#flushes[@]} n=${#flushes[@]} i
	[ "$total" -gt 0 ] || die "no flush logged after mkfs on $fs"
	if [ "$marks" -gt 0 ] && [ "$marks" -lt "$total" ]; then
		n=$marks
		for ((i = 1; i <= n; i++)); do
			picks+=("${flushes[$(((total * i + n - 1) / n - 1))]}")
		done
	else
		picks=("${flushes[@]}")
	fi
	# Regression cases, always checked: the first flush after the first
	# version closed (a new path's entry whose `path` file had not reached
	# the disk: the whole entry was refused).
	local regress
	regress=$(awk '$3 == "M" && $6 == "v1" { on = 1 } on && $3 ~ /[FU]/ { print $1; exit }' \
		"$work/entries")
	mapfile -t picks < <(printf '%s\n' "${picks[@]}" $regress | sort -nu)
	echo "# $workload $fs: $(wc -l <"$work/entries") entries, $total flushes," \
		"recorded in $((SECONDS - t0))s; checking ${#picks[@]}"
	local from=0 off=0 next_off
	violations=0
	for entry in "${picks[@]}"; do
		# Apply everything up to and including the flush entry.
		next_off=$(awk -v e="$((entry + 1))" '$1 == e { print $2 }' "$work/entries")
		"$REPLAY" replay "$log" "$replay" "$from" "$off" "$((entry + 1))"
		[ -n "$next_off" ] || die "entry $entry is the last of the log: nothing follows it"
		from=$((entry + 1)) off=$next_off
		closed=$(awk -v e="$entry" '$1 < e && $3 == "M" && $6 ~ /^v[0-9]+$/ { d = substr($6, 2) }
			END { print d + 0 }' "$work/entries")
		dmsetup create "$SNAP" --table "0 $SECTORS snapshot $replay $cow N 8"
		if ! mount_fs "$fs" "/dev/mapper/$SNAP" "$mnt" 2>"$work/mount.log"; then
			violation "the file system does not mount: $(cat "$work/mount.log")"
		else
			case "$workload" in
			server) check_server ;;
			*) check_shim "$durability" ;;
			esac
			# The flusher started by the checks (server) goes with
			# its cache; a background commit may hold the mount.
			stop_flusher
			local deadline=$((SECONDS + 300))
			until umount "$mnt" 2>/dev/null; do
				[ "$SECONDS" -lt "$deadline" ] ||
					die "$mnt stays busy after the checks: $(fuser -vm "$mnt" 2>&1)"
				sleep 0.1
			done
		fi
		dmsetup remove "$SNAP"
	done
	echo "crash: $workload $fs: ${#picks[@]} marks checked, $violations violations" \
		"($((SECONDS - t0))s)"
	teardown
	[ "$keep_logs" = 1 ] || rm -rf "$work"
	[ "$violations" -eq 0 ]
}

: "${TMPDIR:=/tmp}"
status=0
for workload in "${workloads[@]}"; do
	if [ "$workload" = disk-errors ]; then
		"$repo/tests/crash/disk-errors.sh" --build "$build" || status=1
		continue
	fi
	fss=("${filesystems[@]}")
	[ "$workload" = "${workload%%:*}" ] || fss=("${workload#*:}")
	for fs in "${fss[@]}"; do
		run_one "${workload%%:*}" "$fs" || status=1
	done
done
exit "$status"
