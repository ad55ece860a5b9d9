#!/usr/bin/python3
"""Where each build's calls spend their wall: the ftrace `scripts/bench.sh --spawn` records
with BENCH_SPAWN_SCHED=FILE, summed per build.

    scripts/bench_sched_sum.py FILE

FILE is the text of a tracefs instance (Documentation/trace/ftrace.rst, "The File
System") that recorded, for the whole `--spawn` run: sched_switch (with a kernel stack,
the `stacktrace` trigger, whenever a `spawn-*` task leaves the CPU), sched_wakeup,
sched_process_exec, sched_process_fork, sched_process_exit, and raw_syscalls sys_enter
and sys_exit. A call is one exec of a row's binary (`.../bin/spawn-<row>`; host-device's
rows are not counted), from its exec to its main thread's exit. Per build, over its
calls (warm-up calls included: each call is one sample, as in the timed figures):

  - life: exec to the main thread's exit (ms, median and mean); threads per call;
  - the main thread's time inside each system call (mean ms per call, and the count);
  - the main thread off the CPU, by what it was in (a system call's name or "user"),
    its state when it left the CPU (D, S, R: scheduler states, sched_switch's
    prev_state) and the first kernel frames of its stack (mean ms per call);
  - the waits in rcu_barrier() (the netdev move's: net/core/dev.c
    `__dev_change_net_namespace()`): quantiles of their sum per call, and how many of
    them ended with a wake-up from another CPU than the one the thread slept on.

A switch back onto the CPU missing from the trace (seen for an idle CPU's switch on
this VM) is closed at the thread's wake-up. Only a summary for reading, not a timing:
the trace's own cost is in every call.
"""
import collections
import re
import statistics
import sys

LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+): (<stack trace>|\w+):? ?(.*)$")
# Frames that say only "it slept": skipped to name where.
WAITING = {
    "trace_event_raw_event_sched_switch", "__traceiter_sched_switch", "__schedule", "schedule",
    "schedule_timeout", "io_schedule", "schedule_preempt_disabled", "__wait_for_common",
    "wait_for_completion", "schedule_hrtimeout_range", "schedule_hrtimeout_range_clock",
    "do_task_dead", "io_schedule_timeout", "bit_wait_io", "__wait_on_bit",
    "out_of_line_wait_on_bit",
}
# x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl) the plugin makes.
NAMES = {
    0: "read", 1: "write", 3: "close", 4: "stat", 5: "fstat", 8: "lseek", 9: "mmap",
    10: "mprotect", 11: "munmap", 16: "ioctl", 17: "pread64", 18: "pwrite64", 41: "socket",
    44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 72: "fcntl", 73: "flock",
    74: "fsync", 75: "fdatasync", 77: "ftruncate", 82: "rename", 83: "mkdir", 86: "link",
    87: "unlink", 89: "readlink", 202: "futex", 217: "getdents64", 230: "clock_nanosleep",
    231: "exit_group", 257: "openat", 262: "newfstatat", 265: "linkat", 308: "setns",
    316: "renameat2", 318: "getrandom", 332: "statx", 435: "clone3",
}


def name(nr):
    return NAMES.get(nr, "nr%d" % nr)


