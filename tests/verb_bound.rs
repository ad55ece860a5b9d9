//! Every verb's hard time bound (src/watchdog.rs): whatever one system call does, the
//! plugin answers code 11 on stdout (one JSON error object, nothing else) and exits 1
//! at the verb's bound (ADD 220 s, DEL 60 s, CHECK, GC and STATUS 80 s from the
//! process start), leaving its journal for the next DEL, which restores the host. And a
//! FIFO in place of the node file blocks no call. The bound is shown without waiting it
//! out: the test builds' seam `IB_SRIOV_TEST_STARTED_AGO_MS` moves the process start
//! into the past, and the fail point action `block` blocks the plugin in a `read(2)`
//! that never returns. Every plugin started here is killed and reaped if it outlives
//! its limit (the test then fails). Needs root (netns, veth, mount namespaces) and the
//! `failpoints` feature.

#![cfg(feature = "failpoints")]

mod common;

use common::emuhost::HostSnapshot;
use common::lab::Lab;
use serde_json::{json, Value};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A started plugin, killed and reaped when dropped unless it was waited for.
struct Plugin(Option<Child>);

impl Drop for Plugin {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a plugin run gave: its exit status, stdout, stderr and how long it ran.
struct Ended {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Plugin {
    /// Waits for the plugin to exit, at most `limit`; past it the plugin is killed and
    /// the test fails naming `what`.
    #[track_caller]
    fn end_within(mut self, limit: Duration, what: &str) -> Ended {
        let t0 = Instant::now();
        let mut c = self.0.take().expect("a child");
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                let mut stdout = String::new();
                let mut stderr = String::new();
                if let Some(mut o) = c.stdout.take() {
                    o.read_to_string(&mut stdout).unwrap();
                }
                if let Some(mut e) = c.stderr.take() {
                    e.read_to_string(&mut stderr).unwrap();
                }
                return Ended {
                    status,
                    stdout,
                    stderr,
                    took: t0.elapsed(),
                };
            }
            if t0.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                let mut stderr = String::new();
                if let Some(mut e) = c.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                panic!("{what}: still running after {limit:?} (killed); stderr: {stderr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Ended {
    /// The run ended by the watchdog: exit status 1, stdout one CNI error object of
    /// code 11 (and nothing else) naming the bound of `secs` s. Returns its message.
    #[track_caller]
    fn expect_watchdog(&self, what: &str, secs: u64) -> String {
        assert_eq!(
            (self.status.code(), self.status.signal()),
            (Some(1), None),
            "{what}: exit status; stdout {} stderr {}",
            self.stdout,
            self.stderr
        );
        let mut objs = serde_json::Deserializer::from_str(&self.stdout).into_iter::<Value>();
        let e = objs
            .next()
            .unwrap_or_else(|| panic!("{what}: nothing on stdout; stderr {}", self.stderr))
            .unwrap_or_else(|err| panic!("{what}: stdout {:?}: {err}", self.stdout));
        assert!(objs.next().is_none(), "{what}: one answer: {}", self.stdout);
        assert_eq!(e["code"], 11, "{what}: {e}");
        let msg = e["msg"].as_str().unwrap().to_string();
        assert!(
            msg.contains(&format!("within {secs} s of its start")),
            "{what}: {msg}"
        );
        msg
    }
}

/// The plugin binary under test.
fn bin() -> &'static std::path::Path {
    common::lab::bin()
}

/// The plugin run as `verb` with only `env` beside `CNI_COMMAND` and `CNI_PATH` (no
/// plugin there), its stdin, stdout and stderr piped.
fn plugin(verb: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .env("CNI_COMMAND", verb)
        .env("CNI_PATH", "/nonexistent")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A verb whose stdin the runtime never closes: the plugin blocks in its read of the
/// network configuration. Each verb, started just before its bound, answers code 11
/// naming the bound and the `read` it was blocked in, and exits 1; CNI_COMMAND
/// VERSION has no bound.
#[test]
fn a_verb_whose_stdin_never_ends_answers_11_at_its_bound() {
    for (verb, secs) in [
        ("DEL", 60),
        ("ADD", 220),
        ("CHECK", 80),
        ("GC", 80),
        ("STATUS", 80),
    ] {
        let ago = (secs * 1000 - 700).to_string();
        let mut child = plugin(
            verb,
            &[
                ("CNI_CONTAINERID", "bound-stdin"),
                ("CNI_IFNAME", "net1"),
                ("CNI_NETNS", "/proc/self/ns/net"),
                ("IB_SRIOV_TEST_STARTED_AGO_MS", &ago),
            ],
        )
        .spawn()
        .unwrap();
        // Held open (never written, never closed) until the plugin has ended.
        let stdin = child.stdin.take();
        let what = format!("{verb} with stdin never closed, started {ago} ms ago");
        let end = Plugin(Some(child)).end_within(Duration::from_secs(15), &what);
        drop(stdin);
        let msg = end.expect_watchdog(&what, secs);
        assert!(
            msg.contains("system call") && msg.contains("(read)"),
            "{what}: names where it waited: {msg}"
        );
        assert!(end.took < Duration::from_secs(10), "{what}: {:?}", end.took);
    }
}

/// Runs `verb` of `cid` on the lab's host with fail points `fp` and the process start
/// moved `ago_ms` into the past, its stdin closed after the configuration as a runtime
/// does; killed if it runs past `limit`.
fn run_late(
    lab: &Lab,
    verb: &str,
    cid: &str,
    netns: &str,
    conf: &Value,
    fp: &str,
    ago_ms: u64,
) -> Ended {
    let ago = ago_ms.to_string();
    let child = lab.host.spawn_plugin(
        bin(),
        verb,
        cid,
        netns,
        "net1",
        &conf.to_string(),
        &[
            ("IB_SRIOV_FAILPOINTS", fp),
            ("IB_SRIOV_TEST_STARTED_AGO_MS", &ago),
        ],
    );
    Plugin(Some(child)).end_within(
        Duration::from_secs(20),
        &format!("{verb} {cid} with {fp}, started {ago_ms} ms ago"),
    )
}

/// After the watchdog ended a call of `cid` (its journal kept), the next DEL (the
/// runtime's retry) finishes: no journal, no address allocated, the host as `before`.
#[track_caller]
fn next_del_restores(
    lab: &Lab,
    cid: &str,
    netns: &str,
    conf: &Value,
    before: &HostSnapshot,
    what: &str,
) {
    assert_eq!(
        lab.journals(),
        [format!("{cid}:net1")],
        "{what}: journal kept"
    );
    lab.host.sync_netdevs().unwrap();
    lab.del(cid, netns, conf).expect_ok();
    lab.host.sync_netdevs().unwrap();
    assert!(lab.journals().is_empty(), "{what}: {:?}", lab.journals());
    assert!(
        lab.allocations().is_empty(),
        "{what}: {:?}",
        lab.allocations()
    );
    assert_eq!(lab.host.snapshot(), *before, "{what}: host restored");
}

/// A DEL blocked for ever in a `read(2)` at each step of its teardown (fail point
/// action `block`), started 57 s before its bound: it answers code 11 at 60 s, exits 1
/// and keeps its journal; the next DEL restores the host as before the ADD.
#[test]
fn a_del_blocked_in_a_step_answers_at_60_s_and_the_next_del_finishes() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let mut conf = lab.conf("1.0.0", 1);
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": lab.host.root().join("devinfo-b1.json")});
    for point in ["del.ipam", "del.move", "del.journal"] {
        let pod = lab.host.new_pod();
        lab.add("b1", &pod, &conf).expect_ok();
        let what = format!("DEL blocked at {point}");
        let end = run_late(
            &lab,
            "DEL",
            "b1",
            pod.netns(),
            &conf,
            &format!("{point}=block"),
            57_000,
        );
        let msg = end.expect_watchdog(&what, 60);
        assert!(msg.contains("(read)"), "{what}: {msg}");
        assert!(
            end.stderr
                .contains("DEL did not end within 60 s of its start"),
            "{what}: the watchdog's log record: {}",
            end.stderr
        );
        assert!(
            end.stderr
                .contains(&format!("fail point {point}: blocking")),
            "{what}: the DEL reached {point}: {}",
            end.stderr
        );
        assert!(
            end.took >= Duration::from_millis(2500) && end.took < Duration::from_secs(10),
            "{what}: answered after {:?}, at its bound",
            end.took
        );
        next_del_restores(&lab, "b1", pod.netns(), &conf, &before, &what);
        assert_eq!(pod.links(), ["lo"], "{what}: nothing left in the pod");
    }
}

/// An ADD blocked for ever at a step after its netdev moved, started 3 s before its
/// 220 s bound: code 11 at the bound, exit 1, the journal kept; DEL (the runtime's,
/// after a failed ADD) restores the host.
#[test]
fn an_add_blocked_in_a_step_answers_at_220_s_and_del_restores() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let conf = lab.conf("1.0.0", 2);
    for point in ["add.move", "add.ipam", "add.complete"] {
        let pod = lab.host.new_pod();
        let what = format!("ADD blocked at {point}");
        let end = run_late(
            &lab,
            "ADD",
            "b2",
            pod.netns(),
            &conf,
            &format!("{point}=block"),
            217_000,
        );
        end.expect_watchdog(&what, 220);
        assert!(
            end.stderr
                .contains(&format!("fail point {point}: blocking")),
            "{what}: the ADD reached {point}: {}",
            end.stderr
        );
        next_del_restores(&lab, "b2", pod.netns(), &conf, &before, &what);
    }
}

/// The CPUs in a `Cpus_allowed_list:` line of a /proc status file (proc(5): ranges
/// like `0-3,6`).
fn allowed_cpus(status: &str) -> std::collections::BTreeSet<usize> {
    let text = std::fs::read_to_string(status).unwrap_or_else(|e| panic!("{status}: {e}"));
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("{status}: no Cpus_allowed_list"));
    let mut set = std::collections::BTreeSet::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        set.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    set
}

