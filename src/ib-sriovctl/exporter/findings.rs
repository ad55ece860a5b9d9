//! The doctor's findings as metrics: the exporter runs the plain `ib-sriov doctor` pass
//! ([`crate::doctor::diagnose`] without `--conf`: read-only, no lock) on a thread of its
//! own, at most once per `--doctor-interval` seconds, and every scrape serves the last
//! pass's result ([`Pass`]), so a scrape never waits for one (docs/operations.md
//! "Metrics", "Doctor's findings").

use crate::doctor::paths::Paths;
use crate::doctor::report::Severity;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The default `--doctor-interval`, in seconds: the pause between the end of one pass
/// and the start of the next.
pub const DEFAULT_INTERVAL_SECS: u64 = 30;

/// The most `ib_sriov_doctor_finding` series one scrape serves; the findings past it
/// (the least severe, as the doctor sorts them: severity, then code, then subject) are
/// counted in `ib_sriov_doctor_finding_series_dropped`. A node of 8 PFs of 127 VFs with
/// a finding on every VF stays under it.
pub const MAX_FINDING_SERIES: usize = 1024;

/// How a finding's subject is exported in `ib_sriov_doctor_finding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectKind {
    /// A VF's PCI address (at most the node's VFs).
    Vf,
    /// VFs' PCI addresses joined by `,` (`duplicate-guid`: each VF in at most two such
    /// subjects, its node GUID's and its port GUID's).
    VfList,
    /// A PF's PCI address.
    Pf,
    /// A live attachment, `<containerID>/<ifname>` (at most one per held VF).
    Attachment,
    /// A built-in IPAM store's directory (one per network).
    IpamStore,
    /// One fixed subject (`node`, `RDMA netlink`, the node file, the GUID file, `kernel`).
    Fixed,
}

/// The codes of the plain pass whose subject has bounded cardinality, and what the
/// subject is (src/doctor/findings.rs, src/doctor/mod.rs, src/doctor/node_defaults.rs).
/// Every other code (`partial-view`: any file or source the doctor could not read;
/// `journal-unreadable`: any file in a stateDir; a code added later) is counted in
/// `ib_sriov_doctor_findings` only.
pub const SUBJECT_CODES: &[(&str, SubjectKind)] = &[
    ("netns-gone", SubjectKind::Vf),
    ("vf-held-twice", SubjectKind::Vf),
    ("zero-guid", SubjectKind::Vf),
    ("vfio-under-netdev-attachment", SubjectKind::Vf),
    ("netdev-missing", SubjectKind::Vf),
    ("holder-unknown", SubjectKind::Vf),
    ("original-unknown", SubjectKind::Vf),
    ("vf-guid-unset", SubjectKind::Vf),
    ("vf-guid-from-file", SubjectKind::Vf),
    ("guid-file-exhausted", SubjectKind::Vf),
    ("rollback-unready", SubjectKind::Vf),
    ("undone-by-go", SubjectKind::Vf),
    ("duplicate-guid", SubjectKind::VfList),
    ("vf-table-unreadable", SubjectKind::Pf),
    ("rdma-shared-with-isolation", SubjectKind::Attachment),
    ("allocations-of-another-boot", SubjectKind::IpamStore),
    ("ipam-orphans", SubjectKind::IpamStore),
    ("nothing-to-check", SubjectKind::Fixed),
    ("rdma-unavailable", SubjectKind::Fixed),
    ("guid-file-invalid", SubjectKind::Fixed),
    ("node-file-invalid", SubjectKind::Fixed),
    ("node-default-fails-add", SubjectKind::Fixed),
    ("kernel-lacks-parent-dev", SubjectKind::Fixed),
    ("kernel-lacks-altnames", SubjectKind::Fixed),
    ("kernel-lacks-skip-vf-stats", SubjectKind::Fixed),
    ("kernel-lacks-rdma-netns", SubjectKind::Fixed),
    ("kernel-lacks-vf-guid-read", SubjectKind::Fixed),
];

/// The codes of the plain pass counted only by code and severity (their subject is any
/// path).
pub const COUNT_ONLY_CODES: &[&str] = &["partial-view", "journal-unreadable"];

/// One doctor pass, as the scrapes serve it.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// Whether the pass completed (`ib_sriov_doctor_up`); a pass that panicked is 0,
    /// its message logged on stderr.
    pub up: bool,
    /// When it ended, in seconds since the Unix epoch.
    pub at: f64,
    /// How long it ran, in seconds.
    pub duration: f64,
    /// Its findings: (code, severity, subject), as the doctor sorts them.
    pub findings: Vec<(String, Severity, String)>,
}

/// Runs one plain doctor pass over `paths` (read-only), timed; a panic in it is caught
/// and makes the pass `up: false`, with the message on stderr. In a `failpoints` build
/// the fail point `exporter.doctor_pass=error` fails the pass the same way (tests).
pub fn run_pass(paths: &Paths) -> Pass {
    let start = Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::failpoint::hit("exporter.doctor_pass").map_err(|e| e.to_string())?;
        Ok::<_, String>(crate::doctor::diagnose(paths, None))
    }))
    .unwrap_or_else(|e| {
        Err(e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into()))
    });
    let duration = start.elapsed().as_secs_f64();
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    match r {
        Ok(report) => Pass {
            up: true,
            at,
            duration,
            findings: report
                .findings
                .into_iter()
                .map(|f| (f.code, f.severity, f.subject))
                .collect(),
        },
        Err(msg) => {
            crate::process::print_err(&format!(
                "ib-sriov exporter: the doctor pass failed: {msg}\n"
            ));
            Pass {
                up: false,
                at,
                duration,
                findings: Vec::new(),
            }
        }
    }
}

