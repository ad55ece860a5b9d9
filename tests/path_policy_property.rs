//! The property of the node policy (issue 40; src/policy.rs): for any configuration, the
//! set of files the plugin creates or writes outside the allowed roots is empty.
//!
//! Each generated configuration (seeded, [`CASES`] of them, `IB_SRIOV_POLICY_CASES`
//! changes the count and `IB_SRIOV_POLICY_SEED` the seed) gives each path key (`logFile`,
//! `stateDir`, `ipam.dataDir`, `goCacheDir`, `guidFile`, `runtimeConfig.CNIDeviceInfoFile`)
//! a value or none, drawn from: paths in the allowed roots (`/run`, `/var/run`,
//! `/var/lib/cni`, `/var/log`, and `/tmp`, `/dev/shm`, which the suites' node file adds);
//! paths elsewhere (`/etc`, `/root`, `/usr/local`, `/var`, `/opt`, `/srv`, `/home`,
//! `/dev`, `/proc/self/cwd`, `/sys`); `..`, `.`, `//` and relative forms; links planted
//! in an allowed root that lead out (to an existing bait directory in `/etc`, or
//! dangling) or stay in; and values of the wrong JSON type. The real plugin runs ADD and
//! then DEL of it on the emulated host (every tenth case also GC and STATUS, cniVersion
//! 1.1.0) under `strace -f`, and every successful system call that creates, writes,
//! renames, links, removes or changes the mode or owner of a file is checked: its path,
//! resolved (the kernel's own path of a returned descriptor, else the argument with its
//! existing part's links resolved), must lie beneath an allowed root or one of the
//! kernel interfaces the plugin names itself, never a configuration
//! ([`PLUGIN_OWN`]: the pod's IPv6 sysctls under `/proc/sys/net`, `/dev/null`). The bait
//! directories must stay empty. Needs root and strace (scripts/deps.sh test).

mod common;

use common::lab::{bin, Lab, Run};
use common::rng::Rng;
use common::script::install_script;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Configurations per run, unless `IB_SRIOV_POLICY_CASES` says otherwise.
const CASES: u64 = 10_000;

/// The roots a write may land in: the plugin's defaults and what the suites' node file
/// adds (tests/common/policy.rs).
const ALLOWED: &[&str] = &[
    "/run",
    "/var/run",
    "/var/lib/cni",
    "/var/log",
    "/tmp",
    "/dev/shm",
];

/// What the plugin writes on its own account, named by no configuration: the sysctls of
/// the pod's interface (IPv6 DAD and address settings, in the pod's netns) and the null
/// device (a child's stdio).
const PLUGIN_OWN: &[&str] = &["/proc/sys/net", "/dev/null"];

/// The system calls that create, write or change a file (strace names).
const TRACED: &str = "open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,symlink,symlinkat,unlink,unlinkat,rmdir,truncate,chmod,fchmodat,chown,fchownat,lchown,mknod,mknodat,utimensat,setxattr,lsetxattr,removexattr,lremovexattr";

/// The 23 path bases [`World::path`] draws from, `{t}` standing for the tag and `{tmp}`
/// for the temporary directory. Allowed roots (the first 8; `{tmp}/in` is a link to
/// `{tmp}/real`), then elsewhere (`{tmp}/out` is a link to the bait directory in /etc,
/// `{tmp}/dangling` a link to a missing directory in /etc).
const BASES: &str = "\
    /run/{t} /var/run/{t} /var/lib/cni/{t} /var/log/{t} {tmp}/plain /dev/shm/{t} {tmp}/in \
    /run/{t}/./c//d \
    /etc/{t} /root/{t} /usr/local/{t} /var/{t} /opt/{t} /srv/{t} /home/{t} /dev/{t} \
    /proc/self/cwd/{t} /sys/kernel/{t} {tmp}/out {tmp}/dangling /run/{t}/../../etc/{t} \
    /runx/{t} run/{t}";

struct World {
    tag: String,
    tmp: PathBuf,
    bait: PathBuf,
    cwd: PathBuf,
}

impl World {
    /// One path value for a key whose file is `leaf`.
    fn path(&self, rng: &mut Rng, leaf: &str) -> Value {
        let t = &self.tag;
        let tmp = self.tmp.display();
        let sub = ["", "a", "a/b", "x.d/y"][rng.below(4) as usize];
        let Some(base) = BASES.split_whitespace().nth(rng.below(24) as usize) else {
            return match rng.below(4) {
                0 => json!(""),
                1 => json!(7),
                2 => json!(null),
                _ => json!(["/run"]),
            };
        };
        let base = base.replace("{t}", t).replace("{tmp}", &tmp.to_string());
        let mut p = base;
        if !sub.is_empty() {
            p = format!("{p}/{sub}");
        }
        if !leaf.is_empty() {
            p = format!("{p}/{leaf}");
        }
        if rng.chance(5) {
            p.push('/');
        }
        json!(p)
    }

