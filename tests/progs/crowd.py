#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs N copies of a command at the same moment, as the nodes of a restarted
job do (abuse.bats, bench/restart.sh): every copy is started first, blocked
on a pipe, then the pipe is closed and they all go at once. {i} in an
argument becomes the copy's number. Prints how many failed, the wall time
and the latencies, and the output of the first failures; exits 1 if any
failed.

    crowd.py N COMMAND ARGS...
"""
import os
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    n = int(sys.argv[1])
    argv = sys.argv[2:]
    gate_r, gate_w = os.pipe()
    procs = []
    for i in range(n):
        cmd = [a.replace('{i}', str(i)) for a in argv]
        # 'read' returns once the gate is closed: all copies start together
        out = tempfile.TemporaryFile()
        procs.append(subprocess.Popen(['sh', '-c', 'read _; exec "$@"', 'sh'] + cmd,
                                      stdin=gate_r, stdout=out, stderr=subprocess.STDOUT))
        procs[-1].out = out
    os.close(gate_r)
    start = time.monotonic()
    os.close(gate_w)
    latency, failed = [], []
    pending = {p.pid: p for p in procs}
    outputs = {}
    while pending:
        pid, status = os.wait()
        p = pending.pop(pid, None)
        if p is None:
            continue
        latency.append(time.monotonic() - start)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            failed.append(p)
    wall = time.monotonic() - start
    for p in failed[:3]:
        p.out.seek(0)
        outputs[p.pid] = p.out.read().decode(errors='replace')
    for p in procs:
        p.out.close()
    latency.sort()
    pick = lambda q: latency[min(len(latency) - 1, int(q * len(latency)))]
    print(f'crowd: {n} ran, {len(failed)} failed; wall {wall:.2f} s; latency min {latency[0]:.2f} '
          f'median {pick(0.5):.2f} p95 {pick(0.95):.2f} max {latency[-1]:.2f} s')
    for p in failed[:3]:
        print(f'crowd: exit {p.returncode}: {outputs[p.pid].strip()}')
    sys.exit(1 if failed else 0)


main()
