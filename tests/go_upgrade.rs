//! In-place upgrade from the Go ib-sriov-cni: pods it attached, each described by the
//! cache file it wrote (fixtures in `tests/fixtures/go-cache/`, generated from the Go
//! plugin's own types at k8snetworkplumbingwg/ib-sriov-cni 543060da; see the README
//! there), are deleted by our binary as the Go plugin's DEL would: the emulated host is
//! first put in the state the Go ADD leaves (the VF netdev in the pod as `net1` with its
//! host-local address and default route, GUID and link state set), then DEL must
//! restore what Go's DEL restores, release host-local's allocation, remove the cache;
//! a second DEL changes nothing. CHECK, GC and STATUS tolerate the cache files.
//! Needs root (netns, veth) and Debian's host-local (containernetworking-plugins).

mod common;

use common::gofix::*;
use common::lab::{list, Lab};
use serde_json::json;

/// Runs one fixture: Go's ADD state, CHECK, GC and STATUS tolerate it, DEL restores as
/// Go's DEL ([`go_del_leaves`]), a second DEL changes nothing. `check` asserts what
/// else the fixture's DEL did (driver files), after it.
fn upgrade_case(name: &str, check: impl Fn(&Lab)) {
    let lab = Lab::new(fixture_host(name));
    let f = manifest(name);
    let vf = lab.host.vf(f["vf"].as_u64().unwrap() as u32).clone();
    let pod = lab.host.new_pod();
    let conf = del_conf(&lab, &f);
    let before = lab.host.snapshot();
    go_add(&lab, &f, &pod, &conf);
    let cache = install_cache(&lab, &f);

    // CHECK (Go's CHECK never failed): the VF netdev is in the pod.
    let mut c = conf.clone();
    c["prevResult"] = json!({"cniVersion": "1.0.0"});
    run(&lab, "CHECK", &f, &pod, &c).expect_ok();
    // GC with nothing valid and STATUS leave a Go-attached pod alone.
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    run(&lab, "GC", &f, &pod, &gc).expect_ok();
    run(&lab, "STATUS", &f, &pod, &gc).expect_ok();
    assert!(cache.exists(), "GC left the Go cache alone");
    let network = f["stdin"]["name"].as_str().unwrap();
    if !vf.is_vfio() {
        assert_eq!(host_local_held(&lab, network).len(), 1);
        assert!(pod.links().contains(&"net1".to_string()));
    }

    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert!(
        !cache.exists(),
        "the Go cache is removed by a successful DEL"
    );
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(host_local_held(&lab, network).is_empty(), "IP released");
    let mut want = before.clone();
    go_del_leaves(&lab, name, &mut want);
    check(&lab);
    assert_eq!(lab.host.snapshot(), want, "{name}: host after DEL");
    let after = lab.host.snapshot();
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), after, "second DEL changes nothing");
}

/// The check of a fixture whose DEL leaves `file` of the PCI driver `driver` reading
/// `want` (what the emulated driver last bound or unbound; "" when nothing).
fn driver_file(driver: &str, file: &str, want: &str) -> impl Fn(&Lab) {
    let (driver, file, want) = (driver.to_string(), file.to_string(), want.to_string());
    move |lab| assert_eq!(lab.driver_file(&driver, &file), want, "{driver}/{file}")
}

/// (a) GUID from runtimeConfig, host-local: netdev back down under its name; node and
/// port GUID set to HostIFGUID (the old port GUID: Go sets both), driver rebound.
#[test]
fn go_attached_with_guid_and_host_local() {
    upgrade_case(
        "a-guid-hostlocal",
        driver_file("mlx5_core", "bind", "0000:af:00.2"),
    );
}

/// (f) pod (a) as the v1.2.1 release wrote it (struct key order, no vfioPciMode).
#[test]
fn go_v1_2_1_cache() {
    upgrade_case("f-legacy-v1.2.1", |_| {});
}

