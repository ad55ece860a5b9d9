//! Multi-rail GPU pods: one pod gets 8 VFs (one per rail), as `net1`…`net8`, from one
//! network (same subnet, same routes) or from 8 networks (one subnet each), added one
//! after the other or all at once. Every rail's CHECK passes while the others exist;
//! DELs in a shuffled order each leave the other rails' addresses and routes intact; the
//! host is as before at the end. The same-subnet layout also runs through libcni with
//! `conf/multi-rail-same-subnet.conflist` (tuning's `arp_ignore`/`arp_announce`).
//! Needs root (netns, veth); the conflist case needs Debian's tuning and libcni.

mod common;

use common::emuhost::{exec_in_netns, EmuOptions, Pod};
use common::lab::{bin, Lab, Run};
use common::libcni::driver;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

const RAILS: u32 = 8;
const CID: &str = "trainer-0-sandbox";

fn lab() -> Lab {
    Lab::new(EmuOptions {
        vfs: RAILS,
        ..Default::default()
    })
}

/// Rail `k` (0-based): VF k as `net<k+1>`; one network for all, or network `rail<k>`
/// with subnet 10.60.<k>.0/24. Every rail routes 10.0.0.0/8 through its gateway.
fn rail_conf(lab: &Lab, k: u32, one_network: bool) -> Value {
    let (name, subnet, gw) = if one_network {
        (
            "ibrails".to_string(),
            "10.56.0.0/16".to_string(),
            "10.56.0.1".to_string(),
        )
    } else {
        (
            format!("rail{k}"),
            format!("10.60.{k}.0/24"),
            format!("10.60.{k}.1"),
        )
    };
    let mut c = lab.conf("1.0.0", k);
    c["name"] = json!(name);
    c["runtimeConfig"] = json!({"infinibandGUID": format!("02:00:00:00:00:00:aa:{:02x}", k + 1)});
    c["link_state"] = json!("enable");
    c["ipam"]["subnet"] = json!(subnet);
    c["ipam"]["gateway"] = json!(gw);
    c["ipam"]["routes"] = json!([{"dst": "10.0.0.0/8"}]);
    c
}

fn ifname(k: u32) -> String {
    format!("net{}", k + 1)
}

fn call(lab: &Lab, cmd: &str, pod: &Pod, k: u32, conf: &Value) -> Run {
    Run::from(lab.host.run_plugin(
        bin(),
        cmd,
        CID,
        pod.netns(),
        &ifname(k),
        &conf.to_string(),
        &[],
    ))
}

/// What a rail shows in the pod: its IPv4 addresses and routes.
fn rail_state(pod: &Pod, k: u32) -> (Vec<String>, Vec<String>) {
    let dev = ifname(k);
    let addrs = pod
        .link_snapshots()
        .into_iter()
        .find(|l| l.name == dev)
        .map(|l| l.addrs.into_iter().filter(|a| !a.contains(':')).collect())
        .unwrap_or_default();
    let out = pod.exec(&["ip", "-4", "route", "show"]);
    let routes = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("dev {dev} ")) || l.ends_with(&format!("dev {dev}")))
        .map(|l| l.trim().to_string())
        .collect();
    (addrs, routes)
}

/// A deterministic shuffle of 0..n (xorshift; the seed names the run).
fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn run_rails(one_network: bool, parallel: bool, seed: u64) {
    let lab = lab();
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    let confs: Vec<Value> = (0..RAILS)
        .map(|k| rail_conf(&lab, k, one_network))
        .collect();

    let results: Vec<Value> = if parallel {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..RAILS)
                .map(|k| {
                    let (lab, pod, conf) = (&lab, &pod, &confs[k as usize]);
                    s.spawn(move || call(lab, "ADD", pod, k, conf).expect_ok())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    } else {
        let mut done: Vec<Value> = Vec::new();
        for k in 0..RAILS {
            done.push(call(&lab, "ADD", &pod, k, &confs[k as usize]).expect_ok());
            // Every rail added so far still checks.
            for (j, r) in done.iter().enumerate() {
                let mut c = confs[j].clone();
                c["prevResult"] = r.clone();
                call(&lab, "CHECK", &pod, j as u32, &c).expect_ok();
            }
        }
        done
    };

    // Distinct addresses, every rail with its route to 10.0.0.0/8; every CHECK passes.
    let mut state = BTreeMap::new();
    let mut addrs = Vec::new();
    for k in 0..RAILS {
        let (a, r) = rail_state(&pod, k);
        assert_eq!(a.len(), 1, "rail {k}: {a:?}");
        assert!(
            r.iter().any(|l| l.starts_with("10.0.0.0/8 via")),
            "rail {k} routes: {r:?}"
        );
        addrs.push(a[0].clone());
        state.insert(k, (a, r));
        let mut c = confs[k as usize].clone();
        c["prevResult"] = results[k as usize].clone();
        call(&lab, "CHECK", &pod, k, &c).expect_ok();
    }
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), RAILS as usize, "distinct addresses");

    let order = shuffled(RAILS, seed);
    if parallel {
        std::thread::scope(|s| {
            for &k in &order {
                let (lab, pod, conf) = (&lab, &pod, &confs[k as usize]);
                s.spawn(move || call(lab, "DEL", pod, k, conf).expect_ok());
            }
        });
    } else {
        for (i, &k) in order.iter().enumerate() {
            call(&lab, "DEL", &pod, k, &confs[k as usize]).expect_ok();
            assert_eq!(rail_state(&pod, k), (vec![], vec![]), "rail {k} gone");
            for &other in &order[i + 1..] {
                assert_eq!(
                    rail_state(&pod, other),
                    state[&other],
                    "rail {other} intact after DEL of rail {k}"
                );
                let mut c = confs[other as usize].clone();
                c["prevResult"] = results[other as usize].clone();
                call(&lab, "CHECK", &pod, other, &c).expect_ok();
            }
        }
    }
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), before, "host after every DEL");
}

