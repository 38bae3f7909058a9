#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test: the unit tests and the bats integration tests on a release
# build (the latter twice: with and without the write fast path), the cluster
# tests over RDMA in a guest, power cuts replayed in a guest, then the unit
# tests again under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh --tests
scripts/build.sh
meson test -C build --print-errorlogs --num-processes 2
# The integration tests of the shim again with the write fast path off:
# every file then goes through its shadow file, the path the fast path
# falls back to.
STAGEHAND_FAST=0 meson test -C build --suite shim --print-errorlogs --num-processes 2
# The cluster tests over RDMA, in a QEMU guest with soft-RoCE (minutes under
# software emulation; a skip where the guest cannot run).
meson test -C build --suite rdma --print-errorlogs
# Power cuts replayed at a sample of each workload's flushes, each on ext4
# or XFS, and failing disks, in the same kind of guest (tests/crash/run.sh:
# every workload on both; --marks 200 or --full, the long runs).
meson test -C build --suite crash --print-errorlogs
[ -f build-asan/build.ninja ] ||
	meson setup build-asan -Db_sanitize=address,undefined -Dbats=disabled >/dev/null
meson compile -C build-asan >/dev/null
meson test -C build-asan --suite unit --print-errorlogs