/// (b) no GUID: netdev back, no GUID write, no rebind.
#[test]
fn go_attached_without_guid() {
    upgrade_case("b-noguid-hostlocal", driver_file("mlx5_core", "bind", ""));
}

/// (c) link_state enable: set back to auto (Follow), whatever it was before ADD.
#[test]
fn go_attached_with_link_state() {
    upgrade_case("c-linkstate-enable", |lab| {
        assert_eq!(lab.read(lab.host.vf(3).ofed_policy()), "Follow");
    });
}

/// (d) vfio: no netdev, no IPAM; node and port GUID set to all-ones (Go's default GUID,
/// HostIFGUID in vfio mode); no rebind.
#[test]
fn go_attached_vfio() {
    upgrade_case("d-vfio", driver_file("vfio-pci", "unbind", ""));
}

/// Every fixture, current and legacy (v1.2.1) format, parses; a corrupt cache is named
/// by DEL, which acts on nothing in it, leaves it in place and succeeds, as the Go
/// plugin's DEL does with a cache it cannot load (`cmdDel` returns nil when
/// `config.LoadConfFromCache` fails, cmd/ib-sriov-cni/main.go at 543060da): failing
/// would block the pod's teardown for ever without restoring anything more.
#[test]
fn every_fixture_parses_and_a_corrupt_one_is_named() {
    for dir in ["ib-sriov", "ib-sriov-v1.2.1"] {
        for name in list(&fixtures().join(dir)) {
            let p = fixtures().join(dir).join(&name);
            let a = ib_sriov_cni::gocache::parse(&std::fs::read(&p).unwrap(), p.clone())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(a.vf.to_string().starts_with("0000:af:00."), "{name}");
        }
    }
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let f = manifest("b-noguid-hostlocal");
    let conf = del_conf(&lab, &f);
    let cache = install_cache(&lab, &f);
    std::fs::write(&cache, "{\"deviceID\": 5").unwrap();
    let r = run(&lab, "DEL", &f, &pod, &conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(
        log.contains(f["file"].as_str().unwrap()) && log.contains("left in place"),
        "{log}"
    );
    assert!(cache.exists());
}

/// ADD finds a Go plugin attachment holding its VF through the Go cache directory's
/// index (src/plugin/go_index.rs) whatever became of the index: the Go file written
/// behind its back (after our ADD recorded the directory), the index then up to date, an
/// older copy of it, a corrupt one, none, and a crash of our ADD between writing its own
/// rollback file and the index. Each time the ADD is refused with code 101 naming the
/// Go attachment. A Go file removed behind its back is not believed either: the stale
/// entry is read again, and ADD then fails only because the VF's netdev is in the Go pod.
#[test]
fn go_holder_is_found_whatever_the_index() {
    let lab = Lab::default();
    let f = manifest("b-noguid-hostlocal");
    let n = f["vf"].as_u64().unwrap() as u32;
    let go_dir = lab.host.root().join("go-cache");
    // Ours on VFs 0 and 1: their rollback files in the Go cache dir, indexed as ours
    // (the second ADD lists the directory the first one created, then records its own).
    let (p0, p1) = (lab.host.new_pod(), lab.host.new_pod());
    let (c0, c1) = (lab.conf("1.0.0", 0), lab.conf("1.0.0", 1));
    lab.add("ours-0", &p0, &c0).expect_ok();
    lab.add("ours-1", &p1, &c1).expect_ok();
    let index = ib_sriov_cni::plugin::go_index::index_path(&lab.state, &go_dir);
    let older = std::fs::read(&index).unwrap();
    let ours = std::fs::read_to_string(format!("{}.ours", index.display())).unwrap();
    assert!(
        ours.contains(" ours-0-net1\n") && ours.contains(" ours-1-net1\n"),
        "our own files are logged as ours: {ours}"
    );
    // The Go plugin attaches VF n: its file appears behind the index's back.
    let gpod = lab.host.new_pod();
    go_add(&lab, &f, &gpod, &del_conf(&lab, &f));
    let go_file = go_dir.join(f["file"].as_str().unwrap());
    std::fs::copy(
        fixtures()
            .join(f["dir"].as_str().unwrap())
            .join(f["file"].as_str().unwrap()),
        &go_file,
    )
    .unwrap();
    let conf = lab.conf("1.0.0", n);
    let refused = |what: &str| {
        let pod = lab.host.new_pod();
        let e = lab.add("new", &pod, &conf).expect_code(101);
        let msg = e["msg"].as_str().unwrap();
        assert!(
            msg.contains("attached by the Go ib-sriov-cni")
                && msg.contains(f["file"].as_str().unwrap()),
            "{what}: {msg}"
        );
    };
    refused("a Go file written behind the index");
    refused("the index brought up to date");
    std::fs::write(&index, &older).unwrap();
    refused("an older copy of the index");
    std::fs::write(&index, "ib-sriov go-cache index 2\nstamp x\n").unwrap();
    refused("a corrupt index");
    std::fs::remove_file(&index).unwrap();
    refused("no index");
    // Our ADD on VF 3 killed after its rollback file, before the index write.
    let p3 = lab.host.new_pod();
    let c3 = lab.conf("1.0.0", 3);
    let killed = lab.run(
        "ADD",
        "ours-3",
        p3.netns(),
        &c3,
        &[("IB_SRIOV_FAILPOINTS", "go_index.save=kill")],
    );
    assert!(!killed.ok, "the ADD was killed");
    assert!(go_dir.join("ours-3-net1").exists(), "killed after its file");
    refused("a crash between a change and the index write");
    lab.del("ours-3", p3.netns(), &c3).expect_ok();
    // The Go file removed behind the index's back: its entry is read again, not believed.
    refused("the index brought up to date again");
    std::fs::remove_file(&go_file).unwrap();
    let pod = lab.host.new_pod();
    let e = lab.add("new", &pod, &conf).expect_code(7);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("has no netdev in the host"),
        "{e}"
    );
    lab.del("ours-0", p0.netns(), &c0).expect_ok();
    lab.del("ours-1", p1.netns(), &c1).expect_ok();
}

