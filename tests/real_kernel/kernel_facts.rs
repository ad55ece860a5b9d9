//! The kernel facts the plugin relies on (docs/design.md "Kernel facts") on the booted
//! kernel: what iproute2 and the release show of each, the plugin's netlink view of the
//! VF netdevs' parent device, and `ib-sriov doctor`'s `kernel-lacks-<fact>` findings.
//! Meaningful on every lab kernel: on 5.10 the kernel reports no parent device
//! (`IFLA_PARENT_DEV_NAME` came in 5.14) and the doctor says so, from its probe; on
//! 6.12 and 7.3 it reports none missing.

use super::*;

/// The parent device iproute2 shows for `netdev` (`ip -d -j link show`: `parentdev`,
/// printed from `IFLA_PARENT_DEV_NAME`), `None` when the kernel sent none.
fn ip_parentdev(netdev: &str) -> Option<String> {
    ip_json(&["-d", "link", "show", "dev", netdev])[0]["parentdev"]
        .as_str()
        .map(str::to_string)
}

/// (major, minor) of the booted kernel's release, parsed here (not by the code under
/// test).
fn booted() -> (u32, u32, String) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let r = r.trim().to_string();
    let mut it = r.split(['.', '-', '+']);
    let major = it.next().unwrap().parse().unwrap();
    let minor = it.next().unwrap().parse().unwrap();
    (major, minor, r)
}

/// The parent device of the VF netdevs as iproute2, the plugin's rtnetlink view and the
/// first kernel with it (5.14) say, all three agreeing; then `ib-sriov doctor --json`
/// (the real /sys, the host netns) reports exactly the facts this kernel lacks: the
/// parent device before 5.14 (from its probe: the VF netdevs have a PCI `device` in
/// sysfs and no link reports a parent), VF stats skipped before 6.5 (release only),
/// and none of the facts every lab kernel has (altnames 5.5, VF GUID read-back 5.6,
/// RDMA netns modes 5.2).
#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn kernel_facts_doctor_findings_match_the_booted_kernel() {
    let (major, minor, release) = booted();
    let v = (major, minor);
    let nl = Netlink::open().unwrap();
    let mut parents = Vec::new();
    for vf in vfs() {
        let name = vf_netdev(&vf, Duration::from_secs(10));
        let shown = ip_parentdev(&name);
        let link = nl.link_by_name(&name).unwrap().expect("VF netdev link");
        assert_eq!(link.parent_dev, shown, "{name}: plugin's view vs ip -d");
        assert_eq!(
            shown.is_some(),
            v >= (5, 14),
            "{name} on {release}: parent device {shown:?}, first kernel with it 5.14"
        );
        if let Some(p) = &shown {
            assert_eq!(p, &vf, "{name}'s parent");
        }
        parents.push(format!("{name}={}", shown.as_deref().unwrap_or("none")));
    }
    let out = run(Command::new(bin()).args(["doctor", "--json"]));
    let j: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", text(&out.stderr)));
    let lacks: Vec<String> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["code"].as_str())
        .filter_map(|c| c.strip_prefix("kernel-lacks-"))
        .map(str::to_string)
        .collect();
    let mut want = Vec::new();
    if v < (5, 14) {
        want.push("parent-dev");
    }
    if v < (6, 5) {
        want.push("skip-vf-stats");
    }
    let mut got = lacks.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "kernel {release}: {j}");
    if v < (5, 14) {
        let f = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "kernel-lacks-parent-dev")
            .unwrap();
        let m = f["message"].as_str().unwrap();
        assert!(
            m.contains("in sysfs but the kernel reports no IFLA_PARENT_DEV_NAME"),
            "from the probe, not only the release: {m}"
        );
    }
    println!(
        "kernel-facts: kernel {release}: VF netdev parents {}; doctor kernel-lacks: [{}]",
        parents.join(" "),
        lacks.join(", ")
    );
}
