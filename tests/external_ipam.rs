//! Delegated IPAM (SPEC.md "Section 4: Plugin Delegation") with Debian's real
//! `host-local` and `static` (package containernetworking-plugins, /usr/lib/cni; .ci/run
//! installs it), on the emulated host with the real binary. Needs root.
//!
//! Debian ships plugins 1.1.1, which know CNI versions up to 1.0.0: these tests use
//! cniVersion 1.0.0. GC and STATUS (1.1.0 only) are checked against a recording
//! delegate, a shell script, since those host-local versions do not implement them.

#![cfg(feature = "failpoints")]

mod common;

use common::fixture::fresh;
use common::lab::{list, pod_addrs, Lab};
use common::script::install_script;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const DEBIAN_CNI: &str = "/usr/lib/cni";

fn cni_path() -> String {
    let ours = common::lab::bin().parent().unwrap();
    assert!(
        Path::new(DEBIAN_CNI).join("host-local").exists()
            && Path::new(DEBIAN_CNI).join("static").exists(),
        "{DEBIAN_CNI}/host-local and static are needed: apt-get install containernetworking-plugins"
    );
    format!("{}:{DEBIAN_CNI}", ours.display())
}

fn with_ipam(lab: &Lab, version: &str, vf: u32, ipam: Value) -> Value {
    let mut c = lab.conf(version, vf);
    c["ipam"] = ipam;
    c
}

/// Installs the stand-in delegate `name` (the shell script `script`) in the lab's
/// `fake-cni-bin`: the network config (cniVersion 1.0.0, VF 0) whose IPAM is that
/// delegate, and the CNI_PATH that finds it (then ours and Debian's).
fn fake_delegate(lab: &Lab, name: &str, script: &str) -> (Value, String) {
    let bin = lab.host.root().join("fake-cni-bin");
    install_script(&bin, name, script);
    let conf = with_ipam(lab, "1.0.0", 0, json!({ "type": name }));
    (conf, format!("{}:{}", bin.display(), cni_path()))
}

fn host_local(lab: &Lab) -> (Value, PathBuf) {
    let dir = lab.host.root().join("host-local");
    (
        json!({"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": dir,
               "routes": [{"dst": "172.16.0.0/12"}]}),
        dir.join("ibnet"),
    )
}

fn run(lab: &Lab, cmd: &str, cid: &str, netns: &str, conf: &Value, fp: &str) -> common::lab::Run {
    let path = cni_path();
    let mut env = vec![("CNI_PATH", path.as_str())];
    if !fp.is_empty() {
        env.push(("IB_SRIOV_FAILPOINTS", fp));
    }
    lab.run(cmd, cid, netns, conf, &env)
}

/// host-local allocations: the per-IP files of its store.
fn held(store: &Path) -> Vec<String> {
    list(store)
        .into_iter()
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

#[test]
fn host_local_add_check_del() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let (ipam, store) = host_local(&lab);
    let conf = with_ipam(&lab, "1.0.0", 0, ipam);
    let pod = lab.host.new_pod();
    let res = run(&lab, "ADD", "h1", pod.netns(), &conf, "").expect_ok();
    assert_eq!(res["ips"][0]["address"], "10.77.0.2/24", "{res}");
    assert_eq!(res["ips"][0]["gateway"], "10.77.0.1");
    assert_eq!(res["ips"][0]["interface"], 0, "interface index set by us");
    assert_eq!(res["routes"][0]["dst"], "172.16.0.0/12");
    assert_eq!(res["interfaces"][0]["name"], "net1");
    assert_eq!(pod_addrs(&pod, "net1"), ["10.77.0.2/24"]);
    assert_eq!(held(&store), ["10.77.0.2"]);
    assert_eq!(
        std::fs::read_to_string(store.join("10.77.0.2")).unwrap(),
        "h1\r\nnet1",
        "host-local's own record"
    );
    assert!(
        lab.allocations().is_empty(),
        "the built-in store is not used"
    );

    let mut chk = conf.clone();
    chk["prevResult"] = res.clone();
    run(&lab, "CHECK", "h1", pod.netns(), &chk, "").expect_ok();
    // host-local's CHECK fails when its store holds nothing for the container: only the
    // delegate can see that, so this failure proves CHECK is forwarded.
    let rec = std::fs::read(store.join("10.77.0.2")).unwrap();
    std::fs::remove_file(store.join("10.77.0.2")).unwrap();
    let r = run(&lab, "CHECK", "h1", pod.netns(), &chk, "");
    assert!(!r.ok);
    assert!(
        r.json["msg"]
            .as_str()
            .unwrap()
            .starts_with("ipam plugin host-local CHECK"),
        "{}",
        r.json
    );
    std::fs::write(store.join("10.77.0.2"), rec).unwrap();
    run(&lab, "CHECK", "h1", pod.netns(), &chk, "").expect_ok();

    run(&lab, "DEL", "h1", pod.netns(), &conf, "").expect_ok();
    assert!(held(&store).is_empty(), "host-local released the address");
    assert_eq!(lab.host.snapshot(), before);
    run(&lab, "DEL", "h1", pod.netns(), &conf, "").expect_ok();
}

