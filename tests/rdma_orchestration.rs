//! RDMA isolation orchestration (order, undo at each RDMA step, DEL from inside the pod)
//! against the in-memory RDMA backend, since this machine's kernel has no RDMA
//! subsystem. Everything else is real: the plugin library runs in-process on a thread
//! that has entered the emulated host's netns, moving real veth netdevs into real pod
//! netns, with the emulated sysfs tree. Needs root (the fixture panics otherwise).

mod common;

use common::emuhost::{EmuHost, EmuOptions, HostSnapshot, Pod};
use ib_sriov_cni::cni::{CniEnv, CniError};
use ib_sriov_cni::config::NetConf;
use ib_sriov_cni::journal::JournalStore;
use ib_sriov_cni::plugin::run_with;
use ib_sriov_cni::rdma::{MemoryRdma, NetnsKey, NetnsMode, RdmaDevice, RdmaOp};
use ib_sriov_cni::sysfs::Sysfs;
use nix::sched::{setns, CloneFlags};
use serde_json::{json, Value};
use std::collections::HashMap;

struct World {
    host: EmuHost,
    mem: MemoryRdma,
    host_key: NetnsKey,
}

impl World {
    fn new(mode: NetnsMode) -> World {
        let host = EmuHost::build(EmuOptions::default());
        let host_key = NetnsKey::of_path(host.host_netns_path()).unwrap();
        let mem = MemoryRdma::new(host_key, mode);
        for (i, vf) in host.vfs().iter().enumerate() {
            if let Some(r) = &vf.rdma {
                mem.add_device(host_key, RdmaDevice::new(10 + i as u32, r.clone()));
            }
        }
        World {
            host,
            mem,
            host_key,
        }
    }

    /// A new world in `mode`, its host before anything happens, and a new pod.
    fn fresh(mode: NetnsMode) -> (World, HostSnapshot, Pod) {
        let w = World::new(mode);
        let before = w.host.snapshot();
        let pod = w.host.new_pod();
        (w, before, pod)
    }

    fn conf(&self, vf: u32, rdma_isolation: Option<bool>) -> Value {
        let mut c = json!({
            "cniVersion": "1.0.0", "name": "ibnet", "type": "ib-sriov",
            "deviceID": self.host.vf(vf).addr,
            "stateDir": self.host.root().join("state"),
            "goCacheDir": self.host.root().join("go-cache"),
            "ipam": {"type": "ib-sriov-ipam", "subnet": "10.56.217.0/24",
                     "dataDir": self.host.root().join("ipam")},
        });
        if let Some(b) = rdma_isolation {
            c["rdmaIsolation"] = json!(b);
        }
        c
    }

    /// Runs one command in-process on a thread inside the emulated host's netns.
    fn run(
        &self,
        cmd: &str,
        cid: &str,
        netns: &str,
        conf: &Value,
    ) -> Result<Option<Value>, CniError> {
        let vars: HashMap<String, String> = [
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "net1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let stdin = conf.to_string();
        let root = self.host.root().to_path_buf();
        let host_ns = std::fs::File::open(self.host.host_netns_path()).unwrap();
        let mem = self.mem.clone();
        std::thread::spawn(move || {
            setns(&host_ns, CloneFlags::CLONE_NEWNET).expect("enter host netns");
            let env = CniEnv::from_map(&vars)?;
            let conf = NetConf::parse(stdin.as_bytes())?;
            run_with(&env, &conf, Sysfs::new(root), &mem)
        })
        .join()
        .expect("plugin thread panicked")
    }

    fn pod_key(&self, pod: &Pod) -> NetnsKey {
        NetnsKey::of_path(&pod.path).unwrap()
    }

    fn rdma_names_in(&self, key: NetnsKey) -> Vec<String> {
        let mut v: Vec<String> = self
            .mem
            .devices_in(key)
            .into_iter()
            .map(|d| d.name)
            .collect();
        v.sort();
        v
    }
}

#[test]
fn rdma_isolation_true_moves_the_rdma_device_before_the_netdev_and_back_on_del() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(0, Some(true));
    let rdma = w.host.vf(0).rdma.clone().unwrap();
    w.run("ADD", "c1", pod.netns(), &conf).unwrap();
    assert_eq!(w.rdma_names_in(w.pod_key(&pod)), vec![rdma.clone()]);
    assert!(!w.rdma_names_in(w.host_key).contains(&rdma));
    assert!(pod.links().contains(&"net1".to_string()));
    let j = JournalStore::new(w.host.root().join("state"))
        .load("c1", "net1")
        .unwrap()
        .unwrap();
    let pos = |kind: &str| j.steps.iter().position(|x| x.kind() == kind).unwrap();
    assert!(pos("rdma") < pos("move"), "{:?}", j.steps);
    assert_eq!(j.rdma_device(), Some(rdma.as_str()));