    fn conf(&self, lab: &Lab, rng: &mut Rng, n: u64, version: &str) -> Value {
        let mut c = lab.conf(version, 0);
        c["name"] = json!(format!("pp{}", n % 7));
        for key in [
            "logFile",
            "stateDir",
            "ipam.dataDir",
            "goCacheDir",
            "guidFile",
            "runtimeConfig.CNIDeviceInfoFile",
        ] {
            let leaf = match key {
                "logFile" => "ib.log",
                "guidFile" => "guids",
                "runtimeConfig.CNIDeviceInfoFile" => "devinfo.json",
                _ => "",
            };
            // Absent (the key's default, or the lab's own value) or a drawn value.
            let v = if rng.chance(40) {
                None
            } else {
                Some(self.path(rng, leaf))
            };
            match (key, v) {
                ("ipam.dataDir", Some(v)) => c["ipam"]["dataDir"] = v,
                ("runtimeConfig.CNIDeviceInfoFile", Some(v)) => {
                    c["runtimeConfig"] = json!({ "CNIDeviceInfoFile": v })
                }
                ("stateDir" | "goCacheDir", None) => {} // the lab's (allowed)
                (k, None) => {
                    if let Some(o) = c.as_object_mut() {
                        o.remove(k);
                    }
                }
                (k, Some(v)) => c[k] = v,
            }
        }
        c
    }
}

/// One traced change: (system call, path as resolved).
fn changes(trace: &str, cwd: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for line in trace.lines() {
        // `<pid> <syscall>(<args>) = <ret>`; with -y descriptors read `3</path>`.
        let line = line
            .split_once(' ')
            .map(|(_, l)| l)
            .unwrap_or(line)
            .trim_start();
        let Some(paren) = line.find('(') else {
            continue;
        };
        let call = &line[..paren];
        let Some((args, ret)) = line[paren + 1..].rsplit_once(") = ") else {
            continue;
        };
        let args = split_args(args);
        if matches!(call, "open" | "openat" | "openat2" | "creat") {
            let writes = call == "creat"
                || args.iter().any(|a| {
                    ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"]
                        .iter()
                        .any(|f| a.contains(f))
                });
            if !writes {
                continue;
            }
            // The kernel's path of the descriptor opened.
            if let Some(p) = decoration(ret) {
                out.push((call.to_string(), PathBuf::from(p)));
                continue;
            }
        }
        // Path arguments, each against the directory descriptor just before it (or the
        // working directory); a symbolic link's target is its content, not a file.
        let mut dir: Option<String> = None;
        let mut first_string = true;
        for a in &args {
            if let Some(d) = decoration(a).filter(|_| !a.starts_with('"')) {
                dir = Some(d);
                continue;
            }
            let Some(v) = unquote(a) else { continue };
            let skip = first_string && matches!(call, "symlink" | "symlinkat");
            first_string = false;
            if skip {
                continue;
            }
            let p = Path::new(&v);
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                dir.take()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| cwd.to_path_buf())
                    .join(p)
            };
            out.push((call.to_string(), resolve_existing(&abs)));
        }
    }
    out
}

/// strace's argument text split at its top-level commas (not inside strings, brackets).
fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur) = (Vec::new(), String::new());
    let (mut depth, mut in_str, mut esc) = (0i32, false, false);
    for c in s.chars() {
        if in_str {
            cur.push(c);
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                cur.push(c);
            }
            '[' | '{' | '<' | '(' => {
                depth += 1;
                cur.push(c);
            }
            ']' | '}' | '>' | ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A quoted string argument, unescaped enough for paths.
fn unquote(a: &str) -> Option<String> {
    let inner = a.strip_prefix('"')?.split_once('"').map(|(v, _)| v)?;
    let mut v = String::new();
    let mut it = inner.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                v.push(n);
            }
        } else {
            v.push(c);
        }
    }
    Some(v)
}

/// The path of a descriptor decorated by strace -y (`3</path>`, `AT_FDCWD</path>`).
fn decoration(s: &str) -> Option<String> {
    let i = s.find("</")?;
    let rest = &s[i + 1..];
    let j = rest.rfind('>')?;
    Some(rest[..j].to_string())
}

/// `p` with the links of its longest existing prefix resolved (the rest as written).
fn resolve_existing(p: &Path) -> PathBuf {
    let mut cur = p.to_path_buf();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut r = c;
            for t in tail.iter().rev() {
                r.push(t);
            }
            return r;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_os_string());
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

fn allowed(p: &Path) -> bool {
    ALLOWED
        .iter()
        .chain(PLUGIN_OWN)
        .any(|r| p.starts_with(r) || std::fs::canonicalize(r).is_ok_and(|c| p.starts_with(c)))
}

/// Directories removed on drop.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d).or_else(|_| std::fs::remove_file(d));
        }
    }
}

