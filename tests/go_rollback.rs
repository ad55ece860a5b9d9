//! Rolling a node back to the Go ib-sriov-cni with pods running: ADD also writes the
//! Go plugin's cache file (`goCacheDir`, default `/var/lib/cni/ib-sriov`), byte for
//! byte what the Go plugin writes for the same stdin (fixtures in
//! `tests/fixtures/go-cache/`, generated from its own types at
//! k8snetworkplumbingwg/ib-sriov-cni 543060da) plus our marker key, so the Go plugin's
//! DEL can undo an attachment we made. The Go plugin's DEL is played here by
//! [`go_del`], which follows its `cmdDel` (cmd/ib-sriov-cni/main.go at 543060da: IPAM
//! `ExecDel` with the DEL's stdin, nothing more when the netns is gone,
//! `sriovManager.ReleaseVF`, `ResetVFConfig`, then `utils.CleanCachedNetConf`), acting on
//! the emulated host's sysfs and netns as the Go code acts on the kernel. Then (the node
//! upgraded again) our DEL of the same attachment must touch nothing and succeed.
//! Needs root (netns, veth) and Debian's host-local (containernetworking-plugins).

mod common;

use common::emuhost::{HostSnapshot, Pod};
use common::gofix::*;
use common::lab::{list, Lab};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const OTHER_BOOT: &str = "6f1c7d0e-0000-4000-8000-000000000042";

/// The config of fixture `f` for our binary: the fixture's stdin, with the lab's
/// stateDir, host-local dataDir and a goCacheDir of its own.
fn conf(lab: &Lab, f: &Value) -> (Value, PathBuf) {
    let dir = lab.host.root().join("var-lib-cni-ib-sriov");
    let mut c = del_conf(lab, f);
    c["goCacheDir"] = json!(dir);
    (c, dir)
}

/// The fixture's cache file, and ours with its marker (the last key) cut off.
fn compare_with_fixture(f: &Value, cache: &Path) {
    let ours = std::fs::read_to_string(cache).unwrap();
    let v: Value = serde_json::from_str(&ours).unwrap();
    assert!(
        v["x-ib-sriov"]["bootId"].is_string(),
        "our marker records the boot: {ours}"
    );
    let cut = ours.find(",\"x-ib-sriov\":").unwrap();
    let go = std::fs::read_to_string(
        fixtures()
            .join("ib-sriov")
            .join(f["file"].as_str().unwrap()),
    )
    .unwrap();
    assert_eq!(format!("{}}}", &ours[..cut]), go, "{}", f["name"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(cache), 0o600);
    assert_eq!(mode(cache.parent().unwrap()), 0o700);
}

/// ADD by us, DEL by the Go plugin, then DEL by us again: the cache file is Go's byte
/// for byte; Go's DEL leaves the host as it leaves its own attachments
/// ([`go_del_leaves`]); our later DEL succeeds touching nothing; the VF is free for the
/// next pod, whose ADD and DEL work as usual.
fn rollback_case(name: &str) {
    let lab = Lab::new(fixture_host(name));
    let f = manifest(name);
    let (conf, dir) = conf(&lab, &f);
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    let cache = dir.join(f["file"].as_str().unwrap());
    compare_with_fixture(&f, &cache);
    let network = f["stdin"]["name"].as_str().unwrap();
    let vfio = f["stdin"]["vfioPciMode"] == true;
    if !vfio {
        assert_eq!(host_local_held(&lab, network).len(), 1);
    }

    go_del(&lab, &f, &pod, &conf, &cache);
    let mut want = before.clone();
    go_del_leaves(&lab, name, &mut want);
    assert_eq!(
        lab.host.snapshot(),
        want,
        "{name}: host after the Go plugin's DEL"
    );
    assert!(
        host_local_held(&lab, network).is_empty(),
        "Go's DEL released the IP"
    );
    assert_eq!(pod.links(), vec!["lo"]);

    // Upgraded again: the kubelet's DEL of the same attachment reaches our binary.
    assert_eq!(lab.journals().len(), 1, "our journal outlived the rollback");
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), want, "our DEL touched nothing");

    // The VF is free: another pod's ADD and DEL.
    let pod2 = lab.host.new_pod();
    let mut f2 = f.clone();
    f2["containerID"] = json!(format!("{}-2", &f["containerID"].as_str().unwrap()[..60]));
    run(&lab, "ADD", &f2, &pod2, &conf).expect_ok();
    run(&lab, "DEL", &f2, &pod2, &conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert!(
        !dir.join(format!("{}-net1", f2["containerID"].as_str().unwrap()))
            .exists(),
        "our DEL removes the cache file our ADD wrote"
    );
}

#[test]
fn rollback_guid_and_host_local() {
    rollback_case("a-guid-hostlocal");
}