    let res = w.run("ADD", "c1x", pod.netns(), &w.conf(1, Some(true)));
    assert!(res.is_err(), "net1 taken in the pod");
    let mut c = conf.clone();
    c["prevResult"] = json!({"cniVersion": "1.0.0"});
    w.run("CHECK", "c1", pod.netns(), &c).unwrap();
    // CHECK notices the RDMA device missing from the pod.
    let idx = w.mem.devices_in(w.pod_key(&pod))[0].index;
    let dev = w.mem.remove_device(idx).unwrap();
    let e = w.run("CHECK", "c1", pod.netns(), &c).unwrap_err();
    assert!(e.msg.contains("RDMA device"), "{e}");
    w.mem.add_device(w.pod_key(&pod), dev);

    let moves_before_del = w.mem.calls(RdmaOp::MoveToNetns);
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), moves_before_del + 1);
    let last = *w.mem.moves().last().unwrap();
    assert_eq!(
        (last.1, last.2),
        (w.pod_key(&pod), w.host_key),
        "moved from the pod to the host"
    );
    assert!(w.rdma_names_in(w.host_key).contains(&rdma));
    assert!(w.rdma_names_in(w.pod_key(&pod)).is_empty());
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert_eq!(w.host.snapshot(), before);
}

#[test]
fn shared_mode_required_is_refused_and_optional_leaves_the_device() {
    let (w, before, pod) = World::fresh(NetnsMode::Shared);
    let e = w
        .run("ADD", "c1", pod.netns(), &w.conf(0, Some(true)))
        .unwrap_err();
    assert_eq!(e.code, 7);
    assert!(e.msg.contains("rdma system set netns exclusive"), "{e}");
    assert_eq!(w.host.snapshot(), before);
    assert_eq!(pod.links(), vec!["lo"]);
    assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), 0);

    w.run("ADD", "c1", pod.netns(), &w.conf(0, None)).unwrap();
    assert_eq!(
        w.mem.calls(RdmaOp::MoveToNetns),
        0,
        "shared mode: the device stays"
    );
    w.run("DEL", "c1", pod.netns(), &w.conf(0, None)).unwrap();
    assert_eq!(w.host.snapshot(), before);
}

/// `rdmaIsolation` false or absent never moves the RDMA device, also in exclusive mode:
/// absent means what it means under the Go plugin (its `RdmaIsolation bool` is false
/// when the key is absent, k8snetworkplumbingwg/ib-sriov-cni 543060d
/// `pkg/types/types.go`, and `cmd/ib-sriov-cni/main.go` moves only when it is true).
#[test]
fn rdma_isolation_false_or_absent_never_moves() {
    for iso in [Some(false), None] {
        let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
        let rdma = w.host.vf(0).rdma.clone().unwrap();
        w.run("ADD", "c1", pod.netns(), &w.conf(0, iso)).unwrap();
        assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), 0, "{iso:?}");
        assert!(w.rdma_names_in(w.host_key).contains(&rdma), "{iso:?}");
        let j = JournalStore::new(w.host.root().join("state"))
            .load("c1", "net1")
            .unwrap()
            .unwrap();
        assert_eq!(j.rdma_device(), None);
        assert_eq!(j.rdma_devices, vec![rdma.clone()], "listed for CHECK");
        w.run("DEL", "c1", pod.netns(), &w.conf(0, iso)).unwrap();
        assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), 0, "{iso:?}");
        assert_eq!(w.host.snapshot(), before);
    }
}

