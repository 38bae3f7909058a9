#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a command as root inside a throw-away QEMU guest that boots Debian's
# own kernel (linux-image-amd64 ships rdma_rxe) over the host's file system,
# with two soft-RoCE devices up, and returns the command's exit status: how
# stagehand's RDMA transport is tested on machines without RDMA hardware,
# and its power cuts (tests/crash: Debian's device-mapper modules).
#
#   scripts/rdma-vm.sh [OPTIONS] [--] COMMAND [ARGS...]
#
# Inside the guest:
#   * the host's root file system, read-only (9p, with tmpfs overlays): every
#     host binary, library and kernel module is there; the current directory
#     is the same and shared read-write unless --no-cwd-rw;
#   * a veth pair: veth0 (10.0.0.1) with rxe0, veth1 (10.0.0.2 and 10.0.0.3)
#     with rxe1. Policy routing makes traffic between these addresses cross
#     the veth "wire" (the kernel would take lo, which rxe cannot use);
#     10.0.0.3 is a second address of rxe1, for tests that cut one peer off
#     (drop its packets) without touching the others;
#   * modules veth rdma_rxe ib_uverbs rdma_ucm loaded, RLIMIT_MEMLOCK
#     unlimited (verbs pin memory);
#   * environment: RDMA_VM_GUEST=1 RXE_DEV0=rxe0 RXE_DEV1=rxe1
#     RXE_IP0=10.0.0.1 RXE_IP1=10.0.0.2 RXE_IP2=10.0.0.3 RXE_NETDEV0=veth0
#     RXE_NETDEV1=veth1 RXE_GID_INDEX=1 (the RoCEv2 IPv4 GID) and, with
#     --scratch, RDMA_VM_SCRATCH=/run/s and TMPDIR=/run/s: an empty ext4 file system
#     on a disk of its own (else an overlay of the host's /tmp, in memory).
#
# Options (each also settable through the environment variable shown):
#   --timeout SECS   RDMA_VM_TIMEOUT   bound on the whole run, boot included
#                                      (default 900)
#   --accel MODE     RDMA_VM_ACCEL     auto|kvm|tcg (default auto: KVM when it
#                                      can boot a stock kernel, else TCG, the
#                                      software emulation, 5-20x slower)
#   --mem SIZE       RDMA_VM_MEM       guest memory (default 2G)
#   --cpus N         RDMA_VM_CPUS      guest vCPUs (default: the host's)
#   --mtu N          RDMA_VM_MTU       veth MTU (default 1500: RoCE MTU 1024)
#   --scratch SIZE   RDMA_VM_SCRATCH_SIZE  attach a sparse disk of SIZE (e.g.
#                                      4G), formatted ext4 in the guest and
#                                      mounted on /run/s (TMPDIR)
#   --rwdir DIR      another host directory shared read-write (repeatable)
#   --no-cwd-rw      share the current directory read-only
#   --no-install     RDMA_VM_NO_INSTALL=1  never run apt-get or pip
#   --reason-file F  when exiting 98, write the reason into F too
#   --install-only   install what is missing and exit
#   --verbose        RDMA_VM_VERBOSE=1  show the guest's kernel console
#   RDMA_VM_KERNEL   the guest kernel (default: the newest /boot/vmlinuz-*
#                    whose /lib/modules has rdma_rxe)
#   RDMA_VM_CACHE    the virtme-ng venv and the run directories (default
#                    ${XDG_CACHE_HOME:-$HOME/.cache}/stagehand-rdma-vm)
#
# Exit status: the command's own; 2 usage; 98 this host cannot run the guest
# (one line "rdma-vm: cannot run the guest: REASON" on stderr: no Debian
# packages and no way to install them, no kernel with rdma_rxe, KVM demanded
# but unusable, the guest never started its command); 97 the guest came up
# but setting up rxe failed; 124 timed out after the command started; 125
# the guest stopped before the command finished; 130 interrupted.
#
# Needs a Debian 12 x86_64 host; as root (or with sudo) it installs what is
# missing: the Debian packages of APT_PKGS, and virtme-ng in a venv (PyPI).
set -euo pipefail

VNG_VERSION="${RDMA_VM_VNG_VERSION:-1.42}"
APT_PKGS=(linux-image-amd64 qemu-system-x86 ibverbs-providers ibverbs-utils
	rdma-core iproute2 kmod busybox-static e2fsprogs python3 python3-venv
	procps coreutils dmsetup xfsprogs)