#[test]
fn static_add_check_del() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let ipam = json!({"type": "static",
        "addresses": [{"address": "10.88.0.5/24", "gateway": "10.88.0.1"}],
        "routes": [{"dst": "10.200.0.0/16", "gw": "10.88.0.254"}],
        "dns": {"nameservers": ["10.88.0.53"]}});
    let conf = with_ipam(&lab, "1.0.0", 1, ipam);
    let pod = lab.host.new_pod();
    let res = run(&lab, "ADD", "s1", pod.netns(), &conf, "").expect_ok();
    assert_eq!(res["ips"][0]["address"], "10.88.0.5/24", "{res}");
    assert_eq!(res["ips"][0]["interface"], 0);
    assert_eq!(
        res["dns"]["nameservers"][0], "10.88.0.53",
        "dns passed through"
    );
    assert_eq!(pod_addrs(&pod, "net1"), ["10.88.0.5/24"]);
    let routes = pod.exec(&["ip", "route", "show", "10.200.0.0/16"]);
    assert!(
        String::from_utf8_lossy(&routes.stdout).contains("via 10.88.0.254 dev net1"),
        "{}",
        String::from_utf8_lossy(&routes.stdout)
    );
    let mut chk = conf.clone();
    chk["prevResult"] = res;
    run(&lab, "CHECK", "s1", pod.netns(), &chk, "").expect_ok();
    run(&lab, "DEL", "s1", pod.netns(), &conf, "").expect_ok();
    assert_eq!(lab.host.snapshot(), before);
}

/// ADD failing after the delegate allocated (and a crash there): the delegate's DEL runs,
/// so host-local's allocation is released; the host is as before.
#[test]
fn add_failing_after_ipam_releases_the_delegates_allocation() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let (ipam, store) = host_local(&lab);
    let mut conf = with_ipam(&lab, "1.0.0", 2, ipam);
    conf["link_state"] = json!("enable");
    let pod = lab.host.new_pod();
    for point in ["add.ipam", "add.addresses", "add.complete"] {
        let e = run(
            &lab,
            "ADD",
            "f1",
            pod.netns(),
            &conf,
            &format!("{point}=error"),
        )
        .expect_code(102);
        assert!(e["msg"].as_str().unwrap().contains(point), "{e}");
        assert!(
            held(&store).is_empty(),
            "{point}: host-local DEL was called"
        );
        assert_eq!(lab.host.snapshot(), before, "{point}");
        assert!(lab.journals().is_empty(), "{point}");
    }
    // Killed right after host-local allocated: the next DEL releases it.
    let killed = run(&lab, "ADD", "f2", pod.netns(), &conf, "add.ipam=kill");
    assert!(!killed.ok);
    assert_eq!(held(&store).len(), 1, "allocated before the kill");
    run(&lab, "DEL", "f2", pod.netns(), &conf, "").expect_ok();
    assert!(held(&store).is_empty());
    assert_eq!(lab.host.snapshot(), before);
}

