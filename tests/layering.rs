//! The crate's top-level modules form no circle (issue 43): each module's code names
//! other top-level modules only through `crate::<module>` paths, and following those
//! references never leads back to where it started. `cli` (the entry: parse and
//! dispatch) is named by no module, and `process` (start time, held signals, the
//! per-call log) names none of the layers that use it.
//!
//! Read from the sources: comments (doc links included) are not references.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn rust_files(p: &Path, out: &mut Vec<std::path::PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            rust_files(&e.unwrap().path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

/// Top-level module -> the top-level modules its code names as `crate::<name>`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?.to_string();
            match n.strip_suffix(".rs") {
                Some(m) if m != "main" && m != "lib" => Some(m.to_string()),
                None if p.is_dir() && n != "bin" => Some(n),
                _ => None,
            }
        })
        .collect();
    let mut g = BTreeMap::new();
    for m in &mods {
        let mut files = Vec::new();
        let dir = src.join(m);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(src.join(format!("{m}.rs")));
        }
        let mut deps = BTreeSet::new();
        for f in files {
            for line in std::fs::read_to_string(&f).unwrap().lines() {
                let code = line.split("//").next().unwrap_or("");
                let mut rest = code;
                while let Some(i) = rest.find("crate::") {
                    rest = &rest[i + "crate::".len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if name != *m && mods.contains(&name) {
                        deps.insert(name);
                    }
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// A circle through `from`, if any (depth-first search).
fn circle(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn go(
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        let u = path.last().unwrap().clone();
        for v in g.get(&u).into_iter().flatten() {
            if let Some(i) = path.iter().position(|p| p == v) {
                let mut c = path[i..].to_vec();
                c.push(v.clone());
                return Some(c);
            }
            if done.insert(v.clone()) {
                path.push(v.clone());
                if let Some(c) = go(g, path, done) {
                    return Some(c);
                }
                path.pop();
            }
        }
        None
    }
    go(g, &mut vec![from.to_string()], &mut BTreeSet::new())
}

#[test]
fn top_level_modules_form_no_circle() {
    let g = graph();
    assert!(g.len() > 10, "modules found: {:?}", g.keys());
    for m in g.keys() {
        if let Some(c) = circle(&g, m) {
            panic!("a circle of imports: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_entry_is_named_by_no_module_and_process_by_no_layer_above_it() {
    let g = graph();
    let naming_cli: Vec<&String> = g
        .iter()
        .filter(|(_, d)| d.contains("cli"))
        .map(|(m, _)| m)
        .collect();
    assert!(
        naming_cli.is_empty(),
        "modules importing from cli: {naming_cli:?}"
    );
    let p = &g["process"];
    for above in ["cli", "plugin", "doctor", "ipam_plugin", "exporter", "top"] {
        assert!(!p.contains(above), "process imports from {above}: {p:?}");
    }
    for user in ["plugin", "ipam_plugin"] {
        assert!(g[user].contains("process"), "{user} does not use process");
    }
}

#[test]
fn the_checker_sees_a_planted_circle() {
    // The search itself: a -> b -> c -> a is found, a -> b -> c is not.
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let e = |g: &mut BTreeMap<String, BTreeSet<String>>, a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
    };
    e(&mut g, "a", "b");
    e(&mut g, "b", "c");
    assert_eq!(circle(&g, "a"), None);
    e(&mut g, "c", "a");
    assert_eq!(
        circle(&g, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