/// An attachment journaled by an earlier build, under which an absent `rdmaIsolation`
/// moved the RDMA device: its journal has the RDMA step and no `rdmaIsolation`. DEL
/// undoes what was journaled (the device comes back from the pod), whatever the
/// configuration it gets says now.
#[test]
fn del_of_an_attachment_journaled_under_absent_means_move_brings_the_device_back() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    let rdma = w.host.vf(1).rdma.clone().unwrap();
    w.run("ADD", "c1", pod.netns(), &w.conf(1, Some(true)))
        .unwrap();
    // The journal as the earlier build wrote it: no rdmaIsolation, no rdmaDevices.
    let store = JournalStore::new(w.host.root().join("state"));
    let path = store.dir().join(
        std::fs::read_dir(store.dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .find(|n| n.to_string_lossy().contains("c1"))
            .expect("the journal file"),
    );
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["rdmaIsolation"] = Value::Null;
    v.as_object_mut().unwrap().remove("rdmaDevices");
    v["conf"].as_object_mut().unwrap().remove("rdmaIsolation");
    std::fs::write(&path, v.to_string()).unwrap();
    let j = store.load("c1", "net1").unwrap().unwrap();
    assert_eq!(
        (j.rdma_isolation, j.rdma_device()),
        (None, Some(rdma.as_str()))
    );
    assert_eq!(w.rdma_names_in(w.pod_key(&pod)), vec![rdma.clone()]);

    w.run("DEL", "c1", pod.netns(), &w.conf(1, None)).unwrap();
    let last = *w.mem.moves().last().unwrap();
    assert_eq!((last.1, last.2), (w.pod_key(&pod), w.host_key));
    assert!(w.rdma_names_in(w.host_key).contains(&rdma));
    assert!(store.load("c1", "net1").unwrap().is_none());
    assert_eq!(w.host.snapshot(), before);
}

/// rdma-cni chained after ib-sriov with `rdmaIsolation` absent (what operator users
/// render, `metaPlugins: {"type": "rdma"}`): ADD leaves the RDMA device in the host;
/// rdma-cni then moves it into the pod, and the kernel re-creates the IPoIB netdev in
/// the host (emulated: the pod's veth end deleted and the pair re-created in the host
/// under the kernel's `ib%d`-style name). CHECK says plainly what happened; after
/// rdma-cni's DEL (the device back in the host), our DEL restores the VF fully.
#[test]
fn rdma_cni_chained_after_us_check_names_the_move_and_del_restores() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(2, None);
    let rdma = w.host.vf(2).rdma.clone().unwrap();
    let res = w.run("ADD", "c1", pod.netns(), &conf).unwrap().unwrap();
    assert!(
        w.rdma_names_in(w.host_key).contains(&rdma),
        "left for rdma-cni"
    );
    // rdma-cni's ADD: the device moves into the pod ...
    let dev = w
        .mem
        .devices_in(w.host_key)
        .into_iter()
        .find(|d| d.name == rdma)
        .unwrap();
    w.mem.remove_device(dev.index).unwrap();
    w.mem.add_device(w.pod_key(&pod), dev.clone());
    // ... and the kernel re-creates the IPoIB netdev in the host.
    let out = std::process::Command::new("ip")
        .args(["-n", &pod.name, "link", "del", "net1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    w.host
        .return_destroyed_vf_netdev(2, "ib7", &before)
        .unwrap();
    assert!(!pod.links().contains(&"net1".to_string()));

    let mut c = conf.clone();
    c["prevResult"] = res;
    let e = w.run("CHECK", "c1", pod.netns(), &c).unwrap_err();
    assert_eq!(e.code, 104, "{e}");
    for needle in [
        "net1 is gone from",
        &format!("RDMA device {rdma}"),
        "rdma-cni",
        "recreate the IPoIB netdev in the host network namespace",
        "as ib7",
        "rdmaIsolation: true",
    ] {
        assert!(e.msg.contains(needle), "{needle:?} in {e}");
    }

    // rdma-cni's DEL first (libcni deletes in reverse order): the device back.
    w.mem.remove_device(dev.index).unwrap();
    w.mem.add_device(w.host_key, dev);
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), 0, "we moved nothing");
    assert!(JournalStore::new(w.host.root().join("state"))
        .load("c1", "net1")
        .unwrap()
        .is_none());
    assert_eq!(w.host.snapshot(), before, "the VF restored");
}

