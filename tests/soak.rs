//! Soak test (issue 4): several VFs on the emulated host (tests/common/emuhost.rs), many
//! rounds of parallel ADD and DEL of the real `ib-sriov` binary, with processes killed
//! (SIGKILL from the test after a random delay, or the `kill` action of a fail point),
//! fail points returning errors, pod namespaces deleted before DEL, racing ADDs for one
//! VF and ADDs retried after a kill. After every phase the real state is read back (IPAM
//! store, journals, pod namespaces, host links, OFED files, device-info files) and
//! checked against what the attachments' outcomes allow:
//! - no address assigned twice (allocation files, pod addresses, ADD results);
//! - no allocation without a journal or a live attachment;
//! - at most one journal per VF, none for an attachment that is gone or whose ADD
//!   returned an error, one (complete) for every live attachment;
//! - every VF netdev seen exactly once: in the host under its name, or in the pod of an
//!   attachment of that VF (named CNI_IFNAME; in the live attachment's pod, up, with
//!   its address);
//! - every VF no attachment holds is exactly as at the start (host link, its peer, OFED
//!   GUID and policy files); no other link appears in the host.
//!
//! At the end every attachment is deleted and the host equals its first snapshot, with
//! no journal, allocation or device-info file left. The counts are printed (see them
//! with `--nocapture`).
//!
//! A round: (1) in parallel, DEL of about half the live attachments (some after their
//! pod netns was deleted, some killed) and ADD on about half the VFs (some VFs get two
//! racing ADDs; each ADD in a new pod netns, some killed, some failing at a fail point);
//! check; (2) in parallel, as a runtime does, DEL of every attachment whose ADD failed
//! or was killed (a few killed ADDs are first retried), and the retry of every killed
//! DEL, some DELs killed again and retried until they succeed; check; sometimes CHECK
//! every live attachment. An ADD may be refused (101 naming the holder, or 11) only
//! when another attachment held or contended for its VF; any other failure fails.
//!
//! Knobs: IB_SRIOV_SOAK_SEED (default: from the clock; printed), IB_SRIOV_SOAK_ROUNDS
//! (default 40). Needs root and the `failpoints` feature; without either it fails. A
//! seed replays the same actions, not the same timing (where a SIGKILL lands).
//!
//! Emulation limits: a veth is destroyed with its netns, so after deleting a pod netns
//! that held a VF the test re-creates the pair with the same names, ifindexes and MACs
//! (down, as the kernel returns a physical netdev), sometimes before DEL, sometimes
//! while DEL waits for it. The kernel would return it under its in-pod name; the plugin
//! finds a real VF by its parent device, which a veth does not have.

// Without the `failpoints` feature only `soak_needs_the_failpoints_feature` is built.
#![cfg_attr(not(feature = "failpoints"), allow(dead_code, unused_imports))]

mod common;

use common::emuhost::{vf_netdev, vf_peer, EmuHost, EmuOptions, HostSnapshot, LinkSnapshot, Pod};
use common::failpoints::{ADD_POINTS, DEL_POINTS};
use common::lab::{ipam_allocations, list, plugin_conf};
use common::rng::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ib-sriov");
const NETWORK: &str = "ibsoak";
const IFNAME: &str = "net1";
const SUBNET_PREFIX: &str = "10.57.0.";
const VFS: u32 = 6;
/// A plugin run longer than this is a hang.
const HANG: Duration = Duration::from_secs(60);

