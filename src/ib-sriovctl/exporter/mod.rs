//! `ib-sriov exporter`: serves the node's InfiniBand SR-IOV attachments' counters, the
//! node's plugin state and the plugin's own call metrics at `/metrics`, in the
//! Prometheus text format (exposition format 0.0.4), through the `prometheus-client`
//! crate's encoder and the `tiny_http` server. docs/operations.md "Metrics" lists every
//! metric.
//!
//! Read-only: it reads our journals, sysfs, `/proc`, the built-in IPAM stores, the
//! rebind queue's directory and the call metrics file ([`crate::callmetrics`], through
//! a read-only mapping), and asks rtnetlink in the host netns and in each pod's netns,
//! and RDMA netlink in a pod's netns when the pod's RDMA device is there (exclusive
//! mode; [`stats::rdma_counters_netlink`]) (a socket created there: the scraping thread
//! enters the netns with `setns(2)` only to create it). For such a device it reads the
//! counter files from a sysfs mounted in the pod netns by a short-lived thread in a
//! private mount namespace ([`stats::rdma_counters_in_netns`]), which changes nothing
//! on the host. An attachment whose VF has no RDMA device (an Ethernet VF) reports, in
//! exclusive mode, the RDMA device its pod made on its netdev (an rxe device on `net1`
//! moved into the pod netns, [`stats::pod_rdma_on_netdev`]) as its `rdma_device`, with
//! that device's counters read the same way. It takes no lock, creates, changes and
//! removes no file, so it can never hold up a CNI call; a journal that is being
//! written, removed or is unreadable is counted as such and skipped. Attachments whose
//! pod netns is gone, or is another namespace than the one ADD recorded, are skipped (a
//! pod deleted mid-scrape).
//!
//! Every scrape reads the node afresh: nothing is kept between scrapes, so a deleted
//! attachment's series are gone from the next scrape. The one exception is the doctor's
//! findings ([`findings`]): a plain doctor pass runs on a thread of its own once per
//! `--doctor-interval`, and each scrape serves the last one.

pub mod findings;
pub mod stats;

use crate::callmetrics::{self, BUCKETS_LE, VERBS};
use crate::doctor::collect as dc;
use crate::doctor::paths::Paths;
use crate::journal::{Journal, Step};
use crate::netns::NetNs;
use crate::process::{flag, print_err, print_out, Flag};
use crate::sysfs::Sysfs;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::path::{Path, PathBuf};

/// Usage text.
pub const USAGE: &str =
    "usage: ib-sriov exporter [--listen ADDR:PORT] [--once] [--doctor-interval SECONDS] [--host-root DIR] [--state-dir DIR]...
Serves the node's InfiniBand SR-IOV attachment counters, the plugin's node state and
its own call metrics at http://ADDR:PORT/metrics (Prometheus text format), read-only
(docs/operations.md \"Metrics\").
  --listen ADDR:PORT  where to listen (default 127.0.0.1:9765; an IPv6 address in brackets)
  --once              print one scrape on stdout and exit (no server)
  --doctor-interval SECONDS
                      seconds between the end of one plain doctor pass and the start of the
                      next, whose findings every scrape serves (default 30; 0: no doctor pass)
  --host-root DIR     the node's root as mounted here (default /); journals' netns paths,
                      stateDirs and IPAM stores are read under it
  --state-dir DIR     also read this stateDir (repeatable, as the node names it). Always read:
                      /run/ib-sriov and every stateDir the CNI configurations name";

/// The flags `ib-sriov exporter` takes, in the order its usage text shows them: what
/// [`parse_args`] accepts, and what the usage texts must list (a test holds them to it;
/// a new flag goes here, in [`parse_args`]'s match and in `USAGE`; `ib-sriov --help` is made
/// from this table).
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "--listen",
        value: Some("ADDR:PORT"),
        repeatable: false,
    },
    Flag {
        name: "--once",
        value: None,
        repeatable: false,
    },
    Flag {
        name: "--doctor-interval",
        value: Some("SECONDS"),
        repeatable: false,
    },
    crate::process::HOST_ROOT,
    crate::process::STATE_DIR,
];

/// The default listen address: loopback only (expose it deliberately, see
/// docs/operations.md "Metrics").
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9765";

/// Parsed arguments.
#[derive(Debug, Clone)]
pub struct Args {
    /// `--listen`.
    pub listen: std::net::SocketAddr,
    /// `--once`.
    pub once: bool,
    /// `--doctor-interval`, in seconds (0: no doctor pass).
    pub doctor_interval: u64,
    /// `--host-root`.
    pub host_root: Option<PathBuf>,
    /// `--state-dir`s.
    pub state_dirs: Vec<PathBuf>,
}

