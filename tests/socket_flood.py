#!/usr/bin/env python3
"""Connections to a UNIX socket that send nothing or next to nothing
(tests/integration/t420-socket-flood.sh).

  socket_flood.py hold SOCKET N STATUS
      Opens N connections one after the other and holds them, sending
      nothing.  Every 0.25 s rewrites STATUS (atomically) with one line:
        connected=0|1 opened=X failed=Y open=Z age=S
      opened: connect() succeeded; failed: connect() failed; open: those
      the server has not closed (not readable, no hang-up: it never
      sends unasked); age: seconds since the last connect().  Runs until
      killed.

  socket_flood.py storm SOCKET SECONDS
      Connects and closes at once (non-blocking connects: a full backlog
      is a failure, not a wait), as fast as it can, for SECONDS, then
      prints "connects=X failed=Y per_second=Z".

  socket_flood.py slow SOCKET
      Sends an HTTP request head (100 bytes) one byte a second and prints
      "cut after S s, B bytes sent" when the server closes the
      connection ("answered ..." if it answers, "not cut ..." after 60 s).
"""
import os
import select
import socket
import sys
import time


def hold(path, n, status):
    socks, failed = [], 0
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            socks.append(s)
        except OSError:
            failed += 1
            s.close()
    t_last = time.monotonic()
    while True:
        p = select.poll()
        for s in socks:
            p.register(s, select.POLLIN)
        gone = {fd for fd, _ in p.poll(0)}
        alive = sum(1 for s in socks if s.fileno() not in gone)
        tmp = status + ".tmp"
        with open(tmp, "w") as f:
            f.write("connected=1 opened=%d failed=%d open=%d age=%.2f\n"
                    % (len(socks), failed, alive, time.monotonic() - t_last))
        os.rename(tmp, status)
        time.sleep(0.25)


def storm(path, seconds):
    ok, failed = 0, 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
            ok += 1
        except OSError:
            failed += 1
        s.close()
    took = time.monotonic() - t0
    print("connects=%d failed=%d per_second=%d" % (ok, failed, (ok + failed) / took), flush=True)


def slow(path):
    head = (b"GET /v1/info HTTP/1.1\r\nHost: berth\r\nX-Pad: " + b"a" * 60 +
            b"\r\n\r\n")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    t0 = time.monotonic()
    sent, what = 0, "not cut"
    while time.monotonic() - t0 < 60 and sent < len(head):
        try:
            s.send(head[sent:sent + 1])
            sent += 1
        except OSError:
            what = "cut"
            break
        r, _, _ = select.select([s], [], [], 1.0)
        if r:
            try:
                data = s.recv(4096, socket.MSG_DONTWAIT)
            except OSError:
                data = b""
            what = "answered" if data else "cut"
            break
    print("%s after %.1f s, %d bytes sent" % (what, time.monotonic() - t0, sent))


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "storm":
        storm(sys.argv[2], float(sys.argv[3]))
    else:
        slow(sys.argv[2])
