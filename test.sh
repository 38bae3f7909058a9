#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test: the unit tests and the bats integration tests on a release
# build, then the unit tests again under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh
meson test -C build --print-errorlogs --num-processes 2
[ -f build-asan/build.ninja ] ||
	meson setup build-asan -Db_sanitize=address,undefined -Dbats=disabled >/dev/null
meson compile -C build-asan >/dev/null
meson test -C build-asan --suite unit --print-errorlogs
