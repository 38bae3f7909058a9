#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the power-cut tests (tests/crash/guest.sh: dm-log-writes logs
# replayed up to a sample of their flushes, or every one with --full, on
# ext4 and XFS) in the QEMU guest of
# scripts/rdma-vm.sh, which boots Debian's own kernel and its device-mapper
# modules; this host's kernel may have none.
#
#   tests/crash/run.sh [--timeout SECS] [GUEST OPTIONS...]
#
#   --timeout SECS  bound on the whole guest run, only to stop a guest that
#                   hangs (default $RDMA_VM_TIMEOUT, else 14400)
#   GUEST OPTIONS   passed to tests/crash/guest.sh: --full, --marks N,
#                   --fs LIST, workloads and disk-errors (failing disks:
#                   tests/crash/disk-errors.sh; see their --help); the
#                   build directory is $STAGEHAND_BUILD, else <repo>/build
#
# Exit status: the tests' (0 no violation); 77, meson's skip, with a line
# "SKIP: reason" when this host cannot run the guest; with
# STAGEHAND_RDMA_REQUIRED=1 that is a failure (1) instead (tests/rdma/run.sh
# boots the guest for both).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
	sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

case "${1:-}" in -h | --help) usage 0 ;; esac
# The logs and images go to the scratch disk.
STAGEHAND_GUEST_SCRIPT=tests/crash/guest.sh STAGEHAND_GUEST_SCRATCH=32G \
	STAGEHAND_GUEST_TESTS="crash tests" exec "$repo/tests/rdma/run.sh" "$@"
