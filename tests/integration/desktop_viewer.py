"""A raw RFB viewer over berth-desktop's WebSocket, for t720.

  desktop_viewer.py PORT try USER/NAME QUERY
      One WebSocket request (/ws/USER/NAME?QUERY): prints the status code
      and the error's code ("101 -" when it was taken).
  desktop_viewer.py PORT revoke USER/NAME TOKEN_A TOKEN_B -- CMD...
      Viewers A (and B, unless TOKEN_B is ""), each through the RFB
      handshake and until the page's /state says "connected" ("connected"
      for each); then runs CMD; then "cut" when A's connection ends within
      5 s ("alive" when not), the status code of A coming back with its
      resume key, the state /state then gives A, and for B "alive" when it
      still gets a frame (after 2 s more) or "cut".
  desktop_viewer.py PORT watch USER/NAME TOKEN SECONDS
      A viewer connects ("connected", flushed), then waits up to SECONDS
      for its connection to end: "cut T" (T: the wall clock then) or
      "alive"; then as revoke: its resume code and state.
  desktop_viewer.py PORT comeback USER/NAME TOKEN SECONDS
      A viewer connects ("connected"), leaves, and after SECONDS comes back
      with its resume key: the status code, its state, and "frame" when
      it gets a whole-screen update ("noframe" when not).
"""
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
import urllib.request

PORT = int(sys.argv[1])


class Viewer:
    def __init__(self, path, query):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
        self.s.sendall((f"GET /ws/{path}?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Origin: http://127.0.0.1\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            b = self.s.recv(65536)
            if not b:
                break
            data += b
        head, _, rest = data.partition(b"\r\n\r\n")
        self.code = head.split(b" ")[1].decode() if head else "none"
        while self.code != "101":  # a refusal: its body, to the end
            try:
                b = self.s.recv(65536)
            except OSError:
                b = b""
            if not b:
                break
            rest += b
        self.body = rest
        self.buf = rest if self.code == "101" else b""
        self.closed = False

    def error_code(self):
        try:
            return json.loads(self.body)["error"]["code"]
        except Exception:
            return "-"

    def _frame(self, deadline):
        """Reads one WebSocket frame's payload into buf; False when the
        connection ended (or a close frame came), None at the deadline."""
        def need(n):
            while len(self.raw) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.s], [], [], left)[0]:
                    return None
                try:
                    b = self.s.recv(65536)
                except OSError:
                    b = b""
                if not b:
                    return False
                self.raw += b
            return True
        for n in (2,):
            r = need(n)
            if r is not True:
                return r
        op, ln = self.raw[0] & 0x0F, self.raw[1] & 0x7F
        off = 2
        if ln == 126:
            r = need(4)
            if r is not True:
                return r
            ln, off = struct.unpack(">H", self.raw[2:4])[0], 4
        elif ln == 127:
            r = need(10)
            if r is not True:
                return r
            ln, off = struct.unpack(">Q", self.raw[2:10])[0], 10
        r = need(off + ln)
        if r is not True:
            return r
        payload, self.raw = self.raw[off:off + ln], self.raw[off + ln:]
        if op == 8:
            return False
        if op in (0, 1, 2):
            self.buf += payload
        return True

    def read(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            r = self._frame(deadline)
            if not r:
                raise EOFError("closed" if r is False else "timeout")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, data):
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n))
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def rfb_init(self):
        self.raw, self.buf = self.buf, b""
        self.read(12)
        self.send(b"RFB 003.008\n")
        ntypes = self.read(1)[0]
        types = self.read(ntypes)
        assert 1 in types, types
        self.send(b"\x01")
        assert self.read(4) == b"\0\0\0\0"
        self.send(b"\x01")  # shared
        init = self.read(24)
        self.w, self.h = struct.unpack(">HH", init[:4])
        self.read(struct.unpack(">I", init[20:24])[0])

    def gone_within(self, seconds):
        """Whether the connection ends within SECONDS (what comes is read and
        dropped)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            r = self._frame(deadline)
            if r is False:
                return True
            self.buf = b""
        return False

    def gets_frame(self):
        """Whether a whole-screen update request is answered."""
        try:
            self.send(struct.pack(">BBHHHH", 3, 0, 0, 0, self.w, self.h))
            return self.read(4, timeout=10)[0] == 0  # FramebufferUpdate
        except (EOFError, OSError):
            return False


def state(token, key=None):
    shown = f"&resume={key}" if key else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/state?token={token}{shown}") as r:
        return json.load(r)


def connect(path, token):
    v = Viewer(path, f"token={token}")
    if v.code != "101":
        print(f"refused {v.code} {v.error_code()}")
        sys.exit(0)
    v.rfb_init()
    v.key = None
    for _ in range(600):
        st = state(token)
        v.key = v.key or st.get("resume")
        if st.get("state") == "connected":
            break
        time.sleep(0.1)
    print(st.get("state"), end=" ", flush=True)
    return v


def main():
    mode = sys.argv[2]
    if mode == "try":
        v = Viewer(sys.argv[3], sys.argv[4])
        print(v.code, v.error_code() if v.code != "101" else "-")
        return
    if mode == "watch":
        path, token, wait = sys.argv[3], sys.argv[4], float(sys.argv[5])
        v = connect(path, token)
        print(flush=True)
        if v.gone_within(wait):
            print("cut", f"{time.time():.2f}", end=" ")
        else:
            print("alive", end=" ")
        back = Viewer(path, f"resume={v.key or 'none'}")
        print(back.code, state(token, v.key).get("state"))
        return
    if mode == "comeback":
        path, token, wait = sys.argv[3], sys.argv[4], float(sys.argv[5])
        v = connect(path, token)
        v.s.close()
        time.sleep(wait)
        back = Viewer(path, f"resume={v.key}")
        print(back.code, end=" ")
        if back.code != "101":
            print(state(token, v.key).get("state"))
            return
        back.rfb_init()
        for _ in range(300):
            st = state(token, v.key)
            if st.get("state") == "connected":
                break
            time.sleep(0.1)
        print(st.get("state"), "frame" if back.gets_frame() else "noframe")
        return
    path, ta, tb = sys.argv[3], sys.argv[4], sys.argv[5]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    a = connect(path, ta)
    b = connect(path, tb) if tb else None
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    print("cut" if a.gone_within(5) else "alive", end=" ")
    if not a.key:
        print("nokey", end=" ")
    back = Viewer(path, f"resume={a.key or 'none'}")
    print(back.code, end=" ")
    print(state(ta, a.key).get("state"), end="")
    if b:
        time.sleep(2)
        print(" alive" if b.gets_frame() else " cut", end="")
    print()


main()
