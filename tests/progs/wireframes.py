# SPDX-License-Identifier: MIT
"""Frames of the stagehand wire protocol (docs/PROTOCOL.md), as the test
peers (wire-proxy.py, wire-peer.py) read and write them."""
import os
import socket
import struct

HEADER = 16
MAC = 32
FLAG_MAC = 1


def frame(version, type_, body, tag=0, flags=0, mac=b""):
    """A frame: header, body, and the MAC when flags has FLAG_MAC."""
    return b"SHWP" + struct.pack("<BBHII", version, type_, flags, len(body), tag) + body + mac


def read_exact(sock, n):
    """n bytes, or None when the peer closed (or reset) first."""
    buf = b""
    while len(buf) < n:
        try:
            part = sock.recv(n - len(buf))
        except OSError:
            return None
        if not part:
            return None
        buf += part
    return buf


def read_frame(sock):
    """A whole frame (header, body, MAC when flagged), or None at the end."""
    hdr = read_exact(sock, HEADER)
    if hdr is None:
        return None
    flags, length = struct.unpack_from("<HI", hdr, 6)
    rest = read_exact(sock, length + (MAC if flags & FLAG_MAC else 0))
    return None if rest is None else hdr + rest


def kind(f):
    """(type, tag) of a frame."""
    return f[5], struct.unpack_from("<I", f, 12)[0]


def error_text(f):
    """(code, text) of an ERROR frame."""
    code, n = struct.unpack_from("<IH", f, HEADER)
    return code, f[HEADER + 6:HEADER + 6 + n].decode("ascii", "replace")


def listen_any(port_file, backlog):
    """A socket listening on 127.0.0.1, any free port, written into
    port_file (atomically: a reader sees the whole number or nothing)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(backlog)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(lsock.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    return lsock
