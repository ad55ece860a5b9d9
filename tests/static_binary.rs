//! The shipped binaries are static: no ELF interpreter (`PT_INTERP`), no needed shared
//! library (`DT_NEEDED`), no glibc symbol version, so one `ib-sriov` runs on every node
//! OS (glibc 2.17 on Amazon Linux 2, 2.28 on RHEL 8, 2.31 on Ubuntu 20.04) whatever the
//! build machine's glibc.
//!
//! Checked three ways: our own reading of the ELF program headers and dynamic section
//! (ELF-64 layout from the System V gABI, `<elf.h>`: `PT_INTERP` = 3, `PT_DYNAMIC` = 2,
//! `DT_NEEDED` = 1), `file` (must say "static-pie linked" or "statically linked"), and
//! `objdump -T` (must list no `GLIBC_` version). Then each binary runs with an empty
//! environment.
//!
//! Against the binaries cargo built for the tests (scripts/test.sh builds them the way
//! scripts/build.sh builds the release: `-C target-feature=+crt-static`), or the files
//! named by `IB_SRIOV_BIN` / `THIN_ENTRYPOINT_BIN` (scripts/image-test.sh: the binaries
//! taken out of the image). A plain `cargo test` builds dynamic binaries, and this test
//! then fails, naming scripts/test.sh.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn thin_entrypoint() -> PathBuf {
    match std::env::var_os("THIN_ENTRYPOINT_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_thin_entrypoint")),
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// What the ELF headers say about dynamic linking: (has `PT_INTERP`, count of
/// `DT_NEEDED` entries). Only ELF-64 little-endian (x86_64, aarch64) is read.
fn elf_dynamic_facts(path: &Path) -> (bool, usize) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
    assert_eq!(&b[..4], b"\x7fELF", "{path:?} is not ELF");
    assert_eq!(b[4], 2, "{path:?}: not ELFCLASS64");
    assert_eq!(b[5], 1, "{path:?}: not little-endian");
    let phoff = u64_at(&b, 0x20) as usize;
    let phentsize = u16_at(&b, 0x36) as usize;
    let phnum = u16_at(&b, 0x38) as usize;
    let mut interp = false;
    let mut needed = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(&b, ph) {
            3 => interp = true,
            2 => {
                // The dynamic section, found through its file offset and size.
                let off = u64_at(&b, ph + 0x08) as usize;
                let size = u64_at(&b, ph + 0x20) as usize;
                for e in (off..off + size).step_by(16) {
                    match u64_at(&b, e) {
                        0 => break, // DT_NULL
                        1 => needed += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    (interp, needed)
}

fn tool(cmd: &str, args: &[&str], path: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (scripts/deps.sh test installs file and binutils)"));
    assert!(out.status.success(), "{cmd} {path:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bin --version` with an empty environment: exits 0 and prints `<name>
/// version:<the library's version>, commit:...`; returns that line.
fn version_line(bin: &Path, name: &str) -> String {
    let out = Command::new(bin)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.starts_with(&format!(
            "{name} version:{}, commit:",
            ib_sriov_cni::version()
        )),
        "{line}"
    );
    line
}

fn assert_static(path: &Path) {
    let (interp, needed) = elf_dynamic_facts(path);
    assert!(
        !interp && needed == 0,
        "{path:?} is dynamically linked (PT_INTERP: {interp}, DT_NEEDED entries: {needed}); \
         build with scripts/build.sh / run the tests with scripts/test.sh (crt-static)"
    );
    let file = tool("file", &["-b"], path);
    assert!(
        file.contains("static-pie linked") || file.contains("statically linked"),
        "file {path:?}: {file}"
    );
    let dynsyms = tool("objdump", &["-T"], path);
    assert!(
        !dynsyms.contains("GLIBC_"),
        "objdump -T {path:?} lists glibc symbol versions:\n{dynsyms}"
    );
}

#[test]
fn plugin_is_static_and_runs_with_an_empty_environment() {
    let bin = common::lab::bin();
    assert_static(bin);
    let out = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cniVersion"], "1.1.0", "{v}");
    let line = version_line(bin, "ib-sriov cni");
    // Not a release (scripts/release.sh sets IB_SRIOV_VERSION): X.Y.Z-dev+g<commit>,
    // the commit the line names too (a build from a git checkout, as CI's).
    if std::env::var_os("IB_SRIOV_VERSION").is_none() {
        let commit = line
            .split("commit:")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert_eq!(
            ib_sriov_cni::version(),
            format!("{}-dev+g{commit}", env!("CARGO_PKG_VERSION")),
            "{line}"
        );
        assert!(
            commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "{line}"
        );
    }
}

/// The node tools' binary (`ib-sriovctl`, beside the plugin as in the image) is static
/// too, answers `--version` with the plugin's version, and the plugin runs it for
/// `ib-sriov doctor --help` with an empty environment (found beside itself, no `PATH`).
#[test]
fn tools_binary_is_static_and_the_plugin_runs_it() {
    let tools = common::lab::tools_bin();
    assert_static(&tools);
    version_line(&tools, "ib-sriovctl");
    let out = Command::new(common::lab::bin())
        .args(["doctor", "--help"])
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("usage: ib-sriov doctor"),
        "{out:?}"
    );
}

#[test]
fn thin_entrypoint_is_static_and_runs_with_an_empty_environment() {
    let bin = thin_entrypoint();
    assert_static(&bin);
    let out = Command::new(&bin)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let usage =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(usage.contains("cni-bin-dir"), "{usage}");
}

/// The check itself can fail: a dynamically linked binary of this machine is caught.
#[test]
fn a_dynamic_binary_is_caught() {
    let sh = Path::new("/bin/sh");
    let (interp, needed) = elf_dynamic_facts(&std::fs::canonicalize(sh).unwrap());
    assert!(
        interp && needed > 0,
        "/bin/sh: interp {interp}, needed {needed}"
    );
    let r = std::panic::catch_unwind(|| assert_static(sh));
    assert!(r.is_err(), "assert_static accepted /bin/sh");
}