/// The delegate's own failure (an exhausted host-local range) reaches the runtime with
/// the delegate's code and message, and the VF is rolled back.
#[test]
fn a_failing_delegate_rolls_back_and_passes_its_error_on() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let dir = lab.host.root().join("host-local");
    let ipam = json!({"type": "host-local", "dataDir": dir, "ranges": [[{
        "subnet": "10.77.0.0/24", "rangeStart": "10.77.0.9", "rangeEnd": "10.77.0.9"}]]});
    let (p1, p2) = (lab.host.new_pod(), lab.host.new_pod());
    let c1 = with_ipam(&lab, "1.0.0", 0, ipam.clone());
    let c2 = with_ipam(&lab, "1.0.0", 1, ipam);
    run(&lab, "ADD", "e1", p1.netns(), &c1, "").expect_ok();
    let snap = lab.host.snapshot();
    let r = run(&lab, "ADD", "e2", p2.netns(), &c2, "");
    assert!(!r.ok);
    let msg = r.json["msg"].as_str().unwrap();
    assert!(msg.starts_with("ipam plugin host-local ADD:"), "{}", r.json);
    assert_eq!(lab.host.snapshot(), snap, "VF 1 rolled back");
    assert_eq!(p2.links(), ["lo"]);
    run(&lab, "DEL", "e1", p1.netns(), &c1, "").expect_ok();
    run(&lab, "DEL", "e2", p2.netns(), &c2, "").expect_ok();
    assert_eq!(lab.host.snapshot(), before);
}

/// A delegate that is not on CNI_PATH is a config error before any change; `dhcp` is
/// refused with the reason.
#[test]
fn missing_delegate_and_dhcp_are_refused_up_front() {
    let (lab, before, pod) = fresh();
    let conf = with_ipam(&lab, "1.0.0", 0, json!({"type": "no-such-ipam"}));
    let e = run(&lab, "ADD", "m1", pod.netns(), &conf, "").expect_code(7);
    assert!(
        e["msg"].as_str().unwrap().contains("not found in CNI_PATH"),
        "{e}"
    );
    let conf = with_ipam(&lab, "1.0.0", 0, json!({"type": "dhcp"}));
    let e = run(&lab, "ADD", "m1", pod.netns(), &conf, "").expect_code(7);
    assert!(e["msg"].as_str().unwrap().contains("daemon"), "{e}");
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());
}

/// GC and STATUS are forwarded with the same stdin (the valid-attachments list included)
/// and environment to a delegate whose VERSION lists 1.1.0; a delegate's STATUS code 50
/// is passed on. A delegate without 1.1.0 (Debian's host-local 1.1.1) gets neither.
#[test]
fn gc_and_status_are_forwarded() {
    let lab = Lab::default();
    let bin = lab.host.root().join("fake-cni-bin");
    let log = lab.host.root().join("recorder.log");
    install_script(&bin, "recorder", &format!(
            "#!/bin/sh\ninput=$(cat)\n\
             if [ \"$CNI_COMMAND\" = VERSION ]; then echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}}'; exit 0; fi\n\
             printf '%s %s\\n' \"$CNI_COMMAND\" \"$input\" >> {log}\n\
             if [ \"$CNI_COMMAND\" = STATUS ] && [ -e {log}.down ]; then\n\
             echo '{{\"cniVersion\":\"1.1.0\",\"code\":50,\"msg\":\"pool service down\"}}'; exit 1; fi\n",
            log = log.display()
        ));
    let mut conf = lab.conf("1.1.0", 0);
    conf.as_object_mut().unwrap().remove("deviceID");
    conf["ipam"] = json!({"type": "recorder", "pool": "p1"});
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "x", "ifname": "net1"}]);
    let path = format!("{}:{}", bin.display(), cni_path());
    let env = [("CNI_PATH", path.as_str())];
    lab.run("GC", "", "", &conf, &env).expect_ok();
    lab.run("STATUS", "", "", &conf, &env).expect_ok();
    std::fs::write(format!("{}.down", log.display()), "").unwrap();
    let e = lab.run("STATUS", "", "", &conf, &env).expect_code(50);
    assert!(
        e["msg"].as_str().unwrap().contains("pool service down"),
        "{e}"
    );

    let lines: Vec<(String, Value)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let (cmd, json) = l.split_once(' ').unwrap();
            (cmd.to_string(), serde_json::from_str(json).unwrap())
        })
        .collect();
    let cmds: Vec<&str> = lines.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(cmds, ["GC", "STATUS", "STATUS"]);
    assert_eq!(
        lines[0].1["cni.dev/valid-attachments"][0]["containerID"],
        "x"
    );
    assert_eq!(lines[0].1["ipam"]["pool"], "p1");
    assert_eq!(lines[0].1["name"], "ibnet");

    // Debian's host-local 1.1.1 lists no 1.1.0: GC and STATUS succeed without it.
    let (hl, store) = host_local(&lab);
    conf["ipam"] = hl;
    lab.run("GC", "", "", &conf, &env).expect_ok();
    lab.run("STATUS", "", "", &conf, &env).expect_ok();
    assert!(held(&store).is_empty());
}

