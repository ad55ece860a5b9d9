//! ib-sriov as k8snetworkplumbingwg/dra-driver-sriov (cd9404f, standalone mode) calls
//! it, on the lab's mlx5-shaped VFs, in exclusive RDMA netns mode with
//! `rdmaIsolation: true`: tests/libcni/dra-standin (built by the lab,
//! `LAB_DRA_STANDIN`) injects `deviceID` into the NAD config, loads it as one plugin and
//! calls libcni's AddNetwork/DelNetwork with the driver's RuntimeConf and args and no
//! capability args, then derives the claim's NetworkDeviceData as the driver's
//! `cniResultToNetworkData` does (docs/dra.md). The VF keeps its own GUID (no
//! runtimeConfig under DRA).

use super::*;

/// Runs the stand-in: `<cmd> <nad> <vf> <netns> <sandbox> net1 <ns> <pod> <uid>`.
fn dra(p: &Plugin, cmd: &str, nad: &Path, vf: &str, netns: &str) -> Run {
    let out = Command::new(var("LAB_DRA_STANDIN"))
        .args([
            cmd,
            nad.to_str().unwrap(),
            vf,
            netns,
            "sb-dra",
            IFNAME,
            "team-a",
            "trainer-0",
            "uid-dra-0",
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_PATH", Path::new(bin()).parent().unwrap())
        .env("LIBCNI_CACHE_DIR", p.dir.path().join("libcni-cache"))
        .output()
        .expect("running the dra-driver-sriov stand-in");
    Run {
        ok: out.status.success(),
        json: stdout_json("the dra-driver-sriov stand-in", &text(&out.stdout)),
        stderr: text(&out.stderr),
    }
}

#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_dra_add_del_del_with_rdma_isolation() {
    let (vf, name, rdma, before, p, pod) = ib_start(0, "dra");
    let guid = GUID_BASE + vf_index(vf) as u64;
    // The NAD's config: no deviceID (the driver adds it), no runtimeConfig.
    let mut nad = p.conf(vf);
    nad.as_object_mut().unwrap().remove("deviceID");
    nad["rdmaIsolation"] = json!(true);
    let nad_path = p.dir.path().join("nad.json");
    std::fs::write(&nad_path, nad.to_string()).unwrap();

    let out = dra(&p, "add", &nad_path, vf, &pod.path()).expect_ok("DRA ADD");
    let nd = &out["networkDeviceData"];
    eprintln!("lab-figure: DRA NetworkDeviceData {nd}");
    eprintln!("lab-figure: DRA CNI result {}", out["result"]);
    assert_eq!(nd["interfaceName"], IFNAME, "the claim's ifName");
    let hw = nd["hardwareAddress"].as_str().expect("hardwareAddress");
    assert_eq!(hw.split(':').count(), 20, "the 20-byte IPoIB address: {hw}");
    assert!(hw.len() <= 128, "KEP-4817 limit");
    let (_, pod_addr) = pod_link(&pod, IFNAME);
    assert_eq!(hw, pod_addr, "net1's address in the pod");
    assert_eq!(addr_guid(hw), guid, "the VF's own GUID");
    let ips: Vec<&str> = nd["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ips.len(), 1);
    assert_eq!(
        p.allocations(),
        vec![ips[0].split('/').next().unwrap().to_string()]
    );
    let l = &ip_json(&["-n", &pod.name, "addr", "show", "dev", IFNAME])[0];
    assert!(link_addrs(l).iter().any(|a| a == ips[0]), "{l}");
    assert!(pod_rdma(&pod).contains(&rdma), "RDMA device in the pod");
    assert!(!host_rdma_names().contains(&rdma));
    let j: Value =
        serde_json::from_slice(&std::fs::read(p.state().join(format!("sb-dra:{IFNAME}"))).unwrap())
            .unwrap();
    assert_eq!(j["vf"], vf, "the injected deviceID");
    assert_eq!(j["pod"]["name"], "trainer-0");
    assert_eq!(j["guid"], guid_text(guid));
    assert_eq!(j["pfPortGuid"], guid_text(pf_port_guid()));

    dra(&p, "del", &nad_path, vf, &pod.path()).expect_ok("DRA DEL");
    udev_settle();
    assert_eq!(pod.link_names(), vec!["lo".to_string()]);
    assert!(pod_rdma(&pod).is_empty());
    assert_eq!(sysfs_netdevs(vf), vec![name.clone()]);
    assert_eq!(rdma_of(vf), vec![rdma.clone()]);
    assert_eq!(ib_host_view(), before, "host restored");
    assert!(p.journals().is_empty() && p.allocations().is_empty());
    dra(&p, "del", &nad_path, vf, &pod.path()).expect_ok("second DRA DEL");
    assert_eq!(ib_host_view(), before);
}