UNAVAILABLE=98
SELF="$(readlink -f "${BASH_SOURCE[0]}")"

log() { printf 'rdma-vm: %s\n' "$*" >&2; }
die() {
	local rc=$1
	shift
	log "ERROR: $*"
	exit "$rc"
}
# The one line a caller (tests/rdma/run.sh) turns into a skip.
unavailable() {
	log "cannot run the guest: $*"
	[ -z "${REASON_FILE:-}" ] || printf '%s\n' "$*" >"$REASON_FILE"
	exit "$UNAVAILABLE"
}

# ---------------------------------------------------------------------------
# Guest side: this script runs itself inside the guest as
# "rdma-vm.sh __guest RUNDIR"; RUNDIR is shared read-write with the host,
# which reads back what happened from the files written there.
# ---------------------------------------------------------------------------
guest_main() {
	local rundir=$1
	export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
	local t0 up0 mtu cwd scratch
	t0=$(date +%s.%N)
	up0=$(cut -d' ' -f1 /proc/uptime)
	mtu=$(cat "$rundir/mtu")
	cwd=$(cat "$rundir/cwd")
	scratch=$(cat "$rundir/scratch")
	: >"$rundir/booted"

	# A missing module is this kernel's limit; anything else failing below
	# is a fault of the setup, reported as such (97), not as a skip.
	gunavailable() {
		printf '%s\n' "$*" >"$rundir/unavailable"
		log "cannot run the guest: $*"
		exit "$UNAVAILABLE"
	}
	gfail() {
		log "guest setup failed: $*"
		exit 97
	}
	trap 'gfail "command at line $LINENO of $SELF failed"' ERR
	local m
	for m in veth rdma_rxe ib_uverbs rdma_ucm; do
		modprobe "$m" 2>/dev/null || gunavailable "the guest kernel $(uname -r) cannot load $m"
	done
	ip link set lo up
	ip link add veth0 type veth peer name veth1
	ip link set veth0 mtu "$mtu"
	ip link set veth1 mtu "$mtu"
	ip addr add 10.0.0.1/24 dev veth0
	ip addr add 10.0.0.2/24 dev veth1
	ip link set veth0 up
	ip link set veth1 up
	# The addresses are all local to this one namespace: by default the
	# kernel routes between them through lo, where rxe drops the packets.
	# Send locally generated traffic over the veth instead (to .2 and .3
	# from veth0, to .1 from veth1) and accept packets whose source is local.
	local k
	for k in all default veth0 veth1; do
		sysctl -qw "net.ipv4.conf.$k.accept_local=1" "net.ipv4.conf.$k.rp_filter=0"
	done
	ip rule add pref 100 lookup local
	ip rule del pref 0
	ip rule add pref 10 to 10.0.0.2 iif lo lookup 100
	ip rule add pref 11 to 10.0.0.1 iif lo lookup 101
	ip rule add pref 12 to 10.0.0.3 iif lo lookup 100
	ip route add 10.0.0.2 dev veth0 src 10.0.0.1 table 100
	ip route add 10.0.0.3 dev veth0 src 10.0.0.1 table 100
	ip route add 10.0.0.1 dev veth1 src 10.0.0.2 table 101
	rdma link add rxe0 type rxe netdev veth0
	rdma link add rxe1 type rxe netdev veth1
	# A generous deadline: under emulation on a busy host this takes a while.
	local d port ok=0 deadline=$((SECONDS + 600))
	while [ "$SECONDS" -lt "$deadline" ]; do
		ok=1
		for d in rxe0 rxe1; do
			port=/sys/class/infiniband/$d/ports/1
			grep -q ACTIVE "$port/state" 2>/dev/null || ok=0
			# GID 1 becomes the IPv4 one (0 is the link-local IPv6)
			[ -e "$port/gids/1" ] &&
				[ "$(cat "$port/gids/1")" != 0000:0000:0000:0000:0000:0000:0000:0000 ] || ok=0
		done
		[ "$ok" = 1 ] && break
		sleep 0.1
	done
	[ "$ok" = 1 ] || {
		rdma link show >&2
		gfail "rxe ports did not become ACTIVE with an IPv4 GID"
	}
	# Added once the GID of 10.0.0.2 holds index 1 (RXE_GID_INDEX).
	ip addr add 10.0.0.3/32 dev veth1
	[ -c /dev/infiniband/uverbs0 ] && [ -c /dev/infiniband/rdma_cm ] ||
		gfail "/dev/infiniband/uverbs0 or /dev/infiniband/rdma_cm missing"
	ulimit -l unlimited
	export RDMA_VM_GUEST=1 RXE_DEV0=rxe0 RXE_DEV1=rxe1 RXE_IP0=10.0.0.1 \
		RXE_IP1=10.0.0.2 RXE_IP2=10.0.0.3 RXE_NETDEV0=veth0 RXE_NETDEV1=veth1 \
		RXE_GID_INDEX=1
	if [ -n "$scratch" ]; then
		local blk dev=""
		for blk in /sys/block/*; do
			if [ "$(cat "$blk/serial" 2>/dev/null)" = "$scratch" ]; then
				dev=/dev/${blk##*/}
			fi
		done
		[ -n "$dev" ] || gfail "the scratch disk (serial $scratch) is not in /sys/block"
		# No journal: it would only cost time, the disk is thrown away.
		# TMPDIR, not /tmp: the checkout may live below the host's /tmp.
		# A short path: test paths end up in policy section names.
		mkfs.ext4 -q -F -E nodiscard -O ^has_journal "$dev"
		mkdir -p /run/s
		mount "$dev" /run/s
		chmod 1777 /run/s
		export RDMA_VM_SCRATCH=/run/s TMPDIR=/run/s
	fi
	local setup
	setup=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	log "guest $(uname -r): userspace ${up0}s after kernel start, then ${setup}s of setup;" \
		"rxe0=veth0/10.0.0.1 rxe1=veth1/10.0.0.2,10.0.0.3 mtu=$mtu${scratch:+ scratch=$RDMA_VM_SCRATCH}"
	cd "$cwd" || gfail "cannot cd to $cwd inside the guest"
	local -a argv
	mapfile -d '' argv <"$rundir/argv"
	trap - ERR
	: >"$rundir/started"
	local rc=0
	"${argv[@]}" || rc=$?
	echo "$rc" >"$rundir/status"
	exit "$rc"
}

