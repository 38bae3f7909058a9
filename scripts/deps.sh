#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what stagehand needs to build and test on Debian 12 (bookworm).
# Does nothing when everything is already there.
set -euo pipefail

packages=(
	build-essential meson ninja-build pkg-config gcc g++ gfortran
	libxxhash-dev liblz4-dev liburing-dev libjemalloc-dev libinih-dev
	libibverbs-dev librdmacm-dev
	bats rsync tar python3 python3-numpy python3-h5py time strace util-linux
	iproute2 netcat-openbsd procps
	mpich libmpich-dev libhdf5-mpich-dev
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "deps.sh: run as root or install sudo" >&2; exit 1; }
	SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
