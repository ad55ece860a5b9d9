//! `ib-sriov exporter` on the emulated host (issue 42): traffic through a pod's VF moves
//! that pod's counters with its labels, a second pod is not confused with it, DEL takes
//! the series away, a pod deleted without DEL is skipped, the plugin's call metrics
//! count a known mix of calls, and `strace` shows a scrape served over HTTP writes
//! nothing but its answer. The real binary, run in the emulated host's netns. Needs root.

mod common;

use common::emuhost::{exec_in_netns, EmuOptions, Pod};
use common::lab::{bin, Lab};
use common::prometheus::{free_port, urlencode, Prometheus};
use common::reaped::Reaped;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// A host root for `--host-root` holding only this lab: `/sys` (the emulated tree),
/// `/var/run/netns` and the lab's stateDir, as symlinks; so the machine's own
/// `/run/ib-sriov` (other tests' calls) is not read.
fn host_root(lab: &Lab) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let link = |abs: &std::path::Path, target: &std::path::Path| {
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

/// One scrape (`--once`) in the emulated host's netns: series name{labels} -> value.
fn scrape(lab: &Lab) -> (String, BTreeMap<String, f64>) {
    let (_, text, m) = scrape_with(lab, &[], &[]);
    (text, m)
}

/// [`scrape`] with `env` and `extra` arguments: (stderr, text, series).
fn scrape_with(
    lab: &Lab,
    env: &[(&str, &str)],
    extra: &[&str],
) -> (String, String, BTreeMap<String, f64>) {
    let root = host_root(lab);
    let (b, r, st) = (
        bin().to_string_lossy().into_owned(),
        root.path().to_string_lossy().into_owned(),
        lab.state.to_string_lossy().into_owned(),
    );
    let mut args = vec![
        b.as_str(),
        "exporter",
        "--once",
        "--host-root",
        &r,
        "--state-dir",
        &st,
    ];
    args.extend_from_slice(extra);
    let out = exec_in_netns(&lab.host.host_netns_path(), &args, env, None);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "exporter --once: {err}");
    let text = String::from_utf8(out.stdout).unwrap();
    (err, text.clone(), parse(&text))
}

fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse::<f64>().unwrap())
        })
        .collect()
}

