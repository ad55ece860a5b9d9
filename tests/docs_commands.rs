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

/// Issue 51 item 5: no script names a Debian mirror host in the apt sources it writes
/// (`deb http://deb.debian.org/... bookworm-backports main` was written by
/// scripts/deps.sh and scripts/kernel-lab.sh); the mirror is the one of the machine's own
/// Debian sources (scripts/debian-sources.sh `debian_uri`). Every line of scripts/ and
/// .ci/ is checked for a one-line source with a literal URI (`deb http...`,
/// `deb-src http...`, `deb [opts] http...`), a deb822 `URIs: http...` and the host
/// `deb.debian.org` itself; comments are not exempt (a comment's source line is copied).
#[test]
fn no_script_writes_a_mirror_host_into_apt_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["scripts", ".ci"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .filter(|w| !w.is_empty())
                .collect();
            let literal_source = words.windows(2).any(|w| {
                (w[0] == "deb" || w[0] == "deb-src" || w[0] == "URIs:" || w[0].ends_with(']'))
                    && w[1].contains("://")
            });
            if literal_source || line.contains("deb.debian.org") {
                found.push(format!(
                    "{}:{}: {}",
                    f.strip_prefix(root).unwrap().display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    assert!(found.is_empty(), "{found:#?}");
}

/// `debian_uri SUITE` (scripts/debian-sources.sh) reads the machine's own sources,
/// deb822 (`/etc/apt/sources.list.d/*.sources`) and one-line (`sources.list`, `*.list`):
/// a release suite gets the URI of a release source, a `*-security` suite that of a
/// security source; comments and `Enabled: no` stanzas are skipped; with no Debian
/// source it fails with a message (it never falls back to a host of its own).
#[test]
fn the_mirror_comes_from_the_machine_s_own_debian_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = |etc: &Path, suites: &str| -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". scripts/debian-sources.sh && for s in {suites}; do debian_uri $s || exit 1; done"
            ))
            .current_dir(root)
            .env("DEBIAN_SOURCES_ROOT", etc)
            .output()
            .expect("bash")
    };
    let write = |d: &Path, name: &str, body: &str| {
        let p = d.join("etc/apt").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    // deb822, as Debian 12's installer writes it (and this machine has).
    let d822 = tempfile::tempdir().unwrap();
    write(
        d822.path(),
        "sources.list.d/debian.sources",
        "Types: deb\n# http://snapshot.example/archive/debian/20250520T000000Z\n\
         URIs: http://mirror-a.example/debian\nSuites: bookworm bookworm-updates\n\
         Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
         Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n\n\
         Types: deb\nURIs: https://mirror-a.example/debian-security\n\
         Suites: bookworm-security\nComponents: main\n",
    );
    let out = run(
        d822.path(),
        "bookworm-backports trixie-backports bullseye-security",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://mirror-a.example/debian\nhttp://mirror-a.example/debian\n\
         https://mirror-a.example/debian-security\n"
    );
    // One-line sources.list, with options.
    let d1 = tempfile::tempdir().unwrap();
    write(
        d1.path(),
        "sources.list",
        "# deb http://commented.example/debian bookworm main\n\
         deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror-b.example/debian bookworm main\n\
         deb http://mirror-b.example/debian-security bookworm-security main\n",
    );
    let out = run(d1.path(), "bookworm-backports bullseye-security");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://mirror-b.example/debian\nhttp://mirror-b.example/debian-security\n"
    );
    // No Debian source at all: an error naming where it looked, no guess.
    let none = tempfile::tempdir().unwrap();
    write(none.path(), "sources.list", "# nothing\n");
    let out = run(none.path(), "bookworm-backports");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(
        text(&out).contains("no Debian release source"),
        "{}",
        text(&out)
    );
}
