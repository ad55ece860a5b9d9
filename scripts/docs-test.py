#!/usr/bin/env python3
"""Runs the shell blocks of README.md and docs/*.md, so a wrong command fails CI.

    python3 scripts/docs-test.py [--no-run] [--list] [FILE.md ...]

Default files: README.md and docs/*.md. The rules (docs/testing.md "Runnable docs"):

- Every fenced code block has an info string: `sh` (or `bash`, `shell`, `console`) for
  commands, `text` for output, usage lines and diagrams, `json`/`yaml`/... for data.
- Every shell block is checked: `bash -n` (syntax), and each repository path it names
  (`scripts/...`, `conf/...`, `tests/...`, `docs/...`, `examples/...`) exists.
- Every shell block is run, unless the line just before it (blank lines aside) is a
  marker saying why not:

      <!-- docs-test: skip: REASON -->

  A run takes options in its marker, each after a `;`:

      <!-- docs-test: run; <id>=c0ffee; check: test -x /opt/cni/bin/ib-sriov -->

  `<name>=value` replaces a placeholder `<name>` of the block (a run block with a
  placeholder left fails); `check: CMD` runs after the block, in the same sandbox, and
  must succeed too.
- A run happens as root in a sandbox: a private mount namespace whose /opt/cni,
  /etc/cni, /var/lib/cni and /run/ib-sriov are tmpfs mounts holding only an empty
  /opt/cni/bin and /etc/cni/net.d (the machine's CNI directories are never touched), in the repository root, under
  `bash -euo pipefail`, with a time limit of 900 s. Exit status not 0: the block fails.

--no-run does everything but the runs (the structural checks, in the test suite:
tests/docs_commands.rs); --list prints each shell block and what is done with it.
Exit status: 0 when every check passed, 1 otherwise, 2 for bad arguments.
"""

import glob
import os
import re
import subprocess
import sys

SHELL = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
REPO_PATH = re.compile(r"(?<![\w./-])((?:scripts|conf|tests|docs|examples)/[\w./-]*[\w-])")
PLACEHOLDER = re.compile(r"<([A-Za-z][\w .-]*)>")
# Each mount point of the sandbox, with the directories made in it (as a node has them).
SANDBOX = {"/opt/cni": ["bin"], "/etc/cni": ["net.d"], "/var/lib/cni": [], "/run/ib-sriov": []}
TIMEOUT = 900


class Block:
    def __init__(self, path, line, info, body, marker):
        self.path, self.line, self.info, self.body, self.marker = path, line, info, body, marker

    def where(self):
        return f"{self.path}:{self.line}"


