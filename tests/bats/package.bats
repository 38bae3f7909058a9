#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The Debian packages: built from the source tree by dpkg-buildpackage,
# installed on this machine with apt-get (and removed again at the end); the
# demo and the Slurm tests then run against the installed files.

bats_require_minimum_version 1.5.0
load lib/common

setup_file() {
	local src="$BATS_TEST_DIRNAME/../.." out="$BATS_FILE_TMPDIR/deb"
	mkdir -p "$out/stagehand"
	# what the repository holds, without the build trees
	if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
		git -C "$src" ls-files -z | (cd "$src" && xargs -0 tar cf -) | tar xf - -C "$out/stagehand"
	else
		tar cf - -C "$src" --exclude='./build*' --exclude=./.git . | tar xf - -C "$out/stagehand"
	fi
	(cd "$out/stagehand" && dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1 || {
		tail -n 40 "$out/build.log" >&2
		return 1
	}
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"$out"/stagehand_*.deb "$out"/stagehand-server_*.deb >"$out/install.log" 2>&1 || {
		cat "$out/install.log" >&2
		return 1
	}
}

teardown_file() {
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq stagehand stagehand-server \
		>/dev/null 2>&1 || true
}

setup() {
	common_setup
}

@test "the packages hold the programs, the shim, the plugins and the unit where Debian wants them" {
	local arch
	arch=$(gcc -print-multiarch)
	run dpkg -L stagehand
	for f in /usr/bin/stagehand /usr/libexec/stagehand/stagehand-flusher \
		"/usr/lib/$arch/stagehand/libstagehand.so" "/usr/lib/$arch/slurm-wlm/spank_stagehand.so" \
		/usr/share/stagehand/slurm/burst_buffer.lua /usr/share/doc/stagehand/examples/policy.conf \
		/usr/share/man/man1/stagehand.1.gz; do
		grep -qx "$f" <<<"$output" || fail "stagehand lacks $f: $output"
	done
	run dpkg -L stagehand-server
	for f in /usr/sbin/stagehand-server /lib/systemd/system/stagehand-server@.service \
		/usr/lib/sysusers.d/stagehand.conf /usr/lib/tmpfiles.d/stagehand.conf \
		/usr/share/man/man8/stagehand-server.8.gz; do
		grep -qx "$f" <<<"$output" || fail "stagehand-server lacks $f: $output"
	done
	# its postinst made the server's user and directory
	getent passwd stagehand >/dev/null || fail "no stagehand user"
	[ "$(stat -c %U /var/lib/stagehand)" = stagehand ]
	run /usr/bin/stagehand --version
	[ "$status" -eq 0 ] && [[ "$output" == "stagehand "* ]] || fail "$output"
	# libcrypto, loaded when first needed, is a dependency all the same
	for p in stagehand stagehand-server; do
		dpkg-query -W -f '${Depends}\n' "$p" | grep -q 'libssl3' ||
			fail "$p does not depend on libssl3: $(dpkg-query -W -f '${Depends}' "$p")"
	done
}

@test "the demo runs against the installed programs" {
	run "$BATS_TEST_DIRNAME/../../demo.sh" --installed
	[ "$status" -eq 0 ] || fail "demo: $output"
	[[ "$output" == *"demo OK: 4 versions staged"* ]] || fail "demo: $output"
	[[ "$output" == *"== stagehand: /usr/bin/stagehand, /usr/sbin/stagehand-server"* ]] ||
		fail "demo: $output"
}

@test "the Slurm tests run against the installed plugin, burst_buffer.lua, shim and tool" {
	run env STAGEHAND_INSTALLED=1 bats --tap "$BATS_TEST_DIRNAME/slurm.bats"
	[ "$status" -eq 0 ] || fail "slurm.bats with the installed files: $output"
	[[ "$output" == *"ok 6 "* ]] || fail "$output"
}
