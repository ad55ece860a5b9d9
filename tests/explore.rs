//! Randomized fault exploration against a reference model (issue 33).
//!
//! A seed drives a deterministic choice of CNI operations (ADD, DEL repeated, with an
//! empty CNI_NETNS or a stale prevResult, CHECK, GC with random valid-attachment lists,
//! STATUS, 2-4 at once, Go-cache attachments) and faults (SIGKILL or an error at a named
//! fail point, the pod netns deleted, the VF netdev destroyed in the pod, udev renaming a
//! VF netdev, a link squatting a VF's name, a VF's driver unbound, a VF removed, stateDir
//! or dataDir full, a lock held past lockTimeoutMs, a reboot, the rollback cache file
//! removed or corrupted, stateDir wiped while pods live) against the real binary on
//! an emulated host of 2 PFs x 4 VFs. After every step the host, the pods, the IPAM
//! stores and stateDir are compared with a model of what the README promises
//! (tests/explore/engine.rs: `Model`, `St`, `World::check_all`, `World::quiesce`).
//! A violation is shrunk (delta debugging over the op list, replayed on fresh hosts) and
//! printed as a reproduction; shrunk lists live in tests/fixtures/explore/*.ops and are
//! replayed by `regressions`.
//!
//! - `fixed_seeds`: CI, fixed seeds for EXPLORE_CI_SECONDS (default 170 s).
//! - `long` (ignored; scripts/explore.sh): EXPLORE_SECONDS, EXPLORE_SEED, EXPLORE_JOBS,
//!   EXPLORE_OPS (ops per seed), EXPLORE_REPLAY=1 (replay EXPLORE_SEED's first
//!   EXPLORE_OPS ops), EXPLORE_FILE (replay an .ops file), EXPLORE_SAVE=<name> and
//!   EXPLORE_SAVE_DIR (where the shrunk list is written, default /tmp/explore-shrunk),
//!   EXPLORE_SHRINK_SECONDS (shrinking budget, default 240), EXPLORE_STOP (stop at the
//!   first violation; by default each is reported and exploration goes on with the next
//!   seed), EXPLORE_VERBOSE (with EXPLORE_ALL_LOGS=1, every
//!   plugin call's log, not only those of calls over 1 s). One progress line per seed (`scripts/explore.sh --summarize`).
//! - `regressions`: every tests/fixtures/explore/*.ops, strict (no known defect
//!   tolerated); a file with `# expect-violation: <n>` documents a known plugin defect.
//!
//! The model (engine.rs): each attachment is Live (ADD succeeded: strict), Maybe (an
//! outcome the docs leave open: killed mid-ADD/DEL/GC, code 11, a dead holder another
//! ADD may have finished; anything of it may exist, only where it would be, until a DEL
//! or GC that must clean up completely) or Orphan (its kernel state died in a reboot, or
//! a delegate without GC keeps its record: only IPAM records may remain until its DEL).
//! Devices carry their expected state while free (name, admin state, OFED files, driver,
//! present), changed only by documented effects (a udev rename, the ibvf%d fallback, a
//! Go-plugin DEL). Checked after every step: (1) live netdevs in their pod, named, up,
//! with their addresses, their GUIDs, their journals, and a CHECK of every live
//! attachment every 25 steps; (2) no VF in two places, no pod link the model does not
//! give it; (3) IPAM records equal live addresses (+ maybes/orphans); (4) DEL and GC exit
//! 0 within 100 s, code 11 only under a held lock or a concurrent op on the same VF or
//! store, 102 only for a live pod whose VF netdev is gone (README); (5) free VFs as
//! expected, no foreign host link, no stray journal/holder/cache/device-info file; at
//! each `quiesce` (all DELed, GC run) the full host snapshot, OFED files, RDMA devices,
//! stateDir, dataDirs and goCacheDir equal the start.
//!
//! Needs root, the `failpoints` feature and Debian's host-local (/usr/lib/cni).

#![cfg(feature = "failpoints")]

mod common;
#[path = "explore/engine.rs"]
mod engine;

use engine::{Op, RunOpts, Stats};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/explore")
}