#[test]
fn rollback_without_guid() {
    rollback_case("b-noguid-hostlocal");
}

#[test]
fn rollback_link_state() {
    rollback_case("c-linkstate-enable");
}

#[test]
fn rollback_vfio() {
    rollback_case("d-vfio");
}

/// A cache file our ADD wrote in an earlier boot is never acted on: the DEL that finds
/// it without a journal (the reboot emptied /run) releases the IP, removes the file and
/// does not touch the VF.
#[test]
fn cache_file_from_an_earlier_boot_is_not_acted_on() {
    let lab = Lab::default();
    let f = manifest("a-guid-hostlocal");
    let (conf, dir) = conf(&lab, &f);
    let pod = lab.host.new_pod();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    let cache = dir.join(f["file"].as_str().unwrap());
    assert!(cache.exists());
    // The "reboot": /run emptied, a new boot ID. The pod netns is kept here only to
    // show that nothing is moved out of it.
    std::fs::remove_dir_all(&lab.state).unwrap();
    let attached = lab.host.snapshot();
    let cni_path = cni_path();
    let out = lab.run(
        "DEL",
        f["containerID"].as_str().unwrap(),
        pod.netns(),
        &conf,
        &[
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_TEST_BOOT_ID", OTHER_BOOT),
        ],
    );
    out.expect_ok();
    assert!(!cache.exists(), "the stale cache file is removed");
    assert!(host_local_held(&lab, "ib-sriov-network").is_empty());
    assert_eq!(lab.host.snapshot(), attached, "the VF was not touched");
    assert!(pod.links().contains(&"net1".to_string()));
}

/// Crash safety around the cache file: ADD killed right after writing it (journal not
/// complete) and DEL killed right after removing it (journal still there) both end,
/// after a retried DEL, with the host as before and no file left.
#[test]
fn killed_around_the_cache_file() {
    for (verb, fp) in [("ADD", "add.go_cache"), ("DEL", "del.go_cache")] {
        let lab = Lab::default();
        let f = manifest("a-guid-hostlocal");
        let (conf, dir) = conf(&lab, &f);
        let pod = lab.host.new_pod();
        let before = lab.host.snapshot();
        let cache = dir.join(f["file"].as_str().unwrap());
        let cni_path = cni_path();
        let cid = f["containerID"].as_str().unwrap();
        let env = [
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_FAILPOINTS", &format!("{fp}=kill")),
        ];
        if verb == "DEL" {
            run(&lab, "ADD", &f, &pod, &conf).expect_ok();
        }
        let out = lab.run(verb, cid, pod.netns(), &conf, &env);
        assert!(!out.ok, "{verb} was killed at {fp}");
        assert_eq!(cache.exists(), verb == "ADD", "{fp}");
        assert_eq!(lab.journals().len(), 1, "{fp}");
        run(&lab, "DEL", &f, &pod, &conf).expect_ok();
        assert!(!cache.exists(), "{fp}");
        assert!(lab.journals().is_empty(), "{fp}");
        assert!(host_local_held(&lab, "ib-sriov-network").is_empty(), "{fp}");
        assert_eq!(pod.links(), vec!["lo"], "{fp}");
        assert_eq!(lab.host.snapshot(), before, "{fp}: host restored");
    }
}

/// `"goCacheDir": ""` writes no cache file.
#[test]
fn empty_go_cache_dir_writes_none() {
    let lab = Lab::default();
    let f = manifest("b-noguid-hostlocal");
    let (mut conf, dir) = conf(&lab, &f);
    conf["goCacheDir"] = json!("");
    let pod = lab.host.new_pod();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    assert!(!dir.exists());
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
}

/// The built-in IPAM (`"type": "ib-sriov-ipam"`) across a rollback: the Go plugin's DEL
/// execs the `ib-sriov-ipam` our entrypoint installed beside it (here a symlink to the
/// binary under test, as tests/ipam_plugin.rs does), which releases the record the
/// built-in allocator wrote at our ADD.
#[test]
fn rollback_with_the_builtin_ipam() {
    let lab = Lab::default();
    let mut f = manifest("b-noguid-hostlocal");
    f["containerID"] = json!("rollback-builtin");
    let mut conf = lab.conf("1.0.0", 2);
    let dir = lab.host.root().join("go-cache");
    conf["goCacheDir"] = json!(dir);
    let cni_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(common::lab::bin(), cni_dir.path().join("ib-sriov-ipam")).unwrap();
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    lab.add("rollback-builtin", &pod, &conf).expect_ok();
    assert_eq!(lab.allocations().len(), 1);
    let cache = dir.join("rollback-builtin-net1");
    let c: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(c["ipam"], json!({"type": "ib-sriov-ipam"}));
    go_del_with(&lab, &f, &pod, &conf, &cache, cni_dir.path());
    assert!(
        lab.allocations().is_empty(),
        "released through ib-sriov-ipam"
    );
    let mut want = before.clone();
    netdev_down(&lab, &mut want, 2);
    assert_eq!(lab.host.snapshot(), want);
    lab.del("rollback-builtin", pod.netns(), &conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), want);
}

