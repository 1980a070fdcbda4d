#!/usr/bin/env python3
"""The MCP server's exec tool against the ways berth already runs a command,
measured in the same run on one machine (the tiny image's dropbear, TCG):

  - `exec true` end to end through MCP: a tools/call of exec on `berth mcp`
    (stdio, one process kept for every call, as an agent keeps it), and on
    berth-web's POST /mcp with a token (HTTP, one kept connection, as the
    SDK's fetch keeps it; and a new connection per call);
  - the same command with `berth exec` (root's: the CLI's own SSH, a new
    handshake each time; and with BERTH_URL and BERTH_TOKEN: hostd's exec
    route through berth-web, as every user's `berth exec` but root's goes
    through hostd) and with POST /v1/machines/NAME/exec through berth-web
    (the route the exec tool calls, without MCP), each run alternately
    with the MCP ones.

Ratios: each MCP way over each `berth exec`, and MCP over HTTP over /v1 exec
over HTTP (what MCP's layer costs: the token's check, JSON-RPC, the
answer's JSON).

Usage: bench/run mcp [--n N]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

from berthbench import BIN, hostd, summary, web

CALL = {"jsonrpc": "2.0", "method": "tools/call",
        "params": {"name": "exec", "arguments": {"machine": "bench", "argv": ["true"]}}}


def check_exec(answer):
    r = answer.get("result") or {}
    st = r.get("structuredContent") or {}
    if r.get("isError") or st.get("exit_code") != 0:
        sys.exit(f"bench: the exec tool answered {answer}")


class Stdio:
    """`berth mcp`, initialized."""

    def __init__(self, h):
        self.p = subprocess.Popen([os.path.join(BIN, "berth"), "--state", h.state, "mcp"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.n = 0
        self.rpc({"jsonrpc": "2.0", "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "bench", "version": "1"}}})

    def rpc(self, msg):
        self.n += 1
        self.p.stdin.write(json.dumps(dict(msg, id=self.n)) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def exec_ms(self):
        t0 = time.monotonic()
        check_exec(self.rpc(CALL))
        return (time.monotonic() - t0) * 1000.0

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def post(c, path, body, token, headers=None):
    hdr = {"Content-Type": "application/json", "Authorization": "Bearer " + token,
           **(headers or {})}
    c.request("POST", path, body=json.dumps(body), headers=hdr)
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"bench: POST {path} answered {r.status}: {data!r}")
    return data


def http_mcp_ms(c, token):
    t0 = time.monotonic()
    check_exec(json.loads(post(c, "/mcp", dict(CALL, id=1), token,
                               {"Accept": "application/json, text/event-stream",
                                "MCP-Protocol-Version": "2025-06-18"})))
    return (time.monotonic() - t0) * 1000.0


def http_v1_ms(c, token):
    t0 = time.monotonic()
    lines = post(c, "/v1/machines/bench/exec", {"argv": ["true"]}, token).splitlines()
    if json.loads(lines[-1]).get("exit") != 0:
        sys.exit(f"bench: exec ended with {lines[-1]!r}")
    return (time.monotonic() - t0) * 1000.0


def guest_net():
    """A /24 in 10.224.0.0/11 that no route of the host's covers (other
    hostds run side by side), as tests/lib.sh picks one."""
    import random
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True).stdout
    for _ in range(50):
        net = f"10.{random.randint(224, 255)}.{random.randint(0, 255)}."
        if not any(line.startswith(net) for line in routes.splitlines()):
            return net + "0/24"
    sys.exit("bench: no free guest network in 10.224.0.0/11")


def proc_ms(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=15)
    a = ap.parse_args()

    with hostd(f"guest_network = {guest_net()}\n") as h:
        h.must("create", "bench")
        token = json.loads(h.must("token", "create", "--json").stdout)["token"]
        try:
            with web(h) as wport:
                berth = [os.path.join(BIN, "berth"), "--state", h.state, "exec", "bench", "--",
                         "true"]
                berth_url = ["env", f"BERTH_URL=http://127.0.0.1:{wport}",
                             f"BERTH_TOKEN={token}", os.path.join(BIN, "berth"), "exec",
                             "bench", "--", "true"]
                stdio = Stdio(h)
                kept = http.client.HTTPConnection("127.0.0.1", wport)

                def fresh_mcp():
                    c = http.client.HTTPConnection("127.0.0.1", wport)
                    try:
                        return http_mcp_ms(c, token)
                    finally:
                        c.close()

                def fresh_v1():
                    c = http.client.HTTPConnection("127.0.0.1", wport)
                    try:
                        return http_v1_ms(c, token)
                    finally:
                        c.close()
                ways = [("MCP stdio (berth mcp)             ", stdio.exec_ms),
                        ("MCP HTTP, kept connection         ", lambda: http_mcp_ms(kept, token)),
                        ("MCP HTTP, a connection per call   ", fresh_mcp),
                        ("/v1 exec HTTP, a connection a call", fresh_v1),
                        ("berth exec (root, SSH)            ", lambda: proc_ms(berth)),
                        ("berth exec, BERTH_URL (hostd's)   ", lambda: proc_ms(berth_url))]
                # Warm every path once (the guest's first handshake is slower),
                # then each in turn, after the same pause (a command right
                # after another waits for its kept session to be given back).
                for _, fn in ways:
                    fn()
                times = {name: [] for name, _ in ways}
                for _ in range(a.n):
                    for name, fn in ways:
                        time.sleep(0.3)
                        times[name].append(fn())
                stdio.close()
                kept.close()
                print(f"# one machine, the tiny image's dropbear under TCG; exec true, {a.n} runs "
                      "each, interleaved")
                for name, _ in ways:
                    print(f"{name} " + summary(times[name]))
                med = {name.strip(): statistics.median(v) for name, v in times.items()}
                for label, key in (("berth exec (root, SSH)", "berth exec (root, SSH)"),
                                   ("berth exec with BERTH_URL", "berth exec, BERTH_URL (hostd's)")):
                    base = med[key]
                    print(f"ratio over {label}: MCP stdio "
                          f"{med['MCP stdio (berth mcp)'] / base:.2f}, MCP HTTP kept "
                          f"{med['MCP HTTP, kept connection'] / base:.2f}, MCP HTTP per call "
                          f"{med['MCP HTTP, a connection per call'] / base:.2f}")
                v1 = med["/v1 exec HTTP, a connection a call"]
                print(f"MCP's layer over HTTP: {med['MCP HTTP, a connection per call'] - v1:+.2f} ms "
                      f"(ratio {med['MCP HTTP, a connection per call'] / v1:.2f} over /v1 exec)")
        finally:
            h.berth("rm", "bench")


if __name__ == "__main__":
    main()
