//! IPv6 duplicate address detection at ADD (issue 22), end to end on the emulated host
//! with the real binary: the VF netdev is a veth whose carrier follows its peer
//! (`peer-vfN` in the host netns), so "no carrier" is the peer set down and "a duplicate
//! on the fabric" is the same address on the peer. The IPAM result (an IPv6 address with
//! a gateway) comes from a stand-in delegate on CNI_PATH. Needs root.

mod common;

use common::fixture::fresh;
use common::lab::{bin, Lab};
use common::script::install_script;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const V6: &str = "fd00:56::9";

/// A stand-in IPAM plugin answering ADD with one IPv4 and one IPv6 address, each with a
/// gateway; the network configuration using it and the CNI_PATH that finds it.
fn v6_ipam(lab: &Lab) -> (Value, String) {
    let fake = lab.host.root().join("fake-cni-bin");
    install_script(
        &fake,
        "v6ipam",
        &format!(
            r#"#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
ADD) echo '{{"cniVersion":"1.1.0","ips":[{{"address":"10.56.217.9/24","gateway":"10.56.217.1"}},{{"address":"{V6}/64","gateway":"fd00:56::1"}}]}}' ;;
VERSION) echo '{{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}}' ;;
esac
"#
        ),
    );
    let mut conf = lab.conf("1.1.0", 0);
    conf["ipam"] = json!({"type": "v6ipam"});
    let path = format!("{}:{}", fake.display(), bin().parent().unwrap().display());
    (conf, path)
}

/// The IPv6 addresses of `ifname` in the pod, as `ip -6 -o addr` lines.
fn v6_lines(pod: &common::emuhost::Pod, ifname: &str) -> String {
    let o = pod.exec(&["ip", "-6", "-o", "addr", "show", "dev", ifname]);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An IB port without carrier (before the subnet manager brings it up) never finishes
/// DAD: ADD does not wait for it, succeeds at once with the address configured (still
/// tentative: the kernel finishes DAD once carrier comes), and DEL cleans up.
#[test]
fn ipv6_without_carrier_add_succeeds_and_keeps_the_address() {
    let (lab, before, pod) = fresh();
    let peer = lab.host.vf(0).peer.clone().expect("VF 0 has a netdev");
    lab.host.host_ip(&["link", "set", &peer, "down"]);
    let (conf, path) = v6_ipam(&lab);
    let env = [("CNI_PATH", path.as_str())];
    let t = Instant::now();
    let res = lab
        .run("ADD", "nocarrier", pod.netns(), &conf, &env)
        .expect_ok();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "ADD did not wait for DAD on a link without carrier: {took:?}"
    );
    assert_eq!(res["ips"][1]["address"], format!("{V6}/64"), "{res}");
    let a6 = v6_lines(&pod, "net1");
    assert!(a6.contains(&format!("{V6}/64")), "address kept: {a6}");
    assert!(
        a6.contains("tentative"),
        "DAD cannot finish without carrier: {a6}"
    );
    let link = pod.exec(&["ip", "-o", "link", "show", "dev", "net1"]);
    let link = String::from_utf8_lossy(&link.stdout);
    assert!(link.contains("NO-CARRIER"), "{link}");

    lab.run("DEL", "nocarrier", pod.netns(), &conf, &env)
        .expect_ok();
    lab.host.host_ip(&["link", "set", &peer, "up"]);
    assert_eq!(pod.links(), vec!["lo"]);
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());
}

/// With carrier and an IPv6 gateway, ADD waits for DAD: the address is usable (no longer
/// tentative) when ADD returns.
#[test]
fn ipv6_with_carrier_and_gateway_add_waits_for_dad() {
    let (lab, before, pod) = fresh();
    let (conf, path) = v6_ipam(&lab);
    let env = [("CNI_PATH", path.as_str())];
    lab.run("ADD", "dad", pod.netns(), &conf, &env).expect_ok();
    let a6 = v6_lines(&pod, "net1");
    assert!(a6.contains(&format!("{V6}/64")), "{a6}");
    assert!(
        !a6.contains("tentative"),
        "DAD finished before ADD returned: {a6}"
    );
    lab.run("DEL", "dad", pod.netns(), &conf, &env).expect_ok();
    assert_eq!(lab.host.snapshot(), before);
}

/// A real duplicate: another node (here the veth peer, with the address set `nodad`)
/// answers the DAD probe, the kernel marks the pod's address `IFA_F_DADFAILED`, and ADD
/// fails with code 102 naming it; the failed ADD is rolled back: nothing is left in the
/// pod, the host or stateDir.
#[test]
fn ipv6_dad_failure_fails_add_with_code_102_and_leaves_nothing() {
    let (lab, before, pod) = fresh();
    let peer = lab.host.vf(0).peer.clone().expect("VF 0 has a netdev");
    lab.host.host_exec(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{peer}.disable_ipv6=0"),
    ]);
    lab.host
        .host_ip(&["addr", "add", &format!("{V6}/64"), "dev", &peer, "nodad"]);
    let (conf, path) = v6_ipam(&lab);
    let env = [("CNI_PATH", path.as_str())];
    let r = lab.run("ADD", "dup", pod.netns(), &conf, &env);
    let log = r.stderr.clone();
    let e = r.expect_code(102);
    let msg = e["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains(V6) && msg.contains("duplicate address detection"),
        "{e}\n{log}"
    );
    assert_eq!(pod.links(), vec!["lo"], "rolled back");
    lab.host
        .host_ip(&["addr", "del", &format!("{V6}/64"), "dev", &peer]);
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());
    lab.run("DEL", "dup", pod.netns(), &conf, &env).expect_ok();
    assert_eq!(lab.host.snapshot(), before);
}
