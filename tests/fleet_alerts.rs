//! The fleet alerts end to end (issue 52): two emulated nodes, each with its own
//! `ib-sriov exporter` (own host root, stateDir and port), scraped every second by a
//! real Prometheus (Debian's `prometheus`) that evaluates the shipped plain rules file
//! (conf/ib-sriov-alerts.rules.yml) every second. The alerts are read from Prometheus'
//! alerts API (`/api/v1/alerts`) and printed (`--nocapture` shows them):
//! - `IbSriovDuplicatePortGuid` reaches "firing" when a pod on each node has the same
//!   port GUID, and clears after one DEL: once with the GUID set by ADD from the pod's
//!   `runtimeConfig.infinibandGUID`, once with two VFs that already carry one GUID (what
//!   a GUID file copied between nodes gives) where ADD sets none. The shipped rule as is,
//!   its `for: 1m` included.
//! - `IbSriovAttachmentPodGone` fires for a pod deleted without DEL (the exporters run
//!   their doctor pass every second, `--doctor-interval 1`) and clears after the DEL;
//!   meanwhile a live pod on the other node with that attachment's GUID is no
//!   duplicate. This one's `for:` (10m, its grace period) is shortened to 5s in that
//!   test's copy of the rules file, the only change to it.
//! - `IbSriovJournalStuck` fires for the journal of an ADD killed midway (a fail point of
//!   the test build, its file's mtime set 10 minutes back), and clears after the DEL;
//!   its `for:` (5m) cut to 2 s in that test's copy, likewise.
//!
//! Needs root (network namespaces) and `prometheus`: fails, never skips, without them.
//! Every process is killed when the test ends, however it ends (`Reaped`).

mod common;

use common::emuhost::EmuOptions;
use common::lab::{bin, Lab};
use common::prometheus::{free_port, urlencode, Prometheus};
use common::reaped::Reaped;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const RULES: &str = "conf/ib-sriov-alerts.rules.yml";
const DUP: &str = "IbSriovDuplicatePortGuid";
const GONE: &str = "IbSriovAttachmentPodGone";

/// A host root for `--host-root` holding only this lab: `/sys` (the emulated tree),
/// `/var/run/netns` and the lab's stateDir, as symlinks (as tests/exporter.rs builds it).
fn host_root(lab: &Lab) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let link = |abs: &Path, target: &Path| {
        let at = d.path().join(abs.strip_prefix("/").unwrap());
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, at).unwrap();
    };
    link("/sys".as_ref(), lab.host.root());
    link("/var/run/netns".as_ref(), "/var/run/netns".as_ref());
    std::fs::create_dir_all(&lab.state).unwrap();
    link(&lab.state, &lab.state);
    d
}

/// `GET path` on `addr` (HTTP/1.0): the body.
fn get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// The shipped rules file, with the `for:` of each alert named in `fors` replaced.
fn rules_with(fors: &[(&str, &str)]) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(RULES)).unwrap();
    let mut out = String::new();
    let mut current = String::new();
    for l in text.lines() {
        if let Some(a) = l.trim().strip_prefix("- alert: ") {
            current = a.trim().to_string();
        }
        match fors.iter().find(|(a, _)| *a == current) {
            Some((_, d)) if l.trim().starts_with("for: ") => {
                let indent = &l[..l.len() - l.trim_start().len()];
                out.push_str(&format!("{indent}for: {d}\n"));
            }
            _ => out.push_str(&format!("{l}\n")),
        }
    }
    for (a, _) in fors {
        assert!(text.contains(&format!("- alert: {a}\n")), "no alert {a}");
    }
    out
}

/// Two emulated nodes, their exporters and a Prometheus evaluating `rules`; every
/// process is killed on drop.
struct Fleet {
    // Dropped first: the processes, then the nodes they read.
    _prometheus: Prometheus,
    _exporters: Vec<Reaped>,
    prom: String,
    exporters: Vec<String>,
    nodes: Vec<Lab>,
    _roots: Vec<tempfile::TempDir>,
    _tmp: tempfile::TempDir,
}

