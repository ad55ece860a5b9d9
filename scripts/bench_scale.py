#!/usr/bin/python3
"""Scale benchmark driver for scripts/bench.sh --scale (stdlib only).

Run inside a row's host netns:  python3 bench_scale.py <row> <scenario> <level>[,<level>...]
Prints one JSON object per level: {"level": L, "wall_ms": median, "cpu_ms": median,
"add_cpu_ms": median of ADD alone (pool, attach, vfindex), "n": samples} or {"level": L, "skip": "reason"}. The ADD+DEL cycles of pool, attach
and vfindex run all the given levels in interleaved rounds (env BENCH_ROUNDS, default
10; each level has its own stateDir and IPAM store), so that the ratios between
levels do not depend on machine load drifting between them.

Rows: "ours" (ib-sriov + ib-sriov-ipam on the emulated host) and "hostdevice"
(Debian's host-device + host-local on veths). Scenarios:
  pool <0|50|99>        ADD+DEL with the /20 pool that full (records written first,
                        at random addresses, seed 1, the round-robin hint at a random one)
  attach <0|100|1000>   ADD+DEL with that many other attachments on the node (ours:
                        journals and holder links, their IPAM records and the Go-format
                        rollback files ADD writes in goCacheDir; host-device: host-local
                        records, all the state it has)
  gc <0|100|1000>       one GC (empty valid list) with that many unlisted attachments
                        whose netdevs need no move (ours only: host-local 1.1.1 has no GC)
  vfindex <0|126>       ADD+DEL of VF 0 or VF 126 (ours only)
  concurrent <1|4|16>   that many ADDs started together on as many VFs, then as many
                        DELs; wall of the batch, CPU per ADD+DEL
Environment: BENCH_TMP (work dir, tmpfs), BENCH_STORE_DIR (stateDirs and IPAM
dataDirs), BENCH_CYCLES, BENCH_WARMUP, BENCH_OURS_BIN, BENCH_SYSFS_ROOT, BENCH_EMU
(emuhost JSON), BENCH_PODNS, BENCH_HD_DEVS (space-separated veth names), BENCH_GAP_MS
(pool, attach and vfindex cycles: bench.sh --gap).
CPU is user+sys from wait4()'s rusage (children included), to the microsecond.
"""
import json
import os
import random
import shutil
import statistics
import sys
import time

row, scenario = sys.argv[1], sys.argv[2]
levels = [int(x) for x in sys.argv[3].split(",")]
env = os.environ
tmp = env["BENCH_TMP"]
store = env["BENCH_STORE_DIR"]
cycles, warmup = int(env["BENCH_CYCLES"]), int(env["BENCH_WARMUP"])
rounds = min(max(1, int(env.get("BENCH_ROUNDS") or 10)), cycles)
podns = env["BENCH_PODNS"]
base = {k: v for k, v in env.items() if not k.startswith(("CNI_", "BENCH_", "IB_SRIOV_"))}
work = state = data = gocache = level = None


def select(lv, fresh=False):
    """Makes level lv's own dirs the current ones: its stateDir and IPAM dataDir on the
    store (BENCH_STORE_DIR), its work dir (the plugins' stdin/stdout/stderr files) on
    BENCH_TMP, a tmpfs: they stand in for the runtime's pipes."""
    global work, state, data, gocache, level
    level = lv
    name = "scale-%s-%s-%d" % (row, scenario, lv)
    work, stored = os.path.join(tmp, name), os.path.join(store, name)
    if fresh:
        for d in (work, stored):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
    state, data = os.path.join(stored, "state"), os.path.join(stored, "ipam")
    # The Go-format rollback files (goCacheDir, /var/lib/cni/ib-sriov on a node): on the store.
    gocache = os.path.join(stored, "go-cache")

NET = "bench"
SUBNET_HOSTS = 4093  # 10.80.0.0/20 without network, gateway (.1) and broadcast

if row == "ours":
    emu = json.load(open(env["BENCH_EMU"]))
    vfs = emu["vfs"]
    devices = [v["addr"] for v in vfs]
else:
    devices = env["BENCH_HD_DEVS"].split()


def conf(dev):
    ipam = {"type": "ib-sriov-ipam" if row == "ours" else "host-local",
            "subnet": "10.80.0.0/20", "dataDir": data}
    if row == "ours":
        return {"cniVersion": "1.1.0", "name": NET, "type": "ib-sriov", "deviceID": dev,
                "stateDir": state, "goCacheDir": gocache, "ipam": ipam}
    return {"cniVersion": "1.0.0", "name": NET, "type": "host-device", "device": dev,
            "ipam": ipam}


