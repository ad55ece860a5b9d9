#!/usr/bin/python3
"""Start-up storm driver for scripts/bench.sh --storm (stdlib only).

Run inside the emulated host's netns:  python3 bench_storm.py
P pods start at once; each ADDs its R rails one after another, as Multus does (one
plugin process per rail, each with its own network and a GUID of its own, so every ADD
sets the GUID through the PF and rebinds the VF under the node's rebind queue). When
every pod is up, all pods are deleted at once, each DELeting its rails in reverse order
(every DEL restores the GUID: another rebind). The emulated driver probe
(`emuhost probe`) makes each rebind last BENCH_PROBE_MS.

Prints one JSON object: total wall, per-ADD and per-DEL latency (p50/p99/max, ms), the
queue wait of each ADD and DEL (from the plugin's "begins its turn after S s (K
rebind(s) were ahead on arrival)" line), rebinds per pod, code-11 answers, failures, and
whether the host (links, OFED GUID and policy files) equals its starting state.

Environment: BENCH_OURS_BIN, BENCH_SYSFS_ROOT, BENCH_EMU (emuhost JSON), BENCH_TMP
(work dir), BENCH_PODS, BENCH_RAILS, BENCH_PROBE_MS, BENCH_POD_PREFIX (pod k is the
netns <prefix><k>), BENCH_LOCK_TIMEOUT_MS (optional: lockTimeoutMs of the networks).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

env = os.environ
emu = json.load(open(env["BENCH_EMU"]))
tmp = env["BENCH_TMP"]
P, R = int(env["BENCH_PODS"]), int(env["BENCH_RAILS"])
probe_ms = float(env["BENCH_PROBE_MS"])
pod_prefix = env["BENCH_POD_PREFIX"]
lock_timeout = env.get("BENCH_LOCK_TIMEOUT_MS")
base = {k: v for k, v in env.items() if not k.startswith(("CNI_", "BENCH_", "IB_SRIOV_"))}
state = os.path.join(tmp, "storm-state")
ipam = os.path.join(tmp, "storm-ipam")
vfs = emu["vfs"]
if len(vfs) < P * R:
    sys.exit("bench_storm: %d VFs for %d pods x %d rails" % (len(vfs), P, R))

TURN = re.compile(r"begins its turn after ([0-9.]+) s \((\d+) rebind\(s\) were ahead on arrival\)")
REBOUND = re.compile(r"rebound VF ")


def conf(p, r):
    c = {"cniVersion": "1.1.0", "name": "rail%d" % r, "type": "ib-sriov",
         "deviceID": vfs[p * R + r]["addr"], "stateDir": state, "logLevel": "debug",
         "runtimeConfig": {"infinibandGUID": "02:00:00:00:00:aa:%02x:%02x" % (p, r)},
         "ipam": {"type": "ib-sriov-ipam", "subnet": "10.90.%d.0/24" % r, "dataDir": ipam}}
    if lock_timeout:
        c["lockTimeoutMs"] = int(lock_timeout)
    return c


def call(cmd, p, r):
    """One plugin process; returns a record of it."""
    name = "%s-p%d-r%d" % (cmd, p, r)
    stdin = os.path.join(tmp, name + ".json")
    with open(stdin, "w") as f:
        json.dump(conf(p, r), f)
    cni = dict(base, CNI_COMMAND=cmd, CNI_CONTAINERID="storm-pod%d" % p,
               CNI_NETNS="/var/run/netns/%s%d" % (pod_prefix, p), CNI_IFNAME="net%d" % (r + 1),
               CNI_PATH="/usr/lib/cni", IB_SRIOV_SYSFS_ROOT=env["BENCH_SYSFS_ROOT"])
    out_p, err_p = os.path.join(tmp, name + ".out"), os.path.join(tmp, name + ".err")
    with open(stdin) as i, open(out_p, "w") as o, open(err_p, "w") as e:
        t0 = time.perf_counter()
        proc = subprocess.Popen([env["BENCH_OURS_BIN"]], stdin=i, stdout=o, stderr=e, env=cni)
        _, status, ru = os.wait4(proc.pid, 0)
        t1 = time.perf_counter()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = open(out_p).read(), open(err_p).read()
    code = 0
    if proc.returncode != 0:
        try:
            code = json.loads(out).get("code", -1)
        except ValueError:
            code = -1
    turn = TURN.search(err)
    return {"cmd": cmd, "pod": p, "rail": r, "t0": t0, "t1": t1, "ms": (t1 - t0) * 1000,
            "cpu_ms": (ru.ru_utime + ru.ru_stime) * 1000, "rc": proc.returncode, "code": code,
            "wait_ms": float(turn.group(1)) * 1000 if turn else None,
            "ahead": int(turn.group(2)) if turn else None,
            "rebinds": len(REBOUND.findall(err)), "err": err if proc.returncode else ""}


def host_state():
    """Links of the host netns and the OFED files: what must come back."""
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                      text=True, check=True).stdout)
    ls = sorted((l["ifname"], l["ifindex"], l.get("address"), l["mtu"], "UP" in l["flags"])
                for l in links)
    ofed = []
    for v in vfs:
        d = v.get("ofed_dir")
        if d:
            for f in ("node", "port", "policy"):
                ofed.append((v["addr"], f, open(os.path.join(d, f)).read().strip()))
    return ls, ofed


records, lock = [], threading.Lock()


def pod(cmd, p, start):
    start.wait()
    order = range(R) if cmd == "ADD" else reversed(range(R))
    for r in order:
        rec = call(cmd, p, r)
        with lock:
            records.append(rec)
        if rec["rc"] != 0 and cmd == "ADD":
            return  # Multus stops at the first failed rail (and would roll back)


def phase(cmd):
    start = threading.Event()
    ts = [threading.Thread(target=pod, args=(cmd, p, start)) for p in range(P)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    start.set()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


before = host_state()
t0 = time.perf_counter()
add_s = phase("ADD")
del_s = phase("DEL")
total = time.perf_counter() - t0
after = host_state()


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def stats(cmd):
    rs = [r for r in records if r["cmd"] == cmd]
    ms = [r["ms"] for r in rs]
    waits = [r["wait_ms"] for r in rs if r["wait_ms"] is not None]
    return {"n": len(rs), "p50_ms": statistics.median(ms) if ms else None,
            "p99_ms": pct(ms, 0.99), "max_ms": max(ms) if ms else None,
            "cpu_p50_ms": statistics.median([r["cpu_ms"] for r in rs]) if rs else None,
            "wait_p50_ms": statistics.median(waits) if waits else None,
            "wait_p99_ms": pct(waits, 0.99), "wait_max_ms": max(waits) if waits else None}


rebinds = sum(r["rebinds"] for r in records)
per_pod = [sum(r["rebinds"] for r in records if r["pod"] == p) for p in range(P)]
# Fairness: each waiter's wait against the rebinds that were ahead of it on arrival.
worst = None
for r in records:
    if r["wait_ms"] is None or r["ahead"] is None:
        continue
    bound = 1.15 * r["ahead"] * probe_ms
    excess = r["wait_ms"] - bound
    if worst is None or excess > worst["excess_ms"]:
        worst = {"cmd": r["cmd"], "pod": r["pod"], "rail": r["rail"], "wait_ms": r["wait_ms"],
                 "ahead": r["ahead"], "bound_ms": bound, "excess_ms": excess}
failures = [{k: r[k] for k in ("cmd", "pod", "rail", "rc", "code", "err")}
            for r in records if r["rc"] != 0]
print(json.dumps({
    "pods": P, "rails": R, "probe_ms": probe_ms, "total_s": total, "add_phase_s": add_s,
    "del_phase_s": del_s, "rebinds": rebinds, "rebinds_per_pod": per_pod,
    "ideal_s": rebinds * probe_ms / 1000, "add": stats("ADD"), "del": stats("DEL"),
    "code11": sum(1 for r in records if r["code"] == 11), "failures": failures[:5],
    "failed": len(failures), "worst_wait": worst,
    "host_restored": before == after,
}))
