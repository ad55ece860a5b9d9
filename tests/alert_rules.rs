//! The shipped alerts (issue 52): conf/ib-sriov-alerts.rules.yml passes
//! `promtool check rules`, its unit tests (tests/promtool/alerts.test.yml) pass
//! `promtool test rules` with every alert tested firing and not firing, the
//! PrometheusRule conf/ib-sriov-prometheusrule.yaml holds exactly its groups, every alert
//! names a runbook section of docs/operations.md, and every metric an alert reads is one
//! the exporter serves. promtool comes with Debian's `prometheus` package (scripts/deps.sh
//! test): without it these tests fail, never skip. Needs no root.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

const RULES: &str = "conf/ib-sriov-alerts.rules.yml";
const OPERATOR: &str = "conf/ib-sriov-prometheusrule.yaml";
const UNIT_TESTS: &str = "tests/promtool/alerts.test.yml";

/// `promtool ARGS` in the repository: its output (stdout then stderr); panics when
/// promtool cannot be run (Debian package `prometheus`) or fails.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool (Debian package prometheus, scripts/deps.sh test) cannot run: {e}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    println!("$ promtool {}\n{text}", args.join(" "));
    text
}

/// The alert names of a rules file, in order.
fn alerts(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|a| a.trim().to_string())
        .collect()
}

#[test]
fn promtool_checks_the_rules_file() {
    let out = promtool(&["check", "rules", RULES]);
    let n = alerts(&read(RULES)).len();
    assert!(n >= 10, "{n} alerts");
    assert!(out.contains(&format!("SUCCESS: {n} rules found")), "{out}");
}

/// Every alert has a unit test where it fires (`exp_alerts` with an `exp_labels`) and
/// one where it must not (`exp_alerts: []`), and promtool passes them all.
#[test]
fn promtool_unit_tests_pass_and_cover_every_alert_firing_and_not() {
    let tests = read(UNIT_TESTS);
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    for a in alerts(&read(RULES)) {
        let (mut fires, mut silent) = (false, false);
        for (i, l) in lines.iter().enumerate() {
            if *l != format!("alertname: {a}") {
                continue;
            }
            match lines.get(i + 1) {
                Some(&"exp_alerts: []") => silent = true,
                Some(&"exp_alerts:") => {
                    fires |= lines
                        .get(i + 2)
                        .is_some_and(|n| n.starts_with("- exp_labels:"))
                }
                other => panic!("{UNIT_TESTS}: alertname: {a} followed by {other:?}"),
            }
        }
        assert!(fires, "{UNIT_TESTS}: no test where {a} fires");
        assert!(silent, "{UNIT_TESTS}: no test where {a} does not fire");
    }
    let out = promtool(&["test", "rules", UNIT_TESTS]);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The PrometheusRule is the plain file's `groups:`, indented under `spec:`
/// (scripts/prometheusrule.sh), and promtool accepts what it holds.
#[test]
fn the_prometheusrule_holds_the_same_groups_as_the_plain_file() {
    let plain = read(RULES);
    let op = read(OPERATOR);
    for want in [
        "apiVersion: monitoring.coreos.com/v1\n",
        "kind: PrometheusRule\n",
        "\nspec:\n",
    ] {
        assert!(op.contains(want), "{OPERATOR}: no {want:?}");
    }
    let spec: String = op
        .split_once("\nspec:\n")
        .unwrap()
        .1
        .lines()
        .map(|l| {
            let d = l.strip_prefix("  ").unwrap_or(l);
            assert!(
                l.is_empty() || l.starts_with("  "),
                "{OPERATOR}: a line outside spec after it: {l:?}"
            );
            format!("{d}\n")
        })
        .collect();
    let groups = &plain[plain.find("\ngroups:\n").expect("groups:") + 1..];
    assert!(
        spec == groups,
        "{OPERATOR} differs from {RULES}: run scripts/prometheusrule.sh"
    );
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("spec.rules.yml");
    std::fs::write(&f, &spec).unwrap();
    promtool(&["check", "rules", &f.to_string_lossy()]);
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to `-`, punctuation but
/// `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every alert has a `runbook_url` naming a section of docs/operations.md, and that
/// section names the alert.
#[test]
fn every_alert_has_a_runbook_section() {
    let docs = read("docs/operations.md");
    let anchors: Vec<String> = docs
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let rules = read(RULES);
    for block in rules.split("- alert: ").skip(1) {
        let name = block.lines().next().unwrap().trim();
        let url = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("runbook_url: "))
            .unwrap_or_else(|| panic!("{name}: no runbook_url"))
            .trim_matches('"');
        let a = url
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{name}: runbook_url {url} not in docs/operations.md"));
        assert!(
            anchors.iter().any(|x| x == a),
            "{name}: no section #{a} in docs/operations.md"
        );
        assert!(
            docs.contains(&format!("### {name}\n")) || docs.contains(&format!("`{name}`")),
            "docs/operations.md never names {name}"
        );
    }
}

/// Every `ib_sriov_*` metric the alerts read is one the exporter serves: its name
/// (without the `_total`, `_count`, `_bucket` suffix the encoder adds) is a string in
/// src/ib-sriovctl/exporter/.
#[test]
fn every_metric_an_alert_reads_is_served() {
    let mut src = String::new();
    for e in std::fs::read_dir(repo("src/ib-sriovctl/exporter")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            src.push_str(&std::fs::read_to_string(p).unwrap());
        }
    }
    let rules = read(RULES);
    let mut seen = 0;
    for (i, _) in rules.match_indices("ib_sriov_") {
        let tok: String = rules[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let base = ["_total", "_count", "_bucket", "_sum"]
            .iter()
            .find_map(|s| tok.strip_suffix(s))
            .unwrap_or(&tok);
        assert!(
            src.contains(&format!("\"{base}\"")),
            "{RULES} reads {tok}, which src/ib-sriovctl/exporter/ never names"
        );
        seen += 1;
    }
    assert!(seen >= 10, "{seen}");
}