if [ "${1:-}" = "__guest" ]; then
	guest_main "$2"
fi

# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------
usage() {
	sed -n '3,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

TIMEOUT="${RDMA_VM_TIMEOUT:-900}"
ACCEL="${RDMA_VM_ACCEL:-auto}"
MEM="${RDMA_VM_MEM:-2G}"
CPUS="${RDMA_VM_CPUS:-$(nproc)}"
MTU="${RDMA_VM_MTU:-1500}"
SCRATCH_SIZE="${RDMA_VM_SCRATCH_SIZE:-}"
CWD_RW=1
NO_INSTALL="${RDMA_VM_NO_INSTALL:-0}"
VERBOSE="${RDMA_VM_VERBOSE:-0}"
CACHE="${RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stagehand-rdma-vm}"
RWDIRS=()
REASON_FILE=""
INSTALL_ONLY=0

while [ $# -gt 0 ]; do
	case "$1" in
	--timeout | --accel | --mem | --cpus | --mtu | --scratch | --rwdir | --reason-file)
		[ $# -ge 2 ] || die 2 "$1 needs a value"
		case "$1" in
		--timeout) TIMEOUT=$2 ;;
		--accel) ACCEL=$2 ;;
		--mem) MEM=$2 ;;
		--cpus) CPUS=$2 ;;
		--mtu) MTU=$2 ;;
		--scratch) SCRATCH_SIZE=$2 ;;
		--rwdir) RWDIRS+=("$2") ;;
		--reason-file) REASON_FILE=$2 ;;
		esac
		shift 2
		;;
	--no-cwd-rw) CWD_RW=0; shift ;;
	--no-install) NO_INSTALL=1; shift ;;
	--install-only) INSTALL_ONLY=1; shift ;;
	--verbose) VERBOSE=1; shift ;;
	-h | --help) usage 0 ;;
	--) shift; break ;;
	-*) log "unknown option $1"; usage 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || [ "$INSTALL_ONLY" = 1 ] || {
	log "no command given"
	usage 2
}
case "$ACCEL" in auto | kvm | tcg) ;; *) die 2 "--accel must be auto, kvm or tcg" ;; esac
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die 2 "--timeout must be whole seconds"
[[ -z "$SCRATCH_SIZE" || "$SCRATCH_SIZE" =~ ^[0-9]+[KMG]?$ ]] ||
	die 2 "--scratch must be a size like 4G"

# sudo -n: a password prompt would hang an unattended run.
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo -n "$@"
	else
		return 1
	fi
}

