#!/usr/bin/python3
"""A same-run A/B of several ib-sriov builds: ADD+DEL cycles spawned directly.

Run by `scripts/bench.sh --spawn` (which makes the emulated host, the store and the
configs), as ONE `ip netns exec <emulated host netns> python3 bench_spawn.py SPEC`: the
harness is in the host netns for the whole run, and each ADD and DEL is one
posix_spawn() of the plugin with the CNI environment (CNI_COMMAND, CNI_CONTAINERID,
CNI_NETNS, CNI_IFNAME, CNI_PATH: CNI SPEC.md "Parameters") and the network config on
stdin, reaped with wait4(), whose rusage gives the child's user+sys CPU to the
microsecond (its waited-for children included: host-local under host-device). Wall
time is CLOCK_MONOTONIC (perf_counter_ns) around spawn+wait.

SPEC (JSON): {"rounds": R, "cycles": C, "warmup": W, "gap_ms": G, "tmp": DIR,
  "rows": [{"name": N, "argv": [...], "conf": FILE, "podns": PATH, "env": {...},
            "dev": NETDEV}]}
Each round runs every row's W untimed warm-up cycles and then its C timed cycles,
the rows in an order rotated by one each round (row k first in round k mod rows), so
neither load drift nor "who runs after whom" favours a row. Before each timed call an
untimed sleep drawn from [0, G] ms (same seeded sequence per row: scripts/bench.sh
--gap says why).

Output: a table on stdout, per row and for ADD, DEL and the cycle: medians of wall and
of CPU (ms) and their spread (the interquartile range, p75 - p25, in ms); with a row
named "hostdevice", each row's CPU and wall over that row's. SPEC's "json" (a path)
receives the same figures and "samples" (a dir) the raw samples per row
(ADD wall us, DEL wall us, ADD CPU us, DEL CPU us, then for ADD and for DEL: run-queue
wait us of the main thread from /proc/PID/schedstat, read between exit and reap, and
wait4's voluntary and involuntary context switches and minor faults). SPEC's "trace" (a dir; bench.sh
passes env BENCH_SPAWN_TRACE) runs each timed call under `strace -f -ttt -T -o
DIR/<row>.<verb>.<container id>` (other strace options than -f -ttt -T: SPEC's
"trace_args", env BENCH_SPAWN_TRACE_ARGS, e.g. "-ttt -T -e trace=sendto"), for a per-syscall breakdown; the timed figures then
include strace's own cost.
"""
import json
import os
import random
import sys
import time


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main():
    spec = json.load(open(sys.argv[1]))
    rounds, cycles, warmup = spec["rounds"], spec["cycles"], spec["warmup"]
    gap = float(spec.get("gap_ms", 0)) / 1000.0
    tmp = spec["tmp"]
    out_path, err_path = os.path.join(tmp, "spawn.out"), os.path.join(tmp, "spawn.err")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "BENCH_", "IB_SRIOV_"))}
    rows = spec["rows"]
    trace = spec.get("trace") or ""
    if trace:
        os.makedirs(trace, exist_ok=True)
    rngs = {r["name"]: random.Random(1) for r in rows}
    samples = {r["name"]: [] for r in rows}
    seq = {r["name"]: 0 for r in rows}

    def call(row, cmd, cid, timed):
        if timed and gap > 0:
            time.sleep(rngs[row["name"]].uniform(0, gap))
        env = dict(base, CNI_COMMAND=cmd, CNI_CONTAINERID=cid, CNI_NETNS=row["podns"],
                   CNI_IFNAME="net1", CNI_PATH="/usr/lib/cni", **row.get("env", {}))
        fa = [(os.POSIX_SPAWN_OPEN, 0, row["conf"], os.O_RDONLY, 0),
              (os.POSIX_SPAWN_OPEN, 1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              (os.POSIX_SPAWN_OPEN, 2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
        argv = row["argv"]
        if trace and timed:  # strace of each timed call: the figures then include strace's cost
            targs = (spec.get("trace_args") or "-f -ttt -T").split()
            argv = ["/usr/bin/strace"] + targs + ["-o", os.path.join(trace, "%s.%s.%s" % (row["name"], cmd, cid))] + argv
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
        # Exited but not reaped (WNOWAIT): the main thread's /proc/PID/schedstat (ns on
        # the CPU, ns waiting on a run queue, timeslices) is still there to read.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        t1 = time.perf_counter_ns()
        try:
            with open("/proc/%d/schedstat" % pid) as f:
                run_delay = int(f.read().split()[1]) / 1000.0
        except (OSError, IndexError, ValueError):
            run_delay = float("nan")
        _, status, ru = os.wait4(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.stderr.write("bench_spawn: %s: %s %s failed (exit %s):\n"
                             % (row["name"], cmd, cid, os.waitstatus_to_exitcode(status)))
            for p in (out_path, err_path):
                with open(p) as f:
                    sys.stderr.write(f.read())
            sys.exit(1)
        wall, cpu = (t1 - t0) / 1000.0, (ru.ru_utime + ru.ru_stime) * 1e6
        return wall, cpu, (run_delay, ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt)

    def cycle(row, timed):
        seq[row["name"]] += 1
        cid = "spawn-%s-%d" % (row["name"], seq[row["name"]])
        aw, ac, ax = call(row, "ADD", cid, timed)
        dw, dc, dx = call(row, "DEL", cid, timed)
        if timed:
            samples[row["name"]].append((aw, dw, ac, dc) + ax + dx)

    for k in range(rounds):
        order = rows[k % len(rows):] + rows[:k % len(rows)]
        for row in order:
            for _ in range(warmup):
                cycle(row, False)
            for _ in range(cycles):
                cycle(row, True)
            if row.get("dev") and not os.path.exists("/sys/class/net/" + row["dev"]):
                sys.exit("bench_spawn: %s: %s is not back in the host netns" % (row["name"], row["dev"]))

    res = {}
    for row in rows:
        s = samples[row["name"]]
        cols = {"add_wall": [x[0] for x in s], "del_wall": [x[1] for x in s],
                "cycle_wall": [x[0] + x[1] for x in s], "add_cpu": [x[2] for x in s],
                "del_cpu": [x[3] for x in s], "cycle_cpu": [x[2] + x[3] for x in s]}
        # Where a call's wall goes: CPU (all threads), waiting for a CPU (run queue, main
        # thread) and the rest, asleep (blocked in the kernel: locks, RCU, I/O).
        for i, verb in ((0, "add"), (1, "del")):
            o = 4 + 4 * i
            cols[verb + "_runq"] = [x[o] for x in s]
            cols[verb + "_blocked"] = [x[i] - x[2 + i] - x[o] for x in s]
        res[row["name"]] = {k: {"median_ms": round(quantile(v, 0.5) / 1000, 3),
                                "iqr_ms": round((quantile(v, 0.75) - quantile(v, 0.25)) / 1000, 3)}
                            for k, v in cols.items()}
        for i, verb in ((0, "add"), (1, "del")):
            o = 4 + 4 * i
            for j, k in ((1, "vol_switches"), (2, "invol_switches"), (3, "minor_faults")):
                res[row["name"]]["%s_%s" % (verb, k)] = quantile([x[o + j] for x in s], 0.5)
        res[row["name"]]["n"] = len(s)
        if spec.get("samples"):
            os.makedirs(spec["samples"], exist_ok=True)
            with open(os.path.join(spec["samples"], row["name"] + ".spawn.samples"), "w") as f:
                for x in s:
                    f.write(" ".join("%.1f" % v for v in x) + "\n")

    print("%-12s %5s | %-17s %-17s %-17s | %-17s %-17s %-17s" % (
        "build", "n", "ADD wall", "DEL wall", "cycle wall", "ADD CPU", "DEL CPU", "cycle CPU"))
    print("%-12s %5s | %s" % ("", "", "(median ms, +-IQR ms)"))
    for row in rows:
        r = res[row["name"]]
        cell = lambda k: "%7.2f +-%6.2f" % (r[k]["median_ms"], r[k]["iqr_ms"])
        print("%-12s %5d | %s %s %s | %s %s %s" % (row["name"], r["n"], cell("add_wall"), cell("del_wall"),
              cell("cycle_wall"), cell("add_cpu"), cell("del_cpu"), cell("cycle_cpu")))
    print()
    print("where the wall goes (medians, ms; runq: the main thread waiting for a CPU; blocked:")
    print("wall - CPU - runq, asleep in the kernel), and per call: voluntary/involuntary switches, minor faults")
    for row in rows:
        r = res[row["name"]]
        print("%-12s ADD runq %6.2f blocked %6.2f  sw %3.0f/%3.0f flt %4.0f | DEL runq %6.2f blocked %6.2f  sw %3.0f/%3.0f flt %4.0f" % (
            row["name"], r["add_runq"]["median_ms"], r["add_blocked"]["median_ms"], r["add_vol_switches"],
            r["add_invol_switches"], r["add_minor_faults"], r["del_runq"]["median_ms"], r["del_blocked"]["median_ms"],
            r["del_vol_switches"], r["del_invol_switches"], r["del_minor_faults"]))
    if "hostdevice" in res:
        hd = res["hostdevice"]
        print()
        print("over host-device + host-local (cycle medians; goal for CPU <= 0.30):")
        for row in rows:
            if row["name"] == "hostdevice":
                continue
            r = res[row["name"]]
            print("  %-12s CPU %.3f  wall %.3f" % (
                row["name"], r["cycle_cpu"]["median_ms"] / hd["cycle_cpu"]["median_ms"],
                r["cycle_wall"]["median_ms"] / hd["cycle_wall"]["median_ms"]))
    if spec.get("json"):
        with open(spec["json"], "w") as f:
            json.dump({"rounds": rounds, "cycles_per_round": cycles, "warmup_per_round": warmup,
                       "gap_ms": spec.get("gap_ms", 0), "rows": res}, f, indent=1)


if __name__ == "__main__":
    main()