/// The rollback files of our own live attachments that the Go cache index's log does not
/// know (an upgrade from a version without the index, or a lost log) stay out of the
/// index: their VFs are held by our journals, so the index, read at every ADD, does not
/// grow with the node's attachments. After a wipe of the stateDir (journals and holder
/// links gone) the same files are indexed as orphans (`o` lines), each a holder of its
/// VF for the next ADD (src/plugin/go_index.rs `Kind::Orphan`).
#[test]
fn live_attachments_unknown_to_the_log_stay_out_of_the_index() {
    let lab = Lab::default();
    let go_dir = lab.host.root().join("go-cache");
    let pods: Vec<_> = (0..4).map(|_| lab.host.new_pod()).collect();
    for k in 0..2u32 {
        lab.add(
            &format!("live-{k}"),
            &pods[k as usize],
            &lab.conf("1.0.0", k),
        )
        .expect_ok();
    }
    let index = ib_sriov_cni::plugin::go_index::index_path(&lab.state, &go_dir);
    std::fs::remove_file(&index).unwrap();
    std::fs::remove_file(format!("{}.ours", index.display())).unwrap();
    lab.add("live-2", &pods[2], &lab.conf("1.0.0", 2))
        .expect_ok();
    let text = std::fs::read_to_string(&index).unwrap();
    assert!(!text.lines().any(|l| l.starts_with("o ")), "{text}");
    std::fs::remove_dir_all(&lab.state).unwrap();
    lab.add("after-wipe", &pods[3], &lab.conf("1.0.0", 3))
        .expect_ok();
    let text = std::fs::read_to_string(&index).unwrap();
    let orphans = text.lines().filter(|l| l.starts_with("o ")).count();
    assert_eq!(orphans, 3, "{text}");
}