install_prereqs() {
	[ "$(uname -m)" = x86_64 ] || unavailable "the guest is x86_64 and this host is $(uname -m)"
	command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
		unavailable "not a Debian host (no dpkg-query/apt-get): install ${APT_PKGS[*]} by hand"
	local -a missing=()
	local p
	for p in "${APT_PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$NO_INSTALL" = 1 ] && unavailable "missing packages (and --no-install): ${missing[*]}"
		as_root true 2>/dev/null ||
			unavailable "missing packages ${missing[*]}, and not root (nor sudo without a password)"
		log "installing: ${missing[*]}"
		local -a apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q
			-o DPkg::Lock::Timeout=600 install --no-install-recommends)
		# Without an update first: the package lists are often recent
		# enough, and an update needs the network even when the packages
		# are cached.
		if ! as_root "${apt[@]}" "${missing[@]}" >&2; then
			log "apt-get install failed; apt-get update and again"
			as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update >&2 &&
				as_root "${apt[@]}" "${missing[@]}" >&2 ||
				unavailable "apt-get install ${missing[*]} failed (no network or no package source?)"
		fi
	fi
	VNG="$CACHE/venv/bin/vng"
	if ! [ -x "$VNG" ] ||
		[ "$("$VNG" --version 2>/dev/null | awk '{ print $2 }')" != "$VNG_VERSION" ]; then
		[ "$NO_INSTALL" = 1 ] &&
			unavailable "virtme-ng $VNG_VERSION is not in $CACHE/venv (and --no-install)"
		log "installing virtme-ng==$VNG_VERSION into $CACHE/venv"
		mkdir -p "$CACHE" || unavailable "cannot create $CACHE (RDMA_VM_CACHE)"
		rm -rf "$CACHE/venv"
		/usr/bin/python3 -m venv "$CACHE/venv" >&2 || unavailable "python3 -m venv $CACHE/venv failed"
		"$CACHE/venv/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VNG_VERSION" >&2 ||
			unavailable "pip install virtme-ng==$VNG_VERSION failed (no network or no PyPI?)"
	fi
	command -v qemu-system-x86_64 >/dev/null || unavailable "qemu-system-x86_64 is not on PATH"
}