def blocks(path):
    """The fenced blocks of `path`: (line of the opening fence, info, body, marker)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i, last = [], 0, None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                last = lines[i]
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3)
        j = i + 1
        close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j])
        mk = MARKER.match(last) if last is not None else None
        out.append(Block(path, i + 1, info, body, mk.group(1) if mk else None))
        last = None
        i = j + 1
    return out


def plan(b):
    """What is done with shell block `b`: ("skip", reason) or ("run", subs, check), or
    ("error", why)."""
    if b.marker is None or b.marker == "run":
        return ("run", {}, None)
    if b.marker.startswith("skip"):
        reason = b.marker[len("skip"):].lstrip(":").strip()
        if not reason:
            return ("error", "a skip marker must say why: <!-- docs-test: skip: REASON -->")
        return ("skip", reason)
    parts = [p.strip() for p in b.marker.split(";")]
    if parts[0] != "run":
        return ("error", f"unknown marker {b.marker!r}: 'run; ...' or 'skip: REASON'")
    subs, check = {}, None
    for p in parts[1:]:
        if p.startswith("check:"):
            check = p[len("check:"):].strip()
        elif re.match(r"^<[^>]+>=", p):
            k, v = p.split("=", 1)
            subs[k] = v
        elif p:
            return ("error", f"unknown run option {p!r}: '<name>=value' or 'check: CMD'")
    return ("run", subs, check)


def run(b, subs, check, repo):
    body = b.body
    for k, v in subs.items():
        body = body.replace(k, v)
    left = PLACEHOLDER.findall(body)
    if left:
        return f"placeholder(s) {', '.join('<' + x + '>' for x in left)} left: give values in the marker (<name>=value) or skip the block"
    made = [d for d in SANDBOX if not os.path.exists(d)]
    mounts = "".join(
        f"mkdir -p {d} && mount -t tmpfs docs-test {d}\n" + "".join(f"mkdir {d}/{sub}\n" for sub in subs)
        for d, subs in SANDBOX.items()
    )
    script = (
        "set -e\n" + mounts + f"cd {repo}\n"
        + "bash -euo pipefail -c \"$DOCS_TEST_BLOCK\"\n"
        + ("bash -euo pipefail -c \"$DOCS_TEST_CHECK\"\n" if check else "")
    )
    env = dict(os.environ, DOCS_TEST_BLOCK=body, DOCS_TEST_CHECK=check or "")
    try:
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            env=env, capture_output=True, text=True, timeout=TIMEOUT,
        )
        failed = r.returncode != 0
        why = f"exit {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
    except subprocess.TimeoutExpired:
        failed, why = True, f"still running after {TIMEOUT} s"
    finally:
        for d in reversed(made):
            # Only the mount points this run created on the machine, and only when empty.
            try:
                os.rmdir(d)
            except OSError:
                pass
    return why if failed else None


def main(argv):
    no_run = "--no-run" in argv
    list_only = "--list" in argv
    files = [a for a in argv if not a.startswith("--")]
    bad_args = [a for a in argv if a.startswith("--") and a not in ("--no-run", "--list")]
    if bad_args:
        print(f"docs-test: unknown argument {bad_args[0]} (see {__file__})", file=sys.stderr)
        return 2
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not files:
        files = [os.path.join(repo, "README.md")] + sorted(glob.glob(os.path.join(repo, "docs", "*.md")))
    failures, counts = [], {"run": 0, "skip": 0, "checked": 0}
    for f in files:
        rel = os.path.relpath(f, repo) if f.startswith(repo) else f
        for b in blocks(f):
            b.path = rel
            if not b.info:
                failures.append((b.where(), "a fenced block without an info string: `sh` for commands, `text` for output, usage and diagrams, or the data's language"))
                continue
            if b.info not in SHELL:
                if b.marker is not None:
                    failures.append((b.where(), f"a docs-test marker before a {b.info} block (only shell blocks are run)"))
                continue
            counts["checked"] += 1
            # Placeholders (<id>, <your registry>) read as redirections: words for the check.
            text = b.body
            for k, v in (plan(b)[1] if plan(b)[0] == "run" else {}).items():
                text = text.replace(k, v)
            text = PLACEHOLDER.sub("placeholder", text)
            syn = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
            if syn.returncode != 0:
                failures.append((b.where(), f"bash -n: {syn.stderr.strip()}"))
            for p in REPO_PATH.findall(b.body):
                if not os.path.exists(os.path.join(repo, p)):
                    failures.append((b.where(), f"names {p}, which is not in the repository"))
            p = plan(b)
            if p[0] == "error":
                failures.append((b.where(), p[1]))
                continue
            if list_only:
                print(f"{b.where()}: {'skip: ' + p[1] if p[0] == 'skip' else 'run'}")
                continue
            if p[0] == "skip":
                counts["skip"] += 1
                continue
            counts["run"] += 1
            if no_run:
                continue
            print(f"docs-test: running {b.where()}", flush=True)
            why = run(b, p[1], p[2], repo)
            if why:
                failures.append((b.where(), why))
    for where, why in failures:
        print(f"docs-test: FAIL {where}: {why}", file=sys.stderr)
    verb = "to run" if no_run else "run"
    print(f"docs-test: {counts['checked']} shell blocks checked, {counts['run']} {verb}, {counts['skip']} skipped with a reason, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