/// The Go plugin's file name `<containerID>-<ifname>` is not injective: `(pod-x, net1)`
/// and `(pod, x-net1)` share it. The second ADD leaves the first's file alone (and
/// says it cannot be rolled back); each DEL then undoes its own attachment fully, in
/// either order, and the file goes with the first attachment's DEL.
#[test]
fn colliding_cache_file_names_do_not_mix_attachments() {
    for first_del in [0usize, 1] {
        let lab = Lab::default();
        let dir = lab.host.root().join("go-cache");
        let pods = [lab.host.new_pod(), lab.host.new_pod()];
        let pairs = [("pod-x", "net1"), ("pod", "x-net1")];
        let confs = [lab.conf("1.0.0", 0), lab.conf("1.0.0", 1)];
        let before = lab.host.snapshot();
        let call = |cmd: &str, k: usize| {
            common::lab::Run::from(lab.host.run_plugin(
                common::lab::bin(),
                cmd,
                pairs[k].0,
                pods[k].netns(),
                pairs[k].1,
                &confs[k].to_string(),
                &[],
            ))
        };
        call("ADD", 0).expect_ok();
        let r = call("ADD", 1);
        assert!(r.stderr.contains("cannot be rolled back"), "{}", r.stderr);
        r.expect_ok();
        let file = dir.join("pod-x-net1");
        let c: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            c["ContIFNames"], "net1",
            "the first attachment's file stays"
        );
        let second = 1 - first_del;
        call("DEL", first_del).expect_ok();
        assert_eq!(pods[first_del].links(), vec!["lo"]);
        call("DEL", second).expect_ok();
        assert_eq!(
            pods[second].links(),
            vec!["lo"],
            "DEL {second} undid its attachment"
        );
        assert!(!file.exists());
        assert!(lab.journals().is_empty());
        assert_eq!(lab.host.snapshot(), before);
    }
}

/// Fixture a's attachment (VF 0, a GUID, host-local) with `"link_state": "enable"`
/// too: every piece of VF state Go's DEL would restore. Its lab, config, cache file and
/// pod, the host before ADD, and the emulated driver probe (a recovery rebind
/// re-creates a destroyed netdev).
struct Attached {
    lab: Lab,
    f: Value,
    conf: Value,
    cache: PathBuf,
    pod: Pod,
    before: HostSnapshot,
    _probe: common::emuhost::ProbeEmu,
}

fn attach() -> Attached {
    let lab = Lab::default();
    let f = manifest("a-guid-hostlocal");
    let (mut conf, dir) = conf(&lab, &f);
    conf["link_state"] = json!("enable");
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    let probe = lab.host.probe_on_bind(&before);
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    let cache = dir.join(f["file"].as_str().unwrap());
    assert!(cache.exists());
    Attached {
        lab,
        f,
        conf,
        cache,
        pod,
        before,
        _probe: probe,
    }
}

impl Attached {
    /// The VF's OFED node GUID, port GUID and policy now.
    fn vf_attrs(&self) -> [String; 3] {
        let vf = self.lab.host.vf(0);
        [vf.ofed_node(), vf.ofed_port(), vf.ofed_policy()].map(|p| {
            std::fs::read_to_string(p.unwrap())
                .unwrap()
                .trim()
                .to_string()
        })
    }

    /// Our DEL (upgraded again) restores everything: the VF back in the host as before
    /// ADD, the IP released, no journal, no cache file; then the next pod's ADD on the
    /// VF succeeds and its DEL restores the VF again. Returns our DEL's log.
    fn our_del_restores(&self, pod_gone: bool) -> String {
        let r = run(&self.lab, "DEL", &self.f, &self.pod, &self.conf);
        let log = r.stderr.clone();
        r.expect_ok();
        assert!(
            log.contains("is gone, but VF") && log.contains("undoing the attachment"),
            "{log}"
        );
        assert!(self.lab.journals().is_empty(), "{:?}", self.lab.journals());
        assert!(host_local_held(&self.lab, "ib-sriov-network").is_empty());
        assert!(!self.cache.exists());
        if !pod_gone {
            assert_eq!(self.pod.links(), vec!["lo"]);
        }
        assert_eq!(self.lab.host.snapshot(), self.before, "{log}");
        // The emulated sysfs is refreshed by the tests, not live as the kernel's.
        self.lab.host.sync_netdevs().unwrap();
        let pod2 = self.lab.host.new_pod();
        let mut f2 = self.f.clone();
        f2["containerID"] = json!("next-pod");
        run(&self.lab, "ADD", &f2, &pod2, &self.conf).expect_ok();
        assert_eq!(pod2.links(), vec!["lo", "net1"]);
        run(&self.lab, "DEL", &f2, &pod2, &self.conf).expect_ok();
        assert_eq!(self.lab.host.snapshot(), self.before);
        log
    }
}

