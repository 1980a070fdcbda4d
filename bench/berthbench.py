"""Shared pieces of berth's benchmarks: a private hostd on a temporary state
directory, API calls with hostd's Server-Timing, the CLI, summaries, and a
cleanup that removes every domain whose disks lived there."""
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BERTH_BIN", os.path.join(ROOT, "bin"))
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("berth")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


class Hostd:
    def __init__(self, state):
        self.state = state
        self.sock = os.path.join(state, "hostd.sock")

    def call(self, method, path, body=None):
        """One API call: (status, json, total_ms, ext_ms)."""
        c = UnixHTTP(self.sock)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        payload = json.loads(r.read() or b"null")
        timing = dict(p.strip().split(";dur=") for p in r.getheader("Server-Timing").split(","))
        c.close()
        return r.status, payload, float(timing["total"]), float(timing["ext"])

    def must_call(self, method, path, body=None):
        st, payload, total, ext = self.call(method, path, body)
        if st >= 300:
            sys.exit(f"bench: {method} {path}: {st} {payload}")
        return payload, total, ext

    def berth(self, *args):
        return subprocess.run([os.path.join(BIN, "berth"), "--state", self.state, *args],
                              capture_output=True, text=True)

    def must(self, *args):
        res = self.berth(*args)
        if res.returncode != 0:
            sys.exit(f"bench: berth {' '.join(args)} failed: {res.stderr}")
        return res


def free_port():
    """A loopback TCP port free right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def hostd(conf=None, tiny=True):
    """A berth-hostd on a fresh state directory, with berth.conf CONF (text)
    and the tiny image built unless TINY is false."""
    tmp = tempfile.mkdtemp(prefix="berth-b.", dir="/tmp")
    os.chmod(tmp, 0o711)  # the gateways (berth-gw) reach STATE/hostd.sock through it
    state = os.path.join(tmp, "state")
    if conf is not None:
        os.makedirs(state)
        with open(os.path.join(state, "berth.conf"), "w") as f:
            f.write(conf)
    log = open(os.path.join(tmp, "hostd.log"), "w")
    proc = subprocess.Popen([os.path.join(BIN, "berth-hostd"), "--state", state],
                            stdout=log, stderr=log)
    h = Hostd(state)
    try:
        for _ in range(200):
            if h.berth("info").returncode == 0:
                break
            time.sleep(0.1)
        info = json.loads(h.must("info", "--json").stdout)
        print(f"# hypervisor {info['hypervisor']} {info.get('hypervisor_note', '')}, "
              f"storage {info['storage']['backend']}, network {info['network']}, "
              f"{os.cpu_count()} cores")
        if tiny:
            h.must("image", "build", "tiny")
        yield h
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        names = subprocess.run(VIRSH + ["list", "--all", "--name"], capture_output=True,
                               text=True).stdout.split()
        for d in names:
            xml = subprocess.run(VIRSH + ["dumpxml", d], capture_output=True, text=True).stdout
            if tmp + "/" in xml:
                subprocess.run(VIRSH + ["destroy", d], capture_output=True)
                subprocess.run(VIRSH + ["undefine", "--managed-save", d], capture_output=True)
        net_cleanup(state)
        shutil.rmtree(tmp, ignore_errors=True)


SSH = ["ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o",
       "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]


def user_key(h):
    """A new ed25519 key beside H's state, added with berth key add: its path."""
    key = os.path.join(os.path.dirname(h.state), "user")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    h.must("key", "add", key + ".pub")
    return key


@contextlib.contextmanager
def sshgw(h):
    """berth-sshgw for H on a free loopback port, up: yields (process, port).
    Its log tail is printed when the body failed."""
    port = free_port()
    logpath = os.path.join(os.path.dirname(h.state), "sshgw.log")
    log = open(logpath, "w")
    gw = subprocess.Popen([os.path.join(BIN, "berth-sshgw"), "--state", h.state,
                           "--listen", f"127.0.0.1:{port}", "--log-level", "warn"],
                          stdout=log, stderr=log)
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield gw, port
    except BaseException:
        with open(logpath) as f:
            print("# gateway log tail:\n" + "".join(f.readlines()[-8:]), end="")
        raise
    finally:
        gw.terminate()
        gw.wait()
        log.close()


@contextlib.contextmanager
def web(h, *args):
    """berth-web for H on a free loopback port (started as root, it runs as
    berth-web) with its options ARGS, up: yields its port.  Its log tail is
    printed when the body failed."""
    port = free_port()
    logpath = os.path.join(os.path.dirname(h.state), "web.log")
    log = open(logpath, "w")
    proc = subprocess.Popen([os.path.join(BIN, "berth-web"), "--state", h.state,
                             "--listen", f"127.0.0.1:{port}", "--log-level", "warn", *args],
                            stdout=log, stderr=log)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                sys.exit("bench: berth-web exited: " + open(logpath).read()[-500:])
            time.sleep(0.05)
        yield port
    except BaseException:
        with open(logpath) as f:
            print("# berth-web log tail:\n" + "".join(f.readlines()[-8:]), end="")
        raise
    finally:
        proc.terminate()
        proc.wait()
        log.close()


def net_cleanup(state):
    """What network = routed left once hostd is gone: dnsmasq, the table, the taps."""
    import sqlite3
    try:
        row = sqlite3.connect(os.path.join(state, "berth.db")).execute(
            "SELECT value FROM meta WHERE key = 'instance'").fetchone()
    except sqlite3.Error:
        return
    if not row:
        return
    inst = row[0]
    subprocess.run(["pkill", "-f", f"--conf-file={state}/net/dnsmasq.conf"], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", f"berth-{inst}"], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith(f"bt{inst[:4]}-"):
            subprocess.run(["ip", "link", "delete", name], capture_output=True)


def rss_kib(pid):
    """A process's resident memory (VmRSS), KiB; 0 when it is gone."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def timed(fn):
    t0 = time.monotonic()
    fn()
    return (time.monotonic() - t0) * 1000.0


def summary(xs):
    xs = sorted(xs)
    return (f"median {statistics.median(xs):8.1f} ms  min {xs[0]:8.1f}  max {xs[-1]:8.1f}"
            f"  (n={len(xs)})")