# The newest kernel image that has rdma_rxe among its modules.
pick_kernel() {
	local k v
	if [ -n "${RDMA_VM_KERNEL:-}" ]; then
		KERNEL=$RDMA_VM_KERNEL
	else
		KERNEL=""
		for k in $(ls -v /boot/vmlinuz-* 2>/dev/null | tac); do
			v=${k#/boot/vmlinuz-}
			if find "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe" -name 'rdma_rxe.ko*' \
				2>/dev/null | grep -q .; then
				KERNEL=$k
				break
			fi
		done
	fi
	[ -n "$KERNEL" ] ||
		unavailable "no /boot/vmlinuz-VERSION with rdma_rxe in /lib/modules/VERSION (linux-image-amd64)"
	[ -r "$KERNEL" ] || unavailable "$KERNEL is not readable by $(id -un)"
}

# KVM when it can boot a stock kernel, else TCG; sets ACCEL_USED.
pick_accel() {
	local why=""
	if [ "$ACCEL" = tcg ]; then
		ACCEL_USED=tcg
		return
	fi
	if [ ! -e /dev/kvm ]; then
		why="/dev/kvm does not exist"
	elif [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
		why="/dev/kvm is not read/writable by $(id -un)"
	elif [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] &&
		[ ! -d /sys/module/kvm_amd ]; then
		# PVM runs only PVM-enabled guest kernels: Debian's hangs at boot.
		why="/dev/kvm is kvm_pvm, which cannot boot a stock kernel"
	fi
	if [ -z "$why" ]; then
		ACCEL_USED=kvm
		return
	fi
	[ "$ACCEL" = kvm ] && unavailable "--accel kvm, but $why"
	log "$why: software emulation (TCG), slower"
	ACCEL_USED=tcg
}

install_prereqs
if [ "$INSTALL_ONLY" = 1 ]; then
	pick_kernel
	log "prerequisites installed; guest kernel $KERNEL"
	exit 0
fi
pick_kernel
pick_accel

mkdir -p "$CACHE/tmp"
RUNDIR=$(mktemp -d "$CACHE/tmp/run.XXXXXX")
cleanup() {
	rm -rf "$RUNDIR"
}
trap cleanup EXIT
printf '%s\0' "$@" >"$RUNDIR/argv"
printf '%s' "$PWD" >"$RUNDIR/cwd"
printf '%s' "$MTU" >"$RUNDIR/mtu"

# --user root: the guest's setup needs root (modprobe, ip, rdma) whoever
# runs this; the guest is disposable.
VNG_ARGS=(-r "$KERNEL" --force-9p --user root --cpus "$CPUS" --memory "$MEM" --rwdir "$RUNDIR")
[ "$ACCEL_USED" = tcg ] && VNG_ARGS+=(--disable-kvm)
[ "$VERBOSE" = 1 ] && VNG_ARGS+=(--verbose)
if [ "$CWD_RW" = 1 ] && [ "$PWD" != / ]; then
	VNG_ARGS+=(--rwdir "$PWD")
fi
for d in "${RWDIRS[@]}"; do
	VNG_ARGS+=(--rwdir "$(readlink -f "$d")")
done
if [ -n "$SCRATCH_SIZE" ]; then
	# Sparse, and thrown away with the run directory. The guest finds it by
	# its serial number.
	truncate -s "$SCRATCH_SIZE" "$RUNDIR/scratch.img"
	printf 'rdma-vm-scratch' >"$RUNDIR/scratch"
	drive="if=none,id=scratch,file=$RUNDIR/scratch.img,format=raw,cache=unsafe"
	VNG_ARGS+=(--qemu-opts="-drive $drive -device virtio-blk-pci,drive=scratch,serial=rdma-vm-scratch")
else
	: >"$RUNDIR/scratch"
fi
GUEST_CMD="$(printf '%q' "$SELF") __guest $(printf '%q' "$RUNDIR")"

log "booting $(basename "$KERNEL"), accel=$ACCEL_USED cpus=$CPUS mem=$MEM" \
	"${SCRATCH_SIZE:+scratch=$SCRATCH_SIZE }timeout=${TIMEOUT}s"
T0=$(date +%s.%N)
set +e
# timeout (without --foreground) signals its whole process group: vng and
# the qemu it execs; -k follows with SIGKILL if qemu ignores SIGTERM.
# qemu reopens /proc/self/fd/1 and 2 for the guest's output: a regular file
# reopened gets an offset of its own and is overwritten, so hand it pipes.
# In the background, so that a SIGINT/SIGTERM/SIGHUP sent to this script
# (Ctrl-C, a CI cancel) can be passed on: timeout has a process group of its
# own, which the terminal does not signal.
exec 3<&0
PATH="$CACHE/venv/bin:$PATH" TMPDIR="$CACHE/tmp" timeout -k 20 "$TIMEOUT" \
	"$CACHE/venv/bin/vng" "${VNG_ARGS[@]}" -- "$GUEST_CMD" <&3 > >(cat) 2> >(cat >&2) &
TPID=$!
INTERRUPTED=0
trap 'INTERRUPTED=1; kill -TERM "$TPID" 2>/dev/null' INT TERM HUP
wait "$TPID"
RC=$?
while kill -0 "$TPID" 2>/dev/null; do
	wait "$TPID"
	RC=$?
done
trap - INT TERM HUP
wait
set -e
ELAPSED=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# What the guest wrote into RUNDIR tells how far it got; vng's own status
# alone cannot tell a failing command from a guest that never ran it.
if [ "$INTERRUPTED" = 1 ]; then
	log "interrupted after ${ELAPSED}s; guest stopped"
	exit 130
fi
if [ -e "$RUNDIR/status" ]; then
	RC=$(cat "$RUNDIR/status")
	log "guest finished in ${ELAPSED}s; command exit status $RC"
	exit "$RC"
fi
if [ -e "$RUNDIR/started" ]; then
	case $RC in
	124 | 137)
		log "ERROR: timed out after ${TIMEOUT}s; the guest was stopped"
		exit 124
		;;
	*)
		log "ERROR: the guest stopped after ${ELAPSED}s before the command finished (vng status $RC)"
		exit 125
		;;
	esac
fi
[ -e "$RUNDIR/unavailable" ] && unavailable "$(cat "$RUNDIR/unavailable")"
[ "$RC" = 97 ] && die 97 "setting up rxe inside the guest failed (see above)"
case $RC in
124 | 137) unavailable "the guest did not boot within ${TIMEOUT}s" ;;
esac
if [ -e "$RUNDIR/booted" ]; then
	die 97 "the guest stopped during its setup (vng status $RC; see above)"
fi
unavailable "the guest did not start (vng/qemu exit status $RC after ${ELAPSED}s;" \
	"--verbose shows its console)"
