#!/usr/bin/env python3
"""A WebSocket client of berth-web's GET /v1/machines/NAME/exec/ws for the
tests (t460), on plain sockets (python3 has no websocket module here, and
node 20 no WebSocket client): RFC 6455's handshake and masked frames.

  ws_exec_client.py [--token T] [--timeout S] [--cafile F] [--no-pong] URL NAME FIRST ACTION...
      Opens ws://HOST:PORT/v1/machines/NAME/exec/ws (URL: http://HOST:PORT;
      https://HOST:PORT: wss, the server's certificate checked against F),
      with "Authorization: Bearer T" when --token is given, sends FIRST as
      its first text message (unless FIRST is "-"), then runs each ACTION
      in turn while the server's messages are printed as they come, one a
      line, "SECONDS WHAT DETAIL":
          id {"id": N}            text messages as they are (exit, error,
          exit {"exit": N}        refused...), named by their first key
          stdout "TEXT"           binary messages: output, as a JSON string
          stderr "TEXT"
          ping                    (answered with a pong, unless --no-pong:
                                  a client that RFC 6455 would not have)
          close CODE REASON       the server's close frame
          eof                     the connection ended without one
      and at the end "stdout-all "TEXT"" (all of stdout, joined: pieces may
      come apart or together) and "elapsed S".  A refused handshake prints
      "http STATUS BODY" and exits 1.
  ACTIONs:
      stdin:TEXT        a binary message (TEXT with \\n, \\r, \\x03 escapes)
      text:TEXT         a text message as is
      binary:HEX        a binary message of these bytes
      stdin-file:PATH   PATH's bytes as binary messages of 64 KiB
      binary-file:PATH  PATH's bytes as one binary message
      frame:HEX         raw bytes on the socket (a hand-made frame)
      resize:CxR        {"resize": {"cols": C, "rows": R}}
      signal:NAME       {"signal": NAME}
      eof               {"eof": true}
      wait:REGEX        until all of stdout so far matches REGEX (or the end)
      waitid            until the id message came
      sleep:S
      close[:CODE]      a close frame (default 1000); then waits for the
                        server's
      drop              closes the TCP connection, no close frame, and exits
"""
import base64
import hashlib
import json
import os
import re
import socket
import ssl
import struct
import sys
import threading
import time

t0 = time.monotonic()


def say(*parts):
    print("%.2f" % (time.monotonic() - t0), *parts, flush=True)


