#!/usr/bin/env python3
"""Desktop benchmark: berth-desktop (browser protocol: WebSocket + RFB)
against an RFB client connected straight to QEMU's VNC socket, in the same
run, on one machine whose guest redraws its whole screen continuously (the
VGA text console, 720x400: every cell's background flips between two
colours, so every pixel changes each redraw).

  - updates per second a client receives (goal: bridge >= 0.95 of direct),
    encodings raw and zrle;
  - bytes per update;
  - the same through the bridge while a second, stalled viewer (it never
    reads) is connected: a slow viewer must not slow the others;
  - the cap: a bridge with --max-fps 10;
  - input-to-pixel latency: a key event to the first update that shows
    the echoed character (redraw stopped), median of N.

  - churn: N viewers that each take one update and reset their connection
    in the middle of the next (the bridge must live on).

The same at 1280x800 (--part fb, or all): the tiny-fb image (tiny with
bochs-drm, /dev/fb0 1280x800x32) redraws its whole screen in one of two
ways (--fb-redraw, default both, one after the other):
  - flip: the guest's fbflip (images/recipes/tiny-fb/fbflip.c) shows three
    whole frames (black, white, grey) in video memory in turn by page
    flipping, --flip-rate times a second (60): every frame is complete and
    the guest spends almost no CPU, so this measures the display path;
  - copy: the guest writes two prepared whole frames (black, white) to
    /dev/fb0 in turn with `cat`, which under TCG is bound by how fast the
    emulated CPU copies 4 MB.
Besides updates/s it prints whole screens/s
(pixels received / 1280x800: the frame rate a viewer sees), the guest's
own rate of frames written (a counter it keeps, read before and after each
measurement) and that rate with no viewer at all, to tell the guest from
QEMU and from the bridge, and the CPU used by QEMU, the bridge and the
client; the goal is >= 30 whole screens/s.  Then input-to-pixel at
1280x800 (the redraw stopped; the key's echo is a glyph drawn by fbcon).

Usage: bench/run desktop [--seconds S] [--rounds N] [--keys N] [--churn N]
                         [--part text|fb|all] [--max-fps N]
                         [--fb-redraw flip|copy|both] [--flip-rate N]
"""
import argparse
import base64
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

from berthbench import BIN, free_port, hostd



class Stream:
    """Bytes from a socket, optionally unwrapped from WebSocket frames."""

    def __init__(self, sock, ws=False):
        self.s = sock
        self.ws = ws
        self.buf = bytearray()
        self.raw = bytearray()
        self.nbytes = 0

    def _fill_raw(self, n):
        while len(self.raw) < n:
            b = self.s.recv(1 << 20)
            if not b:
                raise EOFError("connection closed")
            self.raw += b

    def _fill(self):
        if not self.ws:
            b = self.s.recv(1 << 20)
            if not b:
                raise EOFError("connection closed")
            self.nbytes += len(b)
            self.buf += b
            return
        self._fill_raw(2)
        op, ln = self.raw[0] & 0x0F, self.raw[1] & 0x7F
        hl = 2
        if ln == 126:
            self._fill_raw(4)
            ln, hl = struct.unpack(">H", self.raw[2:4])[0], 4
        elif ln == 127:
            self._fill_raw(10)
            ln, hl = struct.unpack(">Q", self.raw[2:10])[0], 10
        self._fill_raw(hl + ln)
        payload = bytes(self.raw[hl:hl + ln])
        del self.raw[:hl + ln]
        self.nbytes += hl + ln
        if op in (1, 2, 0):
            self.buf += payload
        elif op == 8:
            raise EOFError("websocket closed")

    def read(self, n):
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def send(self, data):
        if self.ws:
            mask = os.urandom(4)
            n = len(data)
            head = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else
                                    bytes([0x80 | 126]) + struct.pack(">H", n))
            data = head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.s.sendall(data)