/// The last pass, shared between the pass thread and the scrapes.
pub type Shared = Arc<Mutex<Option<Pass>>>;

/// Runs a first pass now, then starts the thread that runs one every `interval` after
/// the end of the last; returns where the last pass is kept. When the thread cannot be
/// started, the first pass stays the one served and the error is logged.
pub fn start(paths: &Paths, interval: Duration) -> Shared {
    let shared: Shared = Arc::new(Mutex::new(Some(run_pass(paths))));
    let (p, s) = (paths.clone(), shared.clone());
    let spawned = std::thread::Builder::new()
        .name("doctor".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            let pass = run_pass(&p);
            if let Ok(mut g) = s.lock() {
                *g = Some(pass);
            }
        });
    if let Err(e) = spawned {
        crate::process::print_err(&format!(
            "ib-sriov exporter: cannot start the doctor thread: {e}; serving the first pass only\n"
        ));
    }
    shared
}

/// The series of a pass: `ib_sriov_doctor_findings` ((code, severity) -> count, codes
/// with no finding omitted), `ib_sriov_doctor_finding` ((code, severity, subject) of
/// [`SUBJECT_CODES`], each once, at most [`MAX_FINDING_SERIES`]) and the number of
/// those left out by the cap.
#[allow(clippy::type_complexity)]
pub fn series(
    p: &Pass,
) -> (
    Vec<((String, &'static str), u64)>,
    Vec<(String, &'static str, String)>,
    u64,
) {
    let mut counts: std::collections::BTreeMap<(String, &'static str), u64> = Default::default();
    let mut each: Vec<(String, &'static str, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut dropped = 0u64;
    for (code, sev, subject) in &p.findings {
        *counts.entry((code.clone(), sev.as_str())).or_default() += 1;
        if !SUBJECT_CODES.iter().any(|(c, _)| c == code) {
            continue;
        }
        if !seen.insert((code.clone(), sev.as_str(), subject.clone())) {
            continue;
        }
        if each.len() >= MAX_FINDING_SERIES {
            dropped += 1;
            continue;
        }
        each.push((code.clone(), sev.as_str(), subject.clone()));
    }
    (counts.into_iter().collect(), each, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(code: &str, sev: Severity, subject: &str) -> (String, Severity, String) {
        (code.into(), sev, subject.into())
    }

    #[test]
    fn findings_are_counted_and_only_bounded_subjects_become_series() {
        let p = Pass {
            up: true,
            at: 1.0,
            duration: 0.5,
            findings: vec![
                f("vf-held-twice", Severity::Error, "0000:af:00.2"),
                f(
                    "journal-unreadable",
                    Severity::Error,
                    "/run/ib-sriov/x:net1",
                ),
                f(
                    "journal-unreadable",
                    Severity::Error,
                    "/run/ib-sriov/y:net1",
                ),
                f("netns-gone", Severity::Warning, "0000:af:00.3"),
                f("netns-gone", Severity::Warning, "0000:af:00.3"),
                f("partial-view", Severity::Info, "rtnetlink"),
            ],
        };
        let (counts, each, dropped) = series(&p);
        assert_eq!(
            counts,
            vec![
                (("journal-unreadable".into(), "error"), 2),
                (("netns-gone".into(), "warning"), 2),
                (("partial-view".into(), "info"), 1),
                (("vf-held-twice".into(), "error"), 1),
            ]
        );
        assert_eq!(
            each,
            vec![
                ("vf-held-twice".into(), "error", "0000:af:00.2".into()),
                ("netns-gone".into(), "warning", "0000:af:00.3".into()),
            ]
        );
        assert_eq!(dropped, 0);
    }

    #[test]
    fn finding_series_are_capped_and_the_rest_counted() {
        let p = Pass {
            up: true,
            findings: (0..MAX_FINDING_SERIES + 5)
                .map(|i| f("vf-guid-unset", Severity::Warning, &format!("vf{i}")))
                .collect(),
            ..Pass::default()
        };
        let (counts, each, dropped) = series(&p);
        assert_eq!(counts[0].1, (MAX_FINDING_SERIES + 5) as u64);
        assert_eq!(each.len(), MAX_FINDING_SERIES);
        assert_eq!(dropped, 5);
    }

    /// Every code docs/operations.md "Findings" lists that the plain pass can give is
    /// either exported with its subject or counted only: a new code must be placed.
    #[test]
    fn every_plain_pass_code_is_placed() {
        let doc = include_str!("../../../docs/operations.md");
        let start = doc.find("### Findings").expect("Findings section");
        let table = &doc[start..];
        let table = &table[table.find("| code").expect("the codes' table")..];
        let table = &table[..table.find("\n\n").unwrap_or(table.len())];
        let mut codes = Vec::new();
        for line in table.lines().filter(|l| l.starts_with("| `")) {
            // The codes are the backticked words of the first cell (a cell may add a
            // severity in parentheses after a code).
            let first = line.split('|').nth(1).unwrap_or_default();
            codes.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
        }
        assert!(codes.len() > 20, "{codes:?}");
        for c in codes.iter().filter(|c| !c.starts_with("conf-")) {
            assert!(
                SUBJECT_CODES.iter().any(|(s, _)| s == c) || COUNT_ONLY_CODES.contains(&c.as_str()),
                "doctor code {c} is neither in SUBJECT_CODES nor in COUNT_ONLY_CODES"
            );
        }
    }
}