/// Every unusable IPAM configuration: ADD fails before or during IPAM and leaves
/// nothing (no journal, host as before); DEL of the attachment succeeds, twice
/// (issue 9 item 4: such pods could never be deleted). Cases: dhcp, a plugin missing
/// from CNI_PATH, host-local with a malformed subnet (refused by host-local itself,
/// after the journal was written), a delegate refusing the cniVersion (code 1 on ADD
/// and DEL), a delegate refusing its configuration (code 7).
#[test]
fn unusable_ipam_never_blocks_del() {
    let (lab, before, pod) = fresh();
    let bin = lab.host.root().join("fake-cni-bin");
    for (name, code) in [("refuse-version", 1), ("refuse-config", 7)] {
        install_script(
            &bin,
            name,
            &format!(
                "#!/bin/sh\ncat >/dev/null\n\
                 if [ \"$CNI_COMMAND\" = VERSION ]; then echo '{{\"cniVersion\":\"0.3.1\",\"supportedVersions\":[\"0.3.1\"]}}'; exit 0; fi\n\
                 echo '{{\"cniVersion\":\"0.3.1\",\"code\":{code},\"msg\":\"refused\"}}'; exit 1\n"
            ),
        );
    }
    let path = format!("{}:{}", bin.display(), cni_path());
    let env = [("CNI_PATH", path.as_str())];
    let (mut typo, _) = host_local(&lab);
    typo["subnet"] = json!("10.56.217.0/33");
    for (i, ipam) in [
        json!({"type": "dhcp"}),
        json!({"type": "no-such-ipam"}),
        typo,
        json!({"type": "refuse-version"}),
        json!({"type": "refuse-config"}),
    ]
    .into_iter()
    .enumerate()
    {
        let cid = format!("u{i}");
        let conf = with_ipam(&lab, "1.0.0", 0, ipam.clone());
        let r = lab.run("ADD", &cid, pod.netns(), &conf, &env);
        assert!(!r.ok, "ADD with {ipam} succeeded");
        assert_eq!(lab.host.snapshot(), before, "{ipam}: rolled back");
        assert!(lab.journals().is_empty(), "{ipam}: {:?}", lab.journals());
        assert_eq!(pod.links(), ["lo"]);
        lab.run("DEL", &cid, pod.netns(), &conf, &env).expect_ok();
        lab.run("DEL", &cid, pod.netns(), &conf, &env).expect_ok();
        assert_eq!(lab.host.snapshot(), before, "{ipam}");
    }
}

/// An IPAM result without any IP is an error, as in the Go plugin ("IPAM plugin returned
/// missing IP config"): ADD fails with code 103, the VF is rolled back and the delegate's
/// DEL runs; DEL then succeeds (issue 9, item 10).
#[test]
fn a_delegate_result_without_ips_is_an_error() {
    let (lab, before, pod) = fresh();
    let log = lab.host.root().join("noip.log");
    let (conf, path) = fake_delegate(
        &lab,
        "noip",
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho \"$CNI_COMMAND\" >> {log}\n\
             if [ \"$CNI_COMMAND\" = ADD ]; then echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[]}}'; fi\n",
            log = log.display()
        ),
    );
    let env = [("CNI_PATH", path.as_str())];
    let e = lab
        .run("ADD", "n1", pod.netns(), &conf, &env)
        .expect_code(103);
    assert!(e["msg"].as_str().unwrap().contains("no IP address"), "{e}");
    assert_eq!(lab.host.snapshot(), before, "rolled back");
    assert_eq!(pod.links(), ["lo"]);
    assert!(lab.journals().is_empty());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");
    lab.run("DEL", "n1", pod.netns(), &conf, &env).expect_ok();
    assert_eq!(lab.host.snapshot(), before);
}