class RFB:
    def __init__(self, stream, encodings):
        self.st = stream
        self.pixels = 0  # pixels received (raw and zrle rectangles)
        st = stream
        ver = st.read(12)
        if not ver.startswith(b"RFB "):
            raise RuntimeError(f"not RFB: {ver!r}")
        st.send(b"RFB 003.008\n")
        n = st.read(1)[0]
        types = st.read(n)
        if 1 not in types:
            raise RuntimeError(f"no security type None: {list(types)}")
        st.send(b"\x01")
        if struct.unpack(">I", st.read(4))[0] != 0:
            raise RuntimeError("security failed")
        st.send(b"\x01")  # shared
        self.w, self.h = struct.unpack(">HH", st.read(4))
        st.read(16)
        st.read(struct.unpack(">I", st.read(4))[0])
        # 32 bpp, depth 24, little endian, true colour, 8 bits each.
        st.send(struct.pack(">BxxxBBBBHHHBBBxxx", 0, 32, 24, 0, 1, 255, 255, 255, 16, 8, 0))
        st.send(struct.pack(">BxH", 2, len(encodings)) +
                b"".join(struct.pack(">i", e) for e in encodings))

    def request(self, incremental=True):
        self.st.send(struct.pack(">BBHHHH", 3, 1 if incremental else 0, 0, 0, self.w, self.h))

    def key(self, keysym, down):
        self.st.send(struct.pack(">BBxxI", 4, 1 if down else 0, keysym))

    def message(self):
        """Read one server message; returns the number of rectangles of a
        FramebufferUpdate, else -1."""
        st = self.st
        t = st.read(1)[0]
        if t == 0:
            st.read(1)
            nrect = struct.unpack(">H", st.read(2))[0]
            for _ in range(nrect):
                x, y, w, h, enc = struct.unpack(">HHHHi", st.read(12))
                if enc == 0:
                    st.read(w * h * 4)
                    self.pixels += w * h
                elif enc == 16:
                    st.read(struct.unpack(">I", st.read(4))[0])
                    self.pixels += w * h
                elif enc == 1:
                    st.read(4)
                elif enc in (-223, -308):
                    self.w, self.h = w, h
                    if enc == -308:
                        ns = st.read(4)[0]
                        st.read(16 * ns)
                else:
                    raise RuntimeError(f"unexpected encoding {enc}")
            return nrect
        if t == 1:
            st.read(3)
            n = struct.unpack(">H", st.read(2))[0]
            st.read(6 * n)
        elif t == 2:
            pass
        elif t == 3:
            st.read(3)
            st.read(struct.unpack(">I", st.read(4))[0])
        else:
            raise RuntimeError(f"unexpected message {t}")
        return -1


def direct(vnc_sock):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(vnc_sock)
    return Stream(s)


def bridged(port, machine, token):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws/root/{machine}?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: http://127.0.0.1\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            raise RuntimeError("bridge closed during the handshake")
        head += b
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"bridge refused: {head!r}")
    return Stream(s, ws=True)


def measure(stream, encodings, seconds):
    """Updates per second, bytes per update and whole screens per second
    (pixels received / (width x height)) over SECONDS."""
    r = RFB(stream, encodings)
    r.request(False)
    # Settle: the first full update.
    while r.message() < 0:
        pass
    n, t0, b0, p0 = 0, time.monotonic(), stream.nbytes, r.pixels
    end = t0 + seconds
    r.request()
    while time.monotonic() < end:
        if r.message() > 0:
            n += 1
            r.request()
    dt = time.monotonic() - t0
    stream.s.close()
    return n / dt, (stream.nbytes - b0) / max(n, 1), (r.pixels - p0) / (r.w * r.h) / dt


def latency(stream, keys):
    """Median ms from a key event to the update that shows its echo."""
    r = RFB(stream, [0])
    r.request(False)
    while r.message() < 0:
        pass
    xs = []
    stream.s.settimeout(5)
    for i in range(keys):
        ks = 0x61 + (i % 26) if i % 2 == 0 else 0xFF08  # a letter, then BackSpace
        r.request()
        time.sleep(0.05)
        t0 = time.monotonic()
        r.key(ks, True)
        r.key(ks, False)
        try:
            while r.message() <= 0:
                pass
        except socket.timeout:
            continue
        xs.append((time.monotonic() - t0) * 1000)
        time.sleep(0.1)
        stream.s.settimeout(0.3)
        try:  # drain what follows (cursor, echo's tail)
            while True:
                r.request()
                r.message()
        except (socket.timeout, BlockingIOError):
            pass
        stream.s.settimeout(5)
    stream.s.close()
    return xs