/// Issue 39's cleanup repro: ADD, then an admin's `rm` of the Go cache file
/// (`/var/lib/cni/ib-sriov/<cid>-net1`) while the pod lives, then DEL. The file's
/// absence is not taken for the Go plugin's DEL: the host shows the netdev still in
/// the pod, so our DEL undoes the attachment from its journal, and the next ADD on the
/// VF succeeds.
#[test]
fn a_cache_file_removed_by_hand_is_not_taken_for_a_go_del() {
    let t = attach();
    std::fs::remove_file(&t.cache).unwrap();
    let log = t.our_del_restores(false);
    assert!(log.contains("has no netdev in the host"), "{log}");
}

/// Go's DEL with the pod netns gone, a netdev that is not refunded (IPoIB: destroyed
/// with the netns). Played from the Go source (`go_del`: `cmdDel` returns success
/// after the IPAM DEL when `ns.GetNS` fails with `NSPathNotExistErr`, and its deferred
/// `CleanCachedNetConf` removes the file): the VF is left with no netdev, the pod's GUID
/// and link state `enable`. Our DEL then runs its own undo: the recovery rebind
/// re-creates the netdev, the name, GUID and link state are restored.
#[test]
fn go_del_of_a_dead_pod_with_its_netdev_destroyed() {
    let t = attach();
    let pod_attrs = t.vf_attrs();
    assert_eq!(pod_attrs[0], "02:00:00:00:00:00:0a:01");
    t.pod.delete().unwrap();
    t.lab.host.sync_netdevs().unwrap();
    go_del(&t.lab, &t.f, &t.pod, &t.conf, &t.cache);
    assert!(!t.cache.exists());
    assert!(
        list(&t.lab.host.vf(0).dir.join("net")).is_empty(),
        "Go's DEL left the VF without a netdev"
    );
    assert_eq!(
        t.vf_attrs(),
        pod_attrs,
        "and with the pod's GUID and link state"
    );
    assert_eq!(pod_attrs[2], "Up");
    let log = t.our_del_restores(true);
    assert!(log.contains("has no netdev in the host"), "{log}");
    assert!(log.contains("recovery rebind of VF"), "{log}");
}

/// Go's DEL with the pod netns gone and the netdev returned to the host by the kernel
/// under the pod's name `net1`: Go returns early again, leaving `net1` with the dead
/// pod's GUID and `enable`. Our DEL sees the pod's name (and GUID, link state) and
/// restores the VF fully.
#[test]
fn go_del_of_a_dead_pod_with_its_netdev_returned() {
    let t = attach();
    let pod_attrs = t.vf_attrs();
    t.pod.delete().unwrap();
    t.lab
        .host
        .return_destroyed_vf_netdev(0, "net1", &t.before)
        .unwrap();
    go_del(&t.lab, &t.f, &t.pod, &t.conf, &t.cache);
    assert!(!t.cache.exists());
    assert!(
        t.lab.host.snapshot().link("net1").is_some(),
        "net1 in the host"
    );
    assert_eq!(t.vf_attrs(), pod_attrs);
    let log = t.our_del_restores(true);
    assert!(log.contains("under the pod's name net1"), "{log}");
}

/// A journal lost with its `stateDir` (emptied while the pod ran) in this boot: the
/// cache file our ADD wrote is all that is left, and DEL undoes the attachment from it
/// as the Go plugin's DEL would (the netdev back under its name and left down, the GUID
/// Go restores, link state `auto`), instead of dropping it and leaving the VF in the pod.
#[test]
fn a_lost_journal_is_undone_from_our_cache_file_of_this_boot() {
    let t = attach();
    std::fs::remove_dir_all(&t.lab.state).unwrap();
    let r = run(&t.lab, "DEL", &t.f, &t.pod, &t.conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("the journal was lost"), "{log}");
    assert!(!t.cache.exists());
    assert_eq!(t.pod.links(), vec!["lo"]);
    assert!(host_local_held(&t.lab, "ib-sriov-network").is_empty());
    let mut want = t.before.clone();
    netdev_down(&t.lab, &mut want, 0);
    ofed(
        &t.lab,
        &mut want,
        t.lab.host.vf(0).ofed_node(),
        "02:00:00:00:00:02:00:00",
    );
    assert_eq!(t.lab.host.snapshot(), want, "{log}");
}