/// How an invocation is disturbed.
#[derive(Debug, Clone, Copy)]
enum Kill {
    None,
    /// `IB_SRIOV_FAILPOINTS=<point>=kill`.
    Point(&'static str),
    /// `IB_SRIOV_FAILPOINTS=<point>=error`.
    Error(&'static str),
    /// SIGKILL from the test after this long (unless it has exited by then).
    Signal(Duration),
}

/// What one plugin process did.
#[derive(Debug)]
struct Outcome {
    ok: bool,
    /// Died of SIGKILL (ours or a fail point's).
    killed: bool,
    code: Option<u64>,
    json: Value,
    stderr: String,
}

impl Outcome {
    fn msg(&self) -> &str {
        self.json["msg"].as_str().unwrap_or("")
    }
}

/// Where an attachment stands, as far as the runtime (the test) knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// ADD succeeded, not deleted.
    Live,
    /// ADD or DEL killed: any partial state is allowed until a DEL succeeds.
    Pending,
    /// ADD returned an error: it must hold nothing. Still gets a DEL, as from a runtime.
    Clean,
    /// DEL succeeded.
    Gone,
}

struct Att {
    cid: String,
    vf: u32,
    pod: Option<Pod>,
    conf: Value,
    status: St,
    ip: Option<String>,
    result: Option<Value>,
    devinfo: Option<PathBuf>,
    /// The last ADD was killed (so a retried ADD is meaningful).
    add_killed: bool,
    /// A DEL was killed (so the next successful DEL is its retry).
    del_killed: bool,
}

impl Att {
    fn netns(&self) -> String {
        self.pod
            .as_ref()
            .map(|p| p.netns().to_string())
            .unwrap_or_default()
    }
    fn pod_alive(&self) -> bool {
        self.pod.as_ref().is_some_and(|p| p.exists())
    }
}

#[derive(Debug, Default)]
struct Counts {
    rounds: u32,
    adds: u32,
    adds_ok: u32,
    adds_killed_by_point: u32,
    adds_killed_by_signal: u32,
    adds_signal_too_late: u32,
    adds_injected_error: u32,
    adds_busy_101: u32,
    adds_try_later_11: u32,
    adds_retried_after_kill: u32,
    racing_add_pairs: u32,
    dels: u32,
    dels_ok_first_try: u32,
    dels_killed_by_point: u32,
    dels_killed_by_signal: u32,
    dels_signal_too_late: u32,
    dels_killed_then_retried_ok: u32,
    netns_deleted_before_del: u32,
    vf_netdevs_returned_before_del: u32,
    vf_netdevs_returned_during_del: u32,
    checks_ok: u32,
    invariant_checks: u32,
    released_ip_still_in_a_pod_under_del: u32,
    /// Most `.*` files (temp files of killed writers) seen at once in the state or
    /// IPAM directories.
    stray_temp_files: usize,
    max_parallel_processes: usize,
}

/// One thread's work in a phase.
struct Job {
    att: usize,
    /// Retry the ADD (no kill) before anything else.
    retry_add: bool,
    add: Option<Kill>,
    /// The DEL's disturbance, and whether to retry it (undisturbed) until it succeeds.
    del: Option<(Kill, bool)>,
    /// Contended ADD: another attachment of this VF was live or pending at the start of
    /// the phase, or has a job in it. Only then may an ADD be refused.
    contended: bool,
}

#[derive(Default)]
struct JobResult {
    add: Option<(Kill, Outcome)>,
    retry_add: Option<Outcome>,
    dels: Vec<(Kill, Outcome)>,
}

struct Soak {
    host: EmuHost,
    state: PathBuf,
    data: PathBuf,
    devinfo_dir: PathBuf,
    base: HostSnapshot,
    atts: Vec<Att>,
    rng: Rng,
    n: Counts,
    seed: u64,
    round: u32,
}

fn main_seed() -> u64 {
    std::env::var("IB_SRIOV_SOAK_SEED")
        .ok()
        .map(|s| {
            let s = s.trim();
            s.strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16))
                .unwrap_or_else(|| s.parse())
                .unwrap_or_else(|e| panic!("IB_SRIOV_SOAK_SEED={s:?}: {e}"))
        })
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
        })
}

impl Soak {
    fn conf(&mut self, cid: &str, vf: u32) -> (Value, Option<PathBuf>) {
        let mut c = plugin_conf(&self.host, &self.state, &self.data, vf);
        c["cniVersion"] = json!("1.0.0");
        c["name"] = json!(NETWORK);
        c["lockTimeoutMs"] = json!(15000);
        c["ipam"]["subnet"] = json!(format!("{SUBNET_PREFIX}0/24"));
        c["ipam"]["gateway"] = json!(format!("{SUBNET_PREFIX}1"));
        if self.rng.chance(50) {
            c["runtimeConfig"]["infinibandGUID"] = json!(format!(
                "02:00:00:00:{:02x}:{:02x}:00:{:02x}",
                self.round & 0xff,
                self.rng.below(256),
                vf + 1
            ));
        }
        if self.rng.chance(50) {
            c["link_state"] = json!(*self.rng.pick(&["enable", "disable", "auto"]).unwrap());
        }
        let mut devinfo = None;
        if self.rng.chance(30) {
            let p = self.devinfo_dir.join(format!("{cid}.json"));
            c["runtimeConfig"]["CNIDeviceInfoFile"] = json!(p);
            devinfo = Some(p);
        }
        (c, devinfo)
    }

    fn new_att(&mut self, vf: u32) -> usize {
        let k = self.atts.len();
        let cid = format!("soak-r{}-v{vf}-{k}", self.round);
        let (conf, devinfo) = self.conf(&cid, vf);
        let pod = self.host.new_pod();
        self.atts.push(Att {
            cid,
            vf,
            pod: Some(pod),
            conf,
            status: St::Clean,
            ip: None,
            result: None,
            devinfo,
            add_killed: false,
            del_killed: false,
        });
        k
    }

    fn add_kill(&mut self) -> Kill {
        match self.rng.below(100) {
            0..=14 => Kill::Point(self.rng.pick(&ADD_POINTS).unwrap()),
            15..=29 => Kill::Signal(Duration::from_micros(self.rng.below(60_000))),
            30..=37 => Kill::Error(self.rng.pick(&ADD_POINTS).unwrap()),
            _ => Kill::None,
        }
    }

    fn del_kill(&mut self) -> Kill {
        match self.rng.below(100) {
            0..=14 => Kill::Point(self.rng.pick(&DEL_POINTS).unwrap()),
            15..=27 => Kill::Signal(Duration::from_micros(self.rng.below(20_000))),
            _ => Kill::None,
        }
    }

