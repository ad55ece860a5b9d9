//! Randomized check of validation (issue 11): any input that ADD rejects changes
//! nothing on the host, in the pod or in the IPAM store, and DEL of that rejected ADD
//! succeeds and changes nothing either. Inputs are a valid ADD with 1 to 3 random
//! defects from a catalogue of bad configuration values and bad environments (the real
//! binary on the emulated host; proptest picks the combinations, with a fixed number of
//! cases so the run is bounded).

mod common;

use common::lab::{bin, Lab, Run};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

/// One defect: a JSON pointer in the configuration and its value (`None` removes the
/// key), or an environment override.
#[derive(Debug, Clone)]
enum Defect {
    Conf(&'static str, Option<Value>),
    Env(&'static str, &'static str),
}

fn catalogue() -> Vec<Defect> {
    use Defect::*;
    vec![
        Conf("/guid", Some(json!("zz:00"))),
        Conf("/guid", Some(json!(42))),
        Conf("/deviceID", Some(json!("0000:zz:00.0"))),
        Conf("/deviceID", Some(json!("0000:af:00.0"))), // the PF
        Conf("/deviceID", Some(json!("0000:00:1f.7"))), // no such device
        Conf("/deviceID", None),
        Conf("/name", Some(json!("a/b"))),
        Conf("/name", Some(json!(".."))),
        Conf("/name", Some(json!("x\u{1}y"))),
        Conf("/name", None),
        Conf("/cniVersion", Some(json!("9.9.9"))),
        Conf("/type", Some(json!(7))),
        Conf("/link_state", Some(json!("sideways"))),
        Conf("/pkey", Some(json!("0x1ffff"))),
        Conf("/lockTimeoutMs", Some(json!(0))),
        Conf("/stateDir", Some(json!("relative/state"))),
        Conf(
            "/runtimeConfig",
            Some(json!({"CNIDeviceInfoFile": "relative/devinfo.json"})),
        ),
        Conf("/ipam/subnet", Some(json!("10.56.217.0/33"))),
        Conf("/ipam/type", Some(json!("dhcp"))),
        Conf("/ipam/type", Some(json!("no-such-ipam-plugin"))),
        Conf("/ipam/type", Some(json!("ib-sriov"))),
        Conf("/ipam/type", None),
        Conf("/ipam/dataDir", Some(json!("relative/data"))),
        Conf("/ipam/gateway", Some(json!("192.0.2.1"))),
        Env("CNI_IFNAME", "bad\u{1}name"),
        Env("CNI_IFNAME", "a:b"),
        Env("CNI_IFNAME", "sixteen-chars-xx"),
        Env("CNI_IFNAME", ".."),
        Env("CNI_CONTAINERID", "a/b"),
        Env("CNI_CONTAINERID", "-x"),
        Env("CNI_NETNS", "/proc/self/ns/mnt"),
        Env("CNI_NETNS", "/nonexistent/netns"),
        Env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME"),
    ]
}

fn apply(conf: &mut Value, d: &Defect) {
    if let Defect::Conf(ptr, v) = d {
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        let obj = if parent.is_empty() {
            conf.as_object_mut()
        } else {
            conf.pointer_mut(parent).and_then(Value::as_object_mut)
        }
        .unwrap();
        match v {
            Some(v) => {
                obj.insert(key.to_string(), v.clone());
            }
            None => {
                obj.remove(key);
            }
        }
    }
}

#[test]
fn rejected_adds_change_nothing_and_their_del_succeeds() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    let defects = catalogue();
    let n = defects.len();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let rejected = std::cell::Cell::new(0u32);
    let accepted = std::cell::Cell::new(0u32);
    let strategy = (0..2u32, prop::collection::vec(0..n, 1..=3));
    runner
        .run(&strategy, |(vf, picks)| {
            let mut conf = lab.conf("1.0.0", vf);
            let mut env: Vec<(&str, &str)> = vec![
                ("CNI_CONTAINERID", "prop"),
                ("CNI_IFNAME", "net1"),
                ("CNI_NETNS", pod.netns()),
            ];
            let chosen: Vec<&Defect> = picks.iter().map(|&i| &defects[i]).collect();
            for d in &chosen {
                apply(&mut conf, d);
                if let Defect::Env(k, v) = d {
                    env.retain(|(ek, _)| ek != k);
                    env.push((k, v));
                }
            }
            let get = |k: &str| {
                env.iter()
                    .find(|(ek, _)| *ek == k)
                    .map(|(_, v)| *v)
                    .unwrap()
            };
            let call = |cmd: &str| {
                let extra: Vec<(&str, &str)> = env
                    .iter()
                    .filter(|(k, _)| !matches!(*k, "CNI_CONTAINERID" | "CNI_IFNAME" | "CNI_NETNS"))
                    .copied()
                    .collect();
                Run::from(lab.host.run_plugin(
                    bin(),
                    cmd,
                    get("CNI_CONTAINERID"),
                    get("CNI_NETNS"),
                    get("CNI_IFNAME"),
                    &conf.to_string(),
                    &extra,
                ))
            };
            let add = call("ADD");
            if add.ok {
                // Not every defect is fatal (e.g. a malformed CNI_ARGS segment is
                // skipped): such an ADD must then DEL cleanly.
                accepted.set(accepted.get() + 1);
                let del = call("DEL");
                prop_assert!(
                    del.ok,
                    "{chosen:?}: DEL after an accepted ADD: {}",
                    del.stdout
                );
                prop_assert_eq!(&lab.host.snapshot(), &before, "{:?}", chosen);
                lab.host.sync_netdevs().unwrap();
                return Ok(());
            }
            rejected.set(rejected.get() + 1);
            prop_assert!(
                add.json["code"].as_u64().is_some(),
                "{chosen:?}: {}",
                add.stdout
            );
            prop_assert_eq!(
                &lab.host.snapshot(),
                &before,
                "{:?}: ADD changed the host",
                chosen
            );
            prop_assert!(
                lab.journals().is_empty(),
                "{:?}: journal {:?}",
                chosen,
                lab.journals()
            );
            prop_assert!(lab.allocations().is_empty(), "{:?}: allocation", chosen);
            prop_assert_eq!(pod.links(), vec!["lo".to_string()], "{:?}", chosen);
            let del = call("DEL");
            prop_assert!(
                del.ok,
                "{:?}: DEL of a rejected ADD failed: {} / {}",
                chosen,
                del.stdout,
                del.stderr
            );
            prop_assert_eq!(
                &lab.host.snapshot(),
                &before,
                "{:?}: DEL changed the host",
                chosen
            );
            Ok(())
        })
        .unwrap();
    let (rejected, accepted) = (rejected.get(), accepted.get());
    assert!(
        rejected >= 30,
        "only {rejected} of 48 inputs were rejected ({accepted} accepted)"
    );
}
