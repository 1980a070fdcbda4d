#!/usr/bin/env python3
"""Raw bytes to an HTTP server, for the probes curl cannot make (t480,
t610): framing and header lines as a smuggler writes them, a client that
half-closes after its request.

  raw_http.py [--shut] [--wait S] [--tls] HOST PORT REQUEST

REQUEST is sent as it is, after its escapes are decoded (\\r, \\n, \\t,
\\xHH, \\\\); --shut then shuts down the sending side (shutdown(SHUT_WR)),
as a client that has nothing more to say does.  What the server sends is
printed as it came (bytes above 0x7f as \\xHH), until it closes or
nothing came for S seconds (default 10); then a last line "END closed"
or "END quiet"."""
import socket
import ssl
import sys


def main():
    args = sys.argv[1:]
    shut, wait, tls = False, 10.0, False
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--shut":
            shut = True
        elif opt == "--wait":
            wait = float(args.pop(0))
        elif opt == "--tls":
            tls = True
        else:
            raise SystemExit(__doc__)
    if len(args) != 3:
        raise SystemExit(__doc__)
    host, port, req = args[0], int(args[1]), args[2]
    data = req.encode("latin-1").decode("unicode_escape").encode("latin-1")
    s = socket.create_connection((host, port), timeout=wait)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s, server_hostname=host)
    s.sendall(data)
    if shut:
        s.shutdown(socket.SHUT_WR)
    out = b""
    end = "closed"
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            end = "quiet"
            break
        except OSError:
            break
        if not d:
            break
        out += d
    text = "".join(chr(b) if b < 0x80 else "\\x%02x" % b for b in out)
    sys.stdout.write(text)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    print("END " + end)


if __name__ == "__main__":
    main()
