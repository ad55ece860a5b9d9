//! `ib-sriov exporter --once` against an attachment whose RDMA device ADD moved into
//! the pod netns, in RDMA exclusive netns mode: the host's sysfs no longer lists the
//! device, so its counters can only come from the pod netns (RDMA netlink
//! `RDMA_NLDEV_CMD_STAT_GET` on a socket created there). The device is ibvf's, whose
//! test-only hw counters (tests/kmod/ibvf.c: mlx5's basic Q counter names) count in
//! `out_of_buffer` every frame the VF's IPoIB netdev sends and drops.
//!
//! Expected values come from the kernel through other paths than the exporter's: the
//! pod's own sysfs (`ip netns exec` remounts /sys in the pod netns) and the netdev's
//! `tx_dropped` from `ip -s -j link` in the pod.

use super::*;

/// Frames sent through the pod's IPoIB netdev.
const FRAMES: u64 = 7;

/// The exporter's one scrape of the plugin's stateDir. It mounts a sysfs in the pod
/// netns only in a private mount namespace: the host's mounts are the same after it.
fn scrape(p: &Plugin) -> String {
    let mounts = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let before = mounts();
    let state = p.state().display().to_string();
    let out = Command::new(bin())
        .args(["exporter", "--once", "--state-dir", &state])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exporter --once: {}",
        text(&out.stderr)
    );
    assert_eq!(
        mounts(),
        before,
        "the exporter changed no mount of the host"
    );
    text(&out.stdout)
}

/// `<dev>/ports/1/hw_counters/<name>` read in the pod's own sysfs.
fn pod_hw_counter(pod: &Pod, dev: &str, name: &str) -> u64 {
    pod_counter(pod, dev, "hw_counters", name)
}

/// `<dev>/ports/1/<group>/<name>` read in the pod's own sysfs.
fn pod_counter(pod: &Pod, dev: &str, group: &str, name: &str) -> u64 {
    let f = format!("/sys/class/infiniband/{dev}/ports/1/{group}/{name}");
    sh(&["ip", "netns", "exec", &pod.name, "cat", &f])
        .trim()
        .parse()
        .unwrap()
}

/// `tx_dropped` of the pod's IPoIB netdev, from `ip -s -j link`.
fn pod_tx_dropped(pod: &Pod) -> u64 {
    let v: Value = serde_json::from_str(&sh(&[
        "ip", "-n", &pod.name, "-s", "-j", "link", "show", IFNAME,
    ]))
    .unwrap();
    v[0]["stats64"]["tx"]["dropped"].as_u64().unwrap()
}

/// Sends `n` raw frames through the pod's IPoIB netdev (an `AF_PACKET` socket in the
/// pod netns).
fn send_frames(pod: &Pod, n: u64) {
    let py = format!(
        "import socket\ns = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n\
         s.bind(('{IFNAME}', 0))\nfor _ in range({n}): s.send(bytes(64))\n"
    );
    sh(&["ip", "netns", "exec", &pod.name, "python3", "-c", &py]);
}

