#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Configures (once) and builds stagehand in ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build --buildtype=release >/dev/null
meson compile -C build >/dev/null