#[test]
fn no_configuration_makes_the_plugin_write_outside_the_allowed_roots() {
    let cases = std::env::var("IB_SRIOV_POLICY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let seed = std::env::var("IB_SRIOV_POLICY_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let tag = format!("ibsp-{}", std::process::id());
    let tmpd = tempfile::Builder::new().prefix("ibsp-").tempdir().unwrap();
    let tmp = tmpd.path().to_path_buf();
    // The bait: an existing directory outside the roots that a link planted in an
    // allowed root leads to. It must stay empty.
    let bait = PathBuf::from(format!("/etc/{tag}-bait"));
    std::fs::create_dir_all(&bait).unwrap();
    std::fs::create_dir_all(tmp.join("real")).unwrap();
    std::os::unix::fs::symlink(tmp.join("real"), tmp.join("in")).unwrap();
    std::os::unix::fs::symlink(&bait, tmp.join("out")).unwrap();
    std::os::unix::fs::symlink(format!("/etc/{tag}-missing"), tmp.join("dangling")).unwrap();
    let world = World {
        tag: tag.clone(),
        tmp: tmp.clone(),
        bait: bait.clone(),
        cwd: std::env::current_dir().unwrap(),
    };
    // The plugin under strace, in place of the binary (same directory layout: CNI_PATH
    // is the wrapper's, which holds nothing else; the built-in IPAM runs in process).
    let trace = tmp.join("trace");
    let wrapper_dir = tmp.join("bin");
    std::fs::create_dir(&wrapper_dir).unwrap();
    let wrapper = install_script(&wrapper_dir, "ib-sriov", &format!(
            "#!/bin/sh\nexec strace -f -qq --seccomp-bpf -y -e trace={TRACED} -e status=successful -A -o '{}' -- '{}' \"$@\"\n",
            trace.display(),
            bin().display()
        ));

    // Whatever this run wrote under the tag, inside the roots or (had the plugin been
    // wrong) outside them, goes when the test ends, failed or not.
    let cleanup = Cleanup(
        [
            "/run",
            "/var/lib/cni",
            "/var/log",
            "/dev/shm",
            "/etc",
            "/root",
            "/usr/local",
            "/var",
            "/opt",
            "/srv",
            "/home",
            "/dev",
        ]
        .iter()
        .map(|d| PathBuf::from(format!("{d}/{tag}")))
        .chain([bait.clone(), world.cwd.join(&tag)])
        .collect(),
    );
    let mut rng = Rng::new(seed);
    let mut stats: BTreeMap<&str, u64> = BTreeMap::new();
    let mut calls_by_syscall: BTreeMap<String, u64> = BTreeMap::new();
    let mut violations = Vec::new();
    let started = std::time::Instant::now();
    for n in 0..cases {
        let gc = n % 10 == 9;
        let version = if gc { "1.1.0" } else { "1.0.0" };
        let conf = world.conf(&lab, &mut rng, n, version);
        let cid = format!("pp-{n}");
        let run = |cmd: &str, conf: &Value| -> Run {
            Run::from(lab.host.run_plugin(
                &wrapper,
                cmd,
                &cid,
                if cmd == "GC" || cmd == "STATUS" {
                    ""
                } else {
                    pod.netns()
                },
                "net1",
                &conf.to_string(),
                &[],
            ))
        };
        let add = run("ADD", &conf);
        *stats
            .entry(if add.ok {
                "ADD ok"
            } else if add.json["code"] == 7 {
                "ADD code 7"
            } else {
                "ADD other error"
            })
            .or_default() += 1;
        if gc {
            let mut g = conf.clone();
            g["cni.dev/valid-attachments"] = json!([]);
            let _ = run("STATUS", &g);
            let _ = run("GC", &g);
        }
        let del = run("DEL", &conf);
        assert!(
            del.ok,
            "case {n} (seed {seed}): DEL failed: {} / {}\nconf: {conf}",
            del.stdout, del.stderr
        );
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        std::fs::write(&trace, "").unwrap();
        for (call, p) in changes(&text, &world.cwd) {
            *calls_by_syscall.entry(call.clone()).or_default() += 1;
            if !allowed(&p) {
                violations.push(format!("case {n}: {call} {}\n  conf: {conf}", p.display()));
            }
        }
        if std::fs::read_dir(&world.bait).unwrap().next().is_some() {
            violations.push(format!(
                "case {n}: the bait directory is not empty\n  conf: {conf}"
            ));
        }
        if n % 250 == 249 {
            // The VF is back in the host after every DEL: the pod holds only lo.
            assert_eq!(
                common::emuhost::netns_links(&pod.name).len(),
                1,
                "case {n}: the pod kept an interface"
            );
        }
        assert!(violations.len() < 20, "{}", violations.join("\n"));
    }
    drop(cleanup);
    println!(
        "{cases} configurations (seed {seed}) in {:.0} s: {stats:?}; traced changes by system call: {calls_by_syscall:?}; outside the allowed roots: {}",
        started.elapsed().as_secs_f64(),
        violations.len()
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    assert!(
        stats.get("ADD ok").copied().unwrap_or(0) > cases / 50,
        "too few ADDs succeeded to mean anything: {stats:?}"
    );
    assert!(
        stats.get("ADD code 7").copied().unwrap_or(0) > cases / 4,
        "{stats:?}"
    );
    assert!(
        calls_by_syscall.values().sum::<u64>() > cases,
        "the trace saw the plugin's writes: {calls_by_syscall:?}"
    );
}