/// The threads of process `pid` but its main thread (/proc/PID/task, proc(5)); none
/// once the process is gone.
fn other_tasks(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&t| t != pid)
                .collect()
        })
        .unwrap_or_default()
}

/// Field `n` (numbered as in proc(5), `n` >= 3) of the `stat` file at `path`: the
/// fields after the command name, which may hold spaces and parentheses, so they
/// follow the last ')'. `None` when the file or the field is missing.
fn stat_field(path: &str, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n - 3).map(str::to_string)
}

/// The watchdog thread runs on the process's other CPUs than the one its creator ran
/// on (src/watchdog.rs `other_cpus`: the netdev move's `rcu_barrier()` then waits on
/// one CPU, not two), and on the one CPU of a process confined to one. Read from
/// /proc/PID/task/TID/status (`Cpus_allowed_list`) of a STATUS blocked in its read of
/// stdin. Needs two CPUs (the CI machine has two).
#[test]
fn the_watchdog_thread_runs_on_other_cpus_than_the_main_threads() {
    use std::os::unix::process::CommandExt;
    let mine = allowed_cpus("/proc/self/status");
    assert!(
        mine.len() >= 2,
        "this test needs a process allowed on two CPUs or more; this one has {mine:?}"
    );
    let first = *mine.iter().next().unwrap();
    for confine in [None, Some(first)] {
        let mut cmd = plugin("STATUS", &[]);
        if let Some(cpu) = confine {
            // SAFETY: only sched_setaffinity(2) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let mut one = nix::sched::CpuSet::new();
                    one.set(cpu).map_err(std::io::Error::from)?;
                    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let pid = child.id();
        let plugin = Plugin(Some(child));
        let t0 = Instant::now();
        let watchdog = loop {
            let tasks = other_tasks(pid);
            if let [t] = tasks[..] {
                break t;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "confined to {confine:?}: no watchdog thread beside the main thread: {tasks:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let main = allowed_cpus(&format!("/proc/{pid}/task/{pid}/status"));
        let wd = allowed_cpus(&format!("/proc/{pid}/task/{watchdog}/status"));
        match confine {
            None => {
                assert_eq!(main, mine, "the main thread keeps the CPUs it was given");
                assert!(
                    wd.is_subset(&main) && wd.len() == main.len() - 1,
                    "the watchdog on all of the main thread's CPUs {main:?} but one: {wd:?}"
                );
            }
            Some(cpu) => {
                let one = std::collections::BTreeSet::from([cpu]);
                assert_eq!((&main, &wd), (&one, &one), "confined to CPU {cpu}");
            }
        }
        drop(plugin);
        drop(stdin);
    }
}

/// For the exit, the watchdog is moved onto the CPU the main thread runs on
/// (src/watchdog.rs `before_exit`: the exit then wakes no other CPU), and it still bounds
/// the process: a STATUS held after its result by the fail point `cli.exit=block`,
/// started 1.5 s before its 80 s bound, has its watchdog on the main thread's CPU (its
/// last CPU: /proc/PID/task/TID/stat field 39, proc(5)), and exits at the bound with
/// its result's status (0 and nothing on stdout for a STATUS that succeeds), writing
/// nothing more.
#[test]
fn for_the_exit_the_watchdog_is_on_the_main_threads_cpu_and_still_bounds_it() {
    use std::io::Write;
    let ago = (80_000 - 1_500).to_string();
    let mut child = plugin(
        "STATUS",
        &[
            ("IB_SRIOV_FAILPOINTS", "cli.exit=block"),
            ("IB_SRIOV_TEST_STARTED_AGO_MS", &ago),
        ],
    )
    .spawn()
    .unwrap();
    let conf = json!({"cniVersion": "1.1.0", "name": "bound-exit", "type": "ib-sriov"});
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(conf.to_string().as_bytes()).unwrap();
    drop(stdin);
    let pid = child.id();
    let plugin = Plugin(Some(child));
    let t0 = Instant::now();
    let watchdog = loop {
        // In the fail point's read(2) (system call 0; its stdin read ended at EOF).
        let sys = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"));
        let tasks = other_tasks(pid);
        if let ([t], Ok(sys)) = (&tasks[..], sys) {
            if sys.split_whitespace().next() == Some("0") {
                break *t;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "no STATUS blocked at cli.exit beside its watchdog within 1 s: {tasks:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // "processor", the CPU it last ran on, is field 39 (proc(5)).
    let cpu: usize = stat_field(&format!("/proc/{pid}/task/{pid}/stat"), 39)
        .expect("the main thread's processor")
        .parse()
        .unwrap();
    let wd = allowed_cpus(&format!("/proc/{pid}/task/{watchdog}/status"));
    assert_eq!(
        wd,
        std::collections::BTreeSet::from([cpu]),
        "the watchdog on the main thread's CPU {cpu}"
    );
    let what = "STATUS held at cli.exit, 1.5 s before its bound";
    let end = plugin.end_within(Duration::from_secs(10), what);
    assert!(end.status.signal().is_none(), "{what}: {:?}", end.status);
    assert!(
        !end.stdout.contains("did not end within"),
        "{what}: the result stands: {}",
        end.stdout
    );
    // STATUS's success is exit 0 with nothing on stdout (SPEC.md "STATUS"); its failure
    // one error object and exit 1.
    let want = if end.stdout.trim().is_empty() {
        0
    } else {
        let e: Value = serde_json::from_str(end.stdout.trim())
            .unwrap_or_else(|e| panic!("{what}: one error on stdout: {e}: {:?}", end.stdout));
        assert!(e.get("code").is_some(), "{what}: {e}");
        1
    };
    assert_eq!(
        end.status.code(),
        Some(want),
        "{what}: stdout {:?}",
        end.stdout
    );
}

/// A FIFO in place of /etc/ib-sriov/node.json (in a private mount namespace): opening
/// it for reading would block until a writer comes. ADD answers code 7 at once naming
/// it a FIFO; DEL answers at once (the node file is unusable, so the default policy
/// applies). Neither waits for the watchdog.
#[test]
fn a_fifo_as_the_node_file_blocks_no_call() {
    let lab = Lab::default();
    let (dir, wrapper) = common::policy::private_node_file(None);
    nix::unistd::mkfifo(
        &dir.path().join("etc/node.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let conf = lab.conf("1.0.0", 0);
    let pod = lab.host.new_pod();
    for verb in ["ADD", "DEL"] {
        let child = lab.host.spawn_plugin(
            &wrapper,
            verb,
            "fifo-1",
            pod.netns(),
            "net1",
            &conf.to_string(),
            &[],
        );
        let what = format!("{verb} with a FIFO as the node file");
        let end = Plugin(Some(child)).end_within(Duration::from_secs(10), &what);
        assert!(end.took < Duration::from_secs(5), "{what}: {:?}", end.took);
        if verb == "ADD" {
            let e: Value = serde_json::from_str(&end.stdout)
                .unwrap_or_else(|err| panic!("{what}: {:?}: {err}", end.stdout));
            assert_eq!(e["code"], 7, "{what}: {e}");
            assert!(e["msg"].as_str().unwrap().contains("FIFO"), "{what}: {e}");
        } else {
            assert!(
                end.status.success(),
                "{what}: {} {}",
                end.stdout,
                end.stderr
            );
        }
    }
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
}

/// Replaces `path` by rename, again and again until `stop`, with its own content at the
/// time (read, written to a temp file beside it, renamed over it), as a host replacing
/// the node file from a ConfigMap or an editor would; a missing file is left missing.
/// Returns how many replacements it made.
fn keep_replacing(path: std::path::PathBuf, stop: &std::sync::atomic::AtomicBool) -> usize {
    let tmp = path.with_extension("replacing");
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if let Ok(b) = std::fs::read(&path) {
            if std::fs::write(&tmp, &b).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
                n += 1;
            }
        }
        std::thread::yield_now();
    }
    let _ = std::fs::remove_file(&tmp);
    n
}

/// The files of the node that an ADD and a DEL read, replaced by rename in a loop
/// while the calls run (the lab's 10-minute DEL happened while the host replaced the
/// node file): the node file and the operator's GUID file. No call waits: each ends
/// within 10 s (a call that does not is killed and the test fails), every call
/// succeeds, and every DEL leaves the host as the first one did. (The journal and the Go
/// cache file are the plugin's own, written under the VF lock; a replacer from outside
/// can only resurrect a removed one, which is no scenario of a node.)
#[test]
fn replacing_the_files_a_call_reads_in_a_loop_blocks_no_call() {
    // VFs without a GUID: ADD takes VF 3's from the GUID file (and DEL zeroes it again).
    let lab = Lab::new(common::emuhost::EmuOptions {
        zero_guids: true,
        ..Default::default()
    });
    // The host after the first DEL (VF 3 keeps the GUID the file gave it): every
    // later DEL leaves it so.
    let mut first: Option<common::emuhost::HostSnapshot> = None;
    let node = json!({"extraPathRoots": common::policy::TEST_ROOTS}).to_string();
    let (dir, wrapper) = common::policy::private_node_file(Some(&node));
    let guids = lab.host.root().join("etc-guids");
    std::fs::write(
        &guids,
        json!([{"pciAddress": common::emuhost::PF_BDF, "rangeStart": "02:00:00:00:00:00:0a:00", "rangeEnd": "02:00:00:00:00:00:0a:0f"}]).to_string(),
    )
    .unwrap();
    let mut conf = lab.conf("1.0.0", 3);
    conf["guidFile"] = json!(guids);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut adds, mut dels, mut replaced) = (0, 0, 0);
    std::thread::scope(|s| {
        let stop = &stop;
        let workers = vec![
            s.spawn(move || keep_replacing(dir.path().join("etc/node.json"), stop)),
            s.spawn(|| keep_replacing(guids.clone(), stop)),
        ];
        let run = |verb: &str, netns: &str| {
            let child =
                lab.host
                    .spawn_plugin(&wrapper, verb, "r1", netns, "net1", &conf.to_string(), &[]);
            Plugin(Some(child)).end_within(
                Duration::from_secs(10),
                &format!("{verb} while its files are replaced"),
            )
        };
        for _ in 0..25 {
            let pod = lab.host.new_pod();
            let a = run("ADD", pod.netns());
            if a.status.success() {
                adds += 1;
            } else {
                eprintln!("ADD failed: {}", a.stdout);
            }
            lab.host.sync_netdevs().unwrap();
            let d = run("DEL", pod.netns());
            if d.status.success() {
                dels += 1;
            } else {
                eprintln!("DEL failed: {}", d.stdout);
            }
            lab.host.sync_netdevs().unwrap();
            let now = lab.host.snapshot();
            assert_eq!(
                first.get_or_insert_with(|| now.clone()),
                &now,
                "host restored"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        replaced = workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .sum::<usize>();
        drop(wrapper);
    });
    eprintln!("{adds} ADDs and {dels} DELs of 25 succeeded; {replaced} replacements");
    assert!(replaced > 0);
    assert_eq!((adds, dels), (25, 25));
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
}

/// A FUSE file system (kernel uapi include/uapi/linux/fuse.h, protocol 7.31) served by
/// a thread of the test: its root holds one regular file, `node.json`, of 64 bytes,
/// whose reads are not answered until [`StuckFuse::release`]. A reader waits for the
/// answer in the kernel (`request_wait_answer()` in fs/fuse/dev.c): interruptibly, then,
/// once a fatal signal came and the request is with the server, uninterruptibly
/// (state `D`): even SIGKILL cannot end it, as on a hung network file system. Unmounted
/// (lazily) when dropped; its server thread ends with the test process.
struct StuckFuse {
    dir: std::path::PathBuf,
    dev: std::sync::Arc<std::fs::File>,
    /// The `unique` of every READ not answered yet.
    held: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

/// Writes one FUSE answer (`struct fuse_out_header`, then `payload`) to `dev`.
fn fuse_reply(dev: &std::fs::File, unique: u64, error: i32, payload: &[u8]) {
    use std::io::Write;
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&error.to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
    out.extend_from_slice(payload);
    let _ = (&*dev).write_all(&out);
}

impl StuckFuse {
    /// Mounts it on the existing directory `dir` (needs root).
    fn mount(dir: &std::path::Path) -> StuckFuse {
        use std::os::fd::AsRawFd;
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("/dev/fuse");
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        nix::mount::mount(
            Some("ib-sriov-stuck"),
            dir,
            Some("fuse"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(opts.as_str()),
        )
        .expect("mounting a FUSE file system");
        let dev = std::sync::Arc::new(dev);
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (d, h) = (dev.clone(), held.clone());
        std::thread::spawn(move || serve_stuck_fuse(&d, &h));
        StuckFuse {
            dir: dir.to_path_buf(),
            dev,
            held,
        }
    }

    /// Answers every READ held so far with EIO, ending its reader's wait.
    fn release(&self) {
        for unique in self.held.lock().unwrap().drain(..) {
            fuse_reply(&self.dev, unique, -nix::libc::EIO, &[]);
        }
    }
}

impl Drop for StuckFuse {
    fn drop(&mut self) {
        self.release();
        let _ = nix::mount::umount2(&self.dir, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The FUSE server loop of [`StuckFuse`]: answers INIT, LOOKUP of `node.json`,
/// GETATTR, OPEN, OPENDIR, FLUSH, RELEASE, RELEASEDIR, ACCESS and GETXATTR (ENODATA);
/// holds READ in `held`; leaves INTERRUPT and FORGET unanswered; ENOSYS for the rest.
/// Ends when the device read fails (the connection gone).
fn serve_stuck_fuse(dev: &std::fs::File, held: &std::sync::Mutex<Vec<u64>>) {
    let mut buf = vec![0u8; 1 << 17];
    let attr = |ino: u64, mode: u32, size: u64| {
        let mut a = Vec::with_capacity(88);
        for v in [ino, size, 1, 0, 0, 0] {
            a.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [0u32, 0, 0, mode, 1, 0, 0, 0, 4096, 0] {
            a.extend_from_slice(&v.to_ne_bytes());
        }
        a
    };
    loop {
        let n = match (&*dev).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(nix::libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => continue,
            Err(_) => return,
        };
        if n < 40 {
            return;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
        let (opcode, unique, nodeid) = (u32_at(4), u64_at(8), u64_at(16));
        let body = &buf[40..n];
        let reply = |error: i32, payload: &[u8]| fuse_reply(dev, unique, error, payload);
        let file_attr = attr(2, 0o100644, 64);
        let root_attr = attr(1, 0o040755, 0);
        match opcode {
            // INIT: protocol 7.31, no flags, max_write 4096.
            26 => {
                let mut p = Vec::new();
                for v in [7u32, 31, 0, 0] {
                    p.extend_from_slice(&v.to_ne_bytes());
                }
                p.extend_from_slice(&16u16.to_ne_bytes());
                p.extend_from_slice(&12u16.to_ne_bytes());
                p.extend_from_slice(&4096u32.to_ne_bytes());
                p.extend_from_slice(&1u32.to_ne_bytes());
                p.resize(64, 0);
                reply(0, &p);
            }
            // LOOKUP: node.json only.
            1 => {
                let name = body.split(|&b| b == 0).next().unwrap_or(b"");
                if nodeid == 1 && name == b"node.json" {
                    let mut p = Vec::new();
                    for v in [2u64, 0, 0, 0] {
                        p.extend_from_slice(&v.to_ne_bytes());
                    }
                    p.extend_from_slice(&[0u8; 8]);
                    p.extend_from_slice(&file_attr);
                    reply(0, &p);
                } else {
                    reply(-nix::libc::ENOENT, &[]);
                }
            }
            // GETATTR.
            3 => {
                let mut p = vec![0u8; 16];
                p.extend_from_slice(if nodeid == 1 { &root_attr } else { &file_attr });
                reply(0, &p);
            }
            // OPEN, OPENDIR: file handle 0, no flags.
            14 | 27 => reply(0, &[0u8; 16]),
            // READ: held until released.
            15 => held.lock().unwrap().push(unique),
            // INTERRUPT, FORGET: no answer.
            36 | 2 => {}
            // FLUSH, RELEASE, RELEASEDIR, ACCESS.
            25 | 18 | 29 | 34 => reply(0, &[]),
            // GETXATTR: none.
            22 => reply(-nix::libc::ENODATA, &[]),
            _ => reply(-nix::libc::ENOSYS, &[]),
        }
    }
}

/// The state letter of process `pid` (`/proc/<pid>/stat`, proc(5)): `D` for
/// uninterruptible sleep.
fn proc_state(pid: u32) -> char {
    stat_field(&format!("/proc/{pid}/stat"), 3)
        .and_then(|f| f.chars().next())
        .unwrap_or('?')
}

/// The node file on a FUSE file system whose reads are not answered: the DEL reading
/// it waits in the kernel as on a hung 9p or NFS mount. Started 58 s before its bound,
/// the DEL's watchdog writes code 11 on stdout at 60 s, naming the `read` it waits in,
/// and exits; but the read's wait has become uninterruptible (the request is with the
/// server: fs/fuse/dev.c `request_wait_answer()` then waits in state `D`), so the
/// process lives on, in state `D`, with its answer out, until the read is answered;
/// then it is gone, exit status 1. This is the limit the docs state: a runtime that
/// reads stdout to its end (libcni) waits for the process, not the answer.
#[test]
fn a_node_file_whose_read_never_returns_gets_its_answer_at_the_bound() {
    let lab = Lab::default();
    let (dir, wrapper) = common::policy::private_node_file(None);
    let fuse = StuckFuse::mount(&dir.path().join("etc"));
    let conf = lab.conf("1.0.0", 0);
    let pod = lab.host.new_pod();
    let mut child = lab.host.spawn_plugin(
        &wrapper,
        "DEL",
        "fuse-1",
        pod.netns(),
        "net1",
        &conf.to_string(),
        &[("IB_SRIOV_TEST_STARTED_AGO_MS", "58000")],
    );
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut b) {
            if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let plugin = Plugin(Some(child));
    let what = "DEL with its node file's read never answered";
    let t0 = Instant::now();
    let mut out = Vec::new();
    while !out.ends_with(b"\n") {
        let left = Duration::from_secs(10).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => {
                fuse.release();
                drop(plugin);
                panic!("{what}: no answer on stdout within 10 s");
            }
        }
    }
    let took = t0.elapsed();
    // The answer is out, the process is not gone: its main thread is in D state. The
    // read is released before any assertion, so that a failing one cannot leave the
    // plugin (and the Drop that waits for it) blocked.
    std::thread::sleep(Duration::from_millis(300));
    let state = proc_state(pid);
    fuse.release();
    let end = plugin.end_within(Duration::from_secs(10), what);
    let e: Value = serde_json::from_slice(&out)
        .unwrap_or_else(|err| panic!("{what}: {:?}: {err}", String::from_utf8_lossy(&out)));
    assert_eq!(e["code"], 11, "{what}: {e}");
    let msg = e["msg"].as_str().unwrap();
    eprintln!("{what}: answered after {took:?}, then in state {state}: {msg}");
    assert!(msg.contains("within 60 s of its start"), "{what}: {msg}");
    assert!(msg.contains("(read)"), "{what}: {msg}");
    assert!(
        took < Duration::from_secs(8),
        "{what}: answered after {took:?}"
    );
    assert_eq!(state, 'D', "{what}: the process after its answer");
    assert_eq!(end.status.code(), Some(1), "{what}: {}", end.stderr);
    assert!(end.stdout.is_empty(), "{what}: one answer: {}", end.stdout);
    drop(fuse);
}