/// The value of `metric` for the series whose labels include every `want` pair.
fn value(m: &BTreeMap<String, f64>, metric: &str, want: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<f64> = m
        .iter()
        .filter(|(k, _)| {
            k.split_once('{').map(|(n, _)| n).unwrap_or(k) == metric
                && want
                    .iter()
                    .all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| *v)
        .collect();
    assert!(
        hits.len() <= 1,
        "{metric} {want:?}: several series {hits:?}"
    );
    hits.first().copied()
}

fn pod_args(name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME={name};K8S_POD_UID=uid-{name}")
}

/// The ADD of VF `vf` (config `lab.conf("1.0.0", vf)`) as container `cid-<name>` in a
/// new pod that CNI_ARGS name `<name>` ([`pod_args`]): the pod, the config and the
/// result. Panics when the ADD fails.
fn add_named_pod(lab: &Lab, vf: u32, name: &str) -> (Pod, Value, Value) {
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", vf);
    let res = lab
        .run(
            "ADD",
            &format!("cid-{name}"),
            pod.netns(),
            &conf,
            &[("CNI_ARGS", &pod_args(name))],
        )
        .expect_ok();
    (pod, conf, res)
}

/// The arguments of `ib-sriov exporter` serving on `listen` with host root `root` and
/// stateDir `state`.
fn served(listen: &str, root: &Path, state: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec!["exporter".into(), "--listen".into(), listen.into()];
    v.extend([
        "--host-root".into(),
        root.into(),
        "--state-dir".into(),
        state.into(),
    ]);
    v
}

/// [`add_named_pod`] of VF 0 as pod `one`, then of VF 1 as pod `two`.
fn pods_one_and_two(lab: &Lab) -> [(Pod, Value, Value); 2] {
    [add_named_pod(lab, 0, "one"), add_named_pod(lab, 1, "two")]
}

/// The first address of CNI result `r`, without its prefix length.
fn first_ip(r: &Value) -> String {
    let a = r["ips"][0]["address"].as_str().unwrap();
    a.split('/').next().unwrap().to_string()
}

#[test]
fn traffic_moves_the_pods_counters_and_del_removes_its_series() {
    let lab = Lab::new(EmuOptions::default());
    let [(p1, c1, r1), (p2, _, _)] = pods_one_and_two(&lab);
    let ip1 = first_ip(&r1);

    // The test-only RDMA counters of VF 0's device: port_xmit_data in 4-byte words.
    let vf0 = lab.host.vf(0);
    let rdma0 = vf0.rdma.clone().expect("VF 0 has an RDMA device");
    let peer0 = vf0.peer.clone().expect("VF 0 has a netdev");
    let counters = vf0
        .dir
        .join("infiniband")
        .join(&rdma0)
        .join("ports/1/counters");
    std::fs::create_dir_all(&counters).unwrap();
    std::fs::write(counters.join("port_xmit_data"), "0\n").unwrap();

    let (_, before) = scrape(&lab);
    let one = [("pod", "one"), ("namespace", "team-a"), ("uid", "uid-one")];
    let two = [("pod", "two"), ("namespace", "team-a")];
    for p in [&one[..], &two[..]] {
        assert_eq!(
            value(&before, "ib_sriov_attachment_info", p),
            Some(1.0),
            "{p:?}"
        );
    }
    assert_eq!(
        value(
            &before,
            "ib_sriov_attachment_info",
            &[
                ("pod", "one"),
                ("vf", &vf0.addr),
                ("ifname", "net1"),
                ("network", "ibnet"),
                ("rdma_device", &rdma0)
            ]
        ),
        Some(1.0)
    );
    let tx1 = value(&before, "ib_sriov_netdev_transmit_bytes_total", &one).unwrap();
    let tx2 = value(&before, "ib_sriov_netdev_transmit_bytes_total", &two).unwrap();

    // Traffic through VF 0: 20 UDP datagrams of 1000 bytes from the pod to the VF's
    // host side, and 20 back.
    lab.host
        .host_ip(&["addr", "add", "10.56.217.254/24", "dev", &peer0]);
    let send = |to: &str| {
        format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(20): s.sendto(b'x'*1000,('{to}',9))"
        )
    };
    let out = p1.exec(&["python3", "-c", &send("10.56.217.254")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = lab.host.host_exec(&["python3", "-c", &send(&ip1)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(counters.join("port_xmit_data"), "5000\n").unwrap();

    let (text, after) = scrape(&lab);
    let d1 = value(&after, "ib_sriov_netdev_transmit_bytes_total", &one).unwrap() - tx1;
    let r1b = value(&after, "ib_sriov_netdev_receive_bytes_total", &one).unwrap();
    let d2 = value(&after, "ib_sriov_netdev_transmit_bytes_total", &two).unwrap() - tx2;
    assert!(
        d1 >= 20.0 * 1000.0,
        "pod one sent 20 x 1000 bytes, counters moved {d1}\n{text}"
    );
    assert!(
        r1b >= 20.0 * 1000.0,
        "pod one received 20 x 1000 bytes: {r1b}"
    );
    assert!(d2 < 1000.0, "pod two sent nothing, its counters moved {d2}");
    assert_eq!(
        value(&after, "ib_sriov_rdma_port_transmit_bytes_total", &one),
        Some(20000.0),
        "port_xmit_data counts 4-byte words\n{text}"
    );
    assert_eq!(
        value(&after, "ib_sriov_rdma_port_transmit_bytes_total", &two),
        None
    );
    assert_eq!(value(&after, "ib_sriov_attachments_live", &[]), Some(2.0));
    assert_eq!(
        value(&after, "ib_sriov_vfs", &[("state", "held")]),
        Some(2.0)
    );
    assert_eq!(
        value(&after, "ib_sriov_journals", &[("state", "complete")]),
        Some(2.0)
    );

    // DEL of pod one: its series are gone, pod two's stay.
    lab.del("cid-one", p1.netns(), &c1).expect_ok();
    let (text, gone) = scrape(&lab);
    assert!(!text.contains("pod=\"one\""), "{text}");
    assert_eq!(value(&gone, "ib_sriov_attachment_info", &two), Some(1.0));
    assert_eq!(value(&gone, "ib_sriov_attachments_live", &[]), Some(1.0));

    // Pod two deleted without DEL (as when the pod goes while a scrape runs): skipped,
    // counted, never an error.
    p2.delete().unwrap();
    let (text, after_gone) = scrape(&lab);
    assert!(!text.contains("pod=\"two\""), "{text}");
    assert_eq!(
        value(&after_gone, "ib_sriov_attachments_pod_gone", &[]),
        Some(1.0)
    );
    assert_eq!(
        value(&after_gone, "ib_sriov_attachments_live", &[]),
        Some(0.0)
    );
}

#[test]
fn call_metrics_count_verbs_and_codes() {
    let lab = Lab::new(EmuOptions::default());
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0);
    let res = lab.add("cid-a", &pod, &conf).expect_ok();
    lab.check("cid-a", &pod, &conf, &res).expect_ok();
    // ADD of a second attachment on the same VF: refused (the VF is held).
    let failed = lab.run("ADD", "cid-b", pod.netns(), &conf, &[]);
    assert!(!failed.ok);
    let code = failed.json["code"].as_u64().unwrap().to_string();
    lab.del("cid-a", pod.netns(), &conf).expect_ok();
    lab.del("cid-a", pod.netns(), &conf).expect_ok();
    let (text, m) = scrape(&lab);
    let calls = |verb: &str, code: &str| {
        value(
            &m,
            "ib_sriov_cni_calls_total",
            &[("verb", verb), ("code", code)],
        )
    };
    assert_eq!(calls("ADD", "0"), Some(1.0), "{text}");
    assert_eq!(calls("ADD", &code), Some(1.0), "{text}");
    assert_eq!(calls("CHECK", "0"), Some(1.0));
    assert_eq!(calls("DEL", "0"), Some(2.0));
    let count = |verb: &str| {
        value(
            &m,
            "ib_sriov_cni_call_duration_seconds_count",
            &[("verb", verb)],
        )
    };
    assert_eq!(count("ADD"), Some(2.0));
    assert_eq!(count("DEL"), Some(2.0));
    assert_eq!(count("GC"), Some(0.0));
    let inf = value(
        &m,
        "ib_sriov_cni_call_duration_seconds_bucket",
        &[("verb", "ADD"), ("le", "+Inf")],
    );
    assert_eq!(inf, Some(2.0));
    assert!(
        value(
            &m,
            "ib_sriov_cni_call_duration_seconds_sum",
            &[("verb", "ADD")]
        )
        .unwrap()
            > 0.0
    );
    assert_eq!(
        value(&m, "ib_sriov_gc_removed_attachments_total", &[]),
        Some(0.0)
    );
    let file = lab.state.join("locks/calls.metrics");
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        4096,
        "a fixed-size file"
    );

    // GC of a network whose attachment is not listed: one GC call, one removal.
    let mut c11 = lab.conf("1.1.0", 0);
    lab.add("cid-g", &pod, &c11).expect_ok();
    c11.as_object_mut().unwrap().remove("deviceID");
    c11["cni.dev/valid-attachments"] = serde_json::json!([]);
    lab.run("GC", "", "", &c11, &[]).expect_ok();
    let (text, m) = scrape(&lab);
    assert_eq!(
        value(
            &m,
            "ib_sriov_cni_calls_total",
            &[("verb", "GC"), ("code", "0")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&m, "ib_sriov_gc_removed_attachments_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        4096,
        "still 4096 bytes"
    );
}

/// Every system call of a served scrape that could change the host, from strace.
#[test]
fn a_served_scrape_writes_nothing_but_its_answer() {
    let lab = Lab::new(EmuOptions::default());
    let (_pod, _, _) = add_named_pod(&lab, 0, "s");
    let root = host_root(&lab);
    let log = tempfile::NamedTempFile::new().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    // Reaped: strace and the exporter it traces (its child, in its process group) are
    // killed together, also when the test fails; killing strace alone leaves the
    // exporter running, detached.
    let mut child = Reaped::spawn(
        std::process::Command::new("strace")
            .args(["-f", "-qq", "-y", "-o"])
            .arg(log.path())
            .args([
                "-e",
                "trace=openat,open,creat,mkdir,mkdirat,unlink,unlinkat,rename,renameat,renameat2,truncate,ftruncate,link,linkat,symlink,symlinkat,chmod,fchmod,fchmodat,chown,fchown,fchownat,mount,umount2,setxattr,fsetxattr,lsetxattr,utimensat,mknod,mknodat,write,writev,pwrite64,pwritev,sendfile,mmap,flock,fcntl",
            ])
            .arg(bin())
            .args(served(&listen, root.path(), &lab.state))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
        "strace (Debian package strace)",
    );
    let body = http_get(&listen);
    child.kill();
    assert!(body.contains("pod=\"s\""), "{body}");
    assert!(
        body.contains("ib_sriov_netdev_receive_bytes_total{"),
        "{body}"
    );
    let trace = std::fs::read_to_string(log.path()).unwrap();
    assert!(trace.contains("openat("), "strace saw nothing: {trace}");
    let mut bad = Vec::new();
    for l in trace.lines() {
        let call = l.split_once(' ').map(|(_, r)| r.trim_start()).unwrap_or(l);
        let name = call.split('(').next().unwrap_or("");
        let ok = match name {
            "openat" | "open" => !["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"]
                .iter()
                .any(|f| call.contains(f)),
            // The answer to the scrape and stderr: sockets, pipes and /dev/null only.
            "write" | "writev" | "sendfile" => {
                let fd = call.split_once('(').unwrap().1;
                fd.contains("<socket:") || fd.contains("<pipe:") || fd.contains("/dev/null")
            }
            "mmap" => !(call.contains("PROT_WRITE") && call.contains("MAP_SHARED")),
            "fcntl" => !call.contains("F_SETLK") && !call.contains("F_OFD_SETLK"),
            "" => true,
            _ => {
                call.starts_with("+++")
                    || call.starts_with("---")
                    || call.contains("<unfinished")
                    || call.contains("resumed>")
            }
        };
        if !ok {
            bad.push(l.to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "the exporter changed the host:\n{}",
        bad.join("\n")
    );
    assert!(
        trace.contains("<socket:"),
        "the answer went out on a socket: {trace}"
    );
}

/// `GET /metrics` on `addr`, retried while the server starts.
fn http_get(addr: &str) -> String {
    use std::io::{Read, Write};
    let t0 = std::time::Instant::now();
    loop {
        match std::net::TcpStream::connect(addr) {
            Ok(mut s) => {
                s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
                    .unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                assert!(
                    out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"),
                    "{out}"
                );
                assert!(out.contains("text/plain; version=0.0.4"), "{out}");
                return out;
            }
            Err(_) if t0.elapsed() < std::time::Duration::from_secs(20) => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("connecting to the exporter on {addr}: {e}"),
        }
    }
}

/// `GET path` on `addr` (HTTP/1.0): the status line and the body.
fn get(addr: &str, path: &str) -> std::io::Result<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// An instant query through Prometheus' HTTP API: the result vector.
fn prom_query(addr: &str, q: &str) -> Vec<serde_json::Value> {
    let (status, body) = get(addr, &format!("/api/v1/query?query={}", urlencode(q)))
        .unwrap_or_else(|e| panic!("querying Prometheus: {e}"));
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{status}: {e}: {body}"));
    assert_eq!(v["status"], "success", "{q}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The `ib_sriov_*` metric names a PromQL expression names, each once.
fn metric_names(q: &str) -> Vec<String> {
    let mut v: Vec<String> = q
        .match_indices("ib_sriov_")
        .map(|(i, _)| {
            q[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    v.sort();
    v.dedup();
    assert!(!v.is_empty(), "no ib_sriov_ metric in {q}");
    v
}

/// conf/ib-sriov-grafana-dashboard.json against a real Prometheus (Debian's
/// `prometheus`) scraping the exporter on the emulated host: after traffic through two
/// pods' VFs and a mix of CNI calls (one failing), every panel's every query returns
/// series, and the per-pod ones return series of the pod asked for and no other.
#[test]
fn every_dashboard_query_returns_series_for_the_pod() {
    let lab = Lab::new(EmuOptions::default());
    let [(p1, c1, r1), (p2, _, _)] = pods_one_and_two(&lab);
    let ip1 = first_ip(&r1);
    // Test-only RDMA counters of both VFs' devices (the emulated tree has none), moved
    // below with the traffic.
    let rdma_dir = |n: u32| {
        let vf = lab.host.vf(n);
        vf.dir
            .join("infiniband")
            .join(vf.rdma.as_deref().unwrap())
            .join("ports/1")
    };
    let bump = |n: u32, words: u64, retries: u64| {
        let d = rdma_dir(n);
        std::fs::create_dir_all(d.join("counters")).unwrap();
        std::fs::create_dir_all(d.join("hw_counters")).unwrap();
        for f in ["port_xmit_data", "port_rcv_data"] {
            std::fs::write(d.join("counters").join(f), format!("{words}\n")).unwrap();
        }
        for f in ["out_of_sequence", "local_ack_timeout_err"] {
            std::fs::write(d.join("hw_counters").join(f), format!("{retries}\n")).unwrap();
        }
    };
    bump(0, 0, 0);
    bump(1, 0, 0);

    let root = host_root(&lab);
    let exp_addr = format!("127.0.0.1:{}", free_port());
    let _exporter = Reaped::spawn(
        std::process::Command::new(bin())
            .args(served(&exp_addr, root.path(), &lab.state))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
        "the exporter",
    );
    let tmp = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(
        tmp.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: ib-sriov\n    static_configs:\n      - targets: ['{exp_addr}']\n"
        ),
    );
    let prom_addr = prometheus.addr.clone();
    // Until Prometheus has scraped the exporter.
    let t0 = std::time::Instant::now();
    loop {
        let up = get(&prom_addr, "/api/v1/query?query=up")
            .ok()
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v["data"]["result"][0]["value"][1]
                    .as_str()
                    .map(str::to_string)
            });
        if up.as_deref() == Some("1") {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "Prometheus did not scrape the exporter: up = {up:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }

    // Five seconds of traffic through both pods' VFs, with CNI calls in between.
    let peer0 = lab.host.vf(0).peer.clone().unwrap();
    lab.host
        .host_ip(&["addr", "add", "10.56.217.254/24", "dev", &peer0]);
    let send = |to: &str| {
        format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(20): s.sendto(b'x'*1000,('{to}',9))"
        )
    };
    for round in 1..=5u64 {
        assert!(p1
            .exec(&["python3", "-c", &send("10.56.217.254")])
            .status
            .success());
        assert!(lab
            .host
            .host_exec(&["python3", "-c", &send(&ip1)])
            .status
            .success());
        assert!(p2
            .exec(&["python3", "-c", &send("10.56.217.253")])
            .status
            .success());
        bump(0, round * 5000, round);
        bump(1, round * 2500, round);
        lab.check("cid-one", &p1, &c1, &r1).expect_ok();
        // An ADD on a VF another attachment holds: refused.
        assert!(!lab.run("ADD", "cid-three", p2.netns(), &c1, &[]).ok);
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));

    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/ib-sriov-grafana-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let q = expr
                .replace("$__rate_interval", "30s")
                .replace("$namespace", "team-a")
                .replace("$pod", "one");
            let res = prom_query(&prom_addr, &q);
            // A panel that shows trouble (its description begins "Empty when healthy",
            // e.g. duplicate GUIDs: tests/fleet_alerts.rs makes it show some) has no
            // series on this healthy node; every metric it names must have some.
            let healthy_empty = panel["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Empty when healthy"));
            if healthy_empty {
                for name in metric_names(&q) {
                    assert!(
                        !prom_query(&prom_addr, &format!("count({name})")).is_empty(),
                        "panel {:?}: {name} is not served",
                        panel["title"]
                    );
                }
            } else {
                assert!(
                    !res.is_empty(),
                    "panel {:?}: no series for {q}",
                    panel["title"]
                );
            }
            if expr.contains("$pod") {
                for s in &res {
                    assert_eq!(s["metric"]["pod"], "one", "panel {:?}: {s}", panel["title"]);
                }
                let moved = res.iter().any(|s| {
                    s["value"][1]
                        .as_str()
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| v > 0.0)
                });
                let errors = panel["title"].as_str().unwrap().contains("Errors");
                assert!(
                    moved || errors,
                    "panel {:?}: nothing moved: {res:?}",
                    panel["title"]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} queries");
    // The template variables' queries too.
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            let inner = q
                .trim_start_matches("label_values(")
                .rsplit_once(',')
                .unwrap()
                .0
                .replace("$namespace", "team-a");
            assert!(!prom_query(&prom_addr, &inner).is_empty(), "{q}");
        }
    }
}

/// `tmux -L <socket> ARGS`.
fn tmux(sock: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("tmux")
        .arg("-L")
        .arg(sock)
        .args(args)
        .output()
        .expect("tmux (Debian package tmux)")
}

/// `ib-sriov top` in a tmux pane against traffic on the emulated host: one row per
/// attachment with its pod, rail, GUID and VF, the busier pod first, rates that are
/// numbers once read twice, and `q` ends it.
#[test]
fn top_shows_the_pods_sorted_by_rate_and_q_quits() {
    let lab = Lab::new(EmuOptions::default());
    let [(p1, _, _), (p2, _, _)] = pods_one_and_two(&lab);
    let root = host_root(&lab);
    let sock = format!("ib-sriov-top-{}", std::process::id());
    let cmd = format!(
        "{} top --host-root {} --state-dir {}",
        bin().display(),
        root.path().display(),
        lab.state.display()
    );
    let out = tmux(
        &sock,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "200",
            "-y",
            "20",
            &cmd,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    struct Server(String);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = tmux(&self.0, &["kill-server"]);
        }
    }
    let _server = Server(sock.clone());

    // Pod two sends ten times what pod one sends, for four seconds, to a static
    // neighbour (the datagrams leave the pod's VF netdev whoever receives them).
    let mut senders = Vec::new();
    for (pod, n) in [(&p1, 40), (&p2, 400)] {
        let out = pod.exec(&[
            "ip",
            "neigh",
            "replace",
            "10.56.217.250",
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            "net1",
            "nud",
            "permanent",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = format!(
            "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nt=time.time()\nwhile time.time()-t<4:\n  for i in range({n}): s.sendto(b'x'*1000,('10.56.217.250',9))\n  time.sleep(0.1)"
        );
        let netns = pod.netns().to_string();
        senders.push(std::thread::spawn(move || {
            exec_in_netns(Path::new(&netns), &["python3", "-c", &script], &[], None)
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(3000));
    let screen =
        String::from_utf8(tmux(&sock, &["capture-pane", "-p", "-t", "top"]).stdout).unwrap();
    for s in senders {
        assert!(s.join().unwrap().status.success());
    }
    let line = |pod: &str| {
        screen
            .lines()
            .position(|l| l.contains(pod))
            .unwrap_or_else(|| panic!("no row for {pod}:\n{screen}"))
    };
    let (one, two) = (line("team-a/one"), line("team-a/two"));
    assert!(two < one, "the busier pod first:\n{screen}");
    assert!(
        screen.contains("POD") && screen.contains("GUID"),
        "{screen}"
    );
    assert!(screen.contains("2 attachments"), "{screen}");
    let row_two = screen.lines().nth(two).unwrap();
    assert!(row_two.contains("ibnet/net1"), "{row_two}");
    assert!(row_two.contains(&lab.host.vf(1).addr), "{row_two}");
    assert!(
        row_two.contains("kB/s") || row_two.contains("MB/s"),
        "a rate: {row_two}\n{screen}"
    );
    println!("{screen}");

    let out = tmux(&sock, &["send-keys", "-t", "top", "q"]);
    assert!(out.status.success());
    let t0 = std::time::Instant::now();
    while tmux(&sock, &["has-session", "-t", "top"]).status.success() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "q did not end ib-sriov top"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `ib-sriov doctor --json` on the same host root and stateDir as [`scrape`], in the
/// emulated host's netns.
fn doctor_json(lab: &Lab) -> Value {
    let root = host_root(lab);
    let out = exec_in_netns(
        &lab.host.host_netns_path(),
        &[
            &bin().to_string_lossy(),
            "doctor",
            "--json",
            "--host-root",
            &root.path().to_string_lossy(),
            "--state-dir",
            &lab.state.to_string_lossy(),
        ],
        &[],
        None,
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The labels of series key `name{a="x",b="y"}` (values without quotes or commas).
fn labels(key: &str) -> BTreeMap<String, String> {
    let Some((_, rest)) = key.split_once('{') else {
        return BTreeMap::new();
    };
    rest.trim_end_matches('}')
        .split("\",")
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once("=\"").unwrap();
            (k.to_string(), v.trim_end_matches('"').to_string())
        })
        .collect()
}

/// Issue 52: `ib_sriov_attachment_info`'s `node_guid` and `port_guid` are the VF's
/// effective GUIDs, whoever set them, and agree with the doctor for the same
/// attachment: VF 0 with a GUID ADD set (runtimeConfig.infinibandGUID), VF 1 keeping
/// the GUID it had before the pod (the emulated MLNX_OFED `<PF>/sriov/1/{node,port}`,
/// as the operator's GUID file or the firmware leaves it; ADD sets none), where `guid`
/// (what ADD set) stays empty.
#[test]
fn doctor_and_the_exporter_agree_on_each_attachments_guids() {
    let lab = Lab::new(EmuOptions::default());
    let set = "02:00:00:00:00:00:52:00";
    let p0 = lab.host.new_pod();
    let mut c0 = lab.conf("1.0.0", 0);
    c0["runtimeConfig"] = serde_json::json!({ "infinibandGUID": set });
    lab.run(
        "ADD",
        "cid-set",
        p0.netns(),
        &c0,
        &[("CNI_ARGS", &pod_args("set"))],
    )
    .expect_ok();
    let (_p1, _, _) = add_named_pod(&lab, 1, "kept");

    let (text, m) = scrape(&lab);
    let d = doctor_json(&lab);
    let atts = d["attachments"].as_array().unwrap();
    assert_eq!(atts.len(), 2, "{d}");
    for a in atts {
        let vf = a["vf"].as_str().unwrap();
        let info: Vec<BTreeMap<String, String>> = m
            .keys()
            .filter(|k| k.starts_with("ib_sriov_attachment_info{"))
            .map(|k| labels(k))
            .filter(|l| l.get("vf").map(String::as_str) == Some(vf))
            .collect();
        assert_eq!(info.len(), 1, "VF {vf}: {text}");
        let vfj = d["vfs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["pci"] == vf)
            .unwrap();
        assert_eq!(
            info[0].get("port_guid").map(String::as_str),
            a["guid"].as_str(),
            "VF {vf}: exporter port_guid and doctor's attachments[].guid\n{text}"
        );
        assert_eq!(
            info[0].get("node_guid").map(String::as_str),
            vfj["nodeGuid"].as_str(),
            "VF {vf}: exporter node_guid and doctor's vfs[].nodeGuid\n{text}"
        );
    }
    let of = |pod: &str, label: &str| {
        m.keys()
            .filter(|k| k.starts_with("ib_sriov_attachment_info{"))
            .map(|k| labels(k))
            .find(|l| l.get("pod").map(String::as_str) == Some(pod))
            .and_then(|l| l.get(label).cloned())
            .unwrap_or_else(|| panic!("no attachment of pod {pod} with {label}\n{text}"))
    };
    assert_eq!(of("set", "port_guid"), set);
    assert_eq!(of("set", "node_guid"), set);
    assert_eq!(of("set", "guid"), set);
    let vf1 = lab.host.vf(1);
    assert_eq!(of("kept", "port_guid"), vf1.port_guid.clone().unwrap());
    assert_eq!(of("kept", "node_guid"), vf1.node_guid.clone().unwrap());
    assert_eq!(of("kept", "guid"), "", "guid is what ADD set: none");
}

/// Issue 52: the plain doctor's findings, served by the exporter: counts by code and
/// severity equal to `ib-sriov doctor --json`'s, one `ib_sriov_doctor_finding` series
/// per finding whose subject is a VF (`netns-gone` for a pod deleted without DEL), none
/// for a code whose subject is a path (`journal-unreadable`), `ib_sriov_doctor_up` 1
/// with the pass's time; and the age of an incomplete journal (an ADD killed midway,
/// its file last written 10 minutes ago).
#[test]
fn the_doctors_findings_and_a_stuck_journal_are_served() {
    let lab = Lab::new(EmuOptions::default());
    let (p0, _, _) = add_named_pod(&lab, 0, "gone");
    let (_p1, _, _) = add_named_pod(&lab, 1, "stuck");
    p0.delete().unwrap();
    // VF 1's ADD as if killed before it completed, its journal untouched for 600 s.
    let jpath = lab.state.join("cid-stuck:net1");
    let mut j: Value = serde_json::from_slice(&std::fs::read(&jpath).unwrap()).unwrap();
    j["complete"] = Value::Bool(false);
    std::fs::write(&jpath, serde_json::to_vec(&j).unwrap()).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&jpath)
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::fs::write(lab.state.join("garbage:net1"), b"not json").unwrap();

    let (text, m) = scrape(&lab);
    let d = doctor_json(&lab);
    let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
    for f in d["findings"].as_array().unwrap() {
        let k = (
            f["code"].as_str().unwrap().to_string(),
            f["severity"].as_str().unwrap().to_string(),
        );
        *want.entry(k).or_default() += 1.0;
    }
    let got: BTreeMap<(String, String), f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("ib_sriov_doctor_findings{"))
        .map(|(k, v)| {
            let l = labels(k);
            ((l["code"].clone(), l["severity"].clone()), *v)
        })
        .collect();
    assert_eq!(got, want, "{text}");
    let vf0 = lab.host.vf(0).addr.clone();
    assert!(
        want.contains_key(&("netns-gone".to_string(), "warning".to_string())),
        "{d}"
    );
    assert_eq!(
        value(
            &m,
            "ib_sriov_doctor_finding",
            &[
                ("code", "netns-gone"),
                ("severity", "warning"),
                ("subject", &vf0)
            ]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &m,
            "ib_sriov_doctor_findings",
            &[("code", "journal-unreadable")]
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        !text.contains("ib_sriov_doctor_finding{code=\"journal-unreadable\""),
        "a path subject is not a series: {text}"
    );
    assert_eq!(value(&m, "ib_sriov_doctor_up", &[]), Some(1.0));
    assert_eq!(
        value(&m, "ib_sriov_doctor_finding_series_dropped", &[]),
        Some(0.0)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = value(&m, "ib_sriov_doctor_run_timestamp_seconds", &[]).unwrap();
    assert!(at <= now && at > now - 120.0, "{at} {now}");
    let took = value(&m, "ib_sriov_doctor_run_duration_seconds", &[]).unwrap();
    assert!(took > 0.0 && took < 60.0, "{took}");
    let age = value(&m, "ib_sriov_journal_oldest_incomplete_age_seconds", &[]).unwrap();
    assert!((600.0..700.0).contains(&age), "{age}\n{text}");
    assert_eq!(
        value(&m, "ib_sriov_journals", &[("state", "incomplete")]),
        Some(1.0)
    );
    std::fs::remove_file(lab.state.join("garbage:net1")).unwrap();
    // Restore the journal for the lab's teardown.
    j["complete"] = Value::Bool(true);
    std::fs::write(&jpath, serde_json::to_vec(&j).unwrap()).unwrap();
}

/// Issue 52: a doctor pass that fails (the `failpoints` build's `exporter.doctor_pass`)
/// is served as `ib_sriov_doctor_up 0` with no findings, its error on stderr, and the
/// scrape itself goes on; `--doctor-interval 0` serves no doctor series at all.
#[test]
fn a_failed_doctor_pass_is_served_as_down() {
    let lab = Lab::new(EmuOptions::default());
    let (_p, _, _) = add_named_pod(&lab, 0, "one");
    let (err, text, m) = scrape_with(
        &lab,
        &[("IB_SRIOV_FAILPOINTS", "exporter.doctor_pass=error")],
        &[],
    );
    assert_eq!(value(&m, "ib_sriov_doctor_up", &[]), Some(0.0), "{text}");
    assert!(
        err.contains("the doctor pass failed: ") && err.contains("injected failure"),
        "{err}"
    );
    assert!(!text.contains("ib_sriov_doctor_findings{"), "{text}");
    assert_eq!(value(&m, "ib_sriov_attachments_live", &[]), Some(1.0));

    let (_, text, m) = scrape_with(&lab, &[], &["--doctor-interval", "0"]);
    assert!(!text.contains("ib_sriov_doctor_"), "{text}");
    assert_eq!(value(&m, "ib_sriov_attachments_live", &[]), Some(1.0));
}
