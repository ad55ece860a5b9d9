//! Partition readiness (`pkeyWaitMs`, docs/configuration.md "Partition readiness") on
//! the lab's mlx5-shaped VFs. ibvf (tests/kmod/ibvf.c) keeps a test-only pkey table per
//! VF port (4 entries: 0xffff, then empty), which the kernel shows live under
//! `<VF>/infiniband/<dev>/ports/1/pkeys/<i>`; a "subnet manager" thread writes an entry
//! through ibvf's `set_pkey` parameter after a delay, as the SM programs it once the
//! pod's GUID is in the partition. Each case uses `rdmaIsolation: true` and a GUID set
//! through the PF (a real rebind), so the wait runs between the GUID and the moves.
//! Cases: the pkey arrives in time; it arrives late (code 11, the host as before, then
//! the retry succeeds); it never arrives (only a limited-member entry for a
//! full-membership pkey).

use super::*;

/// ibvf's test-only subnet manager interface: "N I 0xKKKK".
const SET_PKEY: &str = "/sys/module/ibvf/parameters/set_pkey";

/// Entry `i` of VF `vf`'s port pkey table, as the kernel shows it.
fn pkey_entry(vf: &str, rdma: &str, i: u32) -> String {
    std::fs::read_to_string(format!(
        "/sys/bus/pci/devices/{vf}/infiniband/{rdma}/ports/1/pkeys/{i}"
    ))
    .unwrap_or_else(|e| panic!("pkey {i} of {vf}: {e}"))
    .trim()
    .to_string()
}

/// The subnet manager: after `delay`, entry `i` of VF `vf`'s table becomes `key`.
fn sm_writes(vf: &str, i: u32, key: &str, delay: Duration) -> std::thread::JoinHandle<()> {
    let line = format!("{} {i} {key}", vf_index(vf));
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        std::fs::write(SET_PKEY, &line).unwrap_or_else(|e| panic!("{SET_PKEY} {line}: {e}"));
        eprintln!("lab: subnet manager wrote {line}");
    })
}

fn pkey_conf(p: &Plugin, vf: &str, guid: u64, pkey: &str, wait_ms: u64) -> Value {
    let mut c = p.ib_conf(vf, guid, true);
    c["pkey"] = json!(pkey);
    c["pkeyWaitMs"] = json!(wait_ms);
    c
}

/// Checks a failed ADD: code 11 naming the pkey, the GUID and the membership; the host
/// as before (GUID and link state restored by the rollback's rebind, RDMA device and
/// netdev in the host), nothing journaled or allocated.
fn assert_pkey_refused(p: &Plugin, r: Run, pkey: &str, guid: u64, member: &str) {
    assert!(!r.ok, "ADD succeeded: {}", r.json);
    assert_eq!(r.json["code"], 11, "{} / {}", r.json, r.stderr);
    let msg = r.json["msg"].as_str().unwrap();
    for want in [
        format!("pkey {pkey}"),
        guid_text(guid),
        format!("as a {member} member"),
    ] {
        assert!(msg.contains(&want), "{want:?} not in {msg}");
    }
    assert!(p.journals().is_empty() && p.allocations().is_empty());
}

#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_pkey_arrives_in_time() {
    let (vf, name, rdma, before, p, pod) = ib_start(0, "pkey-in-time");
    assert_eq!(pkey_entry(vf, &rdma, 0), "0xffff");
    assert_eq!(pkey_entry(vf, &rdma, 1), "0x0000");
    let guid = 0x0200_0000_0000_0b01;
    let conf = pkey_conf(&p, vf, guid, "0x8005", 20_000);
    let t0 = Instant::now();
    let sm = sm_writes(vf, 1, "0x8005", Duration::from_millis(1500));
    let r = p.run("ADD", "cid-pkey1", &pod.path(), &conf);
    let took = t0.elapsed();
    sm.join().unwrap();
    let log = r.stderr.clone();
    let res = r.expect_ok("ADD");
    eprintln!("lab-figure: pkey in time: ADD took {took:?} (the SM wrote the pkey at 1.5 s)");
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(
        log.contains("pkey 0x8005 is in the pkey table of VF"),
        "{log}"
    );
    assert_ib_attached(&p, &pod, &res, vf, IFNAME, guid, &rdma);
    p.run("DEL", "cid-pkey1", &pod.path(), &conf)
        .expect_ok("DEL");
    udev_settle();
    assert_ib_restored(vf, &name, &rdma);
    assert_eq!(pkey_entry(vf, &rdma, 1), "0x8005", "the SM's entry stays");
    assert_eq!(ib_host_view(), before);
}

#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_pkey_arrives_late_code_11_then_the_retry_succeeds() {
    let (vf, name, rdma, before, p, pod) = ib_start(1, "pkey-late");
    let guid = 0x0200_0000_0000_0b02;
    let conf = pkey_conf(&p, vf, guid, "0x8006", 1000);
    let sm = sm_writes(vf, 1, "0x8006", Duration::from_millis(6000));
    let t0 = Instant::now();
    let r = p.run("ADD", "cid-pkey2", &pod.path(), &conf);
    eprintln!(
        "lab-figure: pkey late: ADD answered after {:?}: {}",
        t0.elapsed(),
        r.json
    );
    assert_pkey_refused(&p, r, "0x8006", guid, "full");
    udev_settle();
    assert_eq!(pod.link_names(), vec!["lo".to_string()]);
    assert!(pod_rdma(&pod).is_empty());
    assert_ib_restored(vf, &name, &rdma);
    assert_eq!(ib_host_view(), before, "host as before after the rollback");

    // The SM catches up; kubelet's retry succeeds.
    sm.join().unwrap();
    let res = p
        .run("ADD", "cid-pkey2", &pod.path(), &conf)
        .expect_ok("retried ADD");
    assert_ib_attached(&p, &pod, &res, vf, IFNAME, guid, &rdma);
    p.run("DEL", "cid-pkey2", &pod.path(), &conf)
        .expect_ok("DEL");
    udev_settle();
    assert_ib_restored(vf, &name, &rdma);
    assert_eq!(ib_host_view(), before);
}

#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_pkey_never_arrives() {
    let (vf, name, rdma, _, p, pod) = ib_start(0, "pkey-never");
    // Only a limited-member entry: not the full membership the network asks for.
    std::fs::write(SET_PKEY, format!("{} 2 0x0009", vf_index(vf))).unwrap();
    assert_eq!(pkey_entry(vf, &rdma, 2), "0x0009");
    let before = ib_host_view();
    let guid = 0x0200_0000_0000_0b03;
    let conf = pkey_conf(&p, vf, guid, "0x8009", 800);
    let r = p.run("ADD", "cid-pkey3", &pod.path(), &conf);
    eprintln!("lab-figure: pkey never: {}", r.json);
    assert_pkey_refused(&p, r, "0x8009", guid, "full");
    udev_settle();
    assert_ib_restored(vf, &name, &rdma);
    assert_eq!(ib_host_view(), before);
    // The runtime's DEL after the failed ADD changes nothing.
    p.run("DEL", "cid-pkey3", &pod.path(), &conf)
        .expect_ok("DEL");
    assert_eq!(ib_host_view(), before);
}
