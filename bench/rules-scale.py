#!/usr/bin/env python3
"""Rule sets at scale on real nodes: start, memory and a reload under probes.

For each size, NODES `weir serve` processes (release build) start with the
same rules file of one rule per tenant route (`route = "GET /t/{i}"`) and
form one cluster. Measured: seconds from launch until every node answers
/readyz and lists every member alive; each node's resident set (VmRSS) and
its peak (VmHWM) once ready. Then node 1's file is rewritten three times
by atomic rename (tenant 7's limit changed each time) while /healthz and a
check are probed every 20 ms on every node: the seconds until every node
decides tenant 7 by the new limit, the slowest probe, failed probes, and
whether any node ever listed a member other than alive.

    bench/rules-scale.py                    # 1k, 10k, 100k rules, 3 nodes
    SIZES=20000 NODES=3 bench/rules-scale.py
    WEIR=old/weir bench/rules-scale.py      # another build of the node

Loopback only: ports 19080+ (HTTP), 19180+ (gRPC), 19280+ (gossip). Logs
and rules files stay in target/rules-scale/.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT", os.path.join(ROOT, "target", "rules-scale"))
WEIR = os.environ.get("WEIR", os.path.join(ROOT, "target", "release", "weir"))
NODES = int(os.environ.get("NODES", "3"))
SIZES = [int(s) for s in os.environ.get("SIZES", "1000,10000,100000").split(",")]
PROBE_EVERY = 0.02
REWRITES = 3


def rules_text(n, limit7):
    parts = []
    for i in range(n):
        limit = limit7 if i == 7 else 1000
        parts.append(
            f'[[rule]]\nname = "tenant-{i}"\nroute = "GET /t/{i}"\n'
            f'algorithm = "fixed_window"\nlimit = {limit}\nwindow = "1h"\n'
        )
    return "".join(parts)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def http(method, url, body=None, timeout=5.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def members_alive(port):
    try:
        _, body = http("GET", f"http://127.0.0.1:{port}/v1/cluster", timeout=2)
        states = [m["state"] for m in json.loads(body)["members"]]
        return states
    except Exception:
        return []


def limit7(port):
    status, body = http(
        "POST", f"http://127.0.0.1:{port}/v1/check", {"key": "probe", "route": "GET /t/7"}
    )
    return status, json.loads(body).get("limit") if body else None


def run(n):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"rules-{n}.toml")
    procs = []
    for i in range(NODES):
        # One file per node, as separate machines would hold.
        write_atomic(f"{path}.{i}", rules_text(n, 500))
    env = dict(os.environ, WEIR_CLUSTER_SECRET="rules-scale-bench-secret", RUST_LOG="info")
    start = time.monotonic()
    for i in range(NODES):
        args = [
            WEIR, "serve", "--node-id", f"n{i + 1}",
            "--http", f"127.0.0.1:{19080 + i}", "--grpc", f"127.0.0.1:{19180 + i}",
            "--gossip", f"127.0.0.1:{19280 + i}", "--rules", f"{path}.{i}",
        ]
        if i > 0:
            args += ["--seeds", "127.0.0.1:19280"]
        log = open(os.path.join(OUT, f"n{i + 1}-{n}.log"), "w")
        procs.append(subprocess.Popen(args, stdout=log, stderr=log, env=env))
    try:
        ports = [19080 + i for i in range(NODES)]
        while True:
            ready = all(
                _ready(p) and members_alive(p).count("alive") == NODES for p in ports
            )
            if ready:
                break
            gone(procs)
            if time.monotonic() - start > 300:
                raise SystemExit(f"{n} rules: not ready after 300 s")
            time.sleep(0.05)
        ready_s = time.monotonic() - start
        rss = [status_kb(p.pid, "VmRSS") / 1024 for p in procs]
        hwm = [status_kb(p.pid, "VmHWM") / 1024 for p in procs]

        stop = threading.Event()
        worst = [0.0]
        failed = [0]
        not_alive = [0]

        def probe(port):
            while not stop.is_set():
                t = time.monotonic()
                try:
                    ok = http("GET", f"http://127.0.0.1:{port}/healthz", timeout=5)[0] == 200
                    ok = ok and limit7(port)[0] in (200, 429)
                    if any(s != "alive" for s in members_alive(port)):
                        not_alive[0] += 1
                except Exception:
                    ok = False
                worst[0] = max(worst[0], time.monotonic() - t)
                failed[0] += 0 if ok else 1
                time.sleep(PROBE_EVERY)

        threads = [threading.Thread(target=probe, args=(p,), daemon=True) for p in ports]
        for th in threads:
            th.start()
        spreads = []
        for round_ in range(REWRITES):
            want = 600 + round_
            t = time.monotonic()
            write_atomic(f"{path}.0", rules_text(n, want))
            while not all(limit7(p)[1] == want for p in ports):
                gone(procs)
                if time.monotonic() - t > 120:
                    raise SystemExit(f"{n} rules: rewrite {round_} not seen after 120 s")
                time.sleep(0.02)
            spreads.append(time.monotonic() - t)
        stop.set()
        for th in threads:
            th.join()
        rss_after = [status_kb(p.pid, "VmRSS") / 1024 for p in procs]
        return {
            "rules": n,
            "ready_s": ready_s,
            "rss_mb": max(rss),
            "hwm_mb": max(hwm),
            "rss_after_mb": max(rss_after),
            "rewrite_s": max(spreads),
            "worst_probe_ms": worst[0] * 1e3,
            "failed": failed[0],
            "not_alive": not_alive[0],
        }
    finally:
        for p in procs:
            p.kill()
            p.wait()


def gone(procs):
    """Stops the run when a node has exited: its ports would only refuse."""
    dead = [p.args[3] for p in procs if p.poll() is not None]
    if dead:
        raise SystemExit(f"node(s) {dead} exited; see {OUT}")


def _ready(port):
    try:
        return http("GET", f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200
    except Exception:
        return False


def main():
    if not os.path.exists(WEIR):
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "weir-node", "--bin", "weir"],
            cwd=ROOT, check=True,
        )
    print(f"{NODES} nodes, one rule per tenant route; node 1's file rewritten {REWRITES} times")
    head = ("rules", "ready s", "RSS MB", "peak MB", "RSS after", "rewrite s",
            "worst probe ms", "failed", "not alive")
    print("{:>8} {:>8} {:>7} {:>8} {:>10} {:>10} {:>15} {:>7} {:>10}".format(*head))
    for n in SIZES:
        r = run(n)
        print(
            "{rules:>8} {ready_s:>8.2f} {rss_mb:>7.0f} {hwm_mb:>8.0f} {rss_after_mb:>10.0f} "
            "{rewrite_s:>10.2f} {worst_probe_ms:>15.0f} {failed:>7} {not_alive:>10}".format(**r)
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
