#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Stand-ins for one end of a stagehand connection (docs/PROTOCOL.md), to
test what the real other end does with them.

  wire-peer.py server PORT_FILE MIN MAX
      a server of protocol versions MIN..MAX: listens on 127.0.0.1 (any free
      port, written into PORT_FILE), sends each connection its CHALLENGE and
      reads until the client leaves
  wire-peer.py v1-client HOST:PORT SECRET_FILE UID
      a client of protocol version 1: authenticates as UID and lists
  wire-peer.py garbage HOST:PORT KIND
      reads the CHALLENGE, then sends a malformed frame: KIND is magic (a
      header of another protocol), long (longer than any AUTH) or auth (an
      AUTH whose body is too short)

The clients print what the server answered, one line each: "AUTH_OK",
"LIST_REPLY N", "ERROR CODE TEXT", "closed".
"""
import hashlib
import hmac
import os
import socket
import struct
import sys

from wireframes import error_text, frame, kind, listen_any, read_frame

def report(reply):
    t = None if reply is None else kind(reply)[0]
    if t is None:
        print("closed")
    elif t == 4:
        print("ERROR %d %s" % error_text(reply))
    elif t == 3:
        print("AUTH_OK")
    elif t == 12:
        print(f"LIST_REPLY {struct.unpack_from('<I', reply, 16)[0]}")
    else:
        print(f"type {t}")
    sys.stdout.flush()


def connect(hostport):
    host, port = hostport.rsplit(":", 1)
    return socket.create_connection((host, int(port)))


def server(port_file, lo, hi):
    lsock = listen_any(port_file, 16)
    while True:
        conn, _ = lsock.accept()
        # The CHALLENGE is a version-1 frame, whatever the versions offered.
        conn.sendall(frame(1, 1, struct.pack("<HH", lo, hi) + os.urandom(32)))
        while read_frame(conn) is not None:
            pass
        conn.close()


def v1_client(hostport, secret_file, uid):
    with open(secret_file, "rb") as f:
        secret = f.read().rstrip(b" \t\r\n")
    sock = connect(hostport)
    challenge = read_frame(sock)
    if challenge is None or kind(challenge)[0] != 1:
        return report(challenge)
    server_nonce = challenge[16 + 4:16 + 36]
    client_nonce = os.urandom(32)
    le_uid = struct.pack("<I", uid)
    key = hmac.new(secret, b"stagehand uid key" + le_uid, hashlib.sha256).digest()
    mac = hmac.new(key, b"stagehand client" + server_nonce + client_nonce + le_uid,
                   hashlib.sha256).digest()
    sock.sendall(frame(1, 2, le_uid + client_nonce + mac))
    reply = read_frame(sock)
    report(reply)
    if reply is None or kind(reply)[0] != 3:
        return
    sock.sendall(frame(1, 11, struct.pack("<HH", 0, 0), tag=1))
    report(read_frame(sock))


def garbage(hostport, kind):
    sock = connect(hostport)
    if read_frame(sock) is None:
        return report(None)
    if kind == "magic":
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
    elif kind == "long":
        sock.sendall(b"SHWP" + struct.pack("<BBHII", 2, 2, 0, 4096, 0))
    else:
        sock.sendall(frame(2, 2, bytes(40)))
    report(read_frame(sock))


what = sys.argv[1]
if what == "server":
    server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif what == "v1-client":
    v1_client(sys.argv[2], sys.argv[3], int(sys.argv[4]))
elif what == "garbage":
    garbage(sys.argv[2], sys.argv[3])
else:
    sys.exit(f"wire-peer.py: unknown role '{what}'")