    /// DEL jobs for the live attachments: each picked with `share` percent (`None`: all,
    /// drawing nothing), 35% of them with their pod netns deleted first, each with a
    /// [`Soak::del_kill`] disturbance, retried until it succeeds when `until_ok`. Returns
    /// the jobs and the VFs to re-create during the phase ([`Soak::delete_netns`]).
    fn del_jobs(&mut self, share: Option<u64>, until_ok: bool) -> (Vec<Job>, Vec<(u32, Duration)>) {
        let live: Vec<usize> = (0..self.atts.len())
            .filter(|&i| self.atts[i].status == St::Live)
            .collect();
        let mut jobs = Vec::new();
        let mut returns = Vec::new();
        for i in live {
            if share.is_some_and(|p| !self.rng.chance(p)) {
                continue;
            }
            if self.rng.chance(35) {
                returns.extend(self.delete_netns(i));
            }
            let k = self.del_kill();
            jobs.push(Job {
                att: i,
                retry_add: false,
                add: None,
                del: Some((k, until_ok)),
                contended: false,
            });
        }
        (jobs, returns)
    }

    /// Deletes the pod netns of attachment `i` (a runtime DEL after the sandbox is gone).
    /// If its VF netdev was inside, waits for the kernel to destroy the veth pair, then
    /// re-creates it now or returns the VF to re-create during the DEL.
    fn delete_netns(&mut self, i: usize) -> Option<(u32, Duration)> {
        let vf = self.atts[i].vf;
        let mac = self.base_vf(vf).address.clone();
        let pod = self.atts[i].pod.as_ref().expect("pod");
        let had_vf = pod.link_snapshots().iter().any(|l| l.address == mac);
        pod.delete().expect("deleting pod netns");
        self.n.netns_deleted_before_del += 1;
        if !had_vf {
            return None;
        }
        self.wait_pair_gone(vf);
        if self.rng.chance(60) {
            self.return_vf(vf);
            self.n.vf_netdevs_returned_before_del += 1;
            None
        } else {
            self.n.vf_netdevs_returned_during_del += 1;
            Some((vf, Duration::from_millis(self.rng.below(200))))
        }
    }

    fn base_vf(&self, vf: u32) -> &LinkSnapshot {
        self.base.link(&vf_netdev(vf)).expect("VF in base snapshot")
    }

    fn wait_pair_gone(&self, vf: u32) {
        let peer = vf_peer(vf);
        let t0 = Instant::now();
        while self.host.host_links().iter().any(|l| l.name == peer) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the veth pair of VF {vf} outlived its netns by 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The emulated kernel returns VF `vf`'s netdev to the host: the veth pair again, with
    /// its names, ifindexes, MACs and MTU, the VF end down, the peer up.
    fn return_vf(&self, vf: u32) {
        return_vf(&self.host, &self.base, vf)
    }

    /// Runs the jobs in parallel, one thread each (plus one per delayed VF return).
    fn run_phase(&mut self, jobs: &[Job], returns: &[(u32, Duration)]) -> Vec<JobResult> {
        let procs = jobs.len();
        self.n.max_parallel_processes = self.n.max_parallel_processes.max(procs);
        let host = &self.host;
        let base = &self.base;
        let atts = &self.atts;
        std::thread::scope(|s| {
            for &(vf, delay) in returns {
                s.spawn(move || {
                    std::thread::sleep(delay);
                    return_vf(host, base, vf);
                });
            }
            let hs: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let a = &atts[job.att];
                    s.spawn(move || run_job(host, a, job))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("job thread"))
                .collect()
        })
    }

    fn round(&mut self) {
        self.round += 1;
        self.n.rounds += 1;
        let r = self.round;

        // Phase 1: DELs of some live attachments, ADDs on a random subset of VFs (some
        // of them racing for one VF), in parallel.
        let (mut jobs, returns) = self.del_jobs(Some(50), false);
        for vf in 0..VFS {
            if !self.rng.chance(55) {
                continue;
            }
            let n = if self.rng.chance(15) { 2 } else { 1 };
            if n == 2 {
                self.n.racing_add_pairs += 1;
            }
            for _ in 0..n {
                let i = self.new_att(vf);
                let k = self.add_kill();
                jobs.push(Job {
                    att: i,
                    retry_add: false,
                    add: Some(k),
                    del: None,
                    contended: false,
                });
            }
        }
        self.mark_contention(&mut jobs);
        let results = self.run_phase(&jobs, &returns);
        self.apply(&jobs, results);
        self.check(&format!("round {r} after parallel ADD/DEL"), false);

        // Phase 2: as a runtime does, DEL every attachment whose ADD failed or was
        // killed (some ADDs retried first), retry every killed DEL; some DELs are killed
        // too and retried until they succeed. Some pod netns are deleted first.
        let todo: Vec<usize> = (0..self.atts.len())
            .filter(|&i| matches!(self.atts[i].status, St::Pending | St::Clean))
            .collect();
        let mut jobs = Vec::new();
        let mut returns = Vec::new();
        for i in todo {
            let retry_add =
                self.atts[i].add_killed && self.atts[i].pod_alive() && self.rng.chance(30);
            if !retry_add && self.atts[i].pod_alive() && self.rng.chance(30) {
                returns.extend(self.delete_netns(i));
            }
            let k = if retry_add {
                Kill::None
            } else {
                self.del_kill()
            };
            jobs.push(Job {
                att: i,
                retry_add,
                add: None,
                del: Some((k, true)),
                contended: false,
            });
        }
        self.mark_contention(&mut jobs);
        let results = self.run_phase(&jobs, &returns);
        self.apply(&jobs, results);
        self.check(&format!("round {r} after DELs and retries"), true);

        // CHECK on every live attachment now and then.
        if self.rng.chance(40) {
            self.check_live();
        }
    }

