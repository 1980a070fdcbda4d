#!/usr/bin/env python3
"""A client of berth's previews for tests/integration/t480-previews.sh, with
what curl does not show: a WebSocket, requests on one kept connection, when
the bytes of a streamed answer arrive, and a plain TCP probe.

  preview_client.py ws URL COOKIE MESSAGE       one echo: prints it
  preview_client.py ws-hold URL COOKIE SECONDS  a message every 0.5 s; prints
                                                "cut after S s" or "open"
  preview_client.py keepalive URL COOKIE N      N GETs on one connection:
                                                "STATUS ..." then "conn 1"
  preview_client.py pair URL1 COOKIE1 URL2 COOKIE2
                                                two GETs on one connection (the
                                                same berth-web, any hosts):
                                                "STATUS BODY'S FIRST LINE" each
  preview_client.py stream URL COOKIE           "first S" and "end S": when
                                                the first and last body bytes
                                                arrived
  preview_client.py probe HOST PORT             "open" or "closed" (3 s)
  preview_client.py ctl SOCKET JSON             one request on hostd's webctl
                                                socket: its answer line, then
                                                "fds N" (descriptors passed)

URL is http(s)://HOST:PORT/PATH (HTTPS: the certificate is not checked);
COOKIE a Cookie header's value ("" none)."""
import base64
import http.client
import os
import socket
import ssl
import sys
import time
import urllib.parse


def split(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or 80, u.netloc, (u.path or "/") + (("?" + u.query) if u.query else "")


def ws_open(url, cookie):
    host, port, netloc, path = split(url)
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    if url.startswith("https:"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    head = (f"GET {path} HTTP/1.1\r\nHost: {netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")
    if cookie:
        head += f"Cookie: {cookie}\r\n"
    s.sendall((head + "\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            raise SystemExit("closed before the handshake's answer")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = head.split(b"\r\n")[0].decode()
    if " 101 " not in status + " ":
        raise SystemExit(f"no upgrade: {status}")
    return s, rest


def ws_send(s, text):
    data = text.encode()
    mask = os.urandom(4)
    hdr = bytes([0x81, 0x80 | len(data)]) if len(data) < 126 else \
        bytes([0x81, 0x80 | 126, len(data) >> 8, len(data) & 255])
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def ws_recv(s, rest):
    buf = rest
    while True:
        if len(buf) >= 2:
            n = buf[1] & 0x7f
            off = 2
            if n == 126 and len(buf) >= 4:
                n, off = buf[2] << 8 | buf[3], 4
            if n < 126 or off == 4:
                if len(buf) >= off + n:
                    return buf[off:off + n].decode(errors="replace"), buf[off + n:]
        d = s.recv(65536)
        if not d:
            return None, b""
        buf += d


def main():
    cmd = sys.argv[1]
    if cmd == "ws":
        s, rest = ws_open(sys.argv[2], sys.argv[3])
        ws_send(s, sys.argv[4])
        msg, _ = ws_recv(s, rest)
        print(msg)
    elif cmd == "ws-hold":
        s, rest = ws_open(sys.argv[2], sys.argv[3])
        t0 = time.time()
        s.settimeout(1)
        i = 0
        while time.time() - t0 < float(sys.argv[4]):
            try:
                ws_send(s, f"m{i}")
                msg, rest = ws_recv(s, rest)
            except (OSError, socket.timeout):
                msg = None
            if msg is None:
                print(f"cut after {time.time() - t0:.1f} s", flush=True)
                return
            i += 1
            time.sleep(0.5)
        print("open")
    elif cmd == "keepalive":
        host, port, netloc, path = split(sys.argv[2])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conns = 0
        for _ in range(int(sys.argv[4])):
            if c.sock is None:
                conns += 1
            c.putrequest("GET", path, skip_host=True)
            c.putheader("Host", netloc)
            if sys.argv[3]:
                c.putheader("Cookie", sys.argv[3])
            c.endheaders()
            r = c.getresponse()
            r.read()
            print(r.status, flush=True)
            time.sleep(float(os.environ.get("PAUSE", "0")))
        print(f"conn {conns}")
    elif cmd == "pair":
        port = split(sys.argv[2])[1]
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for url, cookie in ((sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])):
            host, _, netloc, path = split(url)
            c.putrequest("GET", path, skip_host=True)
            c.putheader("Host", netloc)
            if cookie:
                c.putheader("Cookie", cookie)
            c.endheaders()
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            print(r.status, (body.splitlines() or [""])[0][:80], flush=True)
            if c.sock is None:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    elif cmd == "stream":
        host, port, netloc, path = split(sys.argv[2])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.time()
        hdrs = {"Host": netloc}
        if sys.argv[3]:
            hdrs["Cookie"] = sys.argv[3]
        c.request("GET", path, headers=hdrs)
        r = c.getresponse()
        first = None
        while True:
            d = r.read1(65536)
            if not d:
                break
            if first is None:
                first = time.time() - t0
        print(f"first {first:.2f}")
        print(f"end {time.time() - t0:.2f}")
    elif cmd == "ctl":
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(sys.argv[2])
        try:
            s.sendall(sys.argv[3].encode() + b"\n")
        except BrokenPipeError:
            pass  # refused at accept: its line is there to read
        buf, fds, _, _ = socket.recv_fds(s, 65536, 4)
        while buf and b"\n" not in buf:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        print(buf.split(b"\n")[0].decode())
        print(f"fds {len(fds)}")
        for f in fds:
            os.close(f)
    elif cmd == "probe":
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((sys.argv[2], int(sys.argv[3])))
            print("open")
        except OSError:
            print("closed")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