/// The node reboots under a pod the Go plugin attached (fixture (f), VF 0): the pod's
/// netns and the netdev the Go ADD moved into it die with the boot, the VF's netdev is
/// created again under its predictable name, and udev then renames it (`udev-vf0`).
/// The cache file stays on disk, older than the boot. Neither our DEL of that Go
/// attachment nor an ADD that finishes it (its pod is gone) renames this boot's netdev
/// back to the file's `HostIFNames`: the Go DEL renames only the netdev it finds in
/// the pod; ours leaves the host's name (found by the explorer, seed 28115:
/// tests/fixtures/explore/go-orphan-udev-name*.ops). Both leave it down, with the
/// GUID as the Go DEL leaves it, and the allocation released. In the boot of the Go ADD
/// (the file not older than the boot), a netdev back from the dead pod under its pod
/// name still gets `HostIFNames`.
#[test]
fn a_go_attachment_of_an_earlier_boot_leaves_the_netdev_its_name() {
    let name = "f-legacy-v1.2.1";
    for case in ["del", "add finishes it", "same boot"] {
        let lab = Lab::new(fixture_host(name));
        let f = manifest(name);
        let vf = lab.host.vf(0).clone();
        let orig = vf.netdev.clone().unwrap();
        let go_dir = lab.host.root().join("go-cache");
        let pod = lab.host.new_pod();
        let mut conf = del_conf(&lab, &f);
        conf["goCacheDir"] = json!(go_dir);
        let before = lab.host.snapshot();
        go_add(&lab, &f, &pod, &conf);
        std::fs::create_dir_all(&go_dir).unwrap();
        let cache = go_dir.join(f["file"].as_str().unwrap());
        std::fs::copy(
            fixtures()
                .join(f["dir"].as_str().unwrap())
                .join(f["file"].as_str().unwrap()),
            &cache,
        )
        .unwrap();
        pod.delete().unwrap();
        assert!(lab
            .host
            .wait_pair_gone(&vf, std::time::Duration::from_secs(10))
            .unwrap());
        let mut want = before.clone();
        go_del_leaves(&lab, name, &mut want);
        if case == "same boot" {
            // The kernel returns the netdev under its pod name; DEL names it back.
            lab.host
                .return_destroyed_vf_netdev(0, "net1", &before)
                .unwrap();
            run(&lab, "DEL", &f, &pod, &conf).expect_ok();
            assert_eq!(lab.host.snapshot(), want, "{case}");
            continue;
        }
        // The reboot: the VF's netdev of the new boot under its predictable name, then
        // renamed by udev; the cache file written before the boot began.
        lab.host.bind_vf(&vf, &before).unwrap();
        lab.host
            .host_ip(&["link", "set", &orig, "name", "udev-vf0"]);
        lab.host.sync_netdevs().unwrap();
        let btime: u64 = std::fs::read_to_string("/proc/stat")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("btime ").map(|s| s.trim().parse().unwrap()))
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&cache)
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(btime - 60))
            .unwrap();
        if case == "add finishes it" {
            let p2 = lab.host.new_pod();
            let c2 = lab.conf("1.0.0", 0);
            lab.add("new", &p2, &c2).expect_ok();
            assert!(!cache.exists(), "the ADD finished the Go attachment");
            lab.del("new", p2.netns(), &c2).expect_ok();
        }
        run(&lab, "DEL", &f, &pod, &conf).expect_ok();
        assert!(!cache.exists());
        assert!(lab.journals().is_empty(), "{:?}", lab.journals());
        assert!(host_local_held(&lab, f["stdin"]["name"].as_str().unwrap()).is_empty());
        let l = want.links.iter_mut().find(|l| l.name == orig).unwrap();
        l.name = "udev-vf0".into();
        assert_eq!(lab.host.snapshot(), want, "{case}: host after DEL");
    }
}