    fn mark_contention(&self, jobs: &mut [Job]) {
        let busy_vfs: Vec<u32> = jobs.iter().map(|j| self.atts[j.att].vf).collect();
        for (k, job) in jobs.iter_mut().enumerate() {
            let a = &self.atts[job.att];
            let others_in_phase = busy_vfs
                .iter()
                .enumerate()
                .any(|(m, &v)| m != k && v == a.vf);
            let others_holding = self.atts.iter().enumerate().any(|(m, b)| {
                m != job.att && b.vf == a.vf && matches!(b.status, St::Live | St::Pending)
            });
            job.contended = others_in_phase || others_holding;
        }
    }

    /// Who may be named as the holder in a 101 refusal of an ADD of `att`.
    fn valid_holder(&self, att: usize, jobs: &[Job], before: &[St], holder: &str) -> bool {
        let a = &self.atts[att];
        self.atts.iter().enumerate().any(|(m, b)| {
            m != att
                && b.cid == holder
                && b.vf == a.vf
                && (matches!(before[m], St::Live | St::Pending)
                    || jobs
                        .iter()
                        .any(|j| j.att == m && (j.add.is_some() || j.retry_add)))
        })
    }

    fn apply(&mut self, jobs: &[Job], results: Vec<JobResult>) {
        let before: Vec<St> = self.atts.iter().map(|a| a.status).collect();
        for (job, res) in jobs.iter().zip(results) {
            let i = job.att;
            if let Some((kill, out)) = &res.add {
                self.n.adds += 1;
                self.apply_add(i, job, &before, jobs, *kill, out, false);
            }
            if let Some(out) = &res.retry_add {
                self.n.adds += 1;
                self.n.adds_retried_after_kill += 1;
                self.apply_add(i, job, &before, jobs, Kill::None, out, true);
            }
            if res.dels.is_empty() {
                continue;
            }
            self.n.dels += 1;
            for (kill, out) in &res.dels {
                if out.killed {
                    self.atts[i].del_killed = true;
                    match kill {
                        Kill::Signal(_) => self.n.dels_killed_by_signal += 1,
                        _ => self.n.dels_killed_by_point += 1,
                    }
                    self.atts[i].status = St::Pending;
                    continue;
                }
                if matches!(kill, Kill::Signal(_)) {
                    self.n.dels_signal_too_late += 1;
                }
                assert!(
                    out.ok,
                    "seed {}: DEL of {} failed: {} / stderr:\n{}",
                    self.seed, self.atts[i].cid, out.json, out.stderr
                );
                if self.atts[i].del_killed {
                    self.n.dels_killed_then_retried_ok += 1;
                } else {
                    self.n.dels_ok_first_try += 1;
                }
                let a = &mut self.atts[i];
                a.status = St::Gone;
                a.ip = None;
                a.result = None;
                a.pod = None; // deletes the pod netns
            }
            let (_, last) = res.dels.last().unwrap();
            assert!(
                !job.del.unwrap().1 || last.ok,
                "seed {}: DEL of {} never succeeded",
                self.seed,
                self.atts[i].cid
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_add(
        &mut self,
        i: usize,
        job: &Job,
        before: &[St],
        jobs: &[Job],
        kill: Kill,
        out: &Outcome,
        retried: bool,
    ) {
        let seed = self.seed;
        let cid = self.atts[i].cid.clone();
        if out.killed {
            match kill {
                Kill::Signal(_) => self.n.adds_killed_by_signal += 1,
                _ => self.n.adds_killed_by_point += 1,
            }
            self.atts[i].status = St::Pending;
            self.atts[i].add_killed = true;
            return;
        }
        if matches!(kill, Kill::Signal(_)) {
            self.n.adds_signal_too_late += 1;
        }
        self.atts[i].add_killed = false;
        if out.ok {
            self.n.adds_ok += 1;
            let ip = out.json["ips"][0]["address"]
                .as_str()
                .unwrap_or_else(|| panic!("seed {seed}: ADD of {cid}: no IP in {}", out.json));
            assert!(ip.starts_with(SUBNET_PREFIX) && ip.ends_with("/24"), "{ip}");
            let a = &mut self.atts[i];
            a.ip = Some(ip.to_string());
            a.result = Some(out.json.clone());
            a.status = St::Live;
            return;
        }
        let code = out.code.unwrap_or(0);
        match (code, kill) {
            (102, Kill::Error(p)) if out.msg().contains(p) => {
                self.n.adds_injected_error += 1;
            }
            (101, _) => {
                let holder = out
                    .msg()
                    .split("attached to container ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .unwrap_or("");
                assert!(
                    job.contended && self.valid_holder(i, jobs, before, holder),
                    "seed {seed}: ADD of {cid} (VF {}, retried {retried}) refused with 101 naming {holder:?}, which does not hold the VF: {}",
                    self.atts[i].vf,
                    out.json
                );
                self.n.adds_busy_101 += 1;
            }
            (11, _) => {
                assert!(
                    job.contended,
                    "seed {seed}: ADD of {cid} got 11 on an uncontended VF: {}",
                    out.json
                );
                self.n.adds_try_later_11 += 1;
            }
            _ => panic!(
                "seed {seed}: ADD of {cid} (VF {}, {kill:?}, retried {retried}, contended {}) failed: {} / stderr:\n{}",
                self.atts[i].vf, job.contended, out.json, out.stderr
            ),
        }
        self.atts[i].status = St::Clean;
    }

    fn check_live(&mut self) {
        for a in self.atts.iter().filter(|a| a.status == St::Live) {
            let mut c = a.conf.clone();
            c["prevResult"] = a.result.clone().expect("live has a result");
            let out = self.host.run_plugin(
                Path::new(BIN),
                "CHECK",
                &a.cid,
                &a.netns(),
                IFNAME,
                &c.to_string(),
                &[],
            );
            assert!(
                out.status.success(),
                "seed {}: CHECK of live {}: {} / {}",
                self.seed,
                a.cid,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            self.n.checks_ok += 1;
        }
    }

    /// Reads the real state and checks the invariants (see the module docs). `settled`:
    /// no attachment may be pending (after the DEL phase).
    fn check(&mut self, when: &str, settled: bool) {
        self.n.invariant_checks += 1;
        let mut bad: Vec<String> = Vec::new();
        let atts = &self.atts;
        let by_cid: BTreeMap<&str, usize> = atts
            .iter()
            .enumerate()
            .map(|(i, a)| (a.cid.as_str(), i))
            .collect();

        // Journals.
        let mut journals: BTreeMap<String, Value> = BTreeMap::new();
        let mut stray = Vec::new();
        for name in list(&self.state) {
            if name == "locks" || name == "vfs" {
                continue;
            }
            if name.starts_with('.') {
                stray.push(name);
                continue;
            }
            let text = std::fs::read_to_string(self.state.join(&name)).unwrap_or_default();
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => {
                    journals.insert(name, v);
                }
                Err(e) => bad.push(format!("journal {name} unreadable: {e}: {text:?}")),
            }
        }
        let mut per_vf: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, j) in &journals {
            let cid = name.strip_suffix(&format!(":{IFNAME}")).unwrap_or(name);
            per_vf
                .entry(j["vf"].as_str().unwrap_or("?").to_string())
                .or_default()
                .push(cid.to_string());
            match by_cid.get(cid).map(|&i| &atts[i]) {
                None => bad.push(format!("journal {name} of no attachment")),
                Some(a) => {
                    if j["vf"] != json!(self.host.vf(a.vf).addr) {
                        bad.push(format!("journal {name} names VF {} not {}", j["vf"], a.vf));
                    }
                    match a.status {
                        St::Live => {
                            if j["complete"] != json!(true) {
                                bad.push(format!(
                                    "journal {name} of a live attachment is not complete"
                                ))
                            }
                        }
                        St::Pending => {}
                        St::Clean | St::Gone => bad.push(format!(
                            "journal {name} left by an attachment that is {:?}",
                            a.status
                        )),
                    }
                }
            }
        }
        for (vf, cids) in &per_vf {
            if cids.len() > 1 {
                bad.push(format!(
                    "VF {vf} journaled by several attachments: {cids:?}"
                ));
            }
        }
        for a in atts.iter().filter(|a| a.status == St::Live) {
            if !journals.contains_key(&format!("{}:{IFNAME}", a.cid)) {
                bad.push(format!("live attachment {} has no journal", a.cid));
            }
        }

        // Allocations.
        let net_dir = self.data.join(NETWORK);
        let mut allocs: BTreeMap<String, String> = BTreeMap::new(); // ip -> cid
        for name in list(&net_dir) {
            if name.starts_with('.') {
                stray.push(format!("{NETWORK}/{name}"));
                continue;
            }
            if name == "lock" || name == "boot_id" || name.starts_with("last_reserved_ip.") {
                continue;
            }
            let content = std::fs::read_to_string(net_dir.join(&name)).unwrap_or_default();
            let Some((cid, ifname)) = content.trim().split_once("\r\n") else {
                bad.push(format!("allocation {name} has content {content:?}"));
                continue;
            };
            if ifname != IFNAME {
                bad.push(format!("allocation {name} for ifname {ifname:?}"));
            }
            let holder = by_cid.get(cid).map(|&i| &atts[i]);
            let journaled = journals.contains_key(&format!("{cid}:{IFNAME}"));
            match holder {
                Some(a) if a.status == St::Live || journaled => {
                    if a.status == St::Live && a.ip.as_deref() != Some(&format!("{name}/24")) {
                        bad.push(format!(
                            "allocation {name} of live {cid}, whose ADD returned {:?}",
                            a.ip
                        ));
                    }
                }
                Some(a) => bad.push(format!(
                    "allocation {name} of {cid}, which is {:?} and has no journal",
                    a.status
                )),
                None => bad.push(format!("allocation {name} of unknown container {cid:?}")),
            }
            if allocs.values().any(|c| c == cid) {
                bad.push(format!("{cid} holds several addresses"));
            }
            allocs.insert(name, cid.to_string());
        }
        for a in atts.iter().filter(|a| a.status == St::Live) {
            let ip = a.ip.as_deref().unwrap().trim_end_matches("/24");
            if allocs.get(ip).map(String::as_str) != Some(a.cid.as_str()) {
                bad.push(format!("live {} has no allocation of its {ip}", a.cid));
            }
        }
        let mut live_ips: Vec<&str> = atts
            .iter()
            .filter(|a| a.status == St::Live)
            .filter_map(|a| a.ip.as_deref())
            .collect();
        live_ips.sort();
        for w in live_ips.windows(2) {
            if w[0] == w[1] {
                bad.push(format!("address {} given to two live attachments", w[0]));
            }
        }

        // Host links and pods: every VF netdev exactly once.
        let host_links = self.host.host_links();
        let mut seen: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let vf_of_mac: BTreeMap<String, u32> = (0..VFS)
            .map(|v| (self.base_vf(v).address.clone(), v))
            .collect();
        for l in &host_links {
            match self.base.link(&l.name) {
                None => bad.push(format!("unexpected link in the host: {l:?}")),
                Some(b) => {
                    if let Some(&v) = vf_of_mac.get(&l.address) {
                        seen.entry(v).or_default().push("host".into());
                        if b.address != l.address {
                            bad.push(format!("host link {} carries VF {v}'s MAC", l.name));
                        }
                    } else if l != b {
                        bad.push(format!("host link changed: {l:?}, was {b:?}"));
                    }
                }
            }
        }
        let mut pod_addrs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut released_in_pod = 0;
        for a in atts {
            let Some(pod) = a.pod.as_ref().filter(|p| p.exists()) else {
                if a.status == St::Live {
                    bad.push(format!("live {} has no pod netns", a.cid));
                }
                continue;
            };
            let links = pod.link_snapshots();
            for l in links.iter().filter(|l| l.name != "lo") {
                let Some(&v) = vf_of_mac.get(&l.address) else {
                    bad.push(format!("unknown link in the pod of {}: {l:?}", a.cid));
                    continue;
                };
                seen.entry(v).or_default().push(a.cid.clone());
                if v != a.vf {
                    bad.push(format!("VF {v} in the pod of {} (VF {})", a.cid, a.vf));
                }
                if l.name != IFNAME {
                    bad.push(format!("VF {v} in the pod of {} named {}", a.cid, l.name));
                }
                if matches!(a.status, St::Clean | St::Gone) {
                    bad.push(format!(
                        "VF {v} in the pod of {}, which is {:?}",
                        a.cid, a.status
                    ));
                }
                for ip in l.addrs.iter().filter(|x| x.starts_with(SUBNET_PREFIX)) {
                    pod_addrs.entry(ip.clone()).or_default().push(a.cid.clone());
                    let bare = ip.trim_end_matches("/24");
                    if allocs.get(bare) != Some(&a.cid) {
                        // DEL releases IPAM last, after the netdev left the pod: even a
                        // DEL killed half way never leaves a released address in a pod.
                        released_in_pod += 1;
                        bad.push(format!(
                            "{ip} configured in the pod of {} ({:?}) without its allocation",
                            a.cid, a.status
                        ));
                    }
                }
            }
            if a.status == St::Live {
                let ok = links.iter().any(|l| {
                    l.name == IFNAME
                        && l.up
                        && Some(&l.address) == Some(&self.base_vf(a.vf).address)
                        && l.addrs.iter().any(|x| Some(x) == a.ip.as_ref())
                });
                if !ok {
                    bad.push(format!(
                        "live {}: VF {} not in its pod as {IFNAME}, up, with {:?}: {links:?}",
                        a.cid, a.vf, a.ip
                    ));
                }
            }
        }
        for (ip, cids) in &pod_addrs {
            let holding: Vec<&String> = cids
                .iter()
                .filter(|c| {
                    by_cid
                        .get(c.as_str())
                        .is_some_and(|&i| atts[i].status == St::Live)
                })
                .collect();
            if holding.len() > 1 || (cids.len() > 1 && settled) {
                bad.push(format!("{ip} configured in several pods: {cids:?}"));
            }
        }
        for v in 0..VFS {
            let places = seen.get(&v).cloned().unwrap_or_default();
            if places.len() != 1 {
                bad.push(format!(
                    "VF {v} netdev seen {} times: {places:?}",
                    places.len()
                ));
            }
            let held = atts
                .iter()
                .any(|a| a.vf == v && matches!(a.status, St::Live | St::Pending));
            if !held {
                // Released: exactly as at the start.
                let name = vf_netdev(v);
                for n in [name.as_str(), &vf_peer(v)] {
                    let now = host_links.iter().find(|l| l.name == n);
                    if now != self.base.link(n) {
                        bad.push(format!(
                            "released VF {v}: {n} is {now:?}, was {:?}",
                            self.base.link(n)
                        ));
                    }
                }
                let vfd = self.host.vf(v);
                for f in [vfd.ofed_node(), vfd.ofed_port(), vfd.ofed_policy()]
                    .into_iter()
                    .flatten()
                {
                    let rel = f
                        .strip_prefix(self.host.root())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    let now = std::fs::read_to_string(&f).unwrap_or_default();
                    let was = self
                        .base
                        .ofed
                        .iter()
                        .find(|(p, _)| *p == rel)
                        .map(|(_, c)| c.clone());
                    if Some(&now) != was.as_ref() {
                        bad.push(format!("released VF {v}: {rel} is {now:?}, was {was:?}"));
                    }
                }
            }
        }

        // Device-info files.
        for name in list(&self.devinfo_dir) {
            // `<cid>.json`, or the temp file `.<cid>.json.tmp.<pid>` of an ADD killed
            // while writing it (DEL removes both).
            let (cid, temp) = match name
                .strip_prefix('.')
                .and_then(|n| n.split_once(".json.tmp."))
            {
                Some((cid, _)) => (cid, true),
                None => (name.strip_suffix(".json").unwrap_or(&name), false),
            };
            match by_cid.get(cid).map(|&i| atts[i].status) {
                Some(St::Pending) => {}
                Some(St::Live) if !temp => {}
                s => bad.push(format!("device-info file {name} left ({s:?})")),
            }
        }
        for a in atts.iter().filter(|a| a.status == St::Live) {
            if let Some(p) = &a.devinfo {
                if !p.exists() {
                    bad.push(format!("live {} has no device-info file", a.cid));
                }
            }
        }
        if settled {
            if let Some(a) = atts
                .iter()
                .find(|a| matches!(a.status, St::Pending | St::Clean))
            {
                bad.push(format!(
                    "{} is still {:?} after the DEL phase",
                    a.cid, a.status
                ));
            }
        }
        self.n.released_ip_still_in_a_pod_under_del += released_in_pod;
        self.n.stray_temp_files = self.n.stray_temp_files.max(stray.len());
        if !bad.is_empty() {
            let statuses: Vec<String> = atts
                .iter()
                .filter(|a| a.status != St::Gone)
                .map(|a| format!("{} VF {} {:?} {:?}", a.cid, a.vf, a.status, a.ip))
                .collect();
            panic!(
                "seed {} ({when}): {} invariant violation(s):\n  {}\nattachments not gone:\n  {}\njournals: {:?}\nallocations: {allocs:?}",
                self.seed,
                bad.len(),
                bad.join("\n  "),
                statuses.join("\n  "),
                journals.keys().collect::<Vec<_>>()
            );
        }
    }
}

fn return_vf(host: &EmuHost, base: &HostSnapshot, vf: u32) {
    // Under its original name (not the in-pod name, which several VFs share here), and
    // without refreshing the emulated sysfs, which other plugin processes are reading.
    host.recreate_vf_pair(vf, &vf_netdev(vf), base)
        .expect("re-creating the VF pair");
}

/// Runs one plugin process in the host netns with the environment run_plugin sets, the
/// fail points of `kill`, and SIGKILL after the delay of `Kill::Signal`.
fn invoke(host: &EmuHost, cmd: &str, a: &Att, conf: &Value, kill: Kill) -> Outcome {
    let ns = common::emuhost::open_netns(&host.host_netns_path());
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", &a.cid)
        .env("CNI_IFNAME", IFNAME)
        .env("CNI_PATH", Path::new(BIN).parent().unwrap())
        .env("IB_SRIOV_SYSFS_ROOT", host.root());
    let netns = a.netns();
    if !netns.is_empty() {
        c.env("CNI_NETNS", &netns);
    }
    match kill {
        Kill::Point(p) => {
            c.env("IB_SRIOV_FAILPOINTS", format!("{p}=kill"));
        }
        Kill::Error(p) => {
            c.env("IB_SRIOV_FAILPOINTS", format!("{p}=error"));
        }
        _ => {}
    }
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::emuhost::exec_in_netns_file(&mut c, ns);
    let mut child = c.spawn().expect("starting the plugin");
    let t0 = Instant::now();
    let mut stdin = child.stdin.take().unwrap();
    let data = conf.to_string().into_bytes();
    let w = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let re = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let mut sent = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for the plugin") {
            break st;
        }
        let el = t0.elapsed();
        if let Kill::Signal(d) = kill {
            if !sent && el >= d {
                let _ = child.kill();
                sent = true;
            }
        }
        if el > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd} of {} hangs (over {HANG:?})", a.cid);
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    let _ = w.join();
    let stdout = ro.join().unwrap();
    let stderr = re.join().unwrap();
    let killed = status.signal() == Some(nix::libc::SIGKILL);
    let json = if stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{cmd} of {}: stdout is not JSON ({e}): {stdout:?}", a.cid))
    };
    assert!(
        killed || status.code().is_some(),
        "{cmd} of {} died of {status:?} / stderr:\n{stderr}",
        a.cid
    );
    Outcome {
        ok: status.success(),
        killed,
        code: json["code"].as_u64(),
        json,
        stderr,
    }
}