#[test]
fn failed_rdma_move_rolls_back_before_the_netdev_moves() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    w.mem.fail_nth(RdmaOp::MoveToNetns, 1, 16 /* EBUSY */);
    let mut conf = w.conf(0, Some(true));
    conf["link_state"] = json!("enable");
    let e = w.run("ADD", "c1", pod.netns(), &conf).unwrap_err();
    assert_eq!(e.code, 102, "{e}");
    assert!(e.msg.contains("RDMA"), "{e}");
    assert_eq!(
        w.host.snapshot(),
        before,
        "link state restored, netdev never left"
    );
    assert_eq!(pod.links(), vec!["lo"]);
    assert_eq!(w.rdma_names_in(w.pod_key(&pod)), Vec::<String>::new());
    assert!(JournalStore::new(w.host.root().join("state"))
        .list()
        .unwrap()
        .0
        .is_empty());
}

#[test]
fn failure_after_the_rdma_move_brings_it_back_from_inside_the_pod() {
    let w = World::new(NetnsMode::Exclusive);
    let pod1 = w.host.new_pod();
    let pod2 = w.host.new_pod();
    // A pool with one address: the first ADD takes it, the second fails in IPAM,
    // after its RDMA device and netdev already moved.
    let small = |vf: u32, iso: Option<bool>| {
        let mut c = w.conf(vf, iso);
        c["ipam"]["subnet"] = json!("10.9.0.0/30");
        c
    };
    w.run("ADD", "c1", pod1.netns(), &small(1, Some(false)))
        .unwrap();
    let before = w.host.snapshot();
    let e = w
        .run("ADD", "c2", pod2.netns(), &small(0, Some(true)))
        .unwrap_err();
    assert_eq!(e.code, 103, "{e}");
    let rdma = w.host.vf(0).rdma.clone().unwrap();
    assert!(
        w.rdma_names_in(w.host_key).contains(&rdma),
        "RDMA device back in the host"
    );
    assert!(w.rdma_names_in(w.pod_key(&pod2)).is_empty());
    let last = *w.mem.moves().last().unwrap();
    assert_eq!((last.1, last.2), (w.pod_key(&pod2), w.host_key));
    assert_eq!(w.host.snapshot(), before);
    assert_eq!(pod2.links(), vec!["lo"]);
}

#[test]
fn del_with_a_failing_rdma_return_keeps_the_journal_and_a_retry_finishes() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(2, Some(true));
    w.run("ADD", "c1", pod.netns(), &conf).unwrap();
    let next = w.mem.calls(RdmaOp::MoveToNetns) + 1;
    w.mem.fail_nth(RdmaOp::MoveToNetns, next, 1 /* EPERM */);
    let e = w.run("DEL", "c1", pod.netns(), &conf).unwrap_err();
    assert_eq!(e.code, 102);
    let store = JournalStore::new(w.host.root().join("state"));
    assert!(
        store.load("c1", "net1").unwrap().is_some(),
        "journal kept for the retry"
    );
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert!(store.load("c1", "net1").unwrap().is_none());
    assert!(w.rdma_names_in(w.pod_key(&pod)).is_empty());
    assert_eq!(w.host.snapshot(), before);
}