/// Parses the arguments after `exporter` (`Err("")` for `--help`).
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        listen: DEFAULT_LISTEN.parse().expect("valid default"),
        once: false,
        doctor_interval: findings::DEFAULT_INTERVAL_SECS,
        host_root: None,
        state_dirs: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        if matches!(x.as_str(), "-h" | "--help") {
            return Err(String::new());
        }
        match flag(FLAGS, x)?.name {
            "--listen" => {
                let v = value("--listen")?;
                a.listen = v
                    .parse()
                    .map_err(|e| format!("--listen {v:?}: not ADDR:PORT ({e})"))?;
            }
            "--once" => a.once = true,
            "--doctor-interval" => {
                let v = value("--doctor-interval")?;
                a.doctor_interval = v.parse().ok().filter(|n| *n <= 86_400).ok_or_else(|| {
                    format!("--doctor-interval {v:?}: not a number of seconds 0..86400")
                })?;
            }
            "--host-root" => a.host_root = Some(PathBuf::from(value("--host-root")?)),
            "--state-dir" => {
                let d = PathBuf::from(value("--state-dir")?);
                if !d.is_absolute() {
                    return Err(format!("--state-dir {}: not an absolute path", d.display()));
                }
                a.state_dirs.push(d)
            }
            other => return Err(format!("{other}: in FLAGS but not parsed")),
        }
    }
    Ok(a)
}

/// The paths read, as `ib-sriov doctor` reads them ([`crate::doctor::paths::Paths`]).
pub fn paths(a: &Args) -> Paths {
    let root = a.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let sys = match a.host_root {
        Some(_) => None,
        None => Some(Sysfs::from_env().root().to_path_buf()),
    };
    let mut p = Paths::under(&root, sys);
    p.extra_state = a.state_dirs.clone();
    p
}

/// Runs the exporter with the arguments after `exporter`; returns the exit status.
pub fn run(args: &[String]) -> i32 {
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            print_out(&format!("{USAGE}\n"));
            return 0;
        }
        Err(e) => {
            print_err(&format!("ib-sriov exporter: {e}\n{USAGE}\n"));
            return 2;
        }
    };
    if let Some(r) = &a.host_root {
        if !r.is_dir() {
            print_err(&format!(
                "ib-sriov exporter: --host-root {}: not a directory\n",
                r.display()
            ));
            return 2;
        }
    }
    let paths = paths(&a);
    if a.once {
        let mut s = scrape(&paths);
        if a.doctor_interval > 0 {
            s.doctor = Some(findings::run_pass(&paths));
        }
        print_out(&render(&s));
        return 0;
    }
    let doctor = (a.doctor_interval > 0)
        .then(|| findings::start(&paths, std::time::Duration::from_secs(a.doctor_interval)));
    let scrape = |paths: &Paths| {
        let mut s = scrape(paths);
        s.doctor = doctor
            .as_ref()
            .and_then(|d| d.lock().ok().and_then(|g| g.clone()));
        s
    };
    let server = match tiny_http::Server::http(a.listen) {
        Ok(s) => s,
        Err(e) => {
            print_err(&format!(
                "ib-sriov exporter: cannot listen on {}: {e}\n",
                a.listen
            ));
            return 1;
        }
    };
    print_err(&format!(
        "ib-sriov exporter: serving http://{}/metrics\n",
        a.listen
    ));
    for req in server.incoming_requests() {
        let (status, body, ctype) = match (req.method(), req.url()) {
            (tiny_http::Method::Get, "/metrics") => (200, render(&scrape(&paths)), CONTENT_TYPE),
            (tiny_http::Method::Get, "/") => (
                200,
                "ib-sriov exporter: see /metrics\n".to_string(),
                "text/plain; charset=utf-8",
            ),
            _ => (404, "not found\n".to_string(), "text/plain; charset=utf-8"),
        };
        let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("valid header");
        let resp = tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(header);
        if let Err(e) = req.respond(resp) {
            print_err(&format!("ib-sriov exporter: answering a scrape: {e}\n"));
        }
    }
    0
}

