#!/usr/bin/python3
"""An HTTPS API for the credential broker's tests and benchmark (t470,
bench/broker.py): it answers only a request whose header NAME has VALUE
(else 401), the way a model API does.

  broker_upstream.py --listen ADDR:PORT --cert PEM --key PEM
                     --header NAME --value VALUE [--value VALUE2...]
                     [--plain ADDR:PORT] [--log FILE]

Paths (under any prefix; the last segment decides):
  .../echo    any method: {"method", "path", "query", "body_len",
              "body_sha256", "headers": {lower-case name: value}} (the
              key's value shown as "<right>"); the body may be chunked
  .../sse     ?n=N&gap=S: text/event-stream, chunked, N events "data: I",
              S seconds apart
  .../bytes   ?n=N: N bytes, with a Content-Length
  .../stream  ?n=N: N bytes, chunked (64 KiB a chunk)
  .../slow    ?s=S: answers after S seconds
--plain also serves the same over HTTP (the benchmark's direct baseline).
Each request is a JSON line in the log: method, path, status, the headers'
names.  Prints "ready" when it listens.
"""
import argparse
import hashlib
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOG_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # As real APIs answer: a head and its body in separate writes must not
    # wait for the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def note(self, status):
        if not ARGS.log:
            return
        with LOG_LOCK, open(ARGS.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "status": status,
                                "headers": sorted(k.lower() for k in self.headers.keys())})
                    + "\n")

    def body(self):
        n = self.headers.get("Content-Length")
        if n is not None:
            return self.rfile.read(int(n))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def send_json(self, status, obj):
        data = json.dumps(obj).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.note(status)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        body = self.body()
        if self.headers.get(ARGS.header) not in ARGS.value:
            self.send_json(401, {"error": "wrong or missing %s" % ARGS.header})
            return
        last = url.path.rstrip("/").rsplit("/", 1)[-1]
        if last == "echo":
            headers = {k.lower(): v for k, v in self.headers.items()}
            headers[ARGS.header.lower()] = "<value %d>" % (
                ARGS.value.index(self.headers.get(ARGS.header)) + 1)
            self.send_json(200, {"method": self.command, "path": url.path, "query": url.query,
                                 "body_len": len(body),
                                 "body_sha256": hashlib.sha256(body).hexdigest(),
                                 "headers": headers})
        elif last == "sse":
            n, gap = int(q.get("n", ["3"])[0]), float(q.get("gap", ["1"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                if i:
                    time.sleep(gap)
                self.chunk(b"data: %d\n\n" % i)
            self.chunk(b"")
            self.note(200)
        elif last in ("bytes", "stream"):
            n = int(q.get("n", ["1048576"])[0])
            block = b"x" * 65536
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if last == "bytes":
                self.send_header("Content-Length", str(n))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            left = n
            while left > 0:
                piece = block[:min(left, len(block))]
                if last == "bytes":
                    self.wfile.write(piece)
                else:
                    self.chunk(piece)
                left -= len(piece)
            if last == "stream":
                self.chunk(b"")
            self.note(200)
        elif last == "slow":
            time.sleep(float(q.get("s", ["5"])[0]))
            self.send_json(200, {"slow": True})
        else:
            self.send_json(404, {"error": "no such path"})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(listen, tls):
    host, port = listen.rsplit(":", 1)
    srv = Server((host, int(port)), Handler)
    # (inherited by the connections: TLS 1.3's session tickets go out at
    # the handshake, before the handler's own setting)
    srv.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ARGS.cert, ARGS.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--plain")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--header", required=True)
    p.add_argument("--value", required=True, action="append")
    p.add_argument("--log")
    ARGS = p.parse_args()
    serve(ARGS.listen, True)
    if ARGS.plain:
        serve(ARGS.plain, False)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    sys.exit(main())
