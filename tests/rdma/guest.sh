#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the cluster integration tests over RDMA inside the guest of
# scripts/rdma-vm.sh (as root, soft-RoCE devices rxe0 and rxe1 up), all in
# this one boot: servers listen on $RXE_IP0 and $RXE_IP1 (rxe cannot use lo),
# the link-cut test cuts $RXE_IP2 off, the test directories are on the
# guest's scratch disk. Exit status: bats's (2: cannot start).
#
#   tests/rdma/guest.sh [OPTIONS] [BATS_FILE...]
#
#   --transport T   rdma (default), tcp or auto: STAGEHAND_TEST_TRANSPORT
#                   (tcp runs the same tests over TCP on the same addresses)
#   --build DIR     the build directory (default $STAGEHAND_BUILD, else
#                   <repo>/build)
#   --filter REGEX  only the tests whose name matches (bats --filter)
#   --filter-tags T only the tests whose tags match (bats --filter-tags;
#                   '!long' leaves out the long runs of the cluster logic,
#                   which the host runs over TCP: test.sh does)
#   BATS_FILE       default tests/bats/cluster.bats tests/bats/transport.bats
#                   tests/bats/delta.bats
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
	sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}
die() {
	echo "guest.sh: $*" >&2
	exit 2
}

transport=rdma
build="${STAGEHAND_BUILD:-$repo/build}"
filter=()
while [ $# -gt 0 ]; do
	case "$1" in
	--transport | --build | --filter | --filter-tags)
		[ $# -ge 2 ] || die "$1 needs a value"
		case "$1" in
		--transport) transport=$2 ;;
		--build) build=$2 ;;
		--filter) filter+=(--filter "$2") ;;
		--filter-tags) filter+=(--filter-tags "$2") ;;
		esac
		shift 2
		;;
	-h | --help) usage 0 ;;
	--) shift; break ;;
	-*) echo "guest.sh: unknown option $1" >&2; usage 2 ;;
	*) break ;;
	esac
done
files=("$@")
[ ${#files[@]} -gt 0 ] ||
	files=("$repo/tests/bats/cluster.bats" "$repo/tests/bats/transport.bats" "$repo/tests/bats/delta.bats")

case "$transport" in rdma | tcp | auto) ;; *) die "--transport must be rdma, tcp or auto" ;; esac
[ "${RDMA_VM_GUEST:-}" = 1 ] && [ -n "${RXE_IP0:-}" ] && [ -n "${RXE_IP1:-}" ] &&
	[ -n "${RXE_IP2:-}" ] ||
	die "runs inside the guest of scripts/rdma-vm.sh (tests/rdma/run.sh boots it)"
[ "$(id -u)" -eq 0 ] || die "needs root (the guest runs it as root)"
command -v bats >/dev/null || die "bats is not installed (scripts/deps.sh --tests)"
command -v tc >/dev/null || die "tc is not installed (iproute2, scripts/deps.sh --tests)"
[ -x "$build/server/stagehand-server" ] ||
	die "no stagehand-server in '$build' (build first, or --build)"
build="$(cd "$build" && pwd)"
for d in "${RXE_DEV0:-rxe0}" "${RXE_DEV1:-rxe1}"; do
	[ -e "/sys/class/infiniband/$d" ] || die "no RDMA device $d"
done

# The test directories hold a few hundred MiB at once: on the scratch disk
# (ext4, like a node's SSD; rdma-vm.sh --scratch mounts it on /run/s, TMPDIR), not in
# the guest's memory.
[ -n "${RDMA_VM_SCRATCH:-}" ] ||
	echo "guest.sh: no scratch disk (rdma-vm.sh --scratch): test directories in memory" >&2
export STAGEHAND_BUILD="$build"
export STAGEHAND_TEST_TRANSPORT="$transport"
export STAGEHAND_TEST_HOSTS="$RXE_IP0 $RXE_IP1"
export STAGEHAND_TEST_CUT_HOST="$RXE_IP2"
echo "# $(uname -r): transport $transport, servers on $STAGEHAND_TEST_HOSTS," \
	"cut host $STAGEHAND_TEST_CUT_HOST, build $build," \
	"test directories in ${TMPDIR:-/tmp}${RDMA_VM_SCRATCH:+ (scratch disk)}"
start=$SECONDS
rc=0
bats --tap --timing "${filter[@]}" "${files[@]}" || rc=$?
echo "# bats exited $rc after $((SECONDS - start))s"
# 77 means a skip to meson: a failure must not read as one.
[ "$rc" -ne 77 ] || rc=1
exit "$rc"
