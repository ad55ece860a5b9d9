//! The crate's top-level modules form no circle (issue 43): each module's code names
//! other top-level modules only through `crate::<module>` paths, and following those
//! references never leads back to where it started. `cli` (the entry: parse and
//! dispatch) is named by no module, and `process` (start time, held signals, the
//! per-call log) names none of the layers that use it.
//!
//! Read from the sources: comments (doc links included) are not references.
//!
//! Inside each folder of src/ (issue 53) the modules form no circle either: a module of
//! folder `src/f/` (a file `f/x.rs`, or a folder `f/x/` with everything in it) names a
//! sibling `y` through `super::y` (as many `super::` as it is deep below `f`), through
//! `crate::f::y`, through a `use` group (`use super::{y, z::T}`), or through an item
//! `f/mod.rs` imports from `y` (`pub use y::T;` makes `super::T` name `y`). The
//! folder's own `mod.rs` is above its modules and is not one of them.

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

/// The folder of the node tools' crate (`ib-sriovctl`): a crate of its own inside src/,
/// whose modules are not the library's.
const TOOLS: &str = "src/ib-sriovctl";

/// Whether `dir` is the root of a member crate (holds a Cargo.toml).
fn is_crate(dir: &Path) -> bool {
    dir.join("Cargo.toml").is_file()
}

/// The library's top-level module -> the top-level modules its code names as
/// `crate::<name>`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// [`graph`] of the crate whose root folder is `src` (its `lib.rs`/`main.rs` beside the
/// modules; `bin/` and member crates' folders are no modules of it).
fn graph_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = src.to_path_buf();
    let mods: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?.to_string();
            match n.strip_suffix(".rs") {
                Some(m) if m != "main" && m != "lib" => Some(m.to_string()),
                None if p.is_dir() && n != "bin" && !is_crate(&p) => Some(n),
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

/// The node tools' crate (src/ib-sriovctl) stands above the library: its modules (doctor,
/// exporter, top) form no circle, the library's modules are all it names besides them
/// (through its re-exports, `crate::plugin`), and no code of the library names the
/// tools crate (`ib_sriovctl`) nor one of its modules.
#[test]
fn the_tools_crate_stands_above_the_library() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tools = graph_of(&root.join(TOOLS));
    assert_eq!(
        tools.keys().map(String::as_str).collect::<Vec<_>>(),
        ["doctor", "exporter", "top"],
        "the tools crate's modules"
    );
    for m in tools.keys() {
        if let Some(c) = circle(&tools, m) {
            panic!("a circle of imports in {TOOLS}: {}", c.join(" -> "));
        }
    }
    let lib = graph();
    for m in ["doctor", "exporter", "top"] {
        assert!(!lib.contains_key(m), "the library has a module {m}");
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(root.join("src")).unwrap() {
        let p = e.unwrap().path();
        if !is_crate(&p) {
            rust_files(&p, &mut files);
        }
    }
    assert!(files.len() > 50, "library files: {}", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = code_of(&text);
        for bad in [
            "ib_sriovctl",
            "crate::doctor",
            "crate::exporter",
            "crate::top::",
        ] {
            assert!(!code.contains(bad), "{}: names {bad}", f.display());
        }
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

/// The code of a Rust file, comments (doc comments too) removed, joined on one line.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push(' ');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let n = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..n]
}

/// The first name of each item a path names after `rest` (`x::..` or a group
/// `{x::.., y, z as w}`), in order.
fn first_names(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident_at(rest).to_string()];
    };
    let (mut depth, mut out, mut item_start) = (0usize, Vec::new(), true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                item_start = false;
                out.push(ident_at(&group[i..]).to_string());
            }
            _ => {}
        }
    }
    out
}

/// Every path in `code` starting with `prefix` (not itself the tail of a longer path):
/// the first names after it.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].trim_end();
        let starts = i == 0
            || !(before.ends_with("::")
                || code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'));
        if starts {
            out.extend(first_names(&code[i + prefix.len()..]));
        }
    }
    out
}

