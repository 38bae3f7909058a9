#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what stagehand needs on Debian 12 (bookworm): to build it and run
# it (the demo's needs), and with --tests what the tests and benches run too.
# Does nothing when everything is already there.
#
#   scripts/deps.sh [--tests]
set -euo pipefail

packages=(
	build-essential meson ninja-build pkg-config gcc
	libxxhash-dev liblz4-dev libzstd-dev liburing-dev libjemalloc-dev libinih-dev
	libibverbs-dev librdmacm-dev libssl-dev libmunge-dev libslurm-dev
	help2man # the man pages, from --help
	procps # the demo stops the flusher of the node it wipes (pkill)
)
tests=0
case "${1:-}" in
--tests) tests=1 ;;
"") ;;
-h | --help)
	sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "deps.sh: unknown argument '$1' (usage: scripts/deps.sh [--tests])" >&2
	exit 2
	;;
esac
[ $tests = 0 ] || packages+=(
	g++ gfortran munge slurm-wlm lua5.1
	bats rsync tar python3 python3-numpy python3-h5py python3-venv time strace util-linux
	iproute2 netcat-openbsd bindfs fuse3
	mpich libmpich-dev libhdf5-mpich-dev
	cargo golang-go
	restic # bench/reduction.sh compares stored bytes and speed with it
	debhelper dpkg-dev # package.bats builds the Debian packages
	python3-prometheus-client # metrics.bats parses the metrics with Prometheus' own parser
	systemd # install.bats checks the server's unit, user and directories offline
	python3-seccomp # install.bats runs the server in its unit's sandbox (tests/bats/lib/sandbox.py)
)
# safetensors (not packaged in Debian 12), beside Debian's numpy, for the
# tests of programs that make system calls without libc.
venv=/opt/stagehand-test-venv
safetensors=0.8.0

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
have_venv=1
if [ $tests = 1 ] && ! "$venv/bin/python" -c \
	'import safetensors, sys; sys.exit(safetensors.__version__ != sys.argv[1])' \
	"$safetensors" 2>/dev/null; then
	have_venv=0
fi
[ ${#missing[@]} -eq 0 ] && [ $have_venv -eq 1 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "deps.sh: run as root or install sudo" >&2; exit 1; }
	SUDO=sudo
fi
if [ ${#missing[@]} -ne 0 ]; then
	echo "installing: ${missing[*]}" >&2
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ $have_venv -eq 0 ]; then
	echo "installing: safetensors $safetensors in $venv" >&2
	$SUDO /usr/bin/python3 -m venv --system-site-packages "$venv"
	$SUDO "$venv/bin/python" -m pip install -q --disable-pip-version-check "safetensors==$safetensors"
fi
