//! Multi-process tests: several OS processes allocate at once in one
//! dataDir. The test binary re-executes itself (`current_exe()`) running only
//! the ignored [`child_worker`] test, which reads its job from
//! [`CHILD_ENV`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{IpamConfig, IpamError};

/// Environment variable carrying a child's job (JSON: `ipam`, `network`,
/// `prefix`, `count`, `out`, `go`).
const CHILD_ENV: &str = "IB_SRIOV_IPAM_MP_CHILD";
const NET: &str = "mpnet";

/// libtest name of [`child_worker`], whatever module path this file is
/// mounted at (the crate name is not part of libtest names).
fn child_test_name() -> String {
    let path = module_path!();
    let path = path.split_once("::").map_or(path, |(_, rest)| rest);
    format!("{path}::child_worker")
}

/// Child side: wait for the start signal, then allocate `count` attachments
/// `<prefix>-<i>`/net1 and write one line per attempt to `out`:
/// `ok <ip> [<ip>...]`, `exhausted` or `error <msg>`.
#[test]
#[ignore = "run by the multi-process tests in a child process"]
fn child_worker() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let job: Value = serde_json::from_str(&job).unwrap();
    let cfg = IpamConfig::from_json(&job["ipam"]).unwrap();
    let go = PathBuf::from(job["go"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "no start signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut lines = Vec::new();
    for i in 0..job["count"].as_u64().unwrap() {
        let cid = format!("{}-{i}", job["prefix"].as_str().unwrap());
        let line = match cfg.allocate(
            job["network"].as_str().unwrap(),
            &cid,
            "net1",
            Duration::from_secs(60),
        ) {
            Ok(a) => {
                let ips: Vec<String> = a.ips.iter().map(|x| x.address.ip().to_string()).collect();
                format!("ok {cid} {}", ips.join(" "))
            }
            Err(IpamError::Exhausted(_)) => format!("exhausted {cid}"),
            Err(e) => format!("error {cid} {e}"),
        };
        lines.push(line);
    }
    let out = job["out"].as_str().unwrap();
    fs::write(format!("{out}.tmp"), lines.join("\n")).unwrap();
    fs::rename(format!("{out}.tmp"), out).unwrap();
}

/// Outcome of one child allocation.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok(Vec<IpAddr>),
    Exhausted,
}

/// Run `procs` children, each allocating `count` attachments with the given
/// `ipam` config, all released at once; returns container ID -> outcome.
fn run_children(dir: &Path, ipam: &Value, procs: usize, count: usize) -> BTreeMap<String, Outcome> {
    let exe = std::env::current_exe().unwrap();
    let go = dir.join("go");
    let mut children = Vec::new();
    for p in 0..procs {
        let out = dir.join(format!("out-{p}"));
        let job = json!({
            "ipam": ipam,
            "network": NET,
            "prefix": format!("proc{p}"),
            "count": count,
            "out": out.to_str().unwrap(),
            "go": go.to_str().unwrap(),
        });
        let child = Command::new(&exe)
            .args([
                child_test_name().as_str(),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, job.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        children.push((child, out));
    }
    fs::write(&go, "").unwrap();
    let mut results = BTreeMap::new();
    for (child, out) in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = fs::read_to_string(&out).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (did the child run {}?)",
                out.display(),
                child_test_name()
            )
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), count, "{text}");
        for line in lines {
            let mut words = line.split(' ');
            let kind = words.next().unwrap();
            let cid = words.next().unwrap().to_string();
            let outcome = match kind {
                "ok" => Outcome::Ok(words.map(|w| w.parse().unwrap()).collect()),
                "exhausted" => Outcome::Exhausted,
                _ => panic!("unexpected child result: {line}"),
            };
            assert!(results.insert(cid, outcome).is_none());
        }
    }
    results
}

/// `(ip -> file content)` of every per-IP file of the network.
fn files_on_disk(net_dir: &Path) -> BTreeMap<IpAddr, String> {
    fs::read_dir(net_dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let ip: IpAddr = e.file_name().to_str()?.parse().ok()?;
            Some((ip, fs::read_to_string(e.path()).unwrap()))
        })
        .collect()
}

#[test]
fn concurrent_processes_never_share_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = json!({
        "type": "ib-sriov-ipam",
        "ranges": [[{"subnet": "10.20.0.0/24"}], [{"subnet": "fd00:20::/120"}]],
        "dataDir": dir.path().join("data").to_str().unwrap(),
    });
    let (procs, count) = (6, 20);
    let results = run_children(dir.path(), &ipam, procs, count);
    assert_eq!(results.len(), procs * count);

    let mut all = BTreeSet::new();
    let mut expected_files = BTreeMap::new();
    for (cid, outcome) in &results {
        let Outcome::Ok(ips) = outcome else {
            panic!("{cid}: {outcome:?} with a pool large enough for everyone");
        };
        assert_eq!(ips.len(), 2, "{cid}");
        assert!(ips[0].is_ipv4() && ips[1].is_ipv6());
        for ip in ips {
            assert!(all.insert(*ip), "{ip} handed out twice");
            expected_files.insert(*ip, format!("{cid}\r\nnet1"));
        }
    }
    let cfg = IpamConfig::from_json(&ipam).unwrap();
    let net_dir = cfg.data_dir().join(NET);
    assert_eq!(files_on_disk(&net_dir), expected_files);
    // v4 /24: 254 hosts minus the gateway; v6 /120: 256 minus network and
    // gateway (no broadcast in IPv6).
    assert_eq!(cfg.free_counts(NET).unwrap(), [253 - 120, 254 - 120]);
    for ip in &all {
        assert!(
            cfg.ranges
                .iter()
                .any(|s| s.allocatable_range(*ip).is_some()),
            "{ip}"
        );
    }
}

#[test]
fn concurrent_processes_exhaust_a_small_pool_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // Set 0 is large; set 1 holds 30 (fd00:21::/123 minus network and
    // gateway), so every exhausted call must roll back its set-0 address.
    let ipam = json!({
        "type": "ib-sriov-ipam",
        "ranges": [[{"subnet": "10.21.0.0/24"}], [{"subnet": "fd00:21::/123"}]],
        "dataDir": dir.path().join("data").to_str().unwrap(),
    });
    let (procs, count, pool) = (4, 10, 30);
    let results = run_children(dir.path(), &ipam, procs, count);

    let ok: BTreeMap<&String, &Vec<IpAddr>> = results
        .iter()
        .filter_map(|(c, o)| match o {
            Outcome::Ok(ips) => Some((c, ips)),
            Outcome::Exhausted => None,
        })
        .collect();
    assert_eq!(ok.len(), pool, "{results:?}");
    assert_eq!(results.len() - ok.len(), procs * count - pool);

    let mut expected_files = BTreeMap::new();
    for (cid, ips) in &ok {
        for ip in *ips {
            assert!(
                expected_files
                    .insert(*ip, format!("{cid}\r\nnet1"))
                    .is_none(),
                "{ip} handed out twice"
            );
        }
    }
    let cfg = IpamConfig::from_json(&ipam).unwrap();
    assert_eq!(files_on_disk(&cfg.data_dir().join(NET)), expected_files);
    assert_eq!(cfg.free_counts(NET).unwrap(), [253 - pool as u128, 0]);
}
