#!/usr/bin/python3
"""A raw Connect-protocol client (JSON codec, HTTP/1.1) for berth-web's envd
(web/envd.c), for t670: it builds the request envelopes itself and checks
the answers' framing byte by byte, as the e2b SDK's connect-web expects it.

  connect_client.py --port P --host H [--token T] [--user U] [--timeout-ms N]
                    [--keepalive S] COMMAND ...

  unary PATH JSON        POST PATH, application/json: prints "STATUS BODY"
  stream PATH JSON [N]   (--repeat R: R times, printing "repeat MS", the mean)
                         POST PATH, one envelope (application/connect+json):
                         prints each message envelope "msg JSON" as it
                         arrives (with the seconds since the request) and
                         the end "end JSON"; with N, closes the connection
                         after N messages ("cut").  Fails (exit 3, "bad
                         ...") on a framing error: a status other than 200,
                         another Content-Type, no chunked encoding, an
                         envelope whose flags are not 0 or 2, a message
                         that is not JSON, bytes after the end-stream, a
                         body that ends without it.
  raw PATH CTYPE HEXBODY POST the bytes as they are: prints "STATUS BODY"
  get PATH               GET: prints "STATUS LENGTH SHA256" (Content-Length
                         header value or "-"), body to --out
  post PATH CTYPE FILE [ENC]  POST FILE's bytes with that Content-Type (and
                         Content-Encoding ENC): "STATUS BODY"
  multipart PATH NAME=FILE...  POST multipart/form-data, one part per file,
                         name="file", filename=NAME: "STATUS BODY"
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import sys
import time


def conn(a):
    return http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.wait)


def headers(a, ctype=None):
    h = {"Host": a.host, "Connect-Protocol-Version": "1"}
    if a.token:
        h["X-Access-Token"] = a.token
    if a.user:
        h["Authorization"] = "Basic " + base64.b64encode((a.user + ":").encode()).decode()
    if a.timeout_ms:
        h["Connect-Timeout-Ms"] = str(a.timeout_ms)
    if a.keepalive:
        h["Keepalive-Ping-Interval"] = str(a.keepalive)
    if a.sandbox:
        h["E2b-Sandbox-Id"] = a.sandbox
    if ctype:
        h["Content-Type"] = ctype
    return h


def bad(why):
    print("bad " + why, flush=True)
    sys.exit(3)


def read_exact(r, n):
    out = b""
    while len(out) < n:
        piece = r.read(n - len(out))
        if not piece:
            return out
        out += piece
    return out


def cmd_stream(a, path, body, cut):
    payload = body.encode()
    env = bytes([0]) + len(payload).to_bytes(4, "big") + payload
    c = conn(a)
    t0 = time.monotonic()
    c.request("POST", path, body=env, headers=headers(a, "application/connect+json"))
    r = c.getresponse()
    if r.status != 200:
        bad("status %d: %r" % (r.status, r.read()[:300]))
    if r.getheader("Content-Type") != "application/connect+json":
        bad("content-type %r" % r.getheader("Content-Type"))
    if (r.getheader("Transfer-Encoding") or "").lower() != "chunked":
        bad("not chunked: %r" % r.getheader("Transfer-Encoding"))
    n = 0
    while True:
        h = read_exact(r, 5)
        if len(h) == 0:
            bad("the body ended without an end-stream envelope")
        if len(h) < 5:
            bad("a cut envelope header %r" % h)
        flags, length = h[0], int.from_bytes(h[1:5], "big")
        if flags not in (0, 2):
            bad("envelope flags %d" % flags)
        data = read_exact(r, length)
        if len(data) != length:
            bad("an envelope of %d bytes cut at %d" % (length, len(data)))
        try:
            j = json.loads(data)
        except ValueError:
            bad("an envelope that is not JSON: %r" % data[:200])
        if not isinstance(j, dict):
            bad("an envelope that is not an object")
        t = time.monotonic() - t0
        if flags == 2:
            rest = r.read()
            if rest:
                bad("%d bytes after the end-stream envelope" % len(rest))
            print("%.2f end %s" % (t, json.dumps(j, sort_keys=True)), flush=True)
            return
        print("%.2f msg %s" % (t, json.dumps(j, sort_keys=True)), flush=True)
        n += 1
        if cut and n >= cut:
            c.sock.close()
            print("%.2f cut" % t, flush=True)
            return


def show(r):
    body = r.read()
    try:
        body = json.dumps(json.loads(body), sort_keys=True)
    except ValueError:
        # (an envelope's binary head shown as dots)
        body = "".join(ch if " " <= ch else "." for ch in body.decode("utf-8", "replace"))
    print("%d %s" % (r.status, body), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="localhost")
    p.add_argument("--token")
    p.add_argument("--user")
    p.add_argument("--sandbox")
    p.add_argument("--timeout-ms", type=int)
    p.add_argument("--keepalive", type=int)
    p.add_argument("--wait", type=float, default=300)
    p.add_argument("--out")
    p.add_argument("--repeat", type=int, default=0,
                   help="stream: N times, quietly; prints 'repeat MS', the mean")
    p.add_argument("cmd")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    if a.cmd == "stream" and a.repeat:
        import contextlib
        import io
        t0 = time.monotonic()
        for _ in range(a.repeat):
            with contextlib.redirect_stdout(io.StringIO()):
                cmd_stream(a, a.args[0], a.args[1], 0)
        print("repeat %.0f" % ((time.monotonic() - t0) * 1000 / a.repeat))
        return
    if a.cmd == "stream":
        cmd_stream(a, a.args[0], a.args[1], int(a.args[2]) if len(a.args) > 2 else 0)
        return
    c = conn(a)
    if a.cmd == "unary":
        c.request("POST", a.args[0], body=a.args[1].encode(),
                  headers=headers(a, "application/json"))
        show(c.getresponse())
    elif a.cmd == "raw":
        c.request("POST", a.args[0], body=bytes.fromhex(a.args[2]),
                  headers=headers(a, a.args[1]))
        show(c.getresponse())
    elif a.cmd == "get":
        c.request("GET", a.args[0], headers=headers(a))
        r = c.getresponse()
        body = r.read()
        if a.out:
            with open(a.out, "wb") as f:
                f.write(body)
        if r.status != 200:
            print("%d %s" % (r.status, body.decode("utf-8", "replace")), flush=True)
        else:
            print("%d %s %s" % (r.status, r.getheader("Content-Length") or "-",
                                hashlib.sha256(body).hexdigest()), flush=True)
    elif a.cmd == "post":
        with open(a.args[2], "rb") as f:
            data = f.read()
        h = headers(a, a.args[1])
        if len(a.args) > 3:
            h["Content-Encoding"] = a.args[3]
        c.request("POST", a.args[0], body=data, headers=h)
        show(c.getresponse())
    elif a.cmd == "multipart":
        b = "berthpart" + os.urandom(8).hex()
        body = b""
        for spec in a.args[1:]:
            name, fn = spec.split("=", 1)
            with open(fn, "rb") as f:
                data = f.read()
            body += (("--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n")
                     % (b, name)).encode() + data + b"\r\n"
        body += ("--%s--\r\n" % b).encode()
        c.request("POST", a.args[0], body=body,
                  headers=headers(a, "multipart/form-data; boundary=" + b))
        show(c.getresponse())
    else:
        sys.exit("unknown command " + a.cmd)


if __name__ == "__main__":
    main()