def input_to_pixel(label, vnc, port, h, name, keys):
    """Prints the median input-to-pixel latency, direct and bridged."""
    ld = latency(direct(vnc), keys)
    lb = latency(bridged(port, name, token(h, name)), keys)
    if ld and lb:
        print(f"{label}input-to-pixel: direct median {statistics.median(ld):6.1f} ms "
              f"(n={len(ld)}) | bridge median {statistics.median(lb):6.1f} ms "
              f"(n={len(lb)}) | added {statistics.median(lb) - statistics.median(ld):+.1f} ms")
    else:
        print(f"{label}input-to-pixel: no echo seen")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--churn", type=int, default=50)
    ap.add_argument("--only-churn", action="store_true")
    ap.add_argument("--max-fps", type=int, default=60,
                    help="the bridge's --max-fps (its pacing: 1000/N ms after damage)")
    ap.add_argument("--part", choices=("text", "fb", "all"), default="all",
                    help="text: the 720x400 console (and churn, latency); fb: 1280x800")
    ap.add_argument("--fb-redraw", choices=("flip", "copy", "both"), default="both",
                    help="how the 1280x800 guest redraws: page flips, copies to /dev/fb0, or both")
    ap.add_argument("--flip-rate", type=int, default=60,
                    help="page flips per second the 1280x800 guest makes (--fb-redraw flip)")
    a = ap.parse_args()
    with hostd() as h:
        procs = []

        def bridge(fps):
            port = free_port()
            logdir = os.environ.get("BERTH_BENCH_LOGS", h.state)
            log = open(os.path.join(logdir, f"desktop-{port}.log"), "w")
            p = subprocess.Popen([os.path.join(BIN, "berth-desktop"), "--state", h.state,
                                  "--listen", f"127.0.0.1:{port}", "--max-fps", str(fps)],
                                 stdout=log, stderr=log)
            procs.append(p)
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.1)
            return port

        try:
            # desktop_url does not matter: the bench speaks to the bridge itself.
            port = bridge(a.max_fps)
            if a.part in ("text", "all"):
                rc = text_part(h, a, port, bridge, procs)
                if rc is not None:
                    return rc
            if a.part in ("fb", "all"):
                fb_part(h, a, port, procs[0].pid)
        finally:
            for p in procs:
                p.terminate()
                p.wait()


def vnc_socket(h, name):
    mid = json.loads(h.must("show", name, "--json").stdout)["id"]
    return os.path.join(h.state, "machines", mid, "vnc.sock")


def token(h, name):
    return json.loads(h.must("desktop", name, "--json").stdout)["token"]