/// A journal lost with its `stateDir` while the pod runs also holds the VF against the
/// next ADD: the rollback file our ADD wrote in this boot is found as the VF's holder
/// (the Go cache index lists the directory again and cannot place the file in its log
/// of our writes, src/plugin/go_index.rs `Kind::Orphan`). While the pod lives, another
/// pod's ADD of the VF is refused (code 101, naming the file); after the runtime's DEL
/// of the first attachment (undone from the file) the next ADD takes the VF.
#[test]
fn a_lost_journal_holds_its_vf_against_the_next_add() {
    let t = attach();
    std::fs::remove_dir_all(&t.lab.state).unwrap();
    let pod2 = t.lab.host.new_pod();
    let mut f2 = t.f.clone();
    f2["containerID"] = json!("second-pod");
    let e = run(&t.lab, "ADD", &f2, &pod2, &t.conf).expect_code(101);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("journal was lost") && msg.contains(&t.cache.display().to_string()),
        "{msg}"
    );
    assert_eq!(pod2.links(), vec!["lo"]);
    assert!(
        t.pod.links().contains(&"net1".to_string()),
        "still the first pod's"
    );
    // The runtime's DEL of the first attachment undoes it from the file; the VF is then
    // free, and the second pod's ADD takes it.
    run(&t.lab, "DEL", &t.f, &t.pod, &t.conf).expect_ok();
    assert!(!t.cache.exists());
    let r = run(&t.lab, "ADD", &f2, &pod2, &t.conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(pod2.links().contains(&"net1".to_string()), "{log}");
    run(&t.lab, "DEL", &f2, &pod2, &t.conf).expect_ok();
    assert_eq!(pod2.links(), vec!["lo"]);
}

/// A Go cache file that is not one (corrupted) is skipped by a DEL without a journal,
/// as the Go plugin's DEL skips a cache it cannot load: DEL succeeds and the file is
/// left in place. With the journal there, DEL undoes everything and leaves the file
/// (not what ADD wrote any more).
#[test]
fn a_corrupted_cache_file_does_not_fail_del() {
    let t = attach();
    std::fs::write(&t.cache, "{\"deviceID\": trunc").unwrap();
    run(&t.lab, "DEL", &t.f, &t.pod, &t.conf).expect_ok();
    assert_eq!(t.lab.host.snapshot(), t.before);
    assert!(t.cache.exists(), "not ours to remove any more");
    let r = run(&t.lab, "DEL", &t.f, &t.pod, &t.conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("is left in place"), "{log}");
    assert_eq!(t.lab.host.snapshot(), t.before);
}

/// `ib-sriov doctor --json` on the lab's node: run in the emulated host's netns with a
/// host root of links to the emulated sysfs, `/proc`, `/var/run/netns`, the stateDir at
/// its own path and the Go cache directory `dir` as `/var/lib/cni/ib-sriov`. Its exit
/// status and report.
fn doctor(lab: &Lab, dir: &Path) -> (i32, Value) {
    let root = tempfile::tempdir().unwrap();
    let link = |abs: &Path, target: &Path| {
        let at = root.path().join(abs.strip_prefix("/").unwrap());
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, at).unwrap();
    };
    link(Path::new("/sys"), lab.host.root());
    link(Path::new("/proc"), Path::new("/proc"));
    link(Path::new("/var/run/netns"), Path::new("/var/run/netns"));
    link(Path::new("/var/lib/cni/ib-sriov"), dir);
    link(&lab.state, &lab.state);
    let (b, r, s) = (
        common::lab::bin().display().to_string(),
        root.path().display().to_string(),
        lab.state.display().to_string(),
    );
    let out = lab
        .host
        .host_exec(&[&b, "doctor", "--json", "--host-root", &r, "--state-dir", &s]);
    let j: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), j)
}

/// The findings of a doctor report other than `info`, as `severity code subject`.
fn not_info(j: &Value) -> Vec<String> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .map(|f| format!("{} {} {}", f["severity"], f["code"], f["subject"]).replace('"', ""))
        .collect()
}