/// The modules of folder `dir` (below `src`) -> the sibling modules each names.
fn folder_graph(src: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut mods: BTreeMap<String, Vec<(std::path::PathBuf, usize)>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            let mut files = Vec::new();
            rust_files(&p, &mut files);
            // How deep below `dir` each file's module is: f/x/mod.rs is x (1),
            // f/x/y.rs is x::y (2).
            let files = files
                .into_iter()
                .map(|f| {
                    let rel = f.strip_prefix(dir).unwrap();
                    let deep = rel.components().count() - usize::from(f.ends_with("mod.rs"));
                    (f, deep)
                })
                .collect();
            mods.insert(n, files);
        } else if let Some(m) = n.strip_suffix(".rs").filter(|m| *m != "mod") {
            mods.insert(m.to_string(), vec![(p, 1)]);
        }
    }
    // `crate::a::b::` for src/a/b.
    let rel = dir.strip_prefix(src).unwrap();
    let mut crate_path = String::from("crate::");
    for c in rel.components() {
        crate_path.push_str(c.as_os_str().to_str().unwrap());
        crate_path.push_str("::");
    }
    // Items the folder's mod.rs re-exports from a sibling: `pub use y::{T, U as V};`.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("mod.rs")) {
        for stmt in code_of(&text).split(';') {
            let stmt = stmt.trim();
            // A `use` of mod.rs, private or not: its modules see both.
            let Some(at) = stmt.find("use ").filter(|&i| {
                let head = stmt[..i].rsplit(['}', ']']).next().unwrap_or("").trim();
                matches!(head, "" | "pub" | "pub(crate)" | "pub(super)")
            }) else {
                continue;
            };
            let path = stmt[at + 4..].trim().trim_start_matches("self::");
            let from = ident_at(path);
            if !mods.contains_key(from) {
                continue;
            }
            let rest = &path[from.len()..];
            let Some(rest) = rest.strip_prefix("::") else {
                continue;
            };
            let items: Vec<&str> = match rest.trim().strip_prefix('{') {
                Some(g) => g.trim_end_matches('}').split(',').collect(),
                None => vec![rest],
            };
            for item in items {
                let last = item.trim().rsplit("::").next().unwrap_or("");
                let name = last.rsplit(" as ").next().unwrap_or("").trim();
                if !name.is_empty() && name != "*" {
                    reexported.insert(name.to_string(), from.to_string());
                }
            }
        }
    }
    let mut g = BTreeMap::new();
    for (m, files) in &mods {
        let mut deps = BTreeSet::new();
        for (f, deep) in files {
            let code = code_of(&std::fs::read_to_string(f).unwrap());
            let mut named = names_after(&code, &"super::".repeat(*deep));
            // One `super::` more would be the folder's parent, not a sibling.
            named.retain(|n| n != "super");
            named.extend(names_after(&code, &crate_path));
            for n in named {
                let target = match reexported.get(&n) {
                    Some(from) => from.clone(),
                    None => n,
                };
                if target != *m && mods.contains_key(&target) {
                    deps.insert(target);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// Every folder under `dir`, at any depth.
fn folders(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !is_crate(&p) {
            out.push(p.clone());
            folders(&p, out);
        }
    }
}

/// The circles inside folders of `src`, one per folder that has one, as
/// `folder: a -> b -> a`.
fn folder_circles(src: &Path) -> Vec<String> {
    let mut dirs = Vec::new();
    folders(src, &mut dirs);
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let g = folder_graph(src, &d);
        let rel = d.strip_prefix(src).unwrap().display().to_string();
        let mut seen: BTreeSet<Vec<String>> = BTreeSet::new();
        for m in g.keys() {
            if let Some(mut c) = circle(&g, m) {
                // The same circle found from another of its modules is reported once.
                c.pop();
                let at = c.iter().enumerate().min_by_key(|(_, n)| *n).unwrap().0;
                c.rotate_left(at);
                if seen.insert(c.clone()) {
                    c.push(c[0].clone());
                    out.push(format!("src/{rel}: {}", c.join(" -> ")));
                }
            }
        }
    }
    out
}

#[test]
fn modules_inside_each_folder_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = folder_graph(&src, &src.join("plugin"));
    assert!(
        g.get("add").is_some_and(|d| d.contains("steps")),
        "the checker reads plugin/add.rs naming steps: {g:?}"
    );
    let mut circles = folder_circles(&src);
    // The tools' crate, its own root: `crate::doctor::report` for src/ib-sriovctl/doctor.
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(TOOLS);
    let g = folder_graph(&tools, &tools.join("doctor"));
    assert!(
        g.get("findings").is_some_and(|d| d.contains("report")),
        "the checker reads doctor/findings.rs naming report: {g:?}"
    );
    circles.extend(
        folder_circles(&tools)
            .into_iter()
            .map(|c| format!("{TOOLS}/{c}")),
    );
    assert!(
        circles.is_empty(),
        "circles of imports inside folders:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_folder_checker_sees_planted_circles() {
    let tmp = std::env::temp_dir().join(format!("ib-sriov-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let f = tmp.join("src/f");
    std::fs::create_dir_all(f.join("d")).unwrap();
    let w = |p: &str, s: &str| std::fs::write(f.join(p), s).unwrap();
    w(
        "mod.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\npub use c::{Thing, Other as O};\nuse a::X;\n",
    );
    // a -> b by a use group (over two lines), b -> c by a crate path.
    w(
        "a.rs",
        "use super::{\n    b::B,\n    Ctx,\n};\n// super::d is a comment\n",
    );
    w(
        "b.rs",
        "fn f() { crate::f::c::g(); super::super::other::x(); }\n",
    );
    w("c.rs", "pub struct Thing;\npub struct Other;\n");
    // d (a folder) -> a from its nested file.
    w("d/mod.rs", "mod e;\n");
    w(
        "d/e.rs",
        "use super::super::a::X;\nuse super::sibling_of_e;\n",
    );
    let src = tmp.join("src");
    let g = folder_graph(&src, &f);
    let set = |v: &[&str]| {
        v.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(g["a"], set(&["b"]));
    assert_eq!(g["b"], set(&["c"]));
    assert_eq!(g["c"], set(&[]));
    assert_eq!(g["d"], set(&["a"]));
    assert!(folder_circles(&src).is_empty());
    // c -> a through the item mod.rs re-exports from a (`super::X`): a circle a, b, c.
    w("c.rs", "fn h() -> super::X { todo!() }\n");
    assert_eq!(
        folder_circles(&src),
        vec!["src/f: a -> b -> c -> a".to_string()]
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