#[test]
fn del_after_the_pod_netns_died_needs_no_rdma_move() {
    let (w, before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(1, Some(true));
    w.run("ADD", "c1", pod.netns(), &conf).unwrap();
    let key = w.pod_key(&pod);
    let moves = w.mem.calls(RdmaOp::MoveToNetns);
    pod.delete().unwrap();
    w.mem.remove_netns(key); // the kernel returns the device to init_net
                             // ... and the VF netdev (a veth would be destroyed: re-created as the kernel
                             // returns it).
    w.host
        .return_destroyed_vf_netdev(1, "net1", &before)
        .unwrap();
    w.run("DEL", "c1", pod.path.to_str().unwrap(), &conf)
        .unwrap();
    assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), moves, "no move attempted");
    assert!(w
        .rdma_names_in(w.host_key)
        .contains(&w.host.vf(1).rdma.clone().unwrap()));
}

/// STATUS with `rdmaIsolation: true`: code 50 naming the fix in shared mode, ready in
/// exclusive mode; without the requirement the mode does not matter.
#[test]
fn status_reflects_the_rdma_netns_mode() {
    for (mode, required, ok) in [
        (NetnsMode::Shared, Some(true), false),
        (NetnsMode::Exclusive, Some(true), true),
        (NetnsMode::Shared, None, true),
    ] {
        let w = World::new(mode);
        let mut c = w.conf(0, required);
        c["cniVersion"] = json!("1.1.0");
        let r = w.run("STATUS", "", "", &c);
        match (ok, r) {
            (true, Ok(None)) => {}
            (false, Err(e)) => {
                assert_eq!(e.code, 50, "{e}");
                assert!(e.msg.contains("rdma system set netns exclusive"), "{e}");
            }
            (_, r) => panic!("{mode:?} {required:?}: unexpected {r:?}"),
        }
    }
}

/// Kernel 7.3 names RDMA devices per netns: while the VF's device sits in the pod,
/// another VF's rebind may give its new device the same name in the host. DEL still
/// brings ours home: after the rebind lock, under `<name>_r<vf-index>` when the name
/// stays taken by a device that is not ours.
#[test]
fn del_brings_the_rdma_device_home_under_another_name_when_the_host_has_its_name() {
    let (w, _before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(2, Some(true));
    w.run("ADD", "c1", pod.netns(), &conf).unwrap();
    let rdma = w.host.vf(2).rdma.clone().unwrap();
    assert_eq!(w.rdma_names_in(w.pod_key(&pod)), vec![rdma.clone()]);
    // Another VF's new device, named after the initial netns' devices only.
    w.mem
        .add_device(w.host_key, RdmaDevice::new(99, rdma.clone()));
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert!(w.rdma_names_in(w.pod_key(&pod)).is_empty());
    let host = w.rdma_names_in(w.host_key);
    assert!(host.contains(&rdma), "{host:?}");
    assert!(host.contains(&format!("{rdma}_r2")), "{host:?}");
    let store = JournalStore::new(w.host.root().join("state"));
    assert!(store.load("c1", "net1").unwrap().is_none());
}

/// The same `EEXIST` once (a rebind between the kernel's naming and its rename back):
/// the move is retried under the rebind lock and the device keeps its name.
#[test]
fn del_retries_the_rdma_move_once_after_a_transient_name_clash() {
    let (w, _before, pod) = World::fresh(NetnsMode::Exclusive);
    let conf = w.conf(2, Some(true));
    w.run("ADD", "c1", pod.netns(), &conf).unwrap();
    let next = w.mem.calls(RdmaOp::MoveToNetns) + 1;
    w.mem.fail_nth(RdmaOp::MoveToNetns, next, 17 /* EEXIST */);
    w.run("DEL", "c1", pod.netns(), &conf).unwrap();
    assert!(w.rdma_names_in(w.pod_key(&pod)).is_empty());
    assert!(w
        .rdma_names_in(w.host_key)
        .contains(&w.host.vf(2).rdma.clone().unwrap()));
    assert_eq!(w.mem.calls(RdmaOp::MoveToNetns), next + 1);
}
