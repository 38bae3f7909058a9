#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# sandbox.py UNIT INSTANCE ROOT UID GID CMD [ARGS...]: runs CMD as systemd
# would run instance INSTANCE of the service template UNIT, confined, where
# systemd is not PID 1 to do it: ROOT stands for the unit's "/" (the paths it
# names are looked up below it), UID and GID for User= and Group=. Run as
# root in a mount namespace of its own (unshare -m). Emulated, in systemd's
# order (mounts, user, capabilities, seccomp): ProtectSystem=strict with
# StateDirectory= and ReadWritePaths= writable, PrivateTmp=, ProtectHome=,
# CapabilityBoundingSet= (empty), and in one seccomp filter SystemCallFilter=
# (groups expanded by systemd-analyze), SystemCallErrorNumber=,
# SystemCallArchitectures=native, RestrictAddressFamilies=,
# MemoryDenyWriteExecute=, RestrictNamespaces= and NoNewPrivileges=.
import ctypes
import errno
import os
import socket
import subprocess
import sys

import seccomp

unit, instance, root = sys.argv[1:4]
uid, gid = int(sys.argv[4]), int(sys.argv[5])
cmd = sys.argv[6:]

service, section = {}, None
for line in open(unit):
    line = line.strip()
    if line.startswith("["):
        section = line
    elif section == "[Service]" and "=" in line and not line.startswith("#"):
        key, value = line.split("=", 1)
        service.setdefault(key, []).append(value)


def one(key, default=""):
    return service.get(key, [default])[-1]


def mount(*args):
    subprocess.run(["mount", *args], check=True)


def mountpoints():
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4].replace("\\040", " ") for l in f]


# ProtectSystem=strict: everything read-only but the API file systems, then
# the directories the unit may write.
if one("ProtectSystem") == "strict":
    writable = ["/var/lib/" + d for v in service.get("StateDirectory", []) for d in v.split()]
    writable += [p for v in service.get("ReadWritePaths", []) for p in v.split()]
    for mp in mountpoints():
        if not any(mp == a or mp.startswith(a + "/") for a in ("/proc", "/sys", "/dev")):
            subprocess.run(["mount", "-o", "remount,bind,ro", mp], stderr=subprocess.DEVNULL)
    for p in writable:
        optional = p.startswith("-")
        path = root + p.lstrip("-").replace("%i", instance)
        if optional and not os.path.exists(path):
            continue
        mount("--bind", path, path)
        mount("-o", "remount,bind,rw", path)
# PrivateTmp=: an empty /tmp and /var/tmp of its own.
if one("PrivateTmp") == "yes":
    for d in ("/tmp", "/var/tmp"):
        if os.path.isdir(root + d):
            mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", root + d)
# ProtectHome=yes: the homes are empty and unreachable.
if one("ProtectHome") == "yes":
    for d in ("/home", "/root", "/run/user"):
        if os.path.isdir(d):
            mount("-t", "tmpfs", "-o", "ro,mode=000", "tmpfs", d)


# User= and Group=, no supplementary groups; CapabilityBoundingSet= empties
# the bounding set first (it takes CAP_SETPCAP); changing uid clears the rest.
if "CapabilityBoundingSet" in service and not one("CapabilityBoundingSet"):
    libc = ctypes.CDLL(None, use_errno=True)
    PR_CAPBSET_DROP = 24
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)


def expand(names, seen=None):
    """The system calls of a SystemCallFilter= list, groups expanded."""
    seen = set() if seen is None else seen
    calls = set()
    for name in names:
        if not name.startswith("@"):
            calls.add(name)
            continue
        if name in seen:
            continue
        seen.add(name)
        out = subprocess.run(["systemd-analyze", "syscall-filter", name],
                             capture_output=True, text=True, check=True).stdout
        members = [l.strip() for l in out.splitlines()[1:]
                   if l.strip() and not l.strip().startswith("#")]
        calls |= expand(members, seen)
    return calls


allow, deny = set(), set()
for v in service.get("SystemCallFilter", []):
    if v.startswith("~"):
        deny |= expand(v[1:].split())
    else:
        allow |= expand(v.split())
allow -= deny
if not allow:
    sys.exit("sandbox.py: %s has no SystemCallFilter= allow-list" % unit)
code = one("SystemCallErrorNumber")
refuse = seccomp.ERRNO(getattr(errno, code)) if code else seccomp.KILL_PROCESS
# The filter's architecture is the native one only (SystemCallArchitectures=native).
f = seccomp.SyscallFilter(defaction=refuse)


def rule(name, *args):
    try:
        f.add_rule(seccomp.ALLOW, name, *args)
    except (RuntimeError, ValueError, OSError):
        pass  # not a system call of this architecture


conditional = set()
families = one("RestrictAddressFamilies").split()
if families:
    conditional.add("socket")
    for fam in families:
        # (Python's socket module has no AF_IB)
        rule("socket", seccomp.Arg(0, seccomp.EQ, getattr(socket, fam, None) or {"AF_IB": 27}[fam]))
if one("MemoryDenyWriteExecute") == "yes":
    W, X = 0x2, 0x4
    for name in ("mmap", "mprotect", "pkey_mprotect"):
        conditional.add(name)
        if name in allow:
            for ok in (0, W, X):
                rule(name, seccomp.Arg(2, seccomp.MASKED_EQ, W | X, ok))
if one("RestrictNamespaces") == "yes":
    NEW = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
    for name in ("clone", "unshare"):
        conditional.add(name)
        if name in allow:
            rule(name, seccomp.Arg(0, seccomp.MASKED_EQ, NEW, 0))
    conditional |= {"setns", "clone3"}
    # clone3's flags are behind a pointer: refused so that libc uses clone
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
for name in allow - conditional:
    rule(name)
if one("NoNewPrivileges") != "yes":
    f.set_attr(seccomp.Attr.CTL_NNP, 0)
f.load()
os.execvp(cmd[0], cmd)