def parse(path):
    calls = {}  # main tid -> call record
    main_of = {}  # tid -> main tid (the main thread and its threads)
    insys = {}  # main tid -> (syscall nr, entry time)
    away = {}  # main tid -> [left time, state, stack, cpu]
    woken = {}  # main tid -> (wake-up time, waker cpu)
    stack = None
    for line in open(path, errors="replace"):
        if line.startswith(" => "):
            if stack is not None:
                stack.append(line[4:].strip())
            continue
        m = LINE.match(line)
        if not m:
            continue
        pid, cpu, t, ev, rest = int(m[2]), int(m[3]), float(m[4]), m[5], m[6]
        stack = None
        if ev == "sched_process_exec":
            if "/spawn-" in rest:
                row = rest.split("/spawn-")[1].split()[0]
                calls[pid] = dict(row=row, exec=t, exit=None, threads=0, lastexit=t, user=0.0,
                                  sys=collections.Counter(), count=collections.Counter(),
                                  off=collections.Counter(), barrier=0.0, cross=0, barriers=0)
                main_of[pid] = pid
            continue
        if ev == "sched_process_fork":
            f = re.search(r" pid=(\d+) child_comm=\S+ child_pid=(\d+)", rest)
            parent, child = int(f[1]), int(f[2])
            c = calls.get(main_of.get(parent))
            if c is not None and c["exit"] is None:
                main_of[child] = main_of[parent]
                c["threads"] += 1
            continue
        if ev == "<stack trace>":
            if pid in away and away[pid][2] is None:
                stack = away[pid][2] = []
            continue
        c = calls.get(pid)
        if ev == "sys_enter" and c is not None and c["exit"] is None:
            insys[pid] = (int(rest.split()[1]), t)
            c["user"] += t - c["lastexit"]
        elif ev == "sys_exit" and c is not None and c["exit"] is None:
            if pid in insys:
                nr, t0 = insys.pop(pid)
                c["sys"][name(nr)] += t - t0
                c["count"][name(nr)] += 1
            c["lastexit"] = t
        elif ev == "sched_switch":
            s = re.search(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)", rest)
            prev, state, nxt = int(s[1]), s[2], int(s[3])
            if prev in calls and calls[prev]["exit"] is None:
                if prev in away:  # its switch back onto a CPU is not in the trace
                    back, wcpu = woken.pop(prev, (t, cpu))
                    close(calls[prev], insys.get(prev), away.pop(prev), back, wcpu)
                away[prev] = [t, state, None, cpu]
            if nxt in calls and nxt in away:
                back, wcpu = woken.pop(nxt, (t, cpu))
                close(calls[nxt], insys.get(nxt), away.pop(nxt), back, wcpu)
        elif ev == "sched_wakeup":
            w = re.search(r" pid=(\d+) ", rest)
            if w and int(w[1]) in away:
                woken[int(w[1])] = (t, cpu)
        elif ev == "sched_process_exit" and c is not None:
            c["exit"] = t
    return [c for c in calls.values() if c["exit"] is not None]


def close(c, sysc, a, back, waker_cpu):
    """Books one stretch off the CPU of call `c`'s main thread: `a` = [left, state,
    stack, cpu] until `back`, woken by `waker_cpu`."""
    left, state, stack, cpu = a
    where = name(sysc[0]) if sysc else "user"
    frames = [f for f in (stack or []) if f not in WAITING][:3]
    c["off"]["%s %s %s" % (where, state, "<".join(frames))] += back - left
    if "rcu_barrier" in (stack or []):
        c["barrier"] += back - left
        c["barriers"] += 1
        c["cross"] += waker_cpu != cpu


def ms(x):
    return x * 1000.0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = collections.defaultdict(list)
    for c in parse(sys.argv[1]):
        rows[c["row"]].append(c)
    if not rows:
        sys.exit("bench_sched_sum: no call of a spawn-<row> binary in %s" % sys.argv[1])
    for row in sorted(rows):
        cs = rows[row]
        n = len(cs)
        life = [ms(c["exit"] - c["exec"]) for c in cs]
        print("== %s: %d calls, threads per call %s" % (
            row, n, dict(collections.Counter(c["threads"] for c in cs))))
        print("   life (exec to the main thread's exit) median %.2f ms, mean %.2f ms; "
              "outside system calls (user code, faults) median %.2f ms" % (
                  statistics.median(life), statistics.mean(life),
                  statistics.median(ms(c["user"]) for c in cs)))
        tot = collections.Counter()
        cnt = collections.Counter()
        for c in cs:
            tot.update(c["sys"])
            cnt.update(c["count"])
        top = sorted(tot.items(), key=lambda kv: -kv[1])[:12]
        print("   in system calls (mean ms per call, count): " + ", ".join(
            "%s %.3f (%.1f)" % (k, ms(v) / n, cnt[k] / n) for k, v in top))
        off = collections.Counter()
        for c in cs:
            off.update(c["off"])
        print("   off the CPU (mean ms per call; in, state, where):")
        for k, v in sorted(off.items(), key=lambda kv: -kv[1])[:8]:
            print("     %7.3f  %s" % (ms(v) / n, k))
        b = sorted(ms(c["barrier"]) for c in cs)
        q = [b[int(p * (len(b) - 1))] for p in (0.1, 0.25, 0.5, 0.75, 0.9)]
        waits = sum(c["barriers"] for c in cs)
        print("   rcu_barrier() per call, ms: p10 %.1f p25 %.1f p50 %.1f p75 %.1f p90 %.1f, "
              "mean %.2f; %d of %d of its waits woken from another CPU" % (
                  *q, statistics.mean(b), sum(c["cross"] for c in cs), waits))


if __name__ == "__main__":
    main()
