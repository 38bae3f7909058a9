#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A man in the middle for the stagehand wire protocol (docs/PROTOCOL.md).

usage: wire-proxy.py [--every] PORT_FILE SERVER_HOST:PORT MODE LOG [HASH_HEX]

Listens on 127.0.0.1 (any free port, written into PORT_FILE) and relays
every connection to the server frame by frame. On the first connection
(on every one with --every), once the server's AUTH_OK has gone by (the
client is logged in), it tampers as MODE says; other connections are
relayed untouched:

  relay       nothing
  inject-list sends a LIST of its own (as the client's uid) before the
              client's first request, and swallows the answer
  inject-get  the same with a GET_CHUNK of HASH_HEX (32 hex digits)
  replay      sends the client's first request twice
  reorder     holds the client's first PUT_CHUNK back until its next frame
              has gone to the server

Every event goes to LOG, one line each: "injected LIST", "answered the
injected frame: LIST_REPLY", "server ERROR tag 0: TEXT", "server closed"...
A line "answered the ..." means that the server took the tampered frame for
the client's.
"""
import os
import socket
import struct
import sys
import threading

from wireframes import FLAG_MAC, MAC, error_text, frame, kind, listen_any, read_frame

TYPES = {1: "CHALLENGE", 2: "AUTH", 3: "AUTH_OK", 4: "ERROR", 5: "HAVE",
         6: "HAVE_REPLY", 7: "PUT_CHUNK", 8: "OK", 9: "PUT_MANIFEST",
         10: "MISSING", 11: "LIST", 12: "LIST_REPLY", 13: "GET_MANIFEST",
         14: "MANIFEST", 15: "GET_CHUNK", 16: "CHUNK", 17: "STAT",
         18: "STAT_REPLY", 22: "LIST_REPLY_FLAGS"}
INJECTED_TAG = 0xDEADBEEF

args = sys.argv[1:]
every = args[:1] == ["--every"]
if every:
    args = args[1:]
port_file, server, mode, log_path = args[:4]
chunk_hash = bytes.fromhex(args[4]) if len(args) > 4 else bytes(16)
host, port = server.rsplit(":", 1)
log_lock = threading.Lock()
first = threading.Lock()  # held for good by the connection that tampers


def log(conn_no, text):
    with log_lock, open(log_path, "a") as f:
        f.write(f"conn {conn_no}: {text}\n")


def forged(like, type_, body):
    """A frame of type_ in the connection's version, with a MAC of random
    bytes when that version carries MACs: what an attacker can make."""
    version = like[4]
    if version < 2:
        return frame(version, type_, body, INJECTED_TAG)
    return frame(version, type_, body, INJECTED_TAG, FLAG_MAC, os.urandom(MAC))


class Relay:
    def __init__(self, no, client, upstream, tamper):
        self.no, self.client, self.up = no, client, upstream
        self.tamper = tamper
        self.up_lock = threading.Lock()
        self.logged_in = False
        self.watched = {}  # tag -> what was done with the client's frame

    def to_server(self, f):
        with self.up_lock:
            self.up.sendall(f)

    def client_to_server(self):
        held = None
        while True:
            f = read_frame(self.client)
            if f is None:
                break
            t, tag = kind(f)
            if self.tamper and self.logged_in and mode == "replay" and t != 4:
                self.tamper = False
                self.watched[tag] = "replayed"
                log(self.no, f"replayed {TYPES.get(t, t)}")
                self.to_server(f + f)
                continue
            if self.tamper and self.logged_in and mode == "reorder":
                if held is None and t == 7:
                    held = f
                    continue
                if held is not None:
                    self.tamper = False
                    self.watched[kind(held)[1]] = "reordered"
                    log(self.no, f"reordered PUT_CHUNK after {TYPES.get(t, t)}")
                    self.to_server(f + held)
                    held = None
                    continue
            self.to_server(f)
        try:
            self.up.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def server_to_client(self):
        seen = {}
        while True:
            f = read_frame(self.up)
            if f is None:
                log(self.no, "server closed")
                break
            t, tag = kind(f)
            name = TYPES.get(t, str(t))
            if t == 4 and tag == 0:
                log(self.no, f"server ERROR tag 0: {error_text(f)[1]}")
            if tag == INJECTED_TAG:
                log(self.no, f"answered the injected frame: {name}")
                continue
            if tag in self.watched:
                seen[tag] = seen.get(tag, 0) + 1
                what = self.watched[tag]
                if what == "replayed" and seen[tag] == 2:
                    log(self.no, f"answered the replayed frame again: {name}")
                    continue
                if what == "reordered":
                    log(self.no, f"answered the reordered frame: {name}")
            if t == 3 and not self.logged_in:
                self.logged_in = True
                if self.tamper and mode in ("inject-list", "inject-get"):
                    self.tamper = False
                    if mode == "inject-list":
                        self.to_server(forged(f, 11, struct.pack("<HH", 0, 0)))
                        log(self.no, "injected LIST")
                    else:
                        self.to_server(forged(f, 15, chunk_hash))
                        log(self.no, "injected GET_CHUNK")
            try:
                self.client.sendall(f)
            except OSError:
                pass  # the client left: read on, to see the server close
        try:
            self.client.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(no, client):
    up = socket.create_connection((host, int(port)))
    tamper = mode != "relay" and (every or first.acquire(blocking=False))
    relay = Relay(no, client, up, tamper)
    log(no, "connected" + (f", tampering: {mode}" if tamper else ""))
    back = threading.Thread(target=relay.server_to_client, daemon=True)
    back.start()
    try:
        relay.client_to_server()
    except OSError:
        pass
    back.join()
    client.close()
    up.close()


def main():
    lsock = listen_any(port_file, 64)
    no = 0
    while True:
        client, _ = lsock.accept()
        no += 1
        threading.Thread(target=serve, args=(no, client), daemon=True).start()


main()