/// The rollback test (issue 50): ADD by ib-sriov (fixture a with `link_state`: a GUID,
/// a link state, host-local), then an admin removes the pod's Go cache file while the
/// pod runs. The doctor says `rollback-unready` (an error, exit 1) for its VF, and no
/// `undone-by-go`. The fix it names: the network's next CNI GC listing the attachment
/// rewrites the file from the journal, byte for byte what ADD wrote (the doctor then
/// exits 0). Then the node is rolled back and the Go plugin's DEL (played from that
/// file as [`go_del`] plays `cmdDel`) restores the VF as it restores its own: netdev
/// back under its name and down, the GUID it read before ADD, link state `Follow`, the
/// IP released, the VF's RDMA device back in the host's sysfs view with its netdev. Now
/// the doctor shows `undone-by-go` (info, exit 0), and our DEL after going forward again
/// drops the journal touching nothing.
///
/// The RDMA device: the emulated host has no RDMA subsystem (RDMA devices are sysfs
/// entries under the VF; `rdmaIsolation` moves need RDMA netlink), so fixture a moves
/// none, and what is checked is that the VF's `infiniband/<dev>` entry is in the host
/// snapshot Go's DEL leaves (the snapshot covers the VF's sysfs, netdevs, GUIDs and
/// link state).
#[test]
fn rollback_after_a_cache_file_removed_by_hand() {
    let t = attach();
    let dir = t.cache.parent().unwrap().to_path_buf();
    let vf = t.lab.host.vf(0).addr.clone();
    let written = std::fs::read(&t.cache).unwrap();
    std::fs::remove_file(&t.cache).unwrap();

    let (rc, j) = doctor(&t.lab, &dir);
    assert_eq!(
        not_info(&j),
        vec![format!("error rollback-unready {vf}")],
        "{j:#}"
    );
    assert_eq!(rc, 1, "{j:#}");
    let f = &j["findings"].as_array().unwrap()[0];
    assert!(
        f["message"].as_str().unwrap().contains("is missing")
            && f["fix"].as_str().unwrap().contains("next CNI GC"),
        "{f:#}"
    );
    assert!(!j.to_string().contains("undone-by-go"), "{j:#}");

    // The fix: the runtime's GC, with the attachment listed as valid.
    let mut gc = t.conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] =
        json!([{"containerID": t.f["containerID"], "ifname": "net1"}]);
    let cni_path = cni_path();
    let r = t
        .lab
        .run("GC", "", "", &gc, &[("CNI_PATH", cni_path.as_str())]);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("rewrote it from the journal"), "{log}");
    assert_eq!(
        std::fs::read(&t.cache).unwrap(),
        written,
        "byte for byte what ADD wrote"
    );
    let mode = std::fs::metadata(&t.cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (rc, j) = doctor(&t.lab, &dir);
    assert_eq!((rc, not_info(&j)), (0, Vec::<String>::new()), "{j:#}");

    // Rolled back: the Go plugin's DEL of the pod, from the healed file.
    go_del(&t.lab, &t.f, &t.pod, &t.conf, &t.cache);
    let mut want = t.before.clone();
    go_del_leaves(&t.lab, "a-guid-hostlocal", &mut want);
    ofed(&t.lab, &mut want, t.lab.host.vf(0).ofed_policy(), "Follow");
    assert_eq!(t.lab.host.snapshot(), want, "as the Go DEL leaves its own");
    assert_eq!(t.pod.links(), vec!["lo"]);
    assert!(host_local_held(&t.lab, "ib-sriov-network").is_empty());
    let rdma = t.lab.host.vf(0).dir.join("infiniband");
    assert_eq!(
        list(&rdma),
        vec!["mlx5_1"],
        "the VF's RDMA device, in the host"
    );
    t.lab.host.sync_netdevs().unwrap();
    let (rc, j) = doctor(&t.lab, &dir);
    assert_eq!((rc, not_info(&j)), (0, Vec::<String>::new()), "{j:#}");
    let undone: Vec<&Value> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "undone-by-go")
        .collect();
    assert_eq!(undone.len(), 1, "{j:#}");
    assert_eq!(
        (&undone[0]["severity"], &undone[0]["subject"]),
        (&json!("info"), &json!(vf))
    );

    // Forward again: our DEL drops the journal without touching the VF.
    run(&t.lab, "DEL", &t.f, &t.pod, &t.conf).expect_ok();
    assert!(t.lab.journals().is_empty());
    assert_eq!(t.lab.host.snapshot(), want, "our DEL touched nothing");
}

/// The heal is for live attachments only, proved by identity: after the Go plugin's
/// DEL (the VF back in the host), a GC that still lists the attachment (a runtime that
/// has not caught up) does not write the file again, and neither does one after the pod
/// netns is gone.
#[test]
fn no_heal_once_the_vf_is_out_of_the_pod() {
    let t = attach();
    go_del(&t.lab, &t.f, &t.pod, &t.conf, &t.cache);
    let mut gc = t.conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] =
        json!([{"containerID": t.f["containerID"], "ifname": "net1"}]);
    let cni_path = cni_path();
    t.lab
        .run("GC", "", "", &gc, &[("CNI_PATH", cni_path.as_str())])
        .expect_ok();
    assert!(!t.cache.exists(), "not written for a VF out of the pod");
    t.pod.delete().unwrap();
    t.lab
        .run("GC", "", "", &gc, &[("CNI_PATH", cni_path.as_str())])
        .expect_ok();
    assert!(!t.cache.exists(), "nor for a pod netns that is gone");
    run(&t.lab, "DEL", &t.f, &t.pod, &t.conf).expect_ok();
    assert!(t.lab.journals().is_empty());
}