/// The `Content-Type` of `/metrics` (Prometheus text exposition format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One attachment's labels and counters.
#[derive(Debug, Clone, Default)]
pub struct Attachment {
    /// Labels, in order: namespace, pod, uid, network, ifname, vf, pf, guid, rdma_device,
    /// node_guid, port_guid.
    pub labels: Vec<(&'static str, String)>,
    /// Container ID (not a label: the pod names it).
    pub container_id: String,
    /// The pod's IPoIB netdev statistics.
    pub netdev: Option<stats::NetdevStats>,
    /// The PF's statistics of the VF (`IFLA_VF_STATS`), by kind.
    pub vf: Vec<(&'static str, u64)>,
    /// RDMA counters.
    pub rdma: Vec<stats::RdmaCounter>,
}

/// One scrape: everything read from the node.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Live attachments (complete journals of this boot whose pod netns exists).
    pub attachments: Vec<Attachment>,
    /// Journals by state: `complete`, `incomplete`, `other_boot`, `unreadable`.
    pub journals: Vec<(&'static str, u64)>,
    /// Complete journals of this boot whose pod netns is gone (skipped).
    pub pods_gone: u64,
    /// VFs per PF: (PF, held, free).
    pub vfs: Vec<(String, u64, u64)>,
    /// Rebind queue: (entries, age of the oldest in seconds).
    pub rebind: (u64, f64),
    /// IPAM: (network, range, used, free when known).
    pub ipam: Vec<(String, String, u64, Option<u64>)>,
    /// The plugin's call metrics, summed over the stateDirs.
    pub calls: callmetrics::Counts,
    /// Age in seconds of the oldest incomplete journal of this boot (now minus its
    /// file's mtime, the last step ADD or its rollback journaled); 0 when none.
    pub oldest_incomplete: f64,
    /// The last doctor pass ([`findings`]); `None` with `--doctor-interval 0`.
    pub doctor: Option<findings::Pass>,
}

/// Reads the node once (see the module docs).
pub fn scrape(paths: &Paths) -> Snapshot {
    let mut notes = Vec::new();
    let found = crate::doctor::holders::discover(paths, &paths.extra_state);
    let journals = dc::journal_list(&found, paths, &mut notes);
    let unreadable = notes
        .iter()
        .filter(|n| matches!(n, dc::Note::BadJournal(..)))
        .count() as u64;
    let sysfs = Sysfs::new(&paths.sys);
    let mut snap = Snapshot::default();
    let (mut complete, mut incomplete, mut other) = (0u64, 0u64, 0u64);
    let mut held = std::collections::HashSet::new();
    // The PF's VF statistics, read once per PF netdev.
    let mut host = stats::Route::open().ok();
    let mut pf_vf_stats: std::collections::HashMap<
        String,
        Vec<(u32, Vec<netlink_packet_route::link::VfStats>)>,
    > = Default::default();
    let mut guids = VfGuidTables::new(&sysfs);
    for j in &journals {
        if crate::boot::is_other(j.boot_id.as_deref()) {
            other += 1;
            continue;
        }
        held.insert(j.vf);
        if !j.complete {
            incomplete += 1;
            if let Some(age) = journal_age(&found, paths, j) {
                snap.oldest_incomplete = snap.oldest_incomplete.max(age);
            }
            continue;
        }
        complete += 1;
        match attachment(
            paths,
            &sysfs,
            j,
            host.as_mut(),
            &mut pf_vf_stats,
            &mut guids,
        ) {
            Some(a) => snap.attachments.push(a),
            None => snap.pods_gone += 1,
        }
    }
    snap.attachments.sort_by(|a, b| a.labels.cmp(&b.labels));
    snap.journals = vec![
        ("complete", complete),
        ("incomplete", incomplete),
        ("other_boot", other),
        ("unreadable", unreadable),
    ];
    for pf in sysfs.sriov_pfs().unwrap_or_default() {
        let vfs = sysfs.virtfns(pf).unwrap_or_default();
        let h = vfs.iter().filter(|(_, a)| held.contains(a)).count() as u64;
        snap.vfs.push((pf.to_string(), h, vfs.len() as u64 - h));
    }
    // The rebind queue of each stateDir: entries and the oldest one's age.
    let now = std::time::SystemTime::now();
    for (dir, _, _) in &found.state_dirs {
        let q = crate::journal::JournalStore::new(dir).rebind_queue_dir();
        let Ok(rd) = std::fs::read_dir(&q) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            snap.rebind.0 += 1;
            if let Some(age) = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| now.duration_since(t).ok())
            {
                snap.rebind.1 = snap.rebind.1.max(age.as_secs_f64());
            }
        }
    }
    for n in dc::ipam(paths, &journals, &mut notes) {
        snap.ipam.push((
            n.network,
            n.range.unwrap_or_default(),
            n.allocated as u64,
            n.total
                .map(|t| (t.saturating_sub(n.allocated as u128)).min(u64::MAX as u128) as u64),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (dir, _, _) in &found.state_dirs {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(dir) {
            if !seen.insert((m.dev(), m.ino())) {
                continue;
            }
        }
        if let Ok(Some(c)) = callmetrics::read(dir) {
            snap.calls.add(&c);
        }
    }
    snap
}

/// The age in seconds of journal `j`'s file (now minus its mtime): the first of its
/// stateDirs (and the legacy directory) holding a file of its name; `None` when none
/// can be read (removed meanwhile).
fn journal_age(found: &crate::doctor::holders::Found, paths: &Paths, j: &Journal) -> Option<f64> {
    let name = crate::journal::JournalStore::file_name(&j.container_id, &j.ifname);
    let m = found
        .state_dirs
        .iter()
        .map(|(d, _, _)| d.as_path())
        .chain([paths.legacy.as_path()])
        .find_map(|d| std::fs::symlink_metadata(d.join(&name)).ok())?;
    let t = m.modified().ok()?;
    Some(
        std::time::SystemTime::now()
            .duration_since(t)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default(),
    )
}

/// The PFs' VF tables (`IFLA_VFINFO_LIST` of an RTM_GETLINK of the PF's netdev,
/// include/uapi/linux/if_link.h), read once per PF and scrape over one rtnetlink socket
/// in the node's netns, the way `ib-sriov doctor` reads them
/// ([`dc::pf_vf_configs`]): the source of the `node_guid` and `port_guid` labels.
struct VfGuidTables<'a> {
    sysfs: &'a Sysfs,
    nl: Option<crate::netlink::Netlink>,
    tables: std::collections::HashMap<crate::types::PciAddress, Vec<crate::netlink::vf::VfConfig>>,
}

impl<'a> VfGuidTables<'a> {
    fn new(sysfs: &'a Sysfs) -> Self {
        VfGuidTables {
            sysfs,
            nl: crate::netlink::Netlink::open().ok(),
            tables: Default::default(),
        }
    }

    /// The effective (node, port) GUIDs of journal `j`'s VF, as the doctor shows them
    /// ([`dc::attachment_node_guid`], [`dc::attachment_port_guid`]), the port GUID
    /// falling back to the one in the pod netdev's IPoIB hardware address (`hwaddr`,
    /// bytes 12..20, [`crate::types::Guid::from_ipoib_hwaddr`]) when no other source has
    /// it; each `""` when unknown.
    fn of(&mut self, j: &Journal, hwaddr: &[u8]) -> (String, String) {
        let sysfs = self.sysfs;
        let nl = self.nl.as_ref();
        let table = self.tables.entry(j.pf).or_insert_with(|| {
            nl.and_then(|nl| {
                let pf = dc::pf_of(sysfs, Some(nl), j.pf);
                dc::pf_vf_configs(nl, &pf, &mut Vec::new())
            })
            .unwrap_or_default()
        });
        let ids = crate::vfguid::VfGuids::read_ids(sysfs, j.pf, j.vf_index, table);
        let node = dc::attachment_node_guid(j, ids.guid(crate::sysfs::GuidKind::Node));
        let port = dc::attachment_port_guid(j, ids.guid(crate::sysfs::GuidKind::Port))
            .or_else(|| crate::types::Guid::from_ipoib_hwaddr(hwaddr));
        let s = |g: Option<crate::types::Guid>| g.map(|g| g.to_string()).unwrap_or_default();
        (s(node), s(port))
    }
}

/// The GUID ADD set (journal), else the one in the pod netdev's IPoIB hardware address:
/// the `guid` label (kept as it was; `port_guid` is the effective one).
fn guid_of(j: &Journal, hwaddr: &[u8]) -> String {
    j.steps
        .iter()
        .find_map(|s| match s {
            Step::Guid { want, .. } => Some(want.to_string()),
            _ => None,
        })
        .or_else(|| crate::types::Guid::from_ipoib_hwaddr(hwaddr).map(|g| g.to_string()))
        .unwrap_or_default()
}

/// One live attachment's labels and counters; `None` when its pod netns is gone or is
/// not the one ADD recorded (the pod was deleted, perhaps while this scrape ran).
fn attachment(
    paths: &Paths,
    sysfs: &Sysfs,
    j: &Journal,
    host: Option<&mut stats::Route>,
    pf_cache: &mut std::collections::HashMap<
        String,
        Vec<(u32, Vec<netlink_packet_route::link::VfStats>)>,
    >,
    guids: &mut VfGuidTables,
) -> Option<Attachment> {
    use netlink_packet_route::link::VfStats;
    let mut a = Attachment {
        container_id: j.container_id.clone(),
        ..Attachment::default()
    };
    let mut hwaddr = Vec::new();
    let mut pod_ns = None;
    if !j.vfio {
        let p = j.netns.as_deref().filter(|p| !p.is_empty())?;
        let ns = NetNs::open(paths.host(Path::new(p))).ok()?;
        if let Some(id) = j.netns_id {
            if crate::plugin::steps::ns_id(&ns).ok() != Some(id) {
                return None;
            }
        }
        // The socket is created in the pod netns; the pod may go at any time after
        // (its counters then read as the last the kernel had, or nothing).
        let route = ns.run_in(stats::Route::open).ok()?.ok();
        if let Some(mut r) = route {
            if let Ok(Some(l)) = r.link(&j.ifname, false) {
                a.netdev = l.stats;
                hwaddr = l.address;
            }
        }
        pod_ns = Some(ns);
    }
    let pod = j.pod.clone().unwrap_or(crate::journal::PodRef {
        namespace: String::new(),
        name: String::new(),
        uid: String::new(),
    });
    let mut rdma = j
        .rdma_device()
        .map(str::to_string)
        .or_else(|| j.rdma_devices.first().cloned())
        .unwrap_or_default();
    // An attachment without an RDMA device of its VF (an Ethernet VF, e.g. igbvf) whose
    // pod made one on its netdev: an rxe device created on `net1` and moved into the
    // pod netns, in exclusive RDMA netns mode. Only in exclusive mode: in shared mode
    // every netns sees every device, and every pod's netdev may be called `net1`.
    let mut pod_rdma = false;
    if rdma.is_empty() && !hwaddr.is_empty() {
        if let Some(ns) = pod_ns.as_ref() {
            if let Ok(Ok(mut sock)) = ns.run_in(crate::rdma::RdmaSocket::open) {
                use crate::rdma::{NetnsMode, RdmaOps};
                let exclusive = sock.netns_mode().ok() == Some(NetnsMode::Exclusive);
                if exclusive && sock.list_devices().is_ok_and(|d| !d.is_empty()) {
                    if let Some((dev, counters)) = stats::pod_rdma_on_netdev(ns.fd(), &j.ifname) {
                        rdma = dev;
                        a.rdma = counters;
                        pod_rdma = true;
                    }
                }
            }
        }
    }
    let (node_guid, port_guid) = guids.of(j, &hwaddr);
    a.labels = vec![
        ("namespace", pod.namespace),
        ("pod", pod.name),
        ("uid", pod.uid),
        ("network", j.network.clone()),
        ("ifname", j.ifname.clone()),
        ("vf", j.vf.to_string()),
        ("pf", j.pf.to_string()),
        ("guid", guid_of(j, &hwaddr)),
        ("rdma_device", rdma.clone()),
        ("node_guid", node_guid),
        ("port_guid", port_guid),
    ];
    if let (Some(pf), Some(host)) = (j.pf_netdev.as_deref(), host) {
        let table = pf_cache.entry(pf.to_string()).or_insert_with(|| {
            host.link(pf, true)
                .ok()
                .flatten()
                .map(|l| l.vf_stats)
                .unwrap_or_default()
        });
        if let Some((_, st)) = table.iter().find(|(i, _)| *i == j.vf_index.0) {
            for s in st {
                let kv = match s {
                    VfStats::RxPackets(v) => ("rx_packets", *v),
                    VfStats::TxPackets(v) => ("tx_packets", *v),
                    VfStats::RxBytes(v) => ("rx_bytes", *v),
                    VfStats::TxBytes(v) => ("tx_bytes", *v),
                    VfStats::Broadcast(v) => ("broadcast", *v),
                    VfStats::Multicast(v) => ("multicast", *v),
                    VfStats::RxDropped(v) => ("rx_dropped", *v),
                    VfStats::TxDropped(v) => ("tx_dropped", *v),
                    _ => continue,
                };
                a.vf.push(kv);
            }
        }
    }
    if !rdma.is_empty() && !pod_rdma {
        let vf_dir = sysfs.pci_device_dir(j.vf);
        a.rdma = stats::rdma_counters(&vf_dir, &rdma);
        // Exclusive netns mode: ADD moved the device into the pod netns, where the
        // host's sysfs cannot see it; ask RDMA netlink from a socket created there.
        // Every counter from a sysfs mounted in the pod netns when the device is there
        // (its hw counters answered over netlink say so), else those hw counters.
        if !vf_dir.join("infiniband").join(&rdma).exists() {
            if let Some((ns, Ok(Ok(mut sock)))) = pod_ns
                .as_ref()
                .map(|ns| (ns, ns.run_in(crate::rdma::RdmaSocket::open)))
            {
                a.rdma = stats::rdma_counters_netlink(&mut sock, &rdma);
                if !a.rdma.is_empty() {
                    if let Some(all) =
                        stats::rdma_counters_in_netns(ns.fd(), &rdma).filter(|c| !c.is_empty())
                    {
                        a.rdma = all;
                    }
                }
            }
        }
    }
    Some(a)
}

/// The snapshot as one prometheus-client collector.
#[derive(Debug)]
struct Collect(Snapshot);

type Labels = Vec<(&'static str, String)>;

fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in series {
        let me = m.encode_family(labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*v).encode(me)?,
            _ => ConstGauge::new(*v as i64).encode(me)?,
        }
    }
    Ok(())
}

fn gauge_f(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// Per-attachment netdev counters: (metric, help, field).
/// A metric name, its help text, and the field of [`stats::NetdevStats`] it exports.
type NetdevMetric = (&'static str, &'static str, fn(&stats::NetdevStats) -> u64);

const NETDEV: [NetdevMetric; 9] = [
    ("ib_sriov_netdev_receive_bytes", "Bytes the pod's IPoIB netdev received (IFLA_STATS64 rx_bytes, struct rtnl_link_stats64, include/uapi/linux/if_link.h; read over rtnetlink in the pod netns).", |s| s.rx_bytes),
    ("ib_sriov_netdev_transmit_bytes", "Bytes the pod's IPoIB netdev sent (IFLA_STATS64 tx_bytes, read in the pod netns).", |s| s.tx_bytes),
    ("ib_sriov_netdev_receive_packets", "Packets the pod's IPoIB netdev received (IFLA_STATS64 rx_packets, read in the pod netns).", |s| s.rx_packets),
    ("ib_sriov_netdev_transmit_packets", "Packets the pod's IPoIB netdev sent (IFLA_STATS64 tx_packets, read in the pod netns).", |s| s.tx_packets),
    ("ib_sriov_netdev_receive_errors", "Bad packets the pod's IPoIB netdev received (IFLA_STATS64 rx_errors, read in the pod netns).", |s| s.rx_errors),
    ("ib_sriov_netdev_transmit_errors", "Packets the pod's IPoIB netdev failed to send (IFLA_STATS64 tx_errors, read in the pod netns).", |s| s.tx_errors),
    ("ib_sriov_netdev_receive_dropped", "Received packets the pod's IPoIB netdev dropped (IFLA_STATS64 rx_dropped, read in the pod netns).", |s| s.rx_dropped),
    ("ib_sriov_netdev_transmit_dropped", "Packets the pod's IPoIB netdev dropped on send (IFLA_STATS64 tx_dropped, read in the pod netns).", |s| s.tx_dropped),
    ("ib_sriov_netdev_receive_multicast_packets", "Multicast packets the pod's IPoIB netdev received (IFLA_STATS64 multicast, read in the pod netns).", |s| s.multicast),
];

/// RDMA port counters in 4-byte words that are exported in bytes
/// (Documentation/ABI/stable/sysfs-class-infiniband: `port_xmit_data`, `port_rcv_data`
/// are the data octets "divided by 4"; mlx5 fills them with the vport's octet counts
/// shifted right by 2, drivers/infiniband/hw/mlx5/mad.c).
const RDMA_WORDS: [(&str, &str, &str); 2] = [
    ("port_xmit_data", "ib_sriov_rdma_port_transmit_bytes", "Bytes the VF's RDMA port sent: sysfs /sys/class/infiniband/<dev>/ports/<port>/counters/port_xmit_data times 4 (the file counts 4-byte words, Documentation/ABI/stable/sysfs-class-infiniband)."),
    ("port_rcv_data", "ib_sriov_rdma_port_receive_bytes", "Bytes the VF's RDMA port received: sysfs .../ports/<port>/counters/port_rcv_data times 4 (4-byte words, Documentation/ABI/stable/sysfs-class-infiniband)."),
];

impl prometheus_client::collector::Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let info: Vec<(Labels, u64)> = s
            .attachments
            .iter()
            .map(|a| (a.labels.clone(), 1))
            .collect();
        family(&mut enc, "ib_sriov_attachment_info", "One series per live attachment (a complete journal of this boot whose pod netns exists), labelled with the pod (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID as ADD recorded them), network, ifname, VF and PF PCI address, guid (the GUID ADD set, else the pod IPoIB address's), RDMA device, and the VF's effective node_guid and port_guid whoever set them (journal, else the PF's VF table IFLA_VF_IB_NODE_GUID/IFLA_VF_IB_PORT_GUID, else MLNX_OFED <PF>/sriov/<N>/node and port; as ib-sriov doctor shows them); value 1.", MetricType::Gauge, &info)?;
        for (name, help, f) in NETDEV {
            let series: Vec<(Labels, u64)> = s
                .attachments
                .iter()
                .filter_map(|a| a.netdev.as_ref().map(|n| (a.labels.clone(), f(n))))
                .collect();
            family(&mut enc, name, help, MetricType::Counter, &series)?;
        }
        let vf_keys = [
            "rx_bytes",
            "tx_bytes",
            "rx_packets",
            "tx_packets",
            "broadcast",
            "multicast",
            "rx_dropped",
            "tx_dropped",
        ];
        for k in vf_keys {
            let series: Vec<(Labels, u64)> = s
                .attachments
                .iter()
                .filter_map(|a| {
                    a.vf.iter()
                        .find(|(n, _)| *n == k)
                        .map(|(_, v)| (a.labels.clone(), *v))
                })
                .collect();
            let name = format!("ib_sriov_vf_{k}");
            let help = format!("The PF's count of {k} for the VF (IFLA_VF_STATS_{}, IFLA_VF_STATS of RTM_GETLINK on the PF netdev with RTEXT_FILTER_VF, include/uapi/linux/if_link.h).", k.to_uppercase());
            family(&mut enc, &name, &help, MetricType::Counter, &series)?;
        }
        for (file, name, help) in RDMA_WORDS {
            let series: Vec<(Labels, u64)> = s
                .attachments
                .iter()
                .flat_map(|a| {
                    a.rdma
                        .iter()
                        .filter(|c| c.group == "counters" && c.name == file)
                        .map(|c| {
                            let mut l = a.labels.clone();
                            l.push(("port", c.port.clone()));
                            (l, c.value.saturating_mul(4))
                        })
                })
                .collect();
            family(&mut enc, name, help, MetricType::Counter, &series)?;
        }
        for (group, name, help) in [
            ("counters", "ib_sriov_rdma_port_counter", "An RDMA port counter of the VF's RDMA device as sysfs gives it, unconverted (/sys/class/infiniband/<dev>/ports/<port>/counters/<counter>, Documentation/ABI/stable/sysfs-class-infiniband; port_xmit_data and port_rcv_data count 4-byte words: see ib_sriov_rdma_port_*_bytes)."),
            ("hw_counters", "ib_sriov_rdma_hw_counter", "An RDMA hardware counter of the VF's RDMA device (/sys/class/infiniband/<dev>/ports/<port>/hw_counters/<counter>, or the device's own hw_counters with port 0; Documentation/ABI/stable/sysfs-class-infiniband, names per driver, e.g. mlx5: drivers/infiniband/hw/mlx5/counters.c). When the device is in the pod netns (RDMA exclusive netns mode), the same per-port counters read over RDMA netlink in the pod netns (RDMA_NLDEV_CMD_STAT_GET, include/uapi/rdma/rdma_netlink.h)."),
        ] {
            let series: Vec<(Labels, u64)> = s
                .attachments
                .iter()
                .flat_map(|a| {
                    a.rdma.iter().filter(|c| c.group == group).map(|c| {
                        let mut l = a.labels.clone();
                        l.push(("port", c.port.clone()));
                        l.push(("counter", c.name.clone()));
                        (l, c.value)
                    })
                })
                .collect();
            family(&mut enc, name, help, MetricType::Counter, &series)?;
        }
        // Per node.
        let j: Vec<(Labels, u64)> = s
            .journals
            .iter()
            .map(|(st, n)| (vec![("state", st.to_string())], *n))
            .collect();
        family(&mut enc, "ib_sriov_journals", "Attachment journals in the stateDirs by state: complete (ADD finished), incomplete (ADD running or interrupted: DEL or GC will undo it), other_boot (written before the last reboot), unreadable.", MetricType::Gauge, &j)?;
        gauge_f(
            &mut enc,
            "ib_sriov_journal_oldest_incomplete_age_seconds",
            "Age of the oldest incomplete journal of this boot (ADD running, or interrupted and left for DEL or GC to undo): now minus its file's mtime, the last step ADD or its rollback journaled; 0 when none.",
            &[(vec![], s.oldest_incomplete)],
        )?;
        family(&mut enc, "ib_sriov_attachments_live", "Live attachments: complete journals of this boot whose pod netns exists (the series of ib_sriov_attachment_info).", MetricType::Gauge, &[(vec![], s.attachments.len() as u64)])?;
        family(&mut enc, "ib_sriov_attachments_pod_gone", "Complete journals of this boot whose pod netns is gone or replaced (the pod was deleted and DEL has not run yet); not exported per attachment.", MetricType::Gauge, &[(vec![], s.pods_gone)])?;
        let vfs: Vec<(Labels, u64)> = s
            .vfs
            .iter()
            .flat_map(|(pf, h, f)| {
                [
                    (vec![("pf", pf.clone()), ("state", "held".to_string())], *h),
                    (vec![("pf", pf.clone()), ("state", "free".to_string())], *f),
                ]
            })
            .collect();
        family(
            &mut enc,
            "ib_sriov_vfs",
            "VFs of each SR-IOV PF (sysfs <PF>/virtfn*): held by a journal of this boot, or free.",
            MetricType::Gauge,
            &vfs,
        )?;
        family(&mut enc, "ib_sriov_rebind_queue_length", "Entries in the driver rebind queue (<stateDir>/locks/rebind.queue): calls rebinding a VF driver now or waiting to.", MetricType::Gauge, &[(vec![], s.rebind.0)])?;
        gauge_f(
            &mut enc,
            "ib_sriov_rebind_queue_oldest_wait_seconds",
            "Age of the oldest entry in the driver rebind queue (its file's mtime), 0 when empty.",
            &[(vec![], s.rebind.1)],
        )?;
        let used: Vec<(Labels, u64)> = s
            .ipam
            .iter()
            .map(|(n, r, u, _)| (vec![("network", n.clone()), ("range", r.clone())], *u))
            .collect();
        family(&mut enc, "ib_sriov_ipam_addresses_used", "Addresses the built-in IPAM (ib-sriov-ipam) has allocated in the network's store (<dataDir>/<network>).", MetricType::Gauge, &used)?;
        let free: Vec<(Labels, u64)> = s
            .ipam
            .iter()
            .filter_map(|(n, r, u, f)| {
                f.map(|f| {
                    let _ = u;
                    (vec![("network", n.clone()), ("range", r.clone())], f)
                })
            })
            .collect();
        family(&mut enc, "ib_sriov_ipam_addresses_free", "Addresses still free in the built-in IPAM's ranges (allocatable minus used), when a journal's configuration names the range.", MetricType::Gauge, &free)?;
        if let Some(d) = &s.doctor {
            doctor_series(&mut enc, d)?;
        }
        // The plugin's own calls.
        let mut calls: Vec<(Labels, u64)> = Vec::new();
        for (verb, vc) in VERBS.iter().zip(&s.calls.verbs) {
            for (code, n) in &vc.by_code {
                let code = code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "other".into());
                calls.push((vec![("verb", verb.to_string()), ("code", code)], *n));
            }
        }
        family(&mut enc, "ib_sriov_cni_calls", "CNI calls of the ib-sriov plugin on this node since boot, by verb (CNI_COMMAND) and result code (0 success, else the CNI error code; other: a code outside the known ones), from <stateDir>/locks/calls.metrics.", MetricType::Counter, &calls)?;
        family(&mut enc, "ib_sriov_gc_removed_attachments", "Stale attachments CNI GC restored and removed since boot (from <stateDir>/locks/calls.metrics); GC runs are ib_sriov_cni_calls_total{verb=\"GC\"}.", MetricType::Counter, &[(vec![], s.calls.gc_removed)])?;
        let mut m = enc.encode_descriptor(
            "ib_sriov_cni_call_duration_seconds",
            "Duration of the ib-sriov plugin's CNI calls, from the process start to the result written, by verb, since boot (from <stateDir>/locks/calls.metrics).",
            None,
            MetricType::Histogram,
        )?;
        for (verb, vc) in VERBS.iter().zip(&s.calls.verbs) {
            // Per-bucket counts: the encoder makes them cumulative.
            let buckets: Vec<(f64, u64)> = BUCKETS_LE
                .iter()
                .copied()
                .zip(vc.buckets.iter().copied())
                .collect();
            let labels = vec![("verb", verb.to_string())];
            m.encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    vc.sum_us as f64 / 1e6,
                    vc.count(),
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}

/// The series of the last doctor pass (docs/operations.md "Doctor's findings").
fn doctor_series(enc: &mut DescriptorEncoder, d: &findings::Pass) -> Result<(), std::fmt::Error> {
    let (counts, each, dropped) = findings::series(d);
    family(enc, "ib_sriov_doctor_up", "1 when the exporter's last plain ib-sriov doctor pass completed, 0 when it failed (the error is on the exporter's stderr).", MetricType::Gauge, &[(vec![], u64::from(d.up))])?;
    gauge_f(enc, "ib_sriov_doctor_run_timestamp_seconds", "When the last doctor pass ended, in seconds since the Unix epoch (a pass runs every --doctor-interval seconds after the end of the last).", &[(vec![], d.at)])?;
    gauge_f(
        enc,
        "ib_sriov_doctor_run_duration_seconds",
        "How long the last doctor pass ran, in seconds.",
        &[(vec![], d.duration)],
    )?;
    let counts: Vec<(Labels, u64)> = counts
        .into_iter()
        .map(|((code, sev), n)| (vec![("code", code), ("severity", sev.to_string())], n))
        .collect();
    family(enc, "ib_sriov_doctor_findings", "Findings of the last plain ib-sriov doctor pass (no --conf) by code and severity (docs/operations.md \"Findings\"); a code without findings has no series.", MetricType::Gauge, &counts)?;
    let each: Vec<(Labels, u64)> = each
        .into_iter()
        .map(|(code, sev, subject)| {
            (
                vec![
                    ("code", code),
                    ("severity", sev.to_string()),
                    ("subject", subject),
                ],
                1,
            )
        })
        .collect();
    family(enc, "ib_sriov_doctor_finding", "1 for each finding of the last doctor pass whose subject has bounded cardinality (a VF, VFs sharing a GUID, a PF, a live attachment, an IPAM store, or a fixed subject; docs/operations.md \"Doctor's findings\"), at most 1024 series.", MetricType::Gauge, &each)?;
    family(enc, "ib_sriov_doctor_finding_series_dropped", "Findings of the last doctor pass left out of ib_sriov_doctor_finding by its cap of 1024 series (the least severe first).", MetricType::Gauge, &[(vec![], dropped)])?;
    Ok(())
}

/// The snapshot in the Prometheus text format.
pub fn render(s: &Snapshot) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Collect(s.clone())));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &reg) {
        out.push_str(&format!("# encoding failed: {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_parsed_or_refused() {
        let a = parse_args(&["--listen".into(), "[::1]:9100".into(), "--once".into()]).unwrap();
        assert_eq!(a.listen.to_string(), "[::1]:9100");
        assert!(a.once);
        assert!(parse_args(&["--listen".into(), "nope".into()]).is_err());
        assert!(parse_args(&["--state-dir".into(), "rel".into()]).is_err());
        assert!(parse_args(&["--bogus".into()]).is_err());
        assert_eq!(parse_args(&[]).unwrap().listen.to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn rendering_converts_words_to_bytes_and_names_the_calls() {
        let mut s = Snapshot::default();
        s.attachments.push(Attachment {
            labels: vec![("pod", "p1".into())],
            rdma: vec![stats::RdmaCounter {
                port: "1".into(),
                group: "counters",
                name: "port_xmit_data".into(),
                value: 250,
            }],
            ..Attachment::default()
        });
        s.calls.verbs[0].by_code = vec![(Some(0), 3), (None, 1)];
        s.calls.verbs[0].buckets[2] = 4;
        s.calls.verbs[0].sum_us = 8000;
        let t = render(&s);
        assert!(
            t.contains("ib_sriov_rdma_port_transmit_bytes_total{pod=\"p1\",port=\"1\"} 1000"),
            "{t}"
        );
        assert!(
            t.contains("ib_sriov_cni_calls_total{verb=\"ADD\",code=\"0\"} 3"),
            "{t}"
        );
        assert!(
            t.contains("ib_sriov_cni_calls_total{verb=\"ADD\",code=\"other\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("ib_sriov_cni_call_duration_seconds_bucket{verb=\"ADD\",le=\"0.005\"} 4"),
            "{t}"
        );
        assert!(
            t.contains("ib_sriov_cni_call_duration_seconds_sum{verb=\"ADD\"} 0.008"),
            "{t}"
        );
        assert!(
            t.contains("# HELP ib_sriov_rdma_port_transmit_bytes"),
            "{t}"
        );
    }
}