/// An IPAM plugin whose ADD prints something that is not a CNI result: code 103
/// naming the plugin and the bad field, and not calling it a prevResult (it is the IPAM
/// plugin's result); the ADD is rolled back.
#[test]
fn a_delegate_result_that_is_not_a_cni_result_names_the_plugin_not_prev_result() {
    let (lab, before, pod) = fresh();
    let (conf, path) = fake_delegate(
        &lab,
        "badresult",
        "#!/bin/sh\ncat >/dev/null\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"nope\"}]}'; fi\n",
    );
    let env = [("CNI_PATH", path.as_str())];
    let e = lab
        .run("ADD", "b1", pod.netns(), &conf, &env)
        .expect_code(103);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("ipam plugin badresult ADD result is not a CNI result")
            && msg.contains("ips[].address \"nope\""),
        "{msg}"
    );
    assert!(!msg.contains("prevResult"), "{msg}");
    assert_eq!(lab.host.snapshot(), before, "rolled back");
    lab.run("DEL", "b1", pod.netns(), &conf, &env).expect_ok();
}

/// The built-in allocator and Debian's real host-local on the same store (same
/// `dataDir` and network name), records changed behind our back (issue 13): host-local
/// allocates between our ADDs, releases our record and hands the address to another
/// container. ADD never takes an address host-local holds (claimed with link(2), EEXIST
/// = held), finds the pool exhausted when it is, and DEL releases only records that
/// still name our attachment.
#[test]
fn builtin_ipam_and_host_local_share_a_store() {
    let (lab, before, pod) = fresh();
    let range = json!({"subnet": "10.56.217.0/24", "rangeStart": "10.56.217.2",
                       "rangeEnd": "10.56.217.4", "dataDir": lab.data});
    let mut ours = lab.conf("1.0.0", 0);
    ours["ipam"] = range.clone();
    ours["ipam"]["type"] = json!("ib-sriov-ipam");
    let mut hl = range.clone();
    hl["type"] = json!("host-local");
    let hl_conf = json!({"cniVersion": "1.0.0", "name": "ibnet", "ipam": hl});
    let host_local = |cmd: &str, cid: &str| -> Value {
        let out = lab.host.run_plugin(
            &Path::new(DEBIAN_CNI).join("host-local"),
            cmd,
            cid,
            pod.netns(),
            "net1",
            &hl_conf.to_string(),
            &[("CNI_PATH", DEBIAN_CNI)],
        );
        assert!(out.status.success(), "host-local {cmd} {cid}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let store = lab.data.join("ibnet");
    let rec = |ip: &str| std::fs::read_to_string(store.join(ip)).unwrap_or_default();

    let a = lab.add("A", &pod, &ours).expect_ok();
    assert_eq!(a["ips"][0]["address"], "10.56.217.2/24");
    assert_eq!(
        host_local("ADD", "X")["ips"][0]["address"],
        "10.56.217.3/24"
    );
    // host-local releases A's record (it matches by content) and, round robin, gives
    // .4 to Y and then .2 to Z.
    host_local("DEL", "A");
    assert_eq!(
        host_local("ADD", "Y")["ips"][0]["address"],
        "10.56.217.4/24"
    );
    assert_eq!(
        host_local("ADD", "Z")["ips"][0]["address"],
        "10.56.217.2/24"
    );
    // Our DEL of A: the journal says .2, but .2 is Z's now: left alone.
    lab.del("A", pod.netns(), &ours).expect_ok();
    assert_eq!(rec("10.56.217.2"), "Z\r\nnet1");
    // Every address held by host-local: our ADD finds the pool exhausted, changes nothing.
    let e = lab.add("B", &pod, &ours).expect_code(103);
    common::lab::assert_msg_has(&e, "no IP addresses available");
    assert_eq!(lab.host.snapshot(), before);
    // host-local frees .3: our ADD takes exactly that one.
    host_local("DEL", "X");
    let b = lab.add("B", &pod, &ours).expect_ok();
    assert_eq!(b["ips"][0]["address"], "10.56.217.3/24");
    assert_eq!(rec("10.56.217.3"), "B\r\nnet1");
    lab.del("B", pod.netns(), &ours).expect_ok();
    assert_eq!(rec("10.56.217.3"), "");
    assert_eq!(
        (rec("10.56.217.2"), rec("10.56.217.4")),
        ("Z\r\nnet1".into(), "Y\r\nnet1".into())
    );
    assert_eq!(lab.host.snapshot(), before);
}