fn run_job(host: &EmuHost, a: &Att, job: &Job) -> JobResult {
    let mut res = JobResult::default();
    if let Some(k) = job.add {
        res.add = Some((k, invoke(host, "ADD", a, &a.conf, k)));
    }
    if job.retry_add {
        let out = invoke(host, "ADD", a, &a.conf, Kill::None);
        let ok = out.ok;
        res.retry_add = Some(out);
        if ok {
            return res;
        }
    }
    if let Some((mut k, retry)) = job.del {
        for _ in 0..4 {
            let out = invoke(host, "DEL", a, &a.conf, k);
            let done = !out.killed;
            res.dels.push((k, out));
            if done || !retry {
                break;
            }
            k = Kill::None;
        }
    }
    res
}

#[cfg(feature = "failpoints")]
#[test]
fn soak_parallel_add_del_with_kills_and_deleted_netns() {
    let seed = main_seed();
    let rounds: u32 = std::env::var("IB_SRIOV_SOAK_ROUNDS")
        .ok()
        .map(|s| s.trim().parse().expect("IB_SRIOV_SOAK_ROUNDS"))
        .unwrap_or(40);
    println!("soak: seed {seed} (IB_SRIOV_SOAK_SEED={seed} to replay), {rounds} rounds, {VFS} VFs");
    let t0 = Instant::now();
    let host = EmuHost::build(EmuOptions {
        vfs: VFS,
        ..Default::default()
    });
    let state = host.root().join("var-lib-cni-ib-sriov");
    let data = host.root().join("var-lib-cni-networks");
    let devinfo_dir = host.root().join("devinfo");
    std::fs::create_dir_all(&devinfo_dir).unwrap();
    let base = host.snapshot();
    let mut s = Soak {
        host,
        state,
        data,
        devinfo_dir,
        base,
        atts: Vec::new(),
        rng: Rng(seed),
        n: Counts::default(),
        seed,
        round: 0,
    };
    for _ in 0..rounds {
        s.round();
    }

    // The end: DEL every live attachment (some netns deleted first, some DELs killed
    // and retried), then the host is as at the start.
    let (jobs, returns) = s.del_jobs(None, true);
    let results = s.run_phase(&jobs, &returns);
    s.apply(&jobs, results);
    s.check("the end", true);
    assert!(s.atts.iter().all(|a| a.status == St::Gone));
    assert_eq!(
        s.host.snapshot(),
        s.base,
        "seed {seed}: host as at the start"
    );
    let journals: Vec<String> = list(&s.state)
        .into_iter()
        .filter(|n| n != "locks" && n != "vfs" && !n.starts_with('.'))
        .collect();
    assert!(
        journals.is_empty(),
        "seed {seed}: journals left: {journals:?}"
    );
    let allocs = ipam_allocations(&s.data.join(NETWORK));
    assert!(
        allocs.is_empty(),
        "seed {seed}: allocations left: {allocs:?}"
    );
    assert!(
        list(&s.devinfo_dir).is_empty(),
        "seed {seed}: device-info files left"
    );
    // Temp files of writers killed mid-write: harmless (every reader skips them);
    // reported, not failed.
    let temps: Vec<String> = list(&s.state)
        .into_iter()
        .chain(
            list(&s.data.join(NETWORK))
                .into_iter()
                .map(|n| format!("{NETWORK}/{n}")),
        )
        .filter(|n| n.starts_with('.') || n.contains("/."))
        .collect();
    println!("soak: temp files left at the end: {temps:?}");

    let n = &s.n;
    println!("soak: seed {seed}: {:#?}", n);
    println!("soak: wall time {:.1} s", t0.elapsed().as_secs_f64());
    // The run exercised what it is for (40 rounds make each of these near certain; with
    // fewer rounds by env, only the basics are required).
    assert!(n.adds_ok > 0 && n.dels_ok_first_try > 0, "{n:?}");
    if rounds >= 20 {
        assert!(
            n.adds_killed_by_point + n.adds_killed_by_signal > 0,
            "no ADD was killed: {n:?}"
        );
        assert!(
            n.dels_killed_then_retried_ok > 0,
            "no DEL killed and retried: {n:?}"
        );
        assert!(n.netns_deleted_before_del > 0, "no netns deleted: {n:?}");
        assert!(n.adds_busy_101 > 0, "no ADD refused for a busy VF: {n:?}");
    }
}

#[cfg(not(feature = "failpoints"))]
#[test]
fn soak_needs_the_failpoints_feature() {
    panic!("the soak test needs `cargo test --features failpoints` (scripts/test.sh)");
}