/// CHECK of a live attachment whose Go cache file was removed rewrites it (byte for
/// byte what ADD wrote) once the attachment checked out; a file that is there but not
/// ours (here garbage) is left alone by CHECK and by GC: only the admin may judge it.
#[test]
fn check_rewrites_a_missing_cache_file_and_leaves_a_foreign_one() {
    let lab = Lab::default();
    let conf = lab.conf("1.1.0", 0);
    let dir = lab.host.root().join("go-cache");
    let cache = dir.join("chk-net1");
    let pod = lab.host.new_pod();
    let res = lab.add("chk", &pod, &conf).expect_ok();
    let written = std::fs::read(&cache).unwrap();
    std::fs::remove_file(&cache).unwrap();
    let r = lab.check("chk", &pod, &conf, &res);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("rewrote it from the journal"), "{log}");
    assert_eq!(std::fs::read(&cache).unwrap(), written);
    let (rc, j) = doctor(&lab, &dir);
    assert_eq!((rc, not_info(&j)), (0, Vec::<String>::new()), "{j:#}");

    std::fs::write(&cache, "garbage").unwrap();
    lab.check("chk", &pod, &conf, &res).expect_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "chk", "ifname": "net1"}]);
    lab.run("GC", "", "", &gc, &[]).expect_ok();
    assert_eq!(std::fs::read(&cache).unwrap(), b"garbage");
    let (rc, j) = doctor(&lab, &dir);
    assert_eq!(rc, 1, "{j:#}");
    assert!(
        not_info(&j).contains(&format!("error rollback-unready {}", lab.host.vf(0).addr)),
        "{j:#}"
    );
    std::fs::remove_file(&cache).unwrap();
    lab.del("chk", pod.netns(), &conf).expect_ok();
    assert!(lab.journals().is_empty());
}

/// The doctor's fix by hand for a missing file works as written: its command, run in a
/// shell as given (jq on the journal's `go_cache` step), writes back exactly what ADD
/// wrote, mode 0600, and the doctor then exits 0.
#[test]
fn the_doctors_fix_by_hand_writes_what_add_wrote() {
    let lab = Lab::default();
    let conf = lab.conf("1.0.0", 1);
    let dir = lab.host.root().join("go-cache");
    let cache = dir.join("byhand-net1");
    let pod = lab.host.new_pod();
    lab.add("byhand", &pod, &conf).expect_ok();
    let written = std::fs::read(&cache).unwrap();
    std::fs::remove_file(&cache).unwrap();
    let (rc, j) = doctor(&lab, &dir);
    assert_eq!(rc, 1, "{j:#}");
    let fix = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "rollback-unready")
        .and_then(|f| f["fix"].as_str())
        .unwrap_or_else(|| panic!("{j:#}"))
        .to_string();
    let cmd = fix
        .split_once("by hand, on the node: ")
        .and_then(|(_, c)| c.split_once("; or let"))
        .map(|(c, _)| c)
        .unwrap_or_else(|| panic!("{fix}"));
    let out = std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {out:?}");
    assert_eq!(std::fs::read(&cache).unwrap(), written, "{cmd}");
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{cmd}");
    let (rc, j) = doctor(&lab, &dir);
    assert_eq!((rc, not_info(&j)), (0, Vec::<String>::new()), "{j:#}");
    lab.del("byhand", pod.netns(), &conf).expect_ok();
    assert!(!cache.exists());
}

