#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The installed layout: `meson install` into a DESTDIR puts the programs, the
# shim and the flusher where the FHS and Debian expect them, and there they
# find one another as in the build tree, with no variable saying where. The
# server's systemd unit, its user and its directories check out, and the
# server runs as the unit runs it.

bats_require_minimum_version 1.5.0
load lib/common
load lib/cluster

# installed PATH: the one file of the installed tree whose path ends in PATH.
installed() {
	local found
	found=$(find "$ROOT" -path "*/$1" \( -type f -o -type l \))
	[ -n "$found" ] && [ "$(wc -l <<<"$found")" -eq 1 ] || fail "installed $1: '$found'"
	echo "$found"
}

# one_version: $CKPT/f has its version (the background commit is done).
one_version() {
	[ "$(version_count "$CKPT/f")" -eq 1 ]
}

setup() {
	cluster_setup
	# Outside $T, whose parents only root may enter: the unit's user reads
	# the installed tree. Removed (and its processes killed) by teardown.
	USERDIR=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-install.XXXXXX")
	chmod 755 "$USERDIR"
	ROOT="$USERDIR"
	meson install -C "$STAGEHAND_BUILD" --no-rebuild --destdir "$ROOT" >"$T/install.log" 2>&1 ||
		fail "meson install: $(cat "$T/install.log")"
	BIN=$(dirname "$(installed bin/stagehand)")
	PREFIX=${BIN%/bin}
	# nothing of ours may be named by the environment
	unset STAGEHAND_TOOL STAGEHAND_FLUSHER STAGEHAND_LIB STAGEHAND_SERVER
}

teardown() {
	cluster_teardown
}

@test "installed: FHS places, and the tool, the shim and the flusher find one another there" {
	# where Debian wants them: a daemon in sbin, the flusher (which people
	# do not run) in libexec, the shim (preloaded, never linked) in a
	# directory of its own under the multiarch libdir
	[ -x "$PREFIX/sbin/stagehand-server" ]
	[ -x "$PREFIX/libexec/stagehand/stagehand-flusher" ]
	[ -f "$(installed "lib/$(gcc -print-multiarch)/stagehand/libstagehand.so")" ]
	[ -f "$PREFIX/share/doc/stagehand/examples/policy.conf" ]
	# man pages, made from --help, a section per command of the tool
	grep -q '^\.SS stagehand restore$' "$PREFIX/share/man/man1/stagehand.1"
	[ -f "$PREFIX/share/man/man8/stagehand-server.8" ] && [ -f "$PREFIX/share/man/man8/stagehand-flusher.8" ]
	# Slurm's SPANK plugin, in Debian's Slurm plugin directory
	[ -f "$(installed "lib/$(gcc -print-multiarch)/slurm-wlm/spank_stagehand.so")" ]
	# the burst buffer script, running the installed tool
	grep -qx "local tool = os.getenv(\"STAGEHAND_TOOL\") or \"${BIN#"$ROOT"}/stagehand\"" \
		"$(installed share/stagehand/slurm/burst_buffer.lua)"
	[ ! -e "$BIN/stagehand-flusher" ] && [ ! -e "$BIN/stagehand-server" ]
	# the example policy is one the tool takes (once its cache is a real
	# directory)
	sed "s|^dir = .*|dir = $T/example-cache|" "$PREFIX/share/doc/stagehand/examples/policy.conf" \
		>"$T/example.conf"
	run "$BIN/stagehand" ls --policy "$T/example.conf"
	[ "$status" -eq 0 ] || fail "the example policy: $output"

	SERVER="$PREFIX/sbin/stagehand-server" start_servers 1
	# async: the shim hands the commit to the tool it finds; [cluster]:
	# the flusher it finds ships it
	cluster_default_policy durability=async cluster.replicas=1
	random_file "$REF/f" 1000000
	STAGEHAND_LOG=debug STAGEHAND_LOG_FILE="$T/shim.log" \
		"$BIN/stagehand" run --policy "$POLICY" cp "$REF/f" "$CKPT/f"
	grep -q "committing '$CKPT/f' in the background" "$T/shim.log" ||
		fail "no background commit: $(cat "$T/shim.log")"
	wait_for "$WAIT" one_version
	run "$BIN/stagehand" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output"
	# (the flusher that shipped it logs wherever whoever started it said)
	run "$BIN/stagehand" ls --policy "$POLICY" "$CKPT/f"
	[[ "$output" == *" cache+1 server"* ]] || fail "ls: $output"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$BIN/stagehand" restore --policy "$POLICY" --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
}