/// Shrinks a violation, prints the reproduction and the shrunk list, saves it when
/// EXPLORE_SAVE names a file, and returns the report.
fn report_violation(
    seed: u64,
    ops: &[Op],
    at: usize,
    v: &engine::Violation,
    opts: &RunOpts,
) -> String {
    let mut s = format!(
        "explore: VIOLATION of invariant {} at op {at} of seed {seed}: {}\n\
         reproduce: EXPLORE_SEED={seed} EXPLORE_OPS={at} scripts/explore.sh --replay\n",
        v.invariant, v.msg
    );
    let budget = Duration::from_secs(env_u64("EXPLORE_SHRINK_SECONDS", 240));
    let shrunk = engine::shrink(&ops[..at], v.invariant, opts, budget);
    let header = format!(
        "shrunk from seed {seed}, {at} ops: invariant {}\n{}",
        v.invariant,
        v.msg.lines().next().unwrap_or("")
    );
    let text = engine::ops_text(&shrunk, &header);
    s += &format!("explore: shrunk to {} ops:\n{text}", shrunk.len());
    let name = std::env::var("EXPLORE_SAVE").unwrap_or_else(|_| format!("seed{seed}-op{at}"));
    let dir = std::env::var("EXPLORE_SAVE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("explore-shrunk"));
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{name}.ops"));
    if std::fs::write(&p, &text).is_ok() {
        s += &format!(
            "explore: saved {} (copy it to tests/fixtures/explore/ to keep it as a regression)\n",
            p.display()
        );
    }
    s
}

/// Ops executed so far by all jobs of this process.
static EXECUTED: AtomicU64 = AtomicU64::new(0);

/// Runs seeds from `first` (stepping by `step`) until `deadline`, reporting each
/// violation (shrunk); stops at the first one when `stop` is set. Prints a progress
/// line per seed.
fn run_seeds(
    first: u64,
    step: u64,
    ops_per_seed: u64,
    deadline: Instant,
    opts: &RunOpts,
    stop: bool,
) -> (Stats, Vec<String>) {
    let mut total = Stats::default();
    let mut viol = Vec::new();
    let mut seed = first;
    // EXPLORE_TARGET_OPS: no new seed once the jobs together have executed that many.
    let target = env_u64("EXPLORE_TARGET_OPS", 0);
    while Instant::now() < deadline && (target == 0 || EXECUTED.load(Ordering::SeqCst) < target) {
        let r = engine::run_seed(seed, ops_per_seed, deadline, opts);
        EXECUTED.fetch_add(r.stats.ops, Ordering::SeqCst);
        total.add(&r.stats);
        total.elapsed += r.stats.elapsed;
        let mut kinds: Vec<String> = r
            .stats
            .faults
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        kinds.sort();
        eprintln!(
            "explore progress: seed {seed}: ops {} generated {} faulted {} checks {} quiescences {} violation {:?} faults {}",
            r.stats.ops,
            r.stats.generated,
            r.stats.ops_faulted,
            r.stats.checks,
            r.stats.quiesces,
            r.violation.as_ref().map(|(at, v)| (at, v.invariant)),
            kinds.join(",")
        );
        if let Some((at, v)) = &r.violation {
            let rep = report_violation(seed, &r.ops, *at, v, opts);
            eprintln!("{rep}");
            viol.push(rep);
            if stop {
                break;
            }
        }
        seed += step;
    }
    (total, viol)
}

fn run_jobs(
    first: u64,
    jobs: u64,
    ops_per_seed: u64,
    secs: u64,
    opts: &RunOpts,
    stop: bool,
) -> (Stats, Vec<String>) {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(secs);
    let results: Vec<(Stats, Vec<String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..jobs)
            .map(|j| {
                s.spawn(move || run_seeds(first + j, jobs, ops_per_seed, deadline, opts, stop))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = Stats::default();
    let mut viol = Vec::new();
    for (st, v) in results {
        total.add(&st);
        viol.extend(v);
    }
    total.elapsed = t.elapsed();
    total.violations = viol.len() as u64;
    (total, viol)
}

/// CI: fixed seeds for about three minutes.
#[test]
fn fixed_seeds() {
    let secs = env_u64("EXPLORE_CI_SECONDS", 170);
    let opts = RunOpts::default();
    let (stats, viol) = run_jobs(1, 1, 300, secs, &opts, true);
    eprintln!("{}", stats.report());
    for v in &viol {
        eprintln!("{v}");
    }
    assert!(
        viol.is_empty(),
        "explore found a violation:\n{}",
        viol.join("\n")
    );
    assert!(stats.ops > 0);
}

/// Every saved regression list replays without a violation, except the known defects
/// a file declares with `# expect-violation: <invariant>` (still reported).
#[test]
fn regressions() {
    // Strict: no known defect tolerated, so a file's expect-violation line is checked.
    let opts = RunOpts {
        tolerate: Default::default(),
        ..Default::default()
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "ops"));
    files.sort();
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let ops = engine::parse_ops(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let expect: Option<u8> = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect-violation:"))
            .and_then(|v| v.trim().parse().ok());
        let (r, _) = engine::replay(&ops, &opts);
        match (r, expect) {
            (None, None) => eprintln!("{}: ok", f.display()),
            (None, Some(_)) => eprintln!(
                "{}: the known defect no longer reproduces: drop its expect-violation line",
                f.display()
            ),
            (Some((_, v)), Some(n)) if v.invariant == n => {
                eprintln!("{}: known defect still reproduces: {}", f.display(), v.msg)
            }
            (Some((at, v)), _) => bad.push(format!(
                "{}: op {at}: invariant {}: {}",
                f.display(),
                v.invariant,
                v.msg
            )),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// As long as asked (scripts/explore.sh).
#[test]
#[ignore]
fn long() {
    let opts = RunOpts {
        verbose: std::env::var("EXPLORE_VERBOSE").is_ok(),
        ..Default::default()
    };
    if let Ok(f) = std::env::var("EXPLORE_FILE") {
        let ops = engine::parse_ops(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let (r, stats) = engine::replay(&ops, &opts);
        eprintln!("{}", stats.report());
        if let Some((at, v)) = r {
            panic!("{f}: op {at}: invariant {}: {}", v.invariant, v.msg);
        }
        return;
    }
    let seed = env_u64("EXPLORE_SEED", 1000);
    if std::env::var("EXPLORE_REPLAY").is_ok() {
        let n = env_u64("EXPLORE_OPS", 1000);
        let r = engine::run_seed(seed, n, Instant::now() + Duration::from_secs(86400), &opts);
        eprintln!("{}", r.stats.report());
        if let Some((at, v)) = &r.violation {
            let rep = report_violation(seed, &r.ops, *at, v, &opts);
            panic!("{rep}");
        }
        return;
    }
    let secs = env_u64("EXPLORE_SECONDS", 600);
    let jobs = env_u64("EXPLORE_JOBS", 1);
    let per = env_u64("EXPLORE_OPS", 2000);
    let (stats, viol) = run_jobs(
        seed,
        jobs,
        per,
        secs,
        &opts,
        std::env::var("EXPLORE_STOP").is_ok(),
    );
    eprintln!("{}", stats.report());
    let missing: Vec<&str> = engine::FAULT_KINDS
        .iter()
        .filter(|k| !stats.faults.contains_key(**k))
        .copied()
        .collect();
    eprintln!("explore: fault kinds not hit: {missing:?}");
    for v in &viol {
        eprintln!("{v}");
    }
    assert!(viol.is_empty(), "{} violation(s)", viol.len());
}

/// Every count of the explorer's fault kinds in README.md ("N kinds of faults", "N fault
/// kinds", in digits or words) is `engine::FAULT_KINDS`' (issue 50: it said both 15 and
/// 18). A run from before some kinds existed is described without a count.
#[test]
fn readme_counts_the_fault_kinds_the_explorer_has() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    const WORDS: [&str; 21] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    let words: Vec<String> = readme
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .collect();
    let mut counts = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let rest = |k: usize| words.get(i + k).map(String::as_str).unwrap_or("");
        let fault_kinds = rest(1) == "fault" && rest(2) == "kinds";
        let kinds_of_faults = rest(1) == "kinds" && rest(2) == "of" && rest(3) == "faults";
        if !(fault_kinds || kinds_of_faults) {
            continue;
        }
        let n = w
            .parse::<usize>()
            .ok()
            .or_else(|| WORDS.iter().position(|x| x == w));
        if let Some(n) = n {
            counts.push(n);
        }
    }
    assert!(
        !counts.is_empty(),
        "README.md gives no count of fault kinds"
    );
    assert!(
        counts.iter().all(|&n| n == engine::FAULT_KINDS.len()),
        "README.md counts {counts:?} fault kinds; the explorer has {}",
        engine::FAULT_KINDS.len()
    );
}
