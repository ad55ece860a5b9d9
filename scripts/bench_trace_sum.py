#!/usr/bin/python3
"""Sums the straces `scripts/bench.sh --spawn` leaves with BENCH_SPAWN_TRACE=DIR.

    scripts/bench_trace_sum.py DIR [VERB]     VERB: ADD (default) or DEL

For each build (row) and the verb: over all its traced calls, the mean per call of
  - the span from the first to the last traced event (wall inside the process),
  - the time spent inside each system call (strace -T: entry to return), summed by
    name (a call's threads together), and its count,
  - the rest ("outside syscalls": user code, page faults and scheduling delays),
  - the single longest syscall (the netdev move's RTM_SETLINK sendto on ADD).
Then a column per build and, with two or more, the difference of each build against the
first one named on the command line (or the first row in alphabetical order), sorted by
its size, so the syscalls that carry a difference come first.
"""
import collections
import glob
import os
import re
import statistics
import sys

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(?:<\.\.\. )?(\w+)(.*?)(?:<(\d+\.\d+)>)?\s*$")


def parse(path):
    per = collections.Counter()
    cnt = collections.Counter()
    first = last = None
    longest = (0.0, "")
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        ts = float(m.group(2))
        first = ts if first is None else first
        last = ts
        if m.group(5) is None or "unfinished" in m.group(4):
            continue
        name, dur = m.group(3), float(m.group(5))
        last = max(last, ts + dur)
        per[name] += dur
        cnt[name] += 1
        if dur > longest[0]:
            longest = (dur, name)
    span = (last - first) if first is not None else 0.0
    return span, per, cnt, longest


def main():
    d = sys.argv[1]
    verb = sys.argv[2] if len(sys.argv) > 2 else "ADD"
    files = collections.defaultdict(list)
    for p in glob.glob(os.path.join(d, "*.%s.*" % verb)):
        files[os.path.basename(p).split(".")[0]].append(p)
    rows = sorted(files)
    stats = {}
    for r in rows:
        spans, pers, cnts, longs = [], collections.Counter(), collections.Counter(), []
        for p in files[r]:
            span, per, cnt, longest = parse(p)
            spans.append(span)
            pers.update(per)
            cnts.update(cnt)
            longs.append(longest[0])
        n = len(files[r])
        insys = sum(pers.values()) / n
        stats[r] = {"n": n, "span": statistics.median(spans), "span_mean": sum(spans) / n,
                    "insys": insys, "outside": sum(spans) / n - insys,
                    "longest": statistics.median(longs),
                    "per": {k: v / n for k, v in pers.items()}, "cnt": {k: v / n for k, v in cnts.items()}}
    print("%s: mean per call, ms (n calls per build)" % verb)
    print("%-28s" % "" + "".join("%14s" % r for r in rows))
    for key, label in (("n", "calls traced"), ("span", "span, median"), ("span_mean", "span, mean"),
                       ("insys", "inside syscalls"), ("outside", "outside syscalls"),
                       ("longest", "longest syscall, median")):
        fmt = "%14d" if key == "n" else "%14.3f"
        print("%-28s" % label + "".join(fmt % (stats[r][key] * (1 if key == "n" else 1000)) for r in rows))
    names = set()
    for r in rows:
        names |= set(stats[r]["per"])
    ref = rows[0]
    diff = lambda k: max(abs(stats[r]["per"].get(k, 0) - stats[ref]["per"].get(k, 0)) for r in rows)
    print()
    print("per syscall, ms inside it per call (count per call), ordered by the largest difference from %s:" % ref)
    for k in sorted(names, key=diff, reverse=True)[:25]:
        print("%-28s" % k + "".join("%8.3f (%3.0f)" % (stats[r]["per"].get(k, 0) * 1000, stats[r]["cnt"].get(k, 0))
                                    for r in rows))


if __name__ == "__main__":
    main()