/// The RDMA recipe across a per-node rollback (issue 50): a pod ADDed by ib-sriov from
/// an operator-rendered network (no `rdmaIsolation`) with the node default
/// `{"defaults": {"rdmaIsolation": true}}` has its RDMA device moved into the pod; our
/// cache file must then be the one the Go plugin writes for the same network with
/// `rdmaIsolation: true` (fixture `e-rdma-ibk8s`, byte for byte), so that the Go
/// plugin's DEL after a rollback returns both the RDMA device (`handleVFCleanup`'s
/// `MoveRdmaDevFromNs` of `RdmaNetState.containerRdmaDevName`, cmd/ib-sriov-cni/main.go
/// and pkg/utils/rdma.go at 543060da) and the netdev. Our ADD runs in-process (the
/// kernel here has no RDMA subsystem: the in-memory one stands in, exclusive mode) with
/// the node defaults applied by the function the CLI applies them with; the rest as in
/// [`rollback_case`]. Then (upgraded again) our DEL touches nothing.
#[cfg(feature = "test-doubles")]
#[test]
fn rollback_of_a_pod_isolated_by_the_node_default_returns_the_rdma_device() {
    use ib_sriov_cni::rdma::{MemoryRdma, NetnsKey, NetnsMode, RdmaDevice, RdmaOps};
    let lab = Lab::new(common::emuhost::EmuOptions {
        vfs: 5,
        ..Default::default()
    });
    let f = manifest("e-rdma-ibk8s");
    let (mut conf, dir) = conf(&lab, &f);
    // What the SR-IOV network operator renders: no rdmaIsolation.
    conf.as_object_mut().unwrap().remove("rdmaIsolation");
    let host_key = NetnsKey::of_path(lab.host.host_netns_path()).unwrap();
    let mem = MemoryRdma::new(host_key, NetnsMode::Exclusive);
    for (i, vf) in lab.host.vfs().iter().enumerate() {
        if let Some(r) = &vf.rdma {
            mem.add_device(host_key, RdmaDevice::new(10 + i as u32, r.clone()));
        }
    }
    let rdma = lab.host.vf(4).rdma.clone().unwrap();
    let pod = lab.host.new_pod();
    let pod_key = NetnsKey::of_path(&pod.path).unwrap();
    let names_in =
        |k: NetnsKey| -> Vec<String> { mem.devices_in(k).into_iter().map(|d| d.name).collect() };
    let before = lab.host.snapshot();
    let cid = f["containerID"].as_str().unwrap().to_string();
    // One verb in-process, on a thread in the emulated host's netns, as the CLI runs
    // it: the configuration parsed, then the node file's defaults applied.
    let call = |cmd: &str| -> Result<Option<Value>, ib_sriov_cni::cni::CniError> {
        let vars: std::collections::HashMap<String, String> = [
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid.as_str()),
            ("CNI_NETNS", pod.netns()),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", cni_path().as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let stdin = conf.to_string();
        let root = lab.host.root().to_path_buf();
        let host_ns = std::fs::File::open(lab.host.host_netns_path()).unwrap();
        let mem = mem.clone();
        std::thread::spawn(move || {
            nix::sched::setns(&host_ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let env = ib_sriov_cni::cni::CniEnv::from_map(&vars)?;
            let mut conf = ib_sriov_cni::config::NetConf::parse(stdin.as_bytes())?;
            let defaults: ib_sriov_cni::policy::NodeDefaults =
                serde_json::from_value(json!({"rdmaIsolation": true})).unwrap();
            defaults.apply(&mut conf);
            ib_sriov_cni::plugin::run_with(&env, &conf, ib_sriov_cni::sysfs::Sysfs::new(root), &mem)
        })
        .join()
        .expect("plugin thread panicked")
    };
    call("ADD").unwrap();
    assert_eq!(
        names_in(pod_key),
        vec![rdma.clone()],
        "the RDMA device in the pod"
    );
    assert_eq!(pod.links(), vec!["lo", "net1"], "and the IPoIB netdev");
    let cache = dir.join(f["file"].as_str().unwrap());
    compare_with_fixture(&f, &cache);
    let c: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(c["rdmaIsolation"], true);
    assert_eq!(c["RdmaNetState"]["containerRdmaDevName"], rdma.as_str());

    // Rolled back: the Go plugin's DEL from its cache file, its RDMA step included.
    let host_fd = std::fs::File::open(lab.host.host_netns_path()).unwrap();
    let rdma_back = |name: &str| {
        let mut in_pod = mem.in_netns(pod_key);
        let d = in_pod.device_by_name(name).unwrap().unwrap();
        in_pod
            .move_to_netns(d.index, std::os::fd::AsFd::as_fd(&host_fd))
            .unwrap();
    };
    go_del_rdma(
        &lab,
        &f,
        &pod,
        &conf,
        &cache,
        Path::new(DEBIAN_CNI),
        Some(&rdma_back),
    );
    assert!(names_in(pod_key).is_empty());
    assert!(
        names_in(host_key).contains(&rdma),
        "the RDMA device is back"
    );
    let mut want = before.clone();
    netdev_down(&lab, &mut want, 4);
    ofed(
        &lab,
        &mut want,
        lab.host.vf(4).ofed_node(),
        lab.host.vf(4).port_guid.as_deref().unwrap(),
    );
    assert_eq!(
        lab.host.snapshot(),
        want,
        "the netdev back, as Go's DEL leaves it"
    );
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(host_local_held(&lab, "ib-sriov-network").is_empty());

    // Upgraded again: our DEL of the same attachment touches nothing.
    let moves = mem.moves().len();
    call("DEL").unwrap();
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), want, "our DEL touched nothing");
    assert_eq!(mem.moves().len(), moves, "no RDMA move");
    assert!(names_in(host_key).contains(&rdma));
}