impl Fleet {
    fn start(rules: &str) -> Fleet {
        let nodes: Vec<Lab> = (0..2).map(|_| Lab::new(EmuOptions::default())).collect();
        let roots: Vec<tempfile::TempDir> = nodes.iter().map(host_root).collect();
        let mut exporters = Vec::new();
        let mut addrs = Vec::new();
        for (lab, root) in nodes.iter().zip(&roots) {
            let addr = format!("127.0.0.1:{}", free_port());
            exporters.push(Reaped::spawn(
                std::process::Command::new(bin())
                    .args(["exporter", "--listen", &addr, "--doctor-interval", "1"])
                    .arg("--host-root")
                    .arg(root.path())
                    .arg("--state-dir")
                    .arg(&lab.state)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null()),
                "ib-sriov exporter",
            ));
            addrs.push(addr);
        }
        let tmp = tempfile::tempdir().unwrap();
        let rules_file = tmp.path().join("ib-sriov-alerts.rules.yml");
        std::fs::write(&rules_file, rules).unwrap();
        let prometheus = Prometheus::start(
            tmp.path(),
            &format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: ib-sriov-exporter\n    static_configs:\n      - targets: ['{}']\n        labels: {{node: node-a}}\n      - targets: ['{}']\n        labels: {{node: node-b}}\n",
                rules_file.display(),
                addrs[0],
                addrs[1]
            ),
        );
        let prom = prometheus.addr.clone();
        let f = Fleet {
            _prometheus: prometheus,
            _exporters: exporters,
            prom,
            exporters: addrs,
            nodes,
            _roots: roots,
            _tmp: tmp,
        };
        // Both targets up, and the rules loaded.
        f.wait("both exporters scraped and the rules loaded", |f| {
            let up = f.query("up{job=\"ib-sriov-exporter\"} == 1");
            let rules = get(&f.prom, "/api/v1/rules").unwrap_or_default();
            up.len() == 2 && rules.contains(DUP)
        });
        // Two healthy nodes: after a few evaluations (and a doctor pass each), no alert
        // of the shipped rules is pending or firing.
        std::thread::sleep(Duration::from_secs(4));
        let body = get(&f.prom, "/api/v1/alerts").unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["data"]["alerts"], json!([]), "healthy nodes: {body}");
        f
    }

    /// An instant query: the result vector (empty while Prometheus is not answering).
    fn query(&self, q: &str) -> Vec<Value> {
        get(&self.prom, &format!("/api/v1/query?query={}", urlencode(q)))
            .ok()
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The alerts of `/api/v1/alerts` named `name` (pending or firing).
    fn alerts(&self, name: &str) -> Vec<Value> {
        let body = get(&self.prom, "/api/v1/alerts").unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == name)
            .cloned()
            .collect()
    }

    /// Polls `cond` every 250 ms for up to 150 s (the longest `for:` used is 1 min).
    #[track_caller]
    fn wait(&self, what: &str, cond: impl Fn(&Fleet) -> bool) {
        let t0 = Instant::now();
        while !cond(self) {
            assert!(
                t0.elapsed() < Duration::from_secs(150),
                "{what}: not within 150 s; alerts: {}",
                get(&self.prom, "/api/v1/alerts").unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        println!("{what}: after {:.1} s", t0.elapsed().as_secs_f64());
    }

    /// Waits until alert `name` with label `key`=`value` is firing; returns it, printed.
    #[track_caller]
    fn firing(&self, name: &str, key: &str, value: &str) -> Value {
        let pick = |f: &Fleet| {
            f.alerts(name)
                .into_iter()
                .find(|a| a["labels"][key] == value && a["state"] == "firing")
        };
        self.wait(&format!("{name}{{{key}=\"{value}\"}} firing"), |f| {
            pick(f).is_some()
        });
        let a = pick(self).unwrap();
        println!(
            "{name} firing, from /api/v1/alerts:\n{}",
            serde_json::to_string_pretty(&a).unwrap()
        );
        a
    }

    /// Waits until no alert `name` with label `key`=`value` is pending or firing, and
    /// prints what `/api/v1/alerts` then says of `name`.
    #[track_caller]
    fn cleared(&self, name: &str, key: &str, value: &str) {
        self.wait(&format!("{name}{{{key}=\"{value}\"}} cleared"), |f| {
            f.alerts(name).iter().all(|a| a["labels"][key] != value)
        });
        println!(
            "{name} cleared, /api/v1/alerts alerts named {name}: {}",
            json!(self.alerts(name))
        );
    }
}

fn pod_args(name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME={name};K8S_POD_UID=uid-{name}")
}

/// The attachments Prometheus has with port GUID `g`: (node, pod, guid label).
fn attachments_with(f: &Fleet, g: &str) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = f
        .query(&format!("ib_sriov_attachment_info{{port_guid=\"{g}\"}}"))
        .iter()
        .map(|s| {
            let m = &s["metric"];
            let l = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (l("node"), l("pod"), l("guid"))
        })
        .collect();
    v.sort();
    v
}