/// One `#[test]` per row: (name, one network for all rails, DELs in parallel, seed).
macro_rules! rails_tests {
    ($(($name:ident, $one_network:expr, $parallel:expr, $seed:expr)),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_rails($one_network, $parallel, $seed);
            }
        )*
    };
}

rails_tests![
    (eight_rails_one_network_sequential, true, false, 0x5eed_0001),
    (eight_rails_one_network_parallel, true, true, 0x5eed_0002),
    (
        eight_rails_eight_networks_sequential,
        false,
        false,
        0x5eed_0003
    ),
    (
        eight_rails_eight_networks_parallel,
        false,
        true,
        0x5eed_0004
    ),
];

/// `conf/multi-rail-same-subnet.conflist` as shipped, through libcni, for 8 rails of one
/// pod: tuning sets `arp_ignore=1`/`arp_announce=2` in the pod (same-subnet rails must
/// answer ARP only for their own address), CHECK of each rail passes, DEL in shuffled
/// order, host as before.
#[test]
fn shipped_same_subnet_conflist_through_libcni() {
    let lab = lab();
    assert!(
        Path::new("/usr/lib/cni/tuning").exists(),
        "apt-get install containernetworking-plugins"
    );
    let shipped: Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/multi-rail-same-subnet.conflist"),
        )
        .unwrap(),
    )
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    let cni_path = format!("{}:/usr/lib/cni", bin().parent().unwrap().display());
    let cache = scratch.path().join("cache");
    let drive = |cmd: &str, k: u32| {
        // Multus: deviceID/pciBusID per attachment; the test: stateDir and dataDir.
        let mut c = shipped.clone();
        let p = &mut c["plugins"][0];
        p["deviceID"] = json!(lab.host.vf(k).addr);
        p["pciBusID"] = json!(lab.host.vf(k).addr);
        p["stateDir"] = json!(lab.state);
        p["goCacheDir"] = json!(lab.host.root().join("go-cache"));
        p["ipam"]["dataDir"] = json!(lab.data);
        let file = scratch.path().join(format!("rail{k}.conflist"));
        std::fs::write(&file, c.to_string()).unwrap();
        let guid = format!("infinibandGUID=02:00:00:00:00:00:bb:{:02x}", k + 1);
        let args = [
            driver().to_str().unwrap(),
            "--cap",
            guid.as_str(),
            cmd,
            file.to_str().unwrap(),
            pod.netns(),
            CID,
            &ifname(k),
        ];
        let env = [
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_SYSFS_ROOT", lab.host.root().to_str().unwrap()),
            ("LIBCNI_CACHE_DIR", cache.to_str().unwrap()),
        ];
        let o = exec_in_netns(&lab.host.host_netns_path(), &args, &env, None);
        assert!(
            o.status.success(),
            "{cmd} rail {k}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    for k in 0..RAILS {
        drive("add", k);
    }
    for (key, want) in [("arp_ignore", "1"), ("arp_announce", "2")] {
        let o = pod.exec(&["cat", &format!("/proc/sys/net/ipv4/conf/all/{key}")]);
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{key}");
    }
    for k in 0..RAILS {
        assert_eq!(rail_state(&pod, k).0.len(), 1, "rail {k}");
        drive("check", k);
    }
    for k in shuffled(RAILS, 0x5eed_0005) {
        drive("del", k);
    }
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before);
}
