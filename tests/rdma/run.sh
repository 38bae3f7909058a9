#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the cluster integration tests over RDMA on a machine without RDMA
# hardware: scripts/rdma-vm.sh boots a QEMU guest with soft-RoCE devices and
# runs tests/rdma/guest.sh there, every test in that one boot (a boot costs
# 20-40 s under software emulation).
#
#   tests/rdma/run.sh [--timeout SECS] [GUEST OPTIONS...]
#
#   --timeout SECS  bound on the whole guest run, only to stop a guest that
#                   hangs (default $RDMA_VM_TIMEOUT, else 14400: every wait of
#                   the tests has a deadline of its own, generous for a slow
#                   or busy machine, and the emulation is slow)
#   GUEST OPTIONS   passed to tests/rdma/guest.sh: --transport rdma|tcp|auto,
#                   --filter REGEX, --filter-tags TAGS, bats files (see its
#                   --help); the build directory is $STAGEHAND_BUILD, else
#                   <repo>/build
#
# Exit status: the tests' (0 all passed); 77, meson's skip, with a line
# "SKIP: reason" when this host cannot run the guest (no QEMU or kernel with
# rdma_rxe and no way to install them, ...); with STAGEHAND_RDMA_REQUIRED=1
# that is a failure (1) instead, for machines that must run these tests.
#
# tests/crash/run.sh runs its own guest script through this one
# (STAGEHAND_GUEST_SCRIPT, STAGEHAND_GUEST_SCRATCH, STAGEHAND_GUEST_TESTS).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
	sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

timeout="${RDMA_VM_TIMEOUT:-14400}"
case "${1:-}" in
-h | --help) usage 0 ;;
--timeout)
	[ $# -ge 2 ] || usage 2
	timeout=$2
	shift 2
	;;
esac
build="${STAGEHAND_BUILD:-$repo/build}"
guest="${STAGEHAND_GUEST_SCRIPT:-tests/rdma/guest.sh}"
what="${STAGEHAND_GUEST_TESTS:-RDMA tests}"

# The guest runs the host's own bats; without it there is nothing to run.
if [ "$guest" = tests/rdma/guest.sh ] && ! command -v bats >/dev/null; then
	reason="bats is not installed (scripts/deps.sh --tests installs it)"
else
	reason=""
fi

rc=0
if [ -z "$reason" ]; then
	reason_file=$(mktemp)
	trap 'rm -f "$reason_file"' EXIT
	cd "$repo"
	# The guest writes only to its scratch disk (sparse: what is written):
	# the checkout stays read-only to it. A guest that did not start is
	# tried once more: QEMU's emulation has been seen to abort at start-up
	# (an assertion in its MSI-X table) and boot the next time.
	for attempt in 1 2; do
		rc=0
		scripts/rdma-vm.sh --timeout "$timeout" --scratch "${STAGEHAND_GUEST_SCRATCH:-4G}" \
			--no-cwd-rw --reason-file "$reason_file" -- "$guest" --build "$build" "$@" ||
			rc=$?
		[ "$rc" -eq 98 ] || break
		reason=$(cat "$reason_file")
		reason=${reason:-"scripts/rdma-vm.sh exited 98 without saying why"}
		[[ "$reason" == "the guest did not start"* ]] && [ "$attempt" = 1 ] || break
		echo "$what: $reason; trying once more" >&2
		reason=""
	done
fi
if [ -n "$reason" ]; then
	if [ "${STAGEHAND_RDMA_REQUIRED:-0}" = 1 ]; then
		echo "FAIL: cannot run the $what here (STAGEHAND_RDMA_REQUIRED=1): $reason"
		exit 1
	fi
	echo "SKIP: cannot run the $what here: $reason"
	exit 77
fi
# 77 is meson's skip: a failure must not read as one.
[ "$rc" -ne 77 ] || rc=1
exit "$rc"
