//! The CNI binary links none of the node tools (issue 53): `ib-sriov`, which the
//! runtime runs as root on every pod start and stop, carries no HTTP server
//! (tiny_http), no Prometheus encoder (prometheus-client), no terminal UI (ratatui),
//! none of the doctor's parsers (saphyr, toml) and not the tools crate itself
//! (`ib-sriovctl`, src/ib-sriovctl). Checked on the package's dependency graph as Cargo
//! resolves it (`cargo tree -p ib-sriov-cni -e normal,build`, dev-dependencies left
//! out: they never reach a binary), with the feature sets CI builds (none; `failpoints`).

use std::process::Command;

/// Crates only the node tools may link.
const TOOLS_ONLY: &[&str] = &[
    "ib-sriovctl",
    "tiny_http",
    "prometheus-client",
    "ratatui",
    "crossterm",
    "saphyr",
    "toml",
];

/// The package names in `cargo tree -p ib-sriov-cni -e normal,build` with `features`.
fn cni_tree(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "tree",
        "--locked",
        "--offline",
        "-p",
        "ib-sriov-cni",
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let out = cmd.output().expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("cargo tree prints UTF-8")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn the_cni_binary_links_none_of_the_node_tools() {
    for features in [&[][..], &["failpoints"][..]] {
        let tree = cni_tree(features);
        assert!(
            tree.iter().any(|p| p == "ib-sriov-cni") && tree.iter().any(|p| p == "nix"),
            "cargo tree printed no graph with features {features:?}: {tree:?}"
        );
        let bad: Vec<&String> = tree
            .iter()
            .filter(|p| TOOLS_ONLY.contains(&p.as_str()))
            .collect();
        assert!(
            bad.is_empty(),
            "the CNI package (features {features:?}) depends on {bad:?}, which only the node tools (src/ib-sriovctl) may link"
        );
    }
}
