//! The node policy for the suites (`src/policy.rs`, docs/configuration.md "Node policy
//! file"). The suites keep their state, IPAM data, logs and GUID files in temporary
//! directories under `/tmp` and `/dev/shm`, outside the default roots, so they widen the
//! policy the way a node's admin does: [`widen_for_tests`] adds those two roots to
//! `extraPathRoots` of the machine's `/etc/ib-sriov/node.json` (what else the file says
//! is kept). The plugin has no switch to skip the policy.
//!
//! A test that needs a policy of its own (narrowed, widened elsewhere, broken) runs the
//! plugin through [`private_node_file`]: in a private mount namespace whose
//! `/etc/ib-sriov` is a directory of the test's, so the machine's file and the other
//! tests are untouched.

use super::script::install_script;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The machine's node file (the plugin's `NODE_FILE`).
pub const NODE_FILE: &str = "/etc/ib-sriov/node.json";

/// The roots the suites add: where `tempfile` and the labs' tmpfs state dirs live.
pub const TEST_ROOTS: &[&str] = &["/tmp", "/dev/shm"];

/// Makes sure the machine's node file lets the suites' temporary paths through (once per
/// test process; atomic, and harmless when several processes do it at once). Panics
/// when the file cannot be written (the suites run as root).
pub fn widen_for_tests() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut roots: Vec<String> = TEST_ROOTS.iter().map(|s| s.to_string()).collect();
        let tmp = std::env::temp_dir();
        if let Some(t) = tmp.to_str().filter(|t| t.starts_with('/')) {
            if !TEST_ROOTS.iter().any(|r| tmp.starts_with(r)) {
                roots.push(t.to_string());
            }
        }
        let mut v: Value = match std::fs::read(NODE_FILE) {
            Ok(b) => serde_json::from_slice(&b)
                .unwrap_or_else(|e| panic!("{NODE_FILE} is not JSON ({e}); fix or remove it")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
            Err(e) => panic!("reading {NODE_FILE}: {e}"),
        };
        let obj = v.as_object_mut().expect("the node file is a JSON object");
        let extra = obj
            .entry("extraPathRoots")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .expect("extraPathRoots is an array");
        let before = extra.len();
        for r in roots {
            if !extra.iter().any(|e| e.as_str() == Some(&r)) {
                extra.push(json!(r));
            }
        }
        if extra.len() == before {
            return;
        }
        let dir = Path::new(NODE_FILE).parent().unwrap();
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {dir:?}: {e}"));
        let tmp = dir.join(format!(".node.json.{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&v).unwrap())
            .unwrap_or_else(|e| panic!("writing {tmp:?}: {e}"));
        std::fs::rename(&tmp, NODE_FILE).unwrap_or_else(|e| panic!("renaming to {NODE_FILE}: {e}"));
    });
}

/// A plugin of its own node file: a directory holding `node.json` (= `node_json`, or no
/// file when `None`) and an executable `ib-sriov` that runs the plugin under test in a
/// private mount namespace whose `/etc/ib-sriov` is that directory (`unshare -m`, a bind
/// mount), so the plugin reads that file as the node's. The machine's file and the other
/// tests are untouched. Returns the directory (removed on drop) and the wrapper's path,
/// to pass where the tests pass the plugin binary.
pub fn private_node_file(node_json: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    widen_for_tests(); // creates /etc/ib-sriov, the mount point
    let dir = tempfile::Builder::new()
        .prefix("ib-sriov-node-")
        .tempdir()
        .unwrap();
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    if let Some(j) = node_json {
        std::fs::write(etc.join("node.json"), j).unwrap();
    }
    let wrapper = install_script(dir.path(), "ib-sriov", &format!(
            "#!/bin/sh\nexec unshare --mount --propagation private sh -c 'mount --bind \"$0\" /etc/ib-sriov && exec \"$@\"' '{}' '{}' \"$@\"\n",
            etc.display(),
            super::lab::bin().display()
        ));
    (dir, wrapper)
}
