//! docs/design.md "Layout" stays true (issue 43): its `text` block names every source
//! file under src/ and names no file that is gone.
//!
//! The block is a list of entries, each starting at column 0 with a path (`src/cli.rs`,
//! `src/plugin/steps/`) and going on in indented lines. A file `src/a/b/c.rs` is named
//! when the block holds its full path, or when an entry whose path is its directory
//! `src/a/b/` mentions `c.rs`. Every `.rs` name in an entry of src/ resolves the same
//! way (a full `src/...` path as it is; any other name relative to the entry's
//! directory), and each must be a file: a name left behind by a move or a removal fails.

use std::collections::BTreeSet;
use std::path::Path;

/// Every `.rs` file under `dir`, as paths relative to `root` with `/` separators.
fn rust_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_str().unwrap();
            out.insert(rel.replace('\\', "/"));
        }
    }
}

/// The ```` ```text ```` block of the section "## Layout" of a design document.
///
/// Panics when the section or its block is missing or unterminated.
fn layout_block(doc: &str) -> &str {
    let at = doc
        .match_indices("## Layout\n")
        .map(|(i, _)| i)
        .find(|&i| i == 0 || doc[..i].ends_with('\n'))
        .expect("a section \"## Layout\"");
    let section = &doc[at..];
    let open = section
        .find("```text\n")
        .expect("a ```text block in \"## Layout\"")
        + 8;
    let len = section[open..]
        .find("\n```")
        .expect("the Layout block is closed");
    &section[open..open + len + 1]
}

/// The block's entries: (the path at column 0, the whole entry's text).
fn entries(block: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for line in block.lines() {
        match out.last_mut() {
            Some((_, text)) if line.starts_with(char::is_whitespace) || line.is_empty() => {
                text.push('\n');
                text.push_str(line);
            }
            _ => {
                let head = line.split_whitespace().next().unwrap_or_default();
                out.push((head, line.to_string()));
            }
        }
    }
    out
}

/// The `.rs` names an entry's text mentions: words of letters, digits, `_`, `.`, `/`,
/// `-`, with a sentence's final `.` dropped, that end in `.rs`.
fn rs_names(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.len() > 3 && w.ends_with(".rs"))
        .collect()
}

/// The files of src/ a Layout block names: every full `src/...` path anywhere in it, and
/// in an entry of src/ every bare `.rs` name (no `/`), in the entry's directory (the
/// entry's path when it ends in `/`, else the directory of the file it names). Other
/// paths (`tests/layering.rs`, `steps/netdev.rs`) name nothing here.
fn named(block: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (head, text) in entries(block) {
        let dir = match head.rfind('/') {
            Some(i) if head.starts_with("src/") => Some(&head[..=i]),
            _ => None,
        };
        for name in rs_names(&text) {
            if name.starts_with("src/") {
                out.insert(name.to_string());
            } else if let (Some(dir), false) = (dir, name.contains('/')) {
                out.insert(format!("{dir}{name}"));
            }
        }
    }
    out
}

/// (files of `files` the block does not name, names of the block that are no file).
/// Only names under src/ are checked against `files`: `tests/layering.rs` and the like
/// are not source files of the crate.
fn check(block: &str, files: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let named = named(block);
    let missing = files.difference(&named).cloned().collect();
    let stale = named
        .iter()
        .filter(|n| n.starts_with("src/") && !files.contains(*n))
        .cloned()
        .collect();
    (missing, stale)
}

#[test]
fn the_layout_names_every_source_file_and_no_gone_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeSet::new();
    rust_files(root, &root.join("src"), &mut files);
    assert!(files.len() > 50, "src/ read: {files:?}");
    let doc = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
    let (missing, stale) = check(layout_block(&doc), &files);
    assert!(
        missing.is_empty(),
        "docs/design.md \"Layout\" does not name these files (add each, with what it \
         holds, to its directory's entry): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/design.md \"Layout\" names files that do not exist: {stale:?}"
    );
}

#[test]
fn the_checker_sees_a_missing_and_a_stale_name() {
    let files: BTreeSet<String> = [
        "src/main.rs",
        "src/a/mod.rs",
        "src/a/b.rs",
        "src/a/c/d.rs",
        "src/e.rs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let doc = "# x\n\n## Layout\n\n```text\n\
        src/main.rs  the executable (src/e.rs the rest)\n\
        src/a/       a: mod.rs the layer;\n             b.rs (the b).\n\
        src/a/c/d.rs  d\n\
        tests/       t.rs mod.rs\n```\n\n## Next\n";
    assert_eq!(check(layout_block(doc), &files), (vec![], vec![]));

    // d.rs mentioned under src/a/ is not src/a/c/d.rs; mod.rs under tests/ is not
    // src/a/mod.rs; b.rs after the next column-0 entry does not count.
    let doc2 = "## Layout\n```text\nsrc/main.rs  x\nsrc/a/  mod.rs d.rs\nsrc/e.rs\n\
        tests/  b.rs mod.rs src/a/c/d.rs\n```\n";
    assert_eq!(
        check(layout_block(doc2), &files),
        (
            vec!["src/a/b.rs".to_string()],
            vec!["src/a/d.rs".to_string()]
        )
    );
}