/// The Grafana dashboard's fleet panel "Duplicate port GUIDs" (its queries through
/// Prometheus' API): the GUID `g`, and its attachments on both nodes.
fn dashboard_shows_the_duplicate(f: &Fleet, g: &str) {
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/ib-sriov-grafana-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let panel = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "Duplicate port GUIDs")
        .expect("the fleet row's duplicate GUID panel");
    let targets = panel["targets"].as_array().unwrap();
    let guids = f.query(targets[0]["expr"].as_str().unwrap());
    assert_eq!(guids.len(), 1, "{guids:?}");
    assert_eq!(guids[0]["metric"]["port_guid"], g, "{guids:?}");
    assert_eq!(guids[0]["value"][1], "2", "{guids:?}");
    let atts = f.query(targets[1]["expr"].as_str().unwrap());
    let mut nodes: Vec<&str> = atts
        .iter()
        .map(|s| {
            assert_eq!(s["metric"]["port_guid"], g, "{s}");
            s["metric"]["node"].as_str().unwrap()
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node-a", "node-b"], "{atts:?}");
    println!("dashboard panel \"Duplicate port GUIDs\": {}", json!(atts));
}

/// Pods `a` on node-a and `b` on node-b, VF `vf` each, whose port GUID is `g`: the
/// duplicate alert fires (its `for: 1m` as shipped), and clears after node-a's DEL.
fn duplicate_fires_and_clears(f: &Fleet, vf: u32, g: &str, runtime_config: bool) {
    let mut pods = Vec::new();
    for (lab, name) in f.nodes.iter().zip(["a", "b"]) {
        let pod = lab.host.new_pod();
        let mut conf = lab.conf("1.0.0", vf);
        if runtime_config {
            conf["runtimeConfig"] = json!({ "infinibandGUID": g });
        }
        let cid = format!("cid-{name}");
        lab.run(
            "ADD",
            &cid,
            pod.netns(),
            &conf,
            &[("CNI_ARGS", &pod_args(name))],
        )
        .expect_ok();
        pods.push((pod, conf, cid));
    }
    // What ADD set, as the exporter says: the GUID itself, or nothing (the VF's own).
    let set_by_add = if runtime_config { g } else { "" };
    f.wait(
        &format!("both attachments with port_guid {g} in Prometheus"),
        |f| attachments_with(f, g).len() == 2,
    );
    assert_eq!(
        attachments_with(f, g),
        [
            ("node-a".into(), "a".into(), set_by_add.to_string()),
            ("node-b".into(), "b".into(), set_by_add.to_string()),
        ]
    );
    dashboard_shows_the_duplicate(f, g);
    let a = f.firing(DUP, "port_guid", g);
    assert_eq!(a["labels"]["severity"], "critical", "{a}");
    assert_eq!(
        a["annotations"]["summary"],
        format!("Port GUID {g} is on 2 live attachments"),
        "{a}"
    );
    // One DEL: the alert clears.
    let (pod, conf, cid) = &pods[0];
    f.nodes[0].del(cid, pod.netns(), conf).expect_ok();
    f.cleared(DUP, "port_guid", g);
    assert_eq!(
        attachments_with(f, g),
        [("node-b".into(), "b".into(), set_by_add.to_string())]
    );
    let (pod, conf, cid) = &pods[1];
    f.nodes[1].del(cid, pod.netns(), conf).expect_ok();
}

#[test]
fn duplicate_guid_set_by_runtime_config_fires_and_clears_after_one_del() {
    let f = Fleet::start(&rules_with(&[]));
    duplicate_fires_and_clears(&f, 0, "02:00:00:00:00:52:00:01", true);
}

#[test]
fn duplicate_guid_the_vfs_already_carry_fires_and_clears_after_one_del() {
    let f = Fleet::start(&rules_with(&[]));
    // VF 1 of both nodes carries one GUID before any ADD (a GUID file copied between
    // nodes, applied by the operator): the PF's view of it, MLNX_OFED's sriov files.
    let g = "02:00:00:00:00:52:00:02";
    for lab in &f.nodes {
        let vf = lab.host.vf(1);
        for p in [vf.ofed_node(), vf.ofed_port()] {
            std::fs::write(p.unwrap(), format!("{g}\n")).unwrap();
        }
    }
    duplicate_fires_and_clears(&f, 1, g, false);
}

/// A pod deleted without DEL on node-a: `IbSriovAttachmentPodGone` fires (its grace
/// shortened to 5 s in the test's copy of the rules) and clears after the DEL. A live
/// pod on node-b with the GUID the leaked attachment had is not a duplicate: the leaked
/// one has no `ib_sriov_attachment_info`.
#[test]
fn leaked_attachment_fires_after_its_grace_and_clears_after_del() {
    let f = Fleet::start(&rules_with(&[(GONE, "5s")]));
    let g = "02:00:00:00:00:52:00:03";
    let (a, b) = (&f.nodes[0], &f.nodes[1]);
    let conf_of = |lab: &Lab| {
        let mut c = lab.conf("1.0.0", 0);
        c["runtimeConfig"] = json!({ "infinibandGUID": g });
        c
    };
    let pod_a = a.host.new_pod();
    let conf_a = conf_of(a);
    a.run(
        "ADD",
        "cid-a",
        pod_a.netns(),
        &conf_a,
        &[("CNI_ARGS", &pod_args("a"))],
    )
    .expect_ok();
    let netns_a = pod_a.netns().to_string();
    pod_a.delete().unwrap();
    let pod_b = b.host.new_pod();
    let conf_b = conf_of(b);
    b.run(
        "ADD",
        "cid-b",
        pod_b.netns(),
        &conf_b,
        &[("CNI_ARGS", &pod_args("b"))],
    )
    .expect_ok();

    let alert = f.firing(GONE, "node", "node-a");
    assert_eq!(alert["value"], "1e+00", "{alert}");
    assert_eq!(
        alert["labels"]["subject"],
        a.host.vf(0).addr.as_str(),
        "{alert}"
    );
    assert_eq!(alert["labels"]["code"], "netns-gone", "{alert}");
    assert_eq!(
        alert["labels"]["instance"].as_str(),
        Some(f.exporters[0].as_str())
    );
    assert!(f
        .alerts(GONE)
        .iter()
        .all(|x| x["labels"]["node"] == "node-a"));
    // node-b's pod is the only live attachment with GUID g, and was for a while (the
    // duplicate alert would be pending within two evaluations of two such series).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        attachments_with(&f, g),
        [("node-b".into(), "b".into(), g.to_string())]
    );
    assert_eq!(f.alerts(DUP), Vec::<Value>::new());

    // The runtime's DEL, late: the journal goes, the alert clears.
    a.run("DEL", "cid-a", &netns_a, &conf_a, &[]).expect_ok();
    f.cleared(GONE, "node", "node-a");
    b.del("cid-b", pod_b.netns(), &conf_b).expect_ok();
}

