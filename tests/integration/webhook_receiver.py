#!/usr/bin/env python3
"""A webhook receiver for t650: an HTTP server on 127.0.0.1 (a free port,
written to PORT_FILE) that records every request as a JSON line in LOG:
its path, the X-Berth-* headers, its body, and whether its signature is
right for the secret in DIR/secret-NAME (NAME the path's first segment):
HMAC-SHA256(secret, TIMESTAMP + "." + BODY) in hex, as docs/api.md says
a receiver checks it, with a timestamp within five minutes.

What it answers depends on the path's first segment:
  ok     200
  fail2* 500 to the first two requests of a delivery (X-Berth-Delivery), then 200
  fail*  (else) 500 always
  hang*  the first request of a delivery gets no answer (60 s), later ones 200
  redir  302 to /ok (hostd must not follow it)
  other  200
With a fourth argument, CERT (a PEM file with the key and a self-signed
certificate), it speaks HTTPS.
"""
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, log_path, secret_dir = sys.argv[1:4]
lock = threading.Lock()
seen = {}  # (name, delivery) -> requests so far


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        name = self.path.strip("/").split("/")[0].split("?")[0]
        ts = self.headers.get("X-Berth-Timestamp", "")
        sig = self.headers.get("X-Berth-Signature", "")
        delivery = self.headers.get("X-Berth-Delivery", "")
        sig_ok = False
        try:
            with open(os.path.join(secret_dir, "secret-" + name)) as f:
                secret = f.read().strip()
            want = "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + body,
                                        hashlib.sha256).hexdigest()
            sig_ok = hmac.compare_digest(want, sig) and abs(time.time() - int(ts)) < 300
        except (OSError, ValueError):
            pass
        with lock:
            k = (name, delivery)
            seen[k] = seen.get(k, 0) + 1
            count = seen[k]
            rec = {"path": self.path, "name": name, "delivery": delivery,
                   "event": self.headers.get("X-Berth-Event", ""), "timestamp": ts,
                   "content_type": self.headers.get("Content-Type", ""),
                   "sig_ok": sig_ok, "body": body.decode("utf-8", "replace"),
                   "nth": count, "at": time.time()}
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if name.startswith("hang") and count == 1:
            time.sleep(60)
            return
        status = 200
        if name == "redir":
            self.send_response(302)
            self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if name.startswith("fail2"):
            if count <= 2:
                status = 500
        elif name.startswith("fail"):
            status = 500
        out = b'{"ok": true}' if status == 200 else b'{"error": "no"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
if len(sys.argv) > 4:
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[4])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