def spawn(cmd, cid, ifname, dev, extra=None):
    c = dict(base, CNI_COMMAND=cmd, CNI_CONTAINERID=cid, CNI_NETNS=podns, CNI_IFNAME=ifname,
             CNI_PATH="/usr/lib/cni")
    if row == "ours":
        c["IB_SRIOV_SYSFS_ROOT"] = env["BENCH_SYSFS_ROOT"]
        exe = env["BENCH_OURS_BIN"]
    else:
        exe = "/usr/lib/cni/host-device"
    body = conf(dev)
    if extra:
        body.update(extra)
    inp = os.path.join(work, "in-%s-%s" % (cid, cmd))
    with open(inp, "w") as f:
        json.dump(body, f)
    out = os.path.join(work, "out-%s-%s" % (cid, cmd))
    fa = [(os.POSIX_SPAWN_OPEN, 0, inp, os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
          (os.POSIX_SPAWN_OPEN, 2, out + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
    return os.posix_spawn(exe, [exe], c, file_actions=fa), out


def reap(pid, out, what):
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write("bench-scale: %s %s %s failed:\n%s%s\n" % (
            row, scenario, what, open(out).read(), open(out + ".err").read()[-2000:]))
        sys.exit(1)
    return (ru.ru_utime + ru.ru_stime) * 1e3


def timed(cmd, cid, ifname, dev, extra=None):
    t0 = time.perf_counter()
    pid, out = spawn(cmd, cid, ifname, dev, extra)
    cpu = reap(pid, out, cmd)
    return (time.perf_counter() - t0) * 1e3, cpu


GAP_S = float(env.get("BENCH_GAP_MS") or 0) / 1000.0
gap_rng = random.Random(1)


def gap():
    """The untimed random sleep of bench.sh --gap before each timed ADD and DEL."""
    if GAP_S > 0:
        time.sleep(gap_rng.uniform(0, GAP_S))


def interleaved_medians(dev_of):
    """ADD+DEL cycles of every level in interleaved rounds (as bench.sh's rows): in each
    round every level runs its warm-up and its share of the cycles in its own work dir,
    so that drifting machine load hits all levels alike. dev_of(level) is the device."""
    walls = {lv: [] for lv in levels}
    cpus = {lv: [] for lv in levels}
    add_cpus = {lv: [] for lv in levels}
    n = 0
    for k in range(rounds):
        share = (cycles * (k + 1)) // rounds - (cycles * k) // rounds
        for lv in levels:
            select(lv)
            for i in range(warmup + share):
                n += 1
                gap()
                aw, ac = timed("ADD", "bench-%d" % n, "net1", dev_of(lv))
                gap()
                dw, dc = timed("DEL", "bench-%d" % n, "net1", dev_of(lv))
                if i >= warmup:
                    walls[lv].append(aw + dw)
                    cpus[lv].append(ac + dc)
                    add_cpus[lv].append(ac)
    for lv in levels:
        select(lv)
        result(statistics.median(walls[lv]), statistics.median(cpus[lv]), len(walls[lv]),
               statistics.median(add_cpus[lv]))


def ip_of(k):  # host k of 10.80.0.0/20, k >= 2 (.1 is the gateway)
    return "10.80.%d.%d" % (k // 256, k % 256)


def fill_records(n, owner):
    d = os.path.join(data, NET)
    os.makedirs(d, exist_ok=True)
    rng = random.Random(1)
    hosts = rng.sample(range(2, SUBNET_HOSTS + 1), n) if n else []
    for i, k in enumerate(hosts):
        with open(os.path.join(d, ip_of(k)), "w") as f:
            f.write("%s-%d\r\nnet1" % (owner, i))
    if hosts:
        with open(os.path.join(d, "last_reserved_ip.0"), "w") as f:
            f.write(ip_of(rng.choice(hosts)))
    return hosts


def journal_template():
    """A real journal of ours (one ADD of the last VF, read, then DEL)."""
    dev = devices[-1]
    timed("ADD", "template", "net1", dev)
    text = open(os.path.join(state, "template:net1")).read()
    timed("DEL", "template", "net1", dev)
    return json.loads(text)


def fake_journals(n, unlisted_gc):
    """n journals of other attachments on up to 128 (fake) VFs, each with its holder
    link, one IPAM record and (but for GC) its Go-format rollback file in goCacheDir, as
    ADD leaves them. For GC they carry no netdev step."""
    if n == 0:
        return
    t = journal_template()
    os.makedirs(os.path.join(state, "vfs"), exist_ok=True)
    d = os.path.join(data, NET)
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        j = dict(t)
        cid = "other-%d" % i
        # At most 128 distinct VFs, as on a node (one live attachment per VF; the
        # rest are stale ones of the same VFs), so the per-VF lock files are few.
        k = i % 128
        vf = "0000:%02x:%02x.%d" % (0xc0, k // 8, k % 8)
        j["containerId"], j["vf"] = cid, vf
        ip = ip_of(1000 + i)
        steps = [{"step": "ipam", "ipam_type": "ib-sriov-ipam", "ips": [ip]}] if unlisted_gc else t["steps"]
        if not unlisted_gc:
            steps = [dict(x) for x in steps]
            for x in steps:
                if x.get("step") == "go_cache" and x.get("content"):
                    x["path"] = os.path.join(gocache, "%s-net1" % cid)
                    x["content"] = x["content"].replace("template", cid).replace(t["vf"], vf)
                    os.makedirs(gocache, mode=0o700, exist_ok=True)
                    with open(x["path"], "w") as f:
                        f.write(x["content"])
        j["steps"] = steps
        name = "%s:net1" % cid
        with open(os.path.join(state, name), "w") as f:
            json.dump(j, f)
        link = os.path.join(state, "vfs", vf)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(name, link)
        with open(os.path.join(d, ip), "w") as f:
            f.write("%s\r\nnet1" % cid)


def result(wall, cpu, n, add_cpu=None):
    r = {"level": level, "wall_ms": round(wall, 2), "cpu_ms": round(cpu, 2), "n": n}
    if add_cpu is not None:
        r["add_cpu_ms"] = round(add_cpu, 2)
    print(json.dumps(r))


def skip(reason):
    for lv in levels:
        print(json.dumps({"level": lv, "skip": reason}))
    sys.exit(0)


if scenario == "pool":
    for lv in levels:
        select(lv, fresh=True)
        fill_records(SUBNET_HOSTS * lv // 100, "fill")
    interleaved_medians(lambda lv: devices[0])
elif scenario == "attach":
    for lv in levels:
        select(lv, fresh=True)
        if row == "ours":
            fake_journals(lv, False)
        else:
            fill_records(lv, "other")
    interleaved_medians(lambda lv: devices[0])
elif scenario == "gc":
    if row != "ours":
        skip("host-local 1.1.1 has no GC")
    for lv in levels:
        select(lv, fresh=True)
        walls, cpus = [], []
        for r in range(3):
            shutil.rmtree(state, ignore_errors=True)
            shutil.rmtree(data, ignore_errors=True)
            fake_journals(lv, True)
            w, c = timed("GC", "", "", devices[0], {"cni.dev/valid-attachments": []})
            left = [n for n in os.listdir(state) if n.startswith("other-")] if os.path.isdir(state) else []
            if left:
                sys.exit("bench-scale: GC left %d journals" % len(left))
            walls.append(w)
            cpus.append(c)
        result(statistics.median(walls), statistics.median(cpus), len(walls))
elif scenario == "vfindex":
    if row != "ours":
        skip("no VF index for host-device")
    for lv in levels:
        select(lv, fresh=True)
    interleaved_medians(lambda lv: devices[lv])
elif scenario == "concurrent":
    for lv in levels:
        select(lv, fresh=True)
        if len(devices) < lv:
            sys.exit("bench-scale: %d devices for %d concurrent ADDs" % (len(devices), lv))
        walls, cpus = [], []
        batches = max(3, cycles // 4)
        for r in range(1 + batches):
            t0 = time.perf_counter()
            procs = [spawn("ADD", "conc-%d-%d" % (r, k), "net%d" % (k + 1), devices[k]) for k in range(lv)]
            cpu = sum(reap(p, o, "ADD") for p, o in procs)
            procs = [spawn("DEL", "conc-%d-%d" % (r, k), "net%d" % (k + 1), devices[k]) for k in range(lv)]
            cpu += sum(reap(p, o, "DEL") for p, o in procs)
            if r >= 1:
                walls.append((time.perf_counter() - t0) * 1e3)
                cpus.append(cpu / lv)
        result(statistics.median(walls), statistics.median(cpus), len(walls))
else:
    sys.exit("bench-scale: unknown scenario " + scenario)
for lv in levels:
    select(lv)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(os.path.dirname(state), ignore_errors=True)
