#!/usr/bin/env python3
"""A client of hostd's exec routes for the tests (t440): it speaks HTTP
itself, over hostd's UNIX socket or to its HTTP listener with a token, so
that a test sees the NDJSON stream as it arrives.

  exec_client.py [--sock S | --url http://H:P --token T] stream PATH BODY
      POST PATH with the JSON BODY; each line of the answer printed as
      "SECONDS LINE" (seconds since the request), stdout and stderr pieces
      decoded ({"stdout": "text"}); a non-2xx answer printed as
      "STATUS BODY", exit 1.
  ... stream-then PATH BODY ACTION...
      as stream, and after the first line (the id) runs each ACTION:
      "signal:TERM", "stdin:TEXT", "eof", "resize:COLSxROWS", "list", "sleep:S", "close"
      (drops the connection and exits).
  ... call METHOD PATH [BODY]
      one request; prints "STATUS BODY".
"""
import http.client
import json
import socket
import sys
import time
import base64


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("berth")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def connection(opts):
    if opts.get("sock"):
        return UnixConnection(opts["sock"])
    host = opts["url"].split("//", 1)[1].rstrip("/")
    return http.client.HTTPConnection(host)


def headers(opts, ctype="application/json"):
    h = {"Content-Type": ctype}
    if opts.get("token"):
        h["Authorization"] = "Bearer " + opts["token"]
    return h


def call(opts, method, path, body=None, ctype="application/json"):
    c = connection(opts)
    data = body if isinstance(body, bytes) or body is None else body.encode()
    c.request(method, path, body=data, headers=headers(opts, ctype))
    r = c.getresponse()
    out = normal(r.read().decode(errors="replace"))
    c.close()
    return r.status, out


def normal(text):
    """TEXT as JSON with sorted keys, when it is JSON."""
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except ValueError:
        return text


def shown(line):
    j = json.loads(line)
    for k in ("stdout", "stderr"):
        if k in j:
            j[k] = base64.b64decode(j[k]).decode(errors="replace")
    return json.dumps(j, sort_keys=True)


def action(opts, base, a):
    kind, _, arg = a.partition(":")
    if kind == "signal":
        print("signal", *call(opts, "POST", base + "/signal", json.dumps({"signal": arg})))
    elif kind == "stdin":
        print("stdin", *call(opts, "POST", base + "/stdin", arg.encode(),
                             "application/octet-stream"))
    elif kind == "resize":
        cols, rows = arg.split("x")
        print("resize", *call(opts, "POST", base + "/resize",
                              json.dumps({"cols": int(cols), "rows": int(rows)})))
    elif kind == "eof":
        print("eof", *call(opts, "POST", base + "/stdin?eof=1", b"",
                           "application/octet-stream"))
    elif kind == "list":
        print("list", *call(opts, "GET", base.rsplit("/", 1)[0]))
    elif kind == "sleep":
        time.sleep(float(arg))
    elif kind == "close":
        return False
    sys.stdout.flush()
    return True


def stream(opts, path, body, actions):
    t0 = time.monotonic()
    c = connection(opts)
    c.request("POST", path, body=body.encode(), headers=headers(opts))
    r = c.getresponse()
    if r.status // 100 != 2:
        print(r.status, normal(r.read().decode(errors="replace")))
        return 1
    first = True
    for raw in r:
        line = raw.decode().rstrip("\n")
        print("%.2f %s" % (time.monotonic() - t0, shown(line)))
        sys.stdout.flush()
        if first and actions:
            first = False
            base = "%s/%d" % (path, json.loads(line)["id"])
            for a in actions:
                if not action(opts, base, a):
                    c.sock.close()
                    return 0
    return 0


def main(argv):
    opts = {}
    while argv and argv[0].startswith("--"):
        opts[argv[0][2:]] = argv[1]
        argv = argv[2:]
    cmd = argv[0]
    if cmd == "stream":
        return stream(opts, argv[1], argv[2], [])
    if cmd == "stream-then":
        return stream(opts, argv[1], argv[2], argv[3:])
    if cmd == "call":
        status, out = call(opts, argv[1], argv[2], argv[3] if len(argv) > 3 else None)
        print(status, out)
        return 0
    print("exec_client.py: unknown command " + cmd, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
