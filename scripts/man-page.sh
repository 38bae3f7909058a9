#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# man-page.sh HELP2MAN PROGRAM SECTION NAME OUT [COMMAND...]: a man page made
# from PROGRAM's --help and --version by help2man, with a COMMANDS section
# holding `PROGRAM COMMAND --help` of each COMMAND given, and the files the
# policy lives in.
set -euo pipefail
help2man=$1 prog=$2 section=$3 name=$4 out=$5
shift 5
inc=$(mktemp)
trap 'rm -f "$inc"' EXIT
# roff: a backslash is \e; a line starting with . or ' would be a request
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
if [ $# -gt 0 ]; then
	echo "[COMMANDS]" >>"$inc"
	for c in "$@"; do
		printf '.SS %s %s\n.nf\n' "$(basename "$prog")" "$c" >>"$inc"
		"$prog" "$c" --help | roff >>"$inc"
		printf '.fi\n' >>"$inc"
	done
fi
cat >>"$inc" <<'EOS'
[FILES]
.TP
.I /etc/stagehand/policy.conf
the node's policy, unless $STAGEHAND_POLICY or ./stagehand.conf names another
(an example: /usr/share/doc/stagehand/examples/policy.conf)
.TP
.I /etc/stagehand/secret
the cluster's shared secret (servers), unless auth = munge
[SEE ALSO]
stagehand(1), stagehand-server(8), stagehand-flusher(8); README.md and docs/ in
stagehand's source for the formats, the protocol and the metrics.
EOS
"$help2man" --no-info --no-discard-stderr --section="$section" --name="$name" \
	--include="$inc" --output="$out" "$prog"
