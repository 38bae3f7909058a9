#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A relay of stagehand connections run by another user, as an attacker on
the path would (munge.bats):

    munge-relay.py SERVER_PORT NODE_SOCKET DIR pass|hijack|impostor

It listens on 127.0.0.1 (its port written to DIR/port) and forwards each
connection to the server on SERVER_PORT, writing the MUNGE credentials that
cross it to DIR/client.cred and DIR/server.cred. It then tries to decode the
client's with `unmunge` through NODE_SOCKET (DIR/unmunge: the output).

With hijack, once the server has accepted the first connection's login it
stops forwarding that client and sends a LIST of its own, with a frame MAC under the best key it
has: the one an older client's credential carried (its payload's bytes
32..63), when `unmunge` could read it. DIR/result then says what the server
answered: "listed N bytes", "refused: TEXT" or "closed". Later connections
(the client trying again) are forwarded.

With impostor, it does not forward at all: it answers as a server would,
with a credential of its own user (made with `munge` through NODE_SOCKET)
that vouches for the exchange, and a public key of its own. DIR/result
says what the first client did then: "the client answered type N" or
"closed"."""

import hashlib
import os
import hmac
import socket
import struct
import subprocess
import sys
import threading

MAGIC = b"SHWP"
AUTH_OK, ERROR, LIST, LIST_REPLY, LIST_REPLY_FLAGS = 3, 4, 11, 12, 22
CHALLENGE, AUTH_MUNGE, MUNGE_HELLO, MUNGE_SERVER, MUNGE_AUTH = 1, 23, 24, 25, 26
MAC_LEN = 32

server_port, node_sock, out_dir, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


def write(name, data):
    with open(f"{out_dir}/{name}", "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def write_first(name, text):
    """Writes DIR/name unless it exists: the first connection's outcome,
    not that of a retry cut short by the test stopping the client."""
    try:
        with open(f"{out_dir}/{name}", "x") as f:
            f.write(text)
    except FileExistsError:
        pass


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        got = s.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return buf


def read_frame(s):
    """(type, body, whole frame as read)."""
    head = read_exact(s, 16)
    if head[:4] != MAGIC:
        raise EOFError
    _, typ, flags, length, _ = struct.unpack("<BBHII", head[4:])
    rest = read_exact(s, length + (MAC_LEN if flags & 1 else 0))
    return typ, rest[:length], head + rest


def unmunge(cred):
    """The payload, when this user can decode the credential, else None."""
    write("client.cred", cred)
    p = subprocess.run(["unmunge", "--socket", node_sock, "--metadata", "/dev/null"],
                       input=cred, capture_output=True)
    write("unmunge", p.stdout + p.stderr + f"\nexit {p.returncode}\n".encode())
    return p.stdout if p.returncode == 0 else None


hijacked = threading.Lock()  # taken by the one session that hijacks


class Session:
    def __init__(self, client, server):
        self.client, self.server = client, server
        self.hijack = mode == "hijack" and hijacked.acquire(blocking=False)
        self.established = threading.Event()
        self.server_nonce = self.client_nonce = b""
        self.versions = (1, 2)
        self.key = bytes(32)  # a guess, when no credential gives one
        self.uid = 0

    def client_to_server(self):
        while True:
            typ, body, frame = read_frame(self.client)
            if typ == MUNGE_HELLO:
                self.client_nonce = body[:32]
            elif typ == AUTH_MUNGE:  # nonce, mac, cred: an older client's
                self.client_nonce = body[:32]
                payload = unmunge(body[64:])
                if payload is not None and len(payload) >= 64:
                    self.key = payload[32:64]
            elif typ == MUNGE_AUTH:  # mac, cred
                payload = unmunge(body[32:])
                if payload is not None and len(payload) >= 64:
                    self.key = payload[32:64]
            self.server.sendall(frame)
            if typ in (AUTH_MUNGE, MUNGE_AUTH) and self.hijack:
                self.established.wait(60)
                self.forge_list()
                return

    def forge_list(self):
        t = (self.server_nonce + self.client_nonce + struct.pack("<IHHH", self.uid, *self.versions, 2))
        frame_key = hmac.new(self.key, b"stagehand v2 client frames" + t, hashlib.sha256).digest()
        body = struct.pack("<HH", 0, 0)
        head = MAGIC + struct.pack("<BBHII", 2, LIST, 1, len(body), 7)
        mac = hmac.new(frame_key, struct.pack("<Q", 0) + head + body, hashlib.sha256).digest()
        self.server.sendall(head + body + mac)

    def server_to_client(self):
        while True:
            typ, body, frame = read_frame(self.server)
            if typ == CHALLENGE:
                self.versions = struct.unpack("<HH", body[:4])
                self.server_nonce = body[4:36]
            elif typ == MUNGE_SERVER:
                write("server.cred", body[32:])
            if self.established.is_set():
                if typ in (LIST_REPLY, LIST_REPLY_FLAGS):
                    write("result", f"listed {len(body)} bytes\n")
                elif typ == ERROR:
                    write("result", "refused: " + body[6:].decode(errors="replace") + "\n")
                else:
                    write("result", f"answered type {typ}\n")
                return
            self.client.sendall(frame)
            if typ == AUTH_OK and self.hijack:
                self.established.set()


def impostor(client):
    """A server's CHALLENGE and MUNGE_SERVER, made by this user."""
    def frame(typ, body, version=2):
        return MAGIC + struct.pack("<BBHII", version, typ, 0, len(body), 0) + body

    server_nonce, server_pub = os.urandom(32), os.urandom(32)
    client.sendall(frame(CHALLENGE, struct.pack("<HH", 1, 2) + server_nonce, 1))
    typ, body, _ = read_frame(client)
    if typ != MUNGE_HELLO:
        return
    x = server_nonce + body[:32] + struct.pack("<HHH", 1, 2, 2) + body[32:64] + server_pub
    p = subprocess.run(["munge", "--socket", node_sock],
                       input=b"stagehand v2 munge server" + x, capture_output=True)
    client.sendall(frame(MUNGE_SERVER, server_pub + p.stdout.strip()))
    try:
        typ, body, _ = read_frame(client)
        write_first("result", f"the client answered type {typ}\n")
    except EOFError:
        write_first("result", "closed\n")


def serve(client):
    if mode == "impostor":
        run(lambda: impostor(client))
        client.close()
        return
    server = socket.create_connection(("127.0.0.1", server_port))
    s = Session(client, server)
    ends = [threading.Thread(target=run, args=(f,), daemon=True)
            for f in (s.client_to_server, s.server_to_client)]
    for t in ends:
        t.start()
    ends[1].join()
    if s.hijack and s.established.is_set():
        try:
            open(f"{out_dir}/result").close()
        except FileNotFoundError:
            write("result", "closed\n")
    for x in (client, server):
        x.close()


def run(f):
    try:
        f()
    except (EOFError, OSError):
        pass


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
write("port.tmp", f"{listener.getsockname()[1]}\n")
os.rename(f"{out_dir}/port.tmp", f"{out_dir}/port")
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