/// An ADD killed midway on node-b (fail point `add.move=kill`, a test build's): its
/// journal stays incomplete. Its file's mtime is set 10 minutes back, as an ADD killed
/// 10 minutes ago leaves it (the exporter's age is now minus that mtime), and
/// `IbSriovJournalStuck` (its `for: 5m` cut to 2 s in the test's copy of the rules)
/// fires for node-b only; the runtime's DEL undoes the journal and the alert clears.
#[cfg(feature = "failpoints")]
#[test]
fn an_interrupted_adds_journal_fires_as_stuck_and_clears_after_del() {
    const STUCK: &str = "IbSriovJournalStuck";
    let f = Fleet::start(&rules_with(&[(STUCK, "2s")]));
    let b = &f.nodes[1];
    let pod = b.host.new_pod();
    let conf = b.conf("1.0.0", 0);
    let r = b.run(
        "ADD",
        "cid-b",
        pod.netns(),
        &conf,
        &[
            ("CNI_ARGS", &pod_args("b")),
            ("IB_SRIOV_FAILPOINTS", "add.move=kill"),
        ],
    );
    assert!(!r.ok, "the ADD was not killed: {}", r.stdout);
    let journals = b.journals();
    assert_eq!(journals.len(), 1, "{journals:?}");
    let ten_min_ago = std::time::SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(b.state.join(&journals[0]))
        .unwrap()
        .set_modified(ten_min_ago)
        .unwrap();

    let alert = f.firing(STUCK, "node", "node-b");
    let age: f64 = alert["value"].as_str().unwrap().parse().unwrap();
    assert!((600.0..700.0).contains(&age), "{alert}");
    assert!(f
        .alerts(STUCK)
        .iter()
        .all(|x| x["labels"]["node"] == "node-b"));

    b.del("cid-b", pod.netns(), &conf).expect_ok();
    assert_eq!(b.journals(), Vec::<String>::new());
    f.cleared(STUCK, "node", "node-b");
}
