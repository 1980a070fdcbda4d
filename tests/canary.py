#!/usr/bin/env python3
"""Listeners that log who came (tests/integration/t800-network.sh,
t805-user-network.sh): canaries a guest must never reach, and a test
internet's servers.

  canary.py LOG PROTO:ADDR:PORT...
      PROTO is tcp or udp; ADDR an IPv4 address, or an IPv6 one in
      brackets ("tcp:[::1]:8080"), IPv6 sockets being IPv6 only.  Each
      connection (tcp: accepted, then closed) and each datagram (udp:
      answered with "x") appends "PROTO ADDR PORT from PEER" to LOG.
      Prints "ready" once every socket listens; runs until killed.
"""
import socket
import sys
import threading


def parse(spec):
    proto, rest = spec.split(":", 1)
    addr, port = rest.rsplit(":", 1)
    if addr.startswith("["):
        return proto, addr[1:-1], int(port), socket.AF_INET6
    return proto, addr, int(port), socket.AF_INET


def bound(proto, addr, port, fam):
    s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    if proto == "tcp":
        s.listen(16)
    return s


def serve(log, proto, addr, port, s):
    while True:
        if proto == "tcp":
            c, a = s.accept()
            log.write("tcp %s %d from %s\n" % (addr, port, a[0]))
            c.close()
        else:
            _, a = s.recvfrom(2048)
            log.write("udp %s %d from %s\n" % (addr, port, a[0]))
            s.sendto(b"x", a)


def main():
    log = open(sys.argv[1], "a", buffering=1)
    for spec in sys.argv[2:]:
        proto, addr, port, fam = parse(spec)
        s = bound(proto, addr, port, fam)
        threading.Thread(target=serve, args=(log, proto, addr, port, s), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