class Client:
    def __init__(self, url, name, token, timeout, cafile):
        host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        if url.startswith("https:"):
            ctx = ssl.create_default_context(cafile=cafile)
            self.s = ctx.wrap_socket(self.s, server_hostname=host)
        self.s.settimeout(None)
        key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET /v1/machines/{name}/exec/ws HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Key: {key}\r\n")
        if token is not None:
            head += f"Authorization: Bearer {token}\r\n"
        self.s.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            more = self.s.recv(4096)
            if not more:
                break
            data += more
        head, _, self.rest = data.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        status = int(lines[0].split()[1]) if len(lines[0].split()) > 1 else 0
        if status != 101:
            body = self.rest
            self.s.settimeout(2)
            try:
                while True:
                    more = self.s.recv(4096)
                    if not more:
                        break
                    body += more
            except OSError:
                pass
            say("http", status, body.decode(errors="replace").strip())
            sys.exit(1)
        want = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if hdrs.get("sec-websocket-accept") != want:
            say("bad-accept", hdrs.get("sec-websocket-accept"))
            sys.exit(1)
        self.lock = threading.Lock()
        self.cv = threading.Condition()
        self.stdout = b""
        self.id = None
        self.ended = False
        self.close_sent = False
        self.pong = True

    def send(self, op, payload):
        mask = os.urandom(4)
        n = len(payload)
        h = bytes([0x80 | op])
        if n < 126:
            h += bytes([0x80 | n])
        elif n < 65536:
            h += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            h += bytes([0x80 | 127]) + struct.pack(">Q", n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self.lock:
            if self.close_sent:
                return
            if op == 8:
                self.close_sent = True
            try:
                self.s.sendall(h + mask + body)
            except OSError as e:
                say("send-failed", e)

    def recv_exact(self, n):
        while len(self.rest) < n:
            more = self.s.recv(65536)
            if not more:
                raise EOFError
            self.rest += more
        out, self.rest = self.rest[:n], self.rest[n:]
        return out

    def reader(self):
        try:
            while True:
                b0, b1 = self.recv_exact(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self.recv_exact(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self.recv_exact(8))[0]
                if b1 & 0x80:
                    say("masked-frame-from-server")
                payload = self.recv_exact(n)
                op = b0 & 0x0F
                if op == 1:
                    j = json.loads(payload)
                    kind = next(iter(j)) if isinstance(j, dict) and j else "text"
                    if kind == "id":
                        with self.cv:
                            self.id = j["id"]
                            self.cv.notify_all()
                    say(kind, json.dumps(j, sort_keys=True))
                elif op == 2:
                    name = {1: "stdout", 2: "stderr"}.get(payload[0], "binary%d" % payload[0])
                    if payload[0] == 1:
                        with self.cv:
                            self.stdout += payload[1:]
                            self.cv.notify_all()
                    say(name, json.dumps(payload[1:].decode(errors="replace")))
                elif op == 9:
                    say("ping")
                    if self.pong:
                        self.send(10, payload)
                elif op == 8:
                    code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
                    reason = payload[2:].decode(errors="replace")
                    say("close", code, *([reason] if reason else []))
                    self.send(8, payload[:2])
                    break
                else:
                    say("opcode", op)
        except (EOFError, OSError):
            say("eof")
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def wait(self, cond, timeout):
        with self.cv:
            self.cv.wait_for(lambda: cond() or self.ended, timeout=timeout)


def unescape(s):
    return s.encode().decode("unicode_escape").encode("latin-1")


def main():
    args = sys.argv[1:]
    token, timeout, cafile, pong = None, 60.0, None, True
    while args and args[0].startswith("--"):
        if args[0] == "--no-pong":
            pong = False
            args = args[1:]
            continue
        if args[0] == "--token":
            token = args[1]
        elif args[0] == "--timeout":
            timeout = float(args[1])
        elif args[0] == "--cafile":
            cafile = args[1]
        args = args[2:]
    url, name, first, actions = args[0], args[1], args[2], args[3:]
    c = Client(url, name, token, timeout, cafile)
    c.pong = pong
    rd = threading.Thread(target=c.reader, daemon=True)
    rd.start()
    if first != "-":
        c.send(1, first.encode())
    for a in actions:
        what, _, arg = a.partition(":")
        if what == "stdin":
            c.send(2, unescape(arg))
        elif what == "text":
            c.send(1, arg.encode())
        elif what == "binary":
            c.send(2, bytes.fromhex(arg))
        elif what == "stdin-file":
            data = open(arg, "rb").read()
            for i in range(0, len(data), 65536):
                c.send(2, data[i:i + 65536])
        elif what == "binary-file":
            c.send(2, open(arg, "rb").read())
        elif what == "frame":
            with c.lock:
                c.s.sendall(bytes.fromhex(arg))
        elif what == "resize":
            cols, rows = arg.split("x")
            c.send(1, json.dumps({"resize": {"cols": int(cols), "rows": int(rows)}}).encode())
        elif what == "signal":
            c.send(1, json.dumps({"signal": arg}).encode())
        elif what == "eof":
            c.send(1, b'{"eof": true}')
        elif what == "wait":
            c.wait(lambda: re.search(arg.encode(), c.stdout), timeout)
        elif what == "waitid":
            c.wait(lambda: c.id is not None, timeout)
        elif what == "sleep":
            time.sleep(float(arg))
        elif what == "close":
            c.send(8, struct.pack(">H", int(arg or 1000)))
        elif what == "drop":
            c.s.shutdown(socket.SHUT_RDWR)
            c.s.close()
            say("dropped")
            return
    rd.join(timeout)
    say("stdout-all", json.dumps(c.stdout.decode(errors="replace")))
    say("elapsed", "%.2f" % (time.monotonic() - t0))


main()