def text_part(h, a, port, bridge, procs):
    """The 720x400 VGA text console of the tiny image: churn, rates,
    a stalled viewer, the cap, input-to-pixel.  Returns an exit status to
    stop with, or None."""
    h.must("create", "db", "--memory", "256M", "--idle", "never")
    vnc = vnc_socket(h, "db")
    # The guest redraws its whole console, two colours in turn.
    redraw = ("echo $$ >/tmp/redraw.pid; exec >/dev/tty1; printf '\\033[?25l'; a=''; i=0; "
              "while [ $i -lt 2000 ]; do a=\"$a \"; i=$((i+1)); done; "
              "while :; do printf '\\033[H\\033[41m%s' \"$a\"; "
              "printf '\\033[H\\033[44m%s' \"$a\"; done")
    loop = subprocess.Popen([os.path.join(BIN, "berth"), "--state", h.state, "exec",
                             "db", "--", "sh", "-c", redraw],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    print(f"# guest redrawing its 720x400 text console continuously; "
          f"{a.seconds:.0f} s per measurement, medians of {a.rounds} rounds, "
          f"bridge --max-fps {a.max_fps}")
    if a.churn:
        t0 = time.monotonic()
        for i in range(a.churn):
            st = bridged(port, "db", token(h, "db"))
            r = RFB(st, [0])
            r.request(False)
            while r.message() < 0:
                pass
            r.request()
            st.read(1 + i % 64)  # into the next update
            st.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            st.s.close()
        alive = procs[0].poll() is None
        print(f"churn: {a.churn} viewers reset mid-update in "
              f"{time.monotonic() - t0:.1f} s; bridge {'alive' if alive else 'DIED'}")
        if not alive or a.only_churn:
            return 0 if alive else 1
    # Direct and bridge take turns, ROUNDS times: the machine is
    # shared, so each ratio is of medians measured side by side.
    res = {}
    for enc_name, encs in (("raw", [0]), ("zrle", [16, 0])):
        d_runs, b_runs = [], []
        for _ in range(a.rounds):
            d_runs.append(measure(direct(vnc), encs, a.seconds))
            b_runs.append(measure(bridged(port, "db", token(h, "db")), encs, a.seconds))
        d = (statistics.median(x[0] for x in d_runs), statistics.median(x[1] for x in d_runs))
        b = (statistics.median(x[0] for x in b_runs), statistics.median(x[1] for x in b_runs))
        res[("direct", enc_name)], res[("bridge", enc_name)] = d, b
        print(f"{enc_name:5s} direct {d[0]:6.1f} updates/s {d[1] / 1024:8.1f} KiB/update"
              f" | bridge {b[0]:6.1f} updates/s {b[1] / 1024:8.1f} KiB/update"
              f" | ratio {b[0] / d[0]:.2f}   (runs: direct "
              f"{' '.join(f'{x[0]:.1f}' for x in d_runs)}, bridge "
              f"{' '.join(f'{x[0]:.1f}' for x in b_runs)})")
    # A stalled viewer next to a reading one, alternating with the
    # reading one alone.
    alone, beside = [], []
    for _ in range(a.rounds):
        alone.append(measure(bridged(port, "db", token(h, "db")), [0], a.seconds)[0])
        stalled = bridged(port, "db", token(h, "db"))
        RFB(stalled, [0]).request(False)
        beside.append(measure(bridged(port, "db", token(h, "db")), [0], a.seconds)[0])
        stalled.s.close()
    print(f"raw   bridge with a stalled second viewer: {statistics.median(beside):6.1f} "
          f"updates/s, alone {statistics.median(alone):6.1f} (ratio "
          f"{statistics.median(beside) / statistics.median(alone):.2f})")
    slow = bridge(10)
    c = measure(bridged(slow, "db", token(h, "db")), [0], a.seconds)
    print(f"raw   bridge --max-fps 10: {c[0]:6.1f} updates/s")
    loop.terminate()
    loop.wait()
    subprocess.run([os.path.join(BIN, "berth"), "--state", h.state, "exec", "db", "--",
                    "sh", "-c", "kill $(cat /tmp/redraw.pid); printf '\\033[0m\\033[2J\\033[H' "
                    ">/dev/tty1"], capture_output=True)
    time.sleep(1)
    input_to_pixel("", vnc, port, h, "db", a.keys)
    # Its vCPU would compete with the next part's.
    h.must("stop", "db")
    return None


FB_W, FB_H = 1280, 800


def guest_count(h, name):
    """(frames the guest's redraw loop has written, guest uptime in s)."""
    for _ in range(5):
        # The loop rewrites the file: a read can find it empty.
        out = h.must("exec", name, "--", "sh", "-c",
                     "echo n $(cat /tmp/redraw.n 2>/dev/null); cat /proc/uptime").stdout.split()
        if len(out) >= 3 and out[0] == "n" and out[1].isdigit():
            return int(out[1]), float(out[2])
    sys.exit(f"bench: cannot read the guest's frame counter: {out}")


def guest_rate(c0, c1):
    return (c1[0] - c0[0]) / max(c1[1] - c0[1], 0.01)


def cpu_s(pid):
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def qemu_pid(vnc):
    """The QEMU process serving the VNC socket VNC (it is on its command line)."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if vnc.encode() in f.read():
                        return int(d)
            except OSError:
                pass
    sys.exit(f"bench: no process serves {vnc}")


def fb_part(h, a, port, bridge_pid):
    """1280x800: the guest redraws its whole screen (page flips, copies, or
    both in turn); direct vs bridge (raw, zrle), and the guest alone."""
    h.must("image", "build", "tiny-fb")
    h.must("create", "fb", "--image", "tiny-fb", "--memory", "256M", "--idle", "never")
    geo = h.must("exec", "fb", "--", "cat", "/sys/class/graphics/fb0/virtual_size",
                 "/sys/class/graphics/fb0/bits_per_pixel").stdout.split()
    if geo != [f"{FB_W},{FB_H}", "32"]:
        sys.exit(f"bench: tiny-fb's /dev/fb0 is {geo}, not {FB_W},{FB_H} 32 bpp")
    vnc = vnc_socket(h, "fb")
    qpid = qemu_pid(vnc)
    size = FB_W * FB_H * 4
    # Two whole frames in tmpfs for copy; no blinking fbcon cursor on top.
    h.must("exec", "fb", "--", "sh", "-c",
           f"dd if=/dev/zero of=/tmp/fb.a bs={size} count=1 2>/dev/null && "
           "tr '\\000' '\\377' </tmp/fb.a >/tmp/fb.b && "
           "echo 0 >/sys/class/graphics/fbcon/cursor_blink")
    modes = ("flip", "copy") if a.fb_redraw == "both" else (a.fb_redraw,)
    for mode in modes:
        fb_measure(h, a, port, bridge_pid, vnc, qpid, mode)
    # Input to pixel at 1280x800, the redraw stopped: a key typed on tty1
    # (fbcon) echoes as a glyph.
    h.must("exec", "fb", "--", "sh", "-c", "printf '\\033[0m\\033[2J\\033[H' >/dev/tty1")
    time.sleep(1)
    input_to_pixel(f"{FB_W}x{FB_H} ", vnc, port, h, "fb", a.keys)
    h.must("stop", "fb")


def fb_measure(h, a, port, bridge_pid, vnc, qpid, mode):
    if mode == "flip":
        redraw = f"echo $$ >/tmp/redraw.pid; exec fbflip -r {a.flip_rate} -c /tmp/redraw.n"
        what = (f"showing 3 whole {FB_W}x{FB_H}x32 frames (black, white, grey) in turn by "
                f"page flipping, {a.flip_rate} flips/s (fbflip)")
    else:
        redraw = ("echo $$ >/tmp/redraw.pid; i=0; while :; do cat /tmp/fb.a >/dev/fb0; "
                  "cat /tmp/fb.b >/dev/fb0; i=$((i+2)); echo $i >/tmp/redraw.n; done")
        what = f"writing whole {FB_W}x{FB_H}x32 frames to /dev/fb0, black and white in turn (cat)"
    h.must("exec", "fb", "--", "rm", "-f", "/tmp/redraw.n")
    loop = subprocess.Popen([os.path.join(BIN, "berth"), "--state", h.state, "exec",
                             "fb", "--", "sh", "-c", redraw],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        if loop.poll() is not None:
            sys.exit(f"bench: the guest's {mode} redraw ended at once (exit {loop.returncode})")
        print(f"# {mode}: guest (tiny-fb, bochs-drm) {what}; {a.seconds:.0f} s per measurement, "
              f"medians of {a.rounds} rounds, bridge --max-fps {a.max_fps}; host load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        alone = []
        res = {}
        for enc_name, encs in (("raw", [0]), ("zrle", [16, 0])):
            runs = {"direct": [], "bridge": []}
            for _ in range(a.rounds):
                if enc_name == "raw":  # the guest with no viewer, as often
                    c0 = guest_count(h, "fb")
                    time.sleep(a.seconds)
                    alone.append(guest_rate(c0, guest_count(h, "fb")))
                for path in ("direct", "bridge"):
                    st = direct(vnc) if path == "direct" else bridged(port, "fb", token(h, "fb"))
                    c0 = guest_count(h, "fb")
                    cpu0 = (cpu_s(qpid), cpu_s(bridge_pid), time.process_time(), time.monotonic())
                    m = measure(st, encs, a.seconds)
                    cpu1 = (cpu_s(qpid), cpu_s(bridge_pid), time.process_time(), time.monotonic())
                    dt = cpu1[3] - cpu0[3]
                    runs[path].append(m + (guest_rate(c0, guest_count(h, "fb")),) +
                                      tuple(100 * (cpu1[k] - cpu0[k]) / dt for k in range(3)))
            for path in ("direct", "bridge"):
                res[path] = [statistics.median(x[k] for x in runs[path]) for k in range(7)]
            d, b = res["direct"], res["bridge"]
            if enc_name == "raw":
                print(f"{mode:4s} guest alone (no viewer): {statistics.median(alone):6.1f} "
                      f"frames/s shown (runs {' '.join(f'{x:.1f}' for x in alone)})")
            for path in ("direct", "bridge"):
                x = res[path]
                print(f"{mode:4s} {enc_name:5s} {path:6s} {x[2]:6.1f} screens/s {x[0]:6.1f} updates/s "
                      f"{x[1] / 1024:8.1f} KiB/update, guest showing {x[3]:6.1f} frames/s "
                      f"(screens/s runs {' '.join(f'{r[2]:.1f}' for r in runs[path])}); "
                      f"CPU % of a core: qemu {x[4]:.0f}, bridge {x[5]:.0f}, client {x[6]:.0f}")
            print(f"{mode:4s} {enc_name:5s} load average {os.getloadavg()[0]:.1f}; ratio bridge/direct: "
                  f"screens/s {b[2] / d[2]:.2f}, updates/s {b[0] / d[0]:.2f}; >= 30 screens/s: "
                  f"direct {'yes' if d[2] >= 30 else 'no'}, bridge {'yes' if b[2] >= 30 else 'no'}")
    finally:
        loop.terminate()
        loop.wait()
        h.berth("exec", "fb", "--", "sh", "-c", "kill $(cat /tmp/redraw.pid) 2>/dev/null; true")
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