#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_exporter_reads_rdma_counters_in_the_pod_netns() {
    ib_phase();
    assert_eq!(
        rdma_system_mode(),
        "exclusive",
        "the lab runs in exclusive mode"
    );
    let vf = &vfs()[0];
    let (_, rdma) = ib_vf_before(vf);
    let p = Plugin::new();
    let pod = Pod::new("ibexp");
    let conf = p.ib_conf(vf, 0x0200_0000_0000_0b01, true);
    p.run("ADD", "cid-ibexp", &pod.path(), &conf)
        .expect_ok("ADD");
    // udev's handling of the netdevs ADD re-created ends before anything else happens.
    udev_settle();
    // The scenario: the device is in the pod, and the host's sysfs does not list it.
    assert_eq!(pod_rdma(&pod), vec![rdma.clone()]);
    assert!(!rdma_of(vf).contains(&rdma), "{rdma} hidden from the host");

    let labels = [("vf", vf.as_str()), ("rdma_device", rdma.as_str())];
    let oob = |s: &str| {
        series_value(
            s,
            "ib_sriov_rdma_hw_counter_total",
            &[
                labels[0],
                labels[1],
                ("port", "1"),
                ("counter", "out_of_buffer"),
            ],
        )
    };
    // A scrape and the pod's own reads taken while no frame left the netdev (the kernel
    // may send some of its own, e.g. IPv6 neighbour discovery): tried until tx_dropped
    // is the same before and after.
    let stable = || {
        for _ in 0..10 {
            let before = pod_tx_dropped(&pod);
            std::thread::sleep(Duration::from_millis(20));
            let s = scrape(&p);
            let sys = pod_hw_counter(&pod, &rdma, "out_of_buffer");
            let words = pod_counter(&pod, &rdma, "counters", "port_xmit_data");
            let pkts = pod_counter(&pod, &rdma, "counters", "port_xmit_packets");
            if pod_tx_dropped(&pod) == before {
                return (s, before, sys, words, pkts);
            }
        }
        panic!("the pod's netdev never stopped sending");
    };
    let (s0, dropped0, sys0, words0, pkts0) = stable();
    // Issue 52: the VF's effective GUIDs (ibvf answers IFLA_VF_IB_NODE_GUID and
    // IFLA_VF_IB_PORT_GUID in its PF's VF table), here the one ADD set, as the doctor
    // shows them.
    let set = "02:00:00:00:00:00:0b:01";
    assert_eq!(
        series_value(
            &s0,
            "ib_sriov_attachment_info",
            &[labels[0], ("node_guid", set), ("port_guid", set)]
        ),
        Some(1),
        "{s0}"
    );
    let state = p.state().display().to_string();
    let out = Command::new(bin())
        .args(["doctor", "--json", "--state-dir", &state])
        .output()
        .unwrap();
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let of = |list: &str, key: &str| {
        d[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x[key] == vf.as_str())
            .unwrap_or_else(|| panic!("doctor's {list} lack {vf}: {d}"))
            .clone()
    };
    assert_eq!(of("attachments", "vf")["guid"], set, "{d}");
    assert_eq!(of("vfs", "pci")["nodeGuid"], set, "{d}");
    let exp0 = oob(&s0).unwrap_or_else(|| panic!("no out_of_buffer for {rdma}:\n{s0}"));
    assert_eq!(exp0, sys0, "the exporter reads what the pod's sysfs shows");
    for c in [
        "rx_write_requests",
        "rx_read_requests",
        "rx_atomic_requests",
    ] {
        let l = [labels[0], labels[1], ("port", "1"), ("counter", c)];
        assert_eq!(
            series_value(&s0, "ib_sriov_rdma_hw_counter_total", &l),
            Some(0),
            "{c}"
        );
    }

    // The PMA port counters (sysfs only, read from a sysfs mounted in the pod netns):
    // bytes are 4 x the 4-byte words the pod's sysfs shows.
    let port = |s: &str, metric: &str, counter: Option<&str>| {
        let mut l = vec![labels[0], labels[1], ("port", "1")];
        if let Some(c) = counter {
            l.push(("counter", c));
        }
        series_value(s, metric, &l).unwrap_or_else(|| panic!("no {metric} {counter:?}:\n{s}"))
    };
    let tx_bytes = |s: &str| port(s, "ib_sriov_rdma_port_transmit_bytes_total", None);
    let tx_pkts = |s: &str| {
        port(
            s,
            "ib_sriov_rdma_port_counter_total",
            Some("port_xmit_packets"),
        )
    };
    assert_eq!(tx_bytes(&s0), 4 * words0, "port_xmit_data words in bytes");
    assert_eq!(tx_pkts(&s0), pkts0);

    send_frames(&pod, FRAMES);
    // ib_core caches hw counters for RDMA_HW_STATS_DEFAULT_LIFESPAN (10 ms): the
    // stable read sleeps longer than that first.
    let (s1, dropped1, sys1, words1, pkts1) = stable();
    let dropped = dropped1 - dropped0;
    let exp = oob(&s1).unwrap() - exp0;
    let sys = sys1 - sys0;
    eprintln!(
        "{FRAMES} frames sent: netdev tx_dropped +{dropped}, pod sysfs out_of_buffer +{sys}, \
         exporter out_of_buffer +{exp}"
    );
    assert!(dropped >= FRAMES, "tx_dropped +{dropped}");
    let (bytes, pkts) = (tx_bytes(&s1) - tx_bytes(&s0), tx_pkts(&s1) - tx_pkts(&s0));
    eprintln!(
        "port counters: pod sysfs port_xmit_data +{} words, port_xmit_packets +{}; exporter \
         ib_sriov_rdma_port_transmit_bytes +{bytes}, port_xmit_packets +{pkts}",
        words1 - words0,
        pkts1 - pkts0
    );
    assert_eq!(bytes, 4 * (words1 - words0));
    assert_eq!(pkts, pkts1 - pkts0);
    assert_eq!(pkts, dropped, "one packet per frame the netdev sent");
    assert!(
        bytes >= FRAMES * 64,
        "at least the {FRAMES} frames of 64 bytes"
    );
    assert_eq!(
        exp, dropped,
        "the exporter's counter moved by the frames sent"
    );
    assert_eq!(sys, dropped);
    // The netdev counter of the same attachment agrees.
    let nd = series_value(&s1, "ib_sriov_netdev_transmit_dropped_total", &labels[..1]).unwrap();
    assert_eq!(nd, dropped1);

    p.run("DEL", "cid-ibexp", &pod.path(), &conf)
        .expect_ok("DEL");
    udev_settle();
    let s2 = scrape(&p);
    assert_eq!(
        oob(&s2),
        None,
        "no series once the attachment is gone:\n{s2}"
    );
}
