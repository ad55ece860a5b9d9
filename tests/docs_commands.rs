//! The runnable docs (issue 39, docs/testing.md "Runnable docs"): `scripts/docs-test.py`
//! checks every shell block of README.md and docs/*.md and runs those not marked why
//! not; `.ci/run` runs it in full. Here, in the README's test command:
//! - the repository's docs pass its checks without the runs (`--no-run`: every block
//!   labelled, every shell block's syntax, the repository paths it names, its marker);
//! - the checker itself fails on what it must fail on, and passes what it must pass, on
//!   small markdown files run for real (a wrong command, a failing check, a placeholder
//!   left, a skip without a reason, an unlabelled block, a missing script): a checker
//!   that passed everything would let a wrong command through. Needs root (a run is
//!   sandboxed in a private mount namespace).

use std::path::Path;
use std::process::{Command, Output};

fn checker(args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/docs-test.py");
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_docs_pass_the_checks() {
    let out = checker(&["--no-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("0 failure(s)") && !t.contains(" 0 shell blocks checked"),
        "{t}"
    );
}

/// One markdown file per case, run for real: (name, markdown, passes).
#[test]
fn the_checker_fails_a_wrong_command_and_passes_a_right_one() {
    let dir = tempfile::tempdir().unwrap();
    // A `sh` block, and one under a `docs-test` directive.
    let sh = |body: &str| format!("```sh\n{body}\n```\n");
    let under =
        |directive: &str, body: &str| format!("<!-- docs-test: {directive} -->\n{}", sh(body));
    let cases: Vec<(&str, String, bool)> = vec![
        ("right", sh("true\necho fine"), true),
        ("wrong command", sh("no-such-command-ib-sriov --x"), false),
        ("failing later line", sh("true\nfalse\necho never"), false),
        (
            "check passes",
            under("run; check: test -f /opt/cni/bin/x", "touch /opt/cni/bin/x"),
            true,
        ),
        (
            "check fails",
            under("run; check: test -f /opt/cni/bin/y", "touch /opt/cni/bin/x"),
            false,
        ),
        (
            "placeholder given",
            under("run; <word>=fine", "echo <word>"),
            true,
        ),
        ("placeholder left", sh("echo <word>"), false),
        (
            "skip with a reason",
            under("skip: needs a cluster", "kubectl get pods"),
            true,
        ),
        (
            "skip without a reason",
            under("skip", "kubectl get pods"),
            false,
        ),
        ("unlabelled block", "```\nls\n```\n".to_string(), false),
        (
            "text block",
            "```text\nnot run: no-such-command\n```\n".to_string(),
            true,
        ),
        (
            "syntax error in a skipped block",
            under("skip: needs a cluster", "if then fi"),
            false,
        ),
        (
            "missing script in a skipped block",
            under("skip: long", "scripts/no-such-script.sh --x"),
            false,
        ),
    ];
    for (i, (name, md, passes)) in cases.iter().enumerate() {
        let f = dir.path().join(format!("case-{i}.md"));
        std::fs::write(&f, md).unwrap();
        let out = checker(&[f.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(if *passes { 0 } else { 1 }),
            "{name}: {}",
            text(&out)
        );
    }
    // The sandbox kept the runs' files off the machine.
    assert!(
        !Path::new("/opt/cni/bin/x").exists(),
        "a run wrote to the machine's /opt/cni/bin"
    );
}

/// Every doc and manifest that gives `SRIOV_CNI_BIN_PATH`'s directory gives the same,
/// true, one (issue 50: upgrading.md said `/var/lib/cni/bin`, install.md and the canary
/// manifest `/opt/cni/bin`): the operator's own default when the variable is unset (as
/// on OpenShift) is `/var/lib/cni/bin`, and the upstream Helm chart sets it from
/// `operator.cniBinPath`, default `/opt/cni/bin` (k8snetworkplumbingwg/
/// sriov-network-operator 249e2001 `controllers/sriovoperatorconfig_controller.go`,
/// `deployment/sriov-network-operator-chart/values.yaml`). A mention is the 240
/// characters after the name (backticks, `#` comment leaders and line breaks
/// flattened); one that names either directory as a whole path must say both facts.
#[test]
fn sriov_cni_bin_path_defaults_agree_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "conf"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension()
                .is_some_and(|x| x == "md" || x == "yaml" || x == "yml")
            {
                files.push(p);
            }
        }
    }
    files.sort();
    // `p` as a whole path in `t`: not part of a longer one (`/host/opt/cni/bin`).
    let names = |t: &str, p: &str| {
        t.match_indices(p).any(|(i, _)| {
            let before = t[..i].chars().last();
            let after = t[i + p.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '/' || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '/' || c == '_')
        })
    };
    let mut mentions = 0;
    let mut wrong = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let flat: String = text
            .lines()
            .map(|l| l.trim_start().trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join(" ")
            .replace('`', "");
        for (i, _) in flat.match_indices("SRIOV_CNI_BIN_PATH") {
            let end = flat[i..]
                .char_indices()
                .nth(240)
                .map_or(flat.len(), |(j, _)| i + j);
            let window = &flat[i..end];
            if !names(window, "/opt/cni/bin") && !names(window, "/var/lib/cni/bin") {
                continue;
            }
            mentions += 1;
            for fact in [
                "when unset, as on OpenShift: /var/lib/cni/bin",
                "operator.cniBinPath, default /opt/cni/bin",
            ] {
                if !window.contains(fact) {
                    wrong.push(format!(
                        "{}: lacks {fact:?} in {window:?}",
                        f.strip_prefix(root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        mentions >= 3,
        "install.md, upgrading.md and the canary manifest: {mentions}"
    );
}