# unit_instance: instance "a" of the installed server unit ($UNIT),
# configured as the example says, with its user ($UID_A, $GID_A) and
# directories made as at boot; ARGV is its ExecStart with the environment
# file's values, every absolute path inside $ROOT.
unit_instance() {
	UNIT=$(installed "systemd/system/stagehand-server@.service")
	local sysusers tmpfiles
	sysusers=$(installed "sysusers.d/stagehand.conf")
	tmpfiles=$(installed "tmpfiles.d/stagehand.conf")
	mkdir -p "$ROOT/etc/stagehand"
	sed -e 's/^LISTEN=.*/LISTEN=127.0.0.1:0/' \
		-e 's|^OPTIONS=.*|OPTIONS=--port-file /var/lib/stagehand/a/port --log-level info|' \
		"$PREFIX/share/doc/stagehand/examples/server-example.env" >"$ROOT/etc/stagehand/server-a.env"
	cp "$SECRET" "$ROOT/etc/stagehand/secret"
	touch "$ROOT/etc/passwd" "$ROOT/etc/group"
	systemd-sysusers --root="$ROOT" "$sysusers" 2>"$T/sysusers.log" || fail "$(cat "$T/sysusers.log")"
	UID_A=$(awk -F: '$1 == "stagehand" { print $3 }' "$ROOT/etc/passwd")
	GID_A=$(awk -F: '$1 == "stagehand" { print $4 }' "$ROOT/etc/passwd")
	[ -n "$UID_A" ] && [ "$UID_A" -gt 0 ] || fail "no stagehand user: $(cat "$ROOT/etc/passwd")"
	systemd-tmpfiles --root="$ROOT" --create "$tmpfiles" 2>"$T/tmpfiles.log" ||
		fail "$(cat "$T/tmpfiles.log")"
	# StateDirectory=stagehand/%i, as systemd makes it
	install -d -o "$UID_A" -g "$GID_A" -m 750 "$ROOT/var/lib/stagehand/a"
	local listen options cmd w
	# (as systemd reads it: a value is the rest of its line, spaces too)
	listen=$(sed -n 's/^LISTEN=//p' "$ROOT/etc/stagehand/server-a.env")
	options=$(sed -n 's/^OPTIONS=//p' "$ROOT/etc/stagehand/server-a.env")
	cmd=$(sed -n 's/^ExecStart=//p' "$UNIT")
	cmd=${cmd//%i/a}
	cmd=${cmd//'${LISTEN}'/$listen}
	cmd=${cmd//'$OPTIONS'/$options}
	ARGV=()
	for w in $cmd; do
		[[ "$w" == /* ]] && w="$ROOT$w"
		ARGV+=("$w")
	done
}

# unit_serves LAUNCHER...: runs $ARGV through LAUNCHER (which makes it the
# unit's user), and checks that it says it is ready, serves a node that
# ships a version and an empty node that restores it, keeps its store as
# the unit's user's, and stops when told.
unit_serves() {
	# (an abstract socket: the unit's user may not enter $T)
	listen_notify "@stagehand-install-$$-$BATS_TEST_NUMBER"
	NOTIFY_SOCKET="@stagehand-install-$$-$BATS_TEST_NUMBER" "$@" "${ARGV[@]}" \
		2>"$T/unit.log" </dev/null >/dev/null 3>&- &
	local pid=$!
	track $pid
	wait_for "$WAIT" grep -q '^READY=1$' "$T/notify" || fail "not ready: $(cat "$T/unit.log")"
	SRV_HOST[0]=127.0.0.1 SRV_PORT[0]=$(cat "$ROOT/var/lib/stagehand/a/port") NSERVERS=1
	cluster_default_policy cluster.replicas=1
	random_file "$REF/f" 300000
	"$BIN/stagehand" run --policy "$POLICY" cp "$REF/f" "$CKPT/f"
	run "$BIN/stagehand" flush --policy "$POLICY" --wait --timeout "$WAIT"
	[ "$status" -eq 0 ] || fail "flush: $output $(cat "$T/unit.log")"
	stop_flusher "$CACHE"
	rm -rf "$CACHE"
	run "$BIN/stagehand" restore --policy "$POLICY" --to "$BACK" "$CKPT/f"
	[ "$status" -eq 0 ] || fail "restore: $output"
	cmp "$REF/f" "$BACK$CKPT/f"
	[ -z "$(find "$ROOT/var/lib/stagehand/a" ! -uid "$UID_A")" ] ||
		fail "not the unit's user's: $(find "$ROOT/var/lib/stagehand/a" ! -uid "$UID_A" -ls)"
	kill -TERM "$pid"
	wait_for "$WAIT" grep -q '^STOPPING=1$' "$T/notify"
	wait_for "$WAIT" pid_gone "$pid"
}

@test "installed: the server's unit, user and directories check out, and the server runs as the unit says" {
	unit_instance
	grep -qx "ExecStart=${PREFIX#"$ROOT"}/sbin/stagehand-server .*" "$UNIT" ||
		fail "the unit runs another program: $(grep ExecStart "$UNIT")"
	# systemd's own checker, offline, on the instance (the targets it
	# names come from this machine)
	mkdir -p "$ROOT/usr/lib/systemd/system"
	cp /lib/systemd/system/*.target "$ROOT/usr/lib/systemd/system/"
	run systemd-analyze verify --man=no --root="$ROOT" "$(dirname "$UNIT")/stagehand-server@a.service"
	[ "$status" -eq 0 ] && [ -z "$output" ] || fail "systemd-analyze verify: $output"
	[ "$(stat -c '%u:%g %a' "$ROOT/var/lib/stagehand")" = "$UID_A:$GID_A 750" ]
	[ "$(stat -c '%u:%g %a' "$ROOT/etc/stagehand/secret")" = "0:$GID_A 640" ]
	unit_serves setpriv --reuid="$UID_A" --regid="$GID_A" --clear-groups
}

@test "installed: the server runs and serves in the unit's sandbox" {
	"$PYTHON" -c 'import seccomp' 2>/dev/null || skip "no python3-seccomp"
	unit_instance
	# systemd's own judgement of it
	run systemd-analyze security --offline=yes "$UNIT"
	[[ "$output" == *"Overall exposure level for stagehand-server@"*": "[0-2].*" OK"* ]] ||
		fail "systemd-analyze security: $output"
	# (systemd is not PID 1 here: lib/sandbox.py confines it as it would)
	unit_serves unshare --mount --propagation private \
		"$BATS_TEST_DIRNAME/lib/sandbox.py" "$UNIT" a "$ROOT" "$UID_A" "$GID_A"
	# refused in the sandbox, not outside it
	run unshare --mount --propagation private "$BATS_TEST_DIRNAME/lib/sandbox.py" "$UNIT" a \
		"$ROOT" "$UID_A" "$GID_A" "$PYTHON" -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM)'
	[[ "$output" == *"PermissionError"* ]] || fail "AF_PACKET in the sandbox: $output"
	run unshare --mount --propagation private "$BATS_TEST_DIRNAME/lib/sandbox.py" "$UNIT" a \
		"$ROOT" "$UID_A" "$GID_A" touch "$ROOT/etc/stagehand/x" "$ROOT/var/lib/stagehand/a/x"
	[[ "$output" == *"$ROOT/etc/stagehand/x"*"Read-only file system"* ]] && [ -e "$ROOT/var/lib/stagehand/a/x" ] ||
		fail "ProtectSystem=strict in the sandbox: $output"
}

@test "the Spack recipe parses, and passes only options meson.build defines" {
	local recipe="$BATS_TEST_DIRNAME/../../contrib/spack/packages/stagehand/package.py"
	run "$PYTHON" - "$recipe" "$BATS_TEST_DIRNAME/../../meson_options.txt" <<'EOP'
import ast, re, sys
recipe, options = open(sys.argv[1]).read(), open(sys.argv[2]).read()
ast.parse(recipe)
defined = set(re.findall(r"option\('([\w-]+)'", options))
passed = set(re.findall(r'"-D([\w-]+)[="]', recipe)) | set(re.findall(r'feature\("(\w+)"\)', recipe))
missing = passed - defined
if missing or not passed:
    sys.exit("not options of meson.build: %s" % sorted(missing))
print(sorted(passed))
EOP
	[ "$status" -eq 0 ] || fail "$output"
}
