//! `ib-sriov doctor`: the node's InfiniBand SR-IOV state as the plugin sees it, and what
//! is wrong with it (docs/operations.md "Diagnosing a node"). Read-only: it writes nothing, takes no
//! lock, changes no device. A CNI runtime never passes arguments, so `doctor` as the
//! first argument cannot collide with a CNI invocation.
//!
//! ```text
//! ib-sriov doctor [--json] [--conf FILE] [--host-root DIR] [--state-dir DIR]... [--guid-file FILE] [--cni-path DIRS]
//! ```
//! Exit status: 0 with no finding of severity `error`, 1 with one, 2 for bad arguments.

pub mod cnipath;
pub mod collect;
pub mod findings;
pub mod holders;
pub mod input;
pub mod kernel;
pub mod node_defaults;
pub mod paths;
pub mod report;
pub mod text;

use crate::process::{flag, print_err, print_out, Flag};
use report::{ConfCheck, Finding, Report, Severity};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Largest `--conf` file read, in bytes (the plugin's stdin bound).
const MAX_CONF: u64 = 4 << 20;

/// Usage text.
pub const USAGE: &str =
    "usage: ib-sriov doctor [--json] [--conf FILE] [--host-root DIR] [--state-dir DIR]... [--guid-file FILE] [--cni-path DIRS]
  --json           the report as JSON (schemaVersion 1, docs/operations.md \"Diagnosing a node\")
  --conf FILE      also validate a network configuration or conflist (a node's file) as ADD would, or the
                   NetworkAttachmentDefinitions of a YAML file (kubectl get net-attach-def NAME -o yaml)
  --host-root DIR  read /sys, /proc, /run and /var/lib/cni under DIR (kubectl debug node: /host)
  --state-dir DIR  also read the journals in this stateDir (repeatable; under the host root). Always read:
                   /run/ib-sriov and every stateDir named by the configurations in /etc/cni/net.d,
                   /etc/cni/multus/net.d and the runtimes' caches /var/lib/cni/results, /var/lib/cni/multus/results
  --guid-file FILE the networks' guidFile when not the default /etc/sriov-operator/infiniband/guids (under the host root)
  --cni-path DIRS  where --conf looks for delegated IPAM plugins, as CNI_PATH (colon-separated, under the host root;
                   default: what the node's containerd, CRI-O and Multus configurations name, else /opt/cni/bin and /var/lib/cni/bin)";

/// The flags `ib-sriov doctor` takes, in the order [`USAGE`] shows them: what
/// [`parse_args`] accepts, and what the usage texts must list (a test holds them to it;
/// a new flag goes here, in [`parse_args`]'s match and in `USAGE`; `ib-sriov --help` is made
/// from this table).
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "--json",
        value: None,
        repeatable: false,
    },
    Flag {
        name: "--conf",
        value: Some("FILE"),
        repeatable: false,
    },
    crate::process::HOST_ROOT,
    crate::process::STATE_DIR,
    Flag {
        name: "--guid-file",
        value: Some("FILE"),
        repeatable: false,
    },
    Flag {
        name: "--cni-path",
        value: Some("DIRS"),
        repeatable: false,
    },
];

/// Parsed arguments.
#[derive(Debug, Default)]
struct Args {
    json: bool,
    conf: Option<PathBuf>,
    host_root: Option<PathBuf>,
    state_dirs: Vec<PathBuf>,
    guid_file: Option<PathBuf>,
    cni_path: Option<String>,
}

/// Parses the arguments after `doctor` (`Err("")` for `-h`/`--help`).
fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{name} needs a value"))
        };
        if matches!(x.as_str(), "-h" | "--help") {
            return Err(String::new());
        }
        match flag(FLAGS, x)?.name {
            "--json" => a.json = true,
            "--conf" => a.conf = Some(value("--conf")?),
            "--host-root" => a.host_root = Some(value("--host-root")?),
            "--state-dir" => a.state_dirs.push(value("--state-dir")?),
            "--guid-file" => a.guid_file = Some(value("--guid-file")?),
            "--cni-path" => a.cni_path = Some(value("--cni-path")?.to_string_lossy().into_owned()),
            other => return Err(format!("{other}: in FLAGS but not parsed")),
        }
    }
    Ok(a)
}

/// Checks the arguments after `doctor` as [`run`] parses them, without running: `Ok`,
/// `Err("")` for `-h`/`--help`, else the error [`run`] prints (exit status 2).
pub fn check_args(args: &[String]) -> Result<(), String> {
    parse_args(args).map(|_| ())
}

/// Runs the doctor with the arguments after `doctor`; returns the exit status.
pub fn run(args: &[String]) -> i32 {
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            print_out(&format!("{USAGE}\n"));
            return 0;
        }
        Err(e) => {
            print_err(&format!("ib-sriov doctor: {e}\n{USAGE}\n"));
            return 2;
        }
    };
    // A host root that is not there is a mistake in the command, not an empty node.
    if let Some(r) = &a.host_root {
        if !r.is_dir() {
            print_err(&format!(
                "ib-sriov doctor: --host-root {}: not a directory (the node's root as mounted here, e.g. /host)\n",
                r.display()
            ));
            return 2;
        }
    }
    if let Some(d) = a.state_dirs.iter().find(|d| !d.is_absolute()) {
        print_err(&format!(
            "ib-sriov doctor: --state-dir {}: not an absolute path (the stateDir as the node names it)\n",
            d.display()
        ));
        return 2;
    }
    let root = a.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let sys = match a.host_root {
        Some(_) => None,
        None => Some(crate::sysfs::Sysfs::from_env().root().to_path_buf()),
    };
    let mut paths = paths::Paths::under(&root, sys);
    paths.extra_state = a.state_dirs.clone();
    if let Some(g) = &a.guid_file {
        paths.guid_file = paths.host(g);
    }
    if let Some(c) = &a.cni_path {
        paths.cni_path = cnipath::CniPath::given(c);
    }
    let report = diagnose(&paths, a.conf.as_deref());
    if a.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => print_out(&format!("{s}\n")),
            Err(e) => {
                print_err(&format!("ib-sriov doctor: {e}\n"));
                return 1;
            }
        }
    } else {
        print_out(&text::render(&report));
    }
    i32::from(
        report
            .findings
            .iter()
            .any(|f| f.severity == Severity::Error),
    )
}

/// The whole report for the node under `paths`, with `conf` validated when given.
pub fn diagnose(paths: &paths::Paths, conf: Option<&std::path::Path>) -> Report {
    let (mut report, notes) = collect::collect(paths);
    // A test host has no RDMA subsystem: the `failpoints` build takes the mode from the
    // fail point `doctor.rdma_netns_mode` ([`crate::failpoint::value_at`]).
    if let Some(m) = crate::failpoint::value_at("doctor.rdma_netns_mode") {
        report.node.rdma_netns_mode = Some(m);
    }
    let mut findings = findings::evaluate(&report, &notes);
    report.node_file.path = crate::policy::NODE_FILE.into();
    let node = crate::policy::NodePolicy::load(&paths.root);
    match &node {
        Ok(p) if p.from_file => {
            report.node_file.state = "valid".into();
            report.node_file.defaults = p.defaults.clone();
        }
        Ok(_) => report.node_file.state = "absent".into(),
        Err(e) => {
            report.node_file.state = "invalid".into();
            report.node_file.error = Some(e.msg.clone());
        }
    }
    // Defaults that make ADD fail on this node (ADD's own checks, run for each free VF).
    if let Ok(p) = &node {
        findings.extend(node_defaults::findings(&report, paths, &p.defaults));
        findings.sort_by(|a, b| {
            (a.severity, &a.code, &a.subject).cmp(&(b.severity, &b.code, &b.subject))
        });
    }
    if let Err(e) = node {
        findings.push(Finding {
            severity: Severity::Error,
            code: "node-file-invalid".into(),
            subject: crate::policy::NODE_FILE.into(),
            message: e.to_string(),
            fix: "correct the node file (docs/configuration.md \"Node policy file\"): until then ADD, CHECK and STATUS refuse every network with code 7, and DEL and GC apply the default path roots".into(),
        });
        findings.sort_by(|a, b| {
            (a.severity, &a.code, &a.subject).cmp(&(b.severity, &b.code, &b.subject))
        });
    }
    if let Some(p) = conf {
        // Each VF's GUID as the report read it: its IPoIB address's port GUID when it
        // has a netdev in the host, else the node GUID, else the port GUID.
        let parse = |g: &Option<String>| g.as_deref().and_then(|g| g.parse().ok());
        let vf_guids = report
            .vfs
            .iter()
            .map(|v| {
                let g = parse(&v.ipoib_guid)
                    .or_else(|| parse(&v.node_guid))
                    .or_else(|| parse(&v.port_guid));
                (v.pci.clone(), g)
            })
            .collect();
        let rdma_mode = report.node.rdma_netns_mode.clone();
        let (checks, mut f) = check_conf(p, paths, &vf_guids, rdma_mode.as_deref());
        report.conf = checks;
        findings.append(&mut f);
        findings.sort_by(|a, b| {
            (a.severity, &a.code, &a.subject).cmp(&(b.severity, &b.code, &b.subject))
        });
    }
    report.findings = findings;
    report
}

/// Validates what the `--conf` file holds ([`input::read`]): a node's network
/// configuration (`type: ib-sriov`) or conflist (each ib-sriov entry of `plugins`, with
/// the list's `name` and `cniVersion`, as libcni passes them), or the
/// NetworkAttachmentDefinitions of a YAML file, each by its `spec.config` (the subject of
/// its findings is its `namespace/name`). Each ib-sriov entry is checked as ADD does
/// before touching the host ([`conf_verdict`]), and the doctor reports every error (one
/// `conf-invalid` each; the check's `error` is the first, ADD's answer), the keys nothing
/// reads (`conf-unknown-key`, with the key they are a near miss of), ADD's other
/// warnings (`conf-warning`), where a delegated IPAM plugin was looked up and found
/// (`conf-ipam-plugin`), and, when the RDMA netns mode (`rdma_mode`) is exclusive, how
/// the RDMA device and the IPoIB netdev end up ([`rdma_chain_finding`]).
///
/// `conf-node-local-range`: a built-in IPAM range in a NetworkAttachmentDefinition that
/// names no device, i.e. one Multus runs with the same range on every node. A file
/// that is not a NAD is what one node keeps (`/etc/cni/net.d`, or the
/// `/etc/cni/multus/net.d` file a NAD without `spec.config` names), whose range is that
/// node's own (docs/configuration.md "Multi-rail pods"): no warning. A NAD without
/// `spec.config` is `conf-nad-node-file` (info): its configuration is on the nodes.
fn check_conf(
    path: &std::path::Path,
    paths: &paths::Paths,
    vf_guids: &BTreeMap<String, Option<crate::types::Guid>>,
    rdma_mode: Option<&str>,
) -> (Vec<ConfCheck>, Vec<Finding>) {
    let file = path.display().to_string();
    let bad = |subject: &str, msg: String| {
        Finding {
        severity: Severity::Error,
        code: "conf-invalid".into(),
        subject: subject.to_string(),
        message: msg,
        fix: "correct the configuration (docs/configuration.md \"Configuration reference\"); ADD would refuse it before any change".into(),
    }
    };
    let items = match crate::fsutil::read_regular_bounded(path, MAX_CONF)
        .map_err(|e| format!("cannot read it: {e}"))
        .and_then(|b| input::read(&b))
    {
        Ok(i) => i,
        Err(m) => return (Vec::new(), vec![bad(&file, m)]),
    };
    let type_of =
        |p: &serde_json::Value| p.get("type").and_then(|t| t.as_str()) == Some("ib-sriov");
    let mut checks = Vec::new();
    let mut findings = Vec::new();
    for item in items {
        let (nad, v) = match item {
            input::Item::Conf { nad, conf } => (nad, conf),
            input::Item::BadNad { nad, why } => {
                findings.push(Finding {
                    severity: Severity::Error,
                    code: "conf-invalid".into(),
                    subject: nad.clone(),
                    message: format!("{}: {why}", input::NAD_KIND),
                    fix: "correct spec.config: it is the network configuration as a JSON string (kubectl get net-attach-def NAME -o jsonpath='{.spec.config}' shows it); Multus fails every pod attached to it".into(),
                });
                checks.push(ConfCheck {
                    name: "?".into(),
                    nad: Some(nad),
                    ok: false,
                    error: Some(why),
                });
                continue;
            }
            input::Item::NodeFileNad { nad } => {
                findings.push(Finding {
                    severity: Severity::Info,
                    code: "conf-nad-node-file".into(),
                    subject: nad,
                    message: format!("{} without spec.config: Multus reads the configuration of that name from each node's /etc/cni/multus/net.d", input::NAD_KIND),
                    fix: "check that file on each node: ib-sriov doctor --conf /etc/cni/multus/net.d/<file>".into(),
                });
                continue;
            }
        };
        let subject = nad.clone().unwrap_or_else(|| file.clone());
        // Each ib-sriov entry, and whether rdma-cni (`type: rdma`) runs after it in the list.
        let entries: Vec<(serde_json::Value, bool)> =
            match v.get("plugins").and_then(|p| p.as_array()) {
                Some(list) => list
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| type_of(p))
                    .map(|(i, p)| {
                        let mut e = p.clone();
                        for k in ["name", "cniVersion"] {
                            if let (Some(o), Some(val)) = (e.as_object_mut(), v.get(k)) {
                                o.insert(k.into(), val.clone());
                            }
                        }
                        let rdma_after = list[i + 1..]
                            .iter()
                            .any(|q| q.get("type").and_then(|t| t.as_str()) == Some(RDMA_CNI_TYPE));
                        (e, rdma_after)
                    })
                    .collect(),
                None if type_of(&v) => vec![(v.clone(), false)],
                None => Vec::new(),
            };
        for (e, rdma_after) in entries {
            let name = e
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("?")
                .to_string();
            let v = conf_verdict(&e, paths, vf_guids);
            for w in &v.warnings {
                let unknown = w.starts_with("unknown key");
                findings.push(Finding {
                    severity: Severity::Warning,
                    code: if unknown { "conf-unknown-key" } else { "conf-warning" }.into(),
                    subject: subject.clone(),
                    message: format!("network {name}: {w}"),
                    fix: if unknown {
                        "correct or remove the key: ADD ignores it (and logs this warning)"
                    } else {
                        "ADD logs this warning and goes on; see docs/configuration.md \"Configuration reference\""
                    }
                    .into(),
                });
            }
            for err in &v.errors {
                findings.push(bad(
                    &subject,
                    format!("network {name}: code {}: {}", err.code, err.msg),
                ));
            }
            if let Some(m) = &v.ipam_lookup {
                findings.push(Finding {
                    severity: Severity::Info,
                    code: "conf-ipam-plugin".into(),
                    subject: subject.clone(),
                    message: format!("network {name}: {m}"),
                    fix: "where the runtime searches is read from the node's containerd, CRI-O and Multus configurations (else /opt/cni/bin and /var/lib/cni/bin); --cni-path names the directories instead".into(),
                });
            }
            // rdma-cni chained after ib-sriov, judged once the configuration is valid: its
            // refusal is the check's error.
            let mut refused = None;
            if let Some(conf) = v.conf.as_ref().filter(|_| v.errors.is_empty()) {
                if let Some(mut f) = rdma_chain_finding(&e, conf, rdma_after, rdma_mode) {
                    if f.severity == Severity::Error {
                        refused = Some(f.message.clone());
                    }
                    f.subject = subject.clone();
                    f.message = format!("network {name}: {}", f.message);
                    findings.push(f);
                }
                let builtin = conf.ipam.as_ref().is_some_and(crate::ipam::is_builtin);
                if builtin && conf.device_id.is_none() && nad.is_some() {
                    findings.push(Finding {
                        severity: Severity::Warning,
                        code: "conf-node-local-range".into(),
                        subject: subject.clone(),
                        message: format!("network {name}: the built-in IPAM allocates per node, and this NetworkAttachmentDefinition names no device, so Multus runs it on every node with the same range: every node hands out the same addresses"),
                        fix: "for one network across nodes use a cluster-wide IPAM (whereabouts, nv-ipam); keep ib-sriov-ipam for a single node, or give each node its own range in a file of its own (a NetworkAttachmentDefinition without spec.config: Multus reads the node's /etc/cni/multus/net.d file of that name)".into(),
                    });
                }
            }
            checks.push(ConfCheck {
                name,
                nad: nad.clone(),
                ok: v.errors.is_empty() && refused.is_none(),
                // ADD's answer: the first error (else the chain's refusal).
                error: v
                    .errors
                    .first()
                    .map(|e| format!("code {}: {}", e.code, e.msg))
                    .or(refused),
            });
        }
    }
    if checks.is_empty() && findings.is_empty() {
        findings.push(bad(
            &file,
            "no ib-sriov configuration in it (type \"ib-sriov\", or a conflist with one in plugins)".into(),
        ));
    }
    (checks, findings)
}

/// What `doctor --conf` finds in one configuration: every error ADD could answer (the
/// first is the one it does answer) and every warning it would log.
#[derive(Debug, Default)]
struct Verdict {
    /// The errors, ADD's answer first.
    errors: Vec<crate::cni::CniError>,
    /// The warnings ADD logs, in its order.
    warnings: Vec<String>,
    /// The parsed configuration, each key that failed at its default.
    conf: Option<crate::config::NetConf>,
    /// Where a delegated IPAM plugin was looked up, and where it was found.
    ipam_lookup: Option<String>,
}

impl Verdict {
    /// Records `e` unless an error with the same message is there already.
    fn error(&mut self, e: crate::cni::CniError) {
        if !self.errors.iter().any(|x| x.msg == e.msg) {
            self.errors.push(e);
        }
    }
}

/// The configuration `e` as ADD parses and checks it before any change, every check
/// that can run ([`Verdict`]): the keys, every bad one reported
/// ([`crate::config::NetConf::check_all`], the parse ADD runs, in its collecting mode:
/// a bad key is judged as absent by the checks after it) and their warnings, its paths
/// against the node policy read under the host root ([`crate::policy::screen`]; a
/// `logFile` outside it is a warning, as ADD logs it), the IPAM configuration (the
/// built-in one parsed, every error of it ([`crate::ipam::config_errors`]), with the
/// warnings it logs, [`crate::ipam::config_warnings`]; `dhcp` refused; a delegated
/// plugin looked up where the node's runtime looks ([`paths::Paths::cni_path`]), under
/// the host root, as ADD looks it up in the runtime's `CNI_PATH`), and, when it names a
/// device, the device under the host root (`--host-root`) with its vfio mode
/// ([`crate::plugin::device_and_mode`]) and the warnings ADD logs about it
/// ([`crate::plugin::device_warnings`]), the RDMA isolation rule against this node's
/// RDMA netns mode ([`crate::plugin::rdma::plan_for`]), and the GUID rule (unless the
/// GUID keys themselves are bad): a VF whose GUID is not usable (`vf_guids`: the GUID
/// the report read for it) needs a GUID from the pod, else one from `guidFile` (read
/// under the host root) or `deriveGuid`, else ADD answers code 7
/// ([`crate::plugin::no_usable_guid`]); a malformed or exhausted `guidFile` is code 7
/// too. Rules that need the pod are not checked: whether it carries a GUID (a
/// configuration that gives none is judged as a pod without one), ib-kubernetes'
/// annotation.
///
/// The checks run in ADD's order, so the first error is the one ADD answers.
fn conf_verdict(
    e: &serde_json::Value,
    paths: &paths::Paths,
    vf_guids: &BTreeMap<String, Option<crate::types::Guid>>,
) -> Verdict {
    let mut v = Verdict::default();
    let checked =
        crate::config::NetConf::check_all(e.to_string().as_bytes(), crate::cni::Command::Add);
    for (_, err) in &checked.errors {
        v.error(err.clone());
    }
    // The node policy of the configuration's paths, as ADD applies it (crate::cli).
    let screened = crate::policy::screen(e, &paths.root, &crate::policy::PathKey::ALL);
    if let Some(err) = screened.refusal() {
        v.error(err);
    }
    let Some(mut conf) = checked.conf.clone() else {
        return v;
    };
    v.warnings.extend(conf.warnings.iter().cloned());
    v.warnings.extend(screened.warnings);
    if let Some(ipam) = conf.ipam.as_ref().filter(|i| crate::ipam::is_builtin(i)) {
        v.warnings.extend(crate::ipam::config_warnings(ipam));
    }
    // The node file's defaults for the keys the configuration lacks, as ADD applies them.
    screened.defaults.apply(&mut conf);
    // The IPAM as ADD chooses it, a delegated plugin looked up where the runtime's
    // CNI_PATH would look; named as the node names it, not under the host root.
    let dirs: Vec<String> = paths
        .cni_path
        .dirs
        .iter()
        .map(|(d, _)| paths.host(d).display().to_string())
        .collect();
    let root = paths.root.display().to_string();
    let as_node = |s: String| {
        if root == "/" {
            s
        } else {
            s.replace(&root, "")
        }
    };
    let ipam_type = conf
        .ipam
        .as_ref()
        .and_then(|i| i.get("type"))
        .and_then(|t| t.as_str())
        .map(String::from);
    match crate::plugin::ipam_for(&conf, &dirs) {
        Err(mut err) => {
            err.msg = as_node(err.msg);
            v.error(err);
            // The built-in IPAM's other errors (ADD answers the first).
            if let Some(ipam) = conf.ipam.as_ref().filter(|i| crate::ipam::is_builtin(i)) {
                for x in crate::ipam::config_errors(ipam).into_iter().skip(1) {
                    v.error(crate::plugin::ipam_error(x));
                }
            }
            if let Some(t) = ipam_type.filter(|t| t != crate::ipam::BUILTIN_TYPE && t != "dhcp") {
                v.ipam_lookup = Some(format!(
                    "delegated ipam plugin {t:?} not found; looked up in {}",
                    paths.cni_path.described()
                ));
            }
        }
        Ok(Some(crate::plugin::Ipam::External(d))) => {
            v.ipam_lookup = Some(format!(
                "delegated ipam plugin {:?} found at {}; looked up in {}",
                ipam_type.unwrap_or_default(),
                as_node(d.path.display().to_string()),
                paths.cni_path.described()
            ));
        }
        Ok(_) => {}
    }
    // A built-in IPAM the parse refused for its dataDir: the rest of it too.
    if checked.failed("ipam.dataDir") {
        if let Some(ipam) = e.get("ipam") {
            for x in crate::ipam::config_errors(ipam) {
                if !x.message().starts_with("dataDir") {
                    v.error(crate::plugin::ipam_error(x));
                }
            }
        }
    }
    if let Some(addr) = conf.device_id {
        let guid_keys_bad = [
            "runtimeConfig",
            "runtimeConfig.infinibandGUID",
            "args.cni.guid",
        ]
        .iter()
        .any(|k| checked.failed(k));
        if let Err(err) = device_checks(
            &conf,
            addr,
            paths,
            vf_guids,
            !guid_keys_bad,
            &mut v.warnings,
        ) {
            v.error(err);
        }
    }
    v.conf = Some(conf);
    v
}

/// The checks of [`conf_verdict`] on the device `addr` the configuration names (the
/// GUID rule only with `guid_rule`); the warnings ADD logs about it into `warnings`.
fn device_checks(
    conf: &crate::config::NetConf,
    addr: crate::types::PciAddress,
    paths: &paths::Paths,
    vf_guids: &BTreeMap<String, Option<crate::types::Guid>>,
    guid_rule: bool,
    warnings: &mut Vec<String>,
) -> Result<(), crate::cni::CniError> {
    let sysfs = crate::sysfs::Sysfs::new(&paths.sys);
    let (dev, is_pf, vfio) = crate::plugin::device_and_mode(&sysfs, conf, addr)?;
    warnings.extend(crate::plugin::device_warnings(conf, &dev, is_pf, vfio));
    crate::plugin::check_pkey_wait(&sysfs, conf, &dev, is_pf, vfio)?;
    crate::plugin::rdma::plan_for(conf, &*rdma_provider(), &sysfs, &dev, vfio)?;
    let is_vf = dev.pf != dev.addr;
    let cur = vf_guids.get(&addr.to_string()).copied().flatten();
    let Some(g) = cur.filter(|g| is_vf && !g.is_assignable()) else {
        return Ok(());
    };
    if !guid_rule || conf.guid.is_some() || conf.ib_kubernetes_enabled {
        return Ok(());
    }
    let pf = crate::vfguid::PfIdentity::read(&sysfs, None, dev.pf);
    let file = paths.host(&conf.guid_file);
    match crate::vfguid::choose(&file, conf.derive_guid, &pf, dev.vf_index) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(crate::plugin::no_usable_guid(addr, g, &conf.guid_file)),
        // Named as the node names it, not under the host root.
        Err(e) => Err(crate::cni::CniError::config(format!(
            "VF {addr} has no usable GUID: {}",
            e.to_string().replace(
                &file.display().to_string(),
                &conf.guid_file.display().to_string()
            )
        ))),
    }
}

/// The CNI `type` of rdma-cni (k8snetworkplumbingwg/rdma-cni; its binary is `rdma`).
pub const RDMA_CNI_TYPE: &str = "rdma";

/// The RDMA netlink provider `--conf` judges `rdmaIsolation` with: the kernel's, or, in
/// a `failpoints` build with `doctor.rdma_netns_mode` set, an in-memory RDMA subsystem
/// in that mode (the test machines have none).
pub(crate) fn rdma_provider() -> Box<dyn crate::plugin::rdma::RdmaProvider> {
    #[cfg(feature = "failpoints")]
    if let Some(m) = crate::failpoint::value_at("doctor.rdma_netns_mode") {
        use crate::rdma::{MemoryRdma, NetnsKey, NetnsMode};
        if let Ok(here) = NetnsKey::of_path("/proc/thread-self/ns/net") {
            let mode = if m == "shared" {
                NetnsMode::Shared
            } else {
                NetnsMode::Exclusive
            };
            return Box::new(MemoryRdma::new(here, mode));
        }
    }
    Box::new(crate::plugin::rdma::KernelRdma)
}

/// How the VF's RDMA device and its IPoIB netdev end up for the ib-sriov entry `e`
/// (parsed as `conf`, the node file's defaults applied), with rdma-cni chained after it
/// (`rdma_after`) or not, when the RDMA netns mode is exclusive (in shared mode every
/// netns sees every RDMA device, and rdma-cni refuses to run). `None` otherwise, and in
/// vfio mode (no RDMA device moves with a VF given to a VM).
///
/// The facts: moving an RDMA device to another netns makes the kernel re-create its
/// IPoIB netdev in the host netns (ib_core re-registers its ULPs; the Go ib-sriov-cni
/// notes it, k8snetworkplumbingwg/ib-sriov-cni 543060d `cmd/ib-sriov-cni/main.go`
/// `doVFConfig`); rdma-cni looks the device up under
/// `/sys/bus/pci/devices/<deviceID>/infiniband` and fails with "no RDMA devices found"
/// when it is empty (k8snetworkplumbingwg/rdma-cni 449bfbc `cmd/rdma/main.go`
/// `getRDMADevice`).
///
/// - isolation and rdma-cni chained: an error (`conf-rdma-chain-isolation`): rdma-cni
///   would fail every ADD, so the pod never starts;
/// - rdma-cni chained without isolation: a warning (`conf-rdma-chain-loses-ipoib`):
///   the pod gets its RDMA device and loses its IPoIB netdev; the fix gives the recipe;
/// - neither: a warning (`conf-rdma-not-isolated`): the pod sees no RDMA device.
pub fn rdma_chain_finding(
    e: &serde_json::Value,
    conf: &crate::config::NetConf,
    rdma_after: bool,
    rdma_mode: Option<&str>,
) -> Option<Finding> {
    if rdma_mode != Some("exclusive") || conf.vfio_pci_mode == Some(true) {
        return None;
    }
    let isolated = conf.rdma_isolation == Some(true);
    let from = if e.get("rdmaIsolation").is_some() {
        "set in the network"
    } else {
        "from the node file's defaults"
    };
    let recipe = format!(
        "remove the rdma meta plugin from the chain and set rdmaIsolation: true: in the network, or, where the SR-IOV network operator renders it (a SriovIBNetwork cannot carry rdmaIsolation), as the node default {{\"defaults\": {{\"rdmaIsolation\": true}}}} in {} on every node (docs/configuration.md \"RDMA device isolation\"): ib-sriov then moves the RDMA device before the netdev, and the pod gets both",
        crate::policy::NODE_FILE
    );
    let f = |severity, code: &str, message: String, fix: String| Finding {
        severity,
        code: code.into(),
        subject: String::new(),
        message,
        fix,
    };
    Some(match (isolated, rdma_after) {
        (true, true) => f(
            Severity::Error,
            "conf-rdma-chain-isolation",
            format!("rdmaIsolation is true ({from}) and rdma-cni (type \"rdma\") is chained after ib-sriov: ib-sriov moves the VF's RDMA device into the pod, so rdma-cni finds none under /sys/bus/pci/devices/<deviceID>/infiniband and fails every ADD (\"no RDMA devices found\"): the pod never starts"),
            "remove the rdma meta plugin from the chain: with rdmaIsolation ib-sriov moves the RDMA device itself and the pod keeps its IPoIB netdev (or set rdmaIsolation: false in the network, and the pod loses its IPoIB netdev)".into(),
        ),
        (false, true) => f(
            Severity::Warning,
            "conf-rdma-chain-loses-ipoib",
            "rdma-cni (type \"rdma\") chained after ib-sriov moves the VF's RDMA device into the pod, and moving an RDMA device makes the kernel recreate its IPoIB netdev in the host network namespace: the pod gets its RDMA device but loses its IPoIB interface (CHECK fails; DEL restores the VF)".into(),
            recipe,
        ),
        (false, false) => f(
            Severity::Warning,
            "conf-rdma-not-isolated",
            "the RDMA netns mode is exclusive and rdmaIsolation is not true, so the VF's RDMA device stays in the host: the pod sees no RDMA device (no verbs)".into(),
            format!("set rdmaIsolation: true in the network, or as the node default {{\"defaults\": {{\"rdmaIsolation\": true}}}} in {} where the SR-IOV network operator renders the network (docs/configuration.md \"RDMA device isolation\")", crate::policy::NODE_FILE),
        ),
        (true, false) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_parsed_or_refused() {
        let a = parse_args(&["--json".into(), "--host-root".into(), "/host".into()]).unwrap();
        assert!(a.json && a.host_root == Some(PathBuf::from("/host")));
        assert!(parse_args(&["--conf".into()])
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse_args(&["--frobnicate".into()])
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn rdma_chain_rules_in_exclusive_mode_only() {
        let conf = |iso: Option<bool>| {
            let mut v = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "ib-sriov"});
            if let Some(b) = iso {
                v["rdmaIsolation"] = b.into();
            }
            (
                v.clone(),
                crate::config::NetConf::parse(v.to_string().as_bytes()).unwrap(),
            )
        };
        let code = |iso: Option<bool>, defaulted: bool, rdma: bool, mode: &str| {
            let (v, mut c) = conf(iso);
            if defaulted {
                c.rdma_isolation = Some(true);
            }
            rdma_chain_finding(&v, &c, rdma, Some(mode)).map(|f| (f.severity, f.code, f.message))
        };
        assert_eq!(code(None, false, false, "shared"), None);
        assert_eq!(code(None, false, true, "shared"), None);
        let (sev, c, _) = code(None, false, false, "exclusive").unwrap();
        assert_eq!(
            (sev, c.as_str()),
            (Severity::Warning, "conf-rdma-not-isolated")
        );
        let (sev, c, _) = code(Some(false), false, true, "exclusive").unwrap();
        assert_eq!(
            (sev, c.as_str()),
            (Severity::Warning, "conf-rdma-chain-loses-ipoib")
        );
        assert_eq!(code(Some(true), false, false, "exclusive"), None);
        let (sev, c, m) = code(Some(true), false, true, "exclusive").unwrap();
        assert_eq!(
            (sev, c.as_str()),
            (Severity::Error, "conf-rdma-chain-isolation")
        );
        assert!(m.contains("set in the network"), "{m}");
        let (sev, _, m) = code(None, true, true, "exclusive").unwrap();
        assert_eq!(sev, Severity::Error);
        assert!(m.contains("from the node file's defaults"), "{m}");
    }

    #[test]
    fn conf_checks_name_what_add_would_refuse() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.conflist");
        std::fs::write(
            &p,
            r#"{"cniVersion":"1.0.0","name":"ibnet","plugins":[{"type":"ib-sriov","pkey":"0x1ffff"},{"type":"tuning"}]}"#,
        )
        .unwrap();
        let paths = paths::Paths::under(d.path(), None);
        let (checks, f) = check_conf(&p, &paths, &BTreeMap::new(), None);
        assert_eq!(checks.len(), 1);
        assert!(!checks[0].ok && checks[0].name == "ibnet", "{checks:?}");
        assert!(
            f[0].message.contains("pkey") && f[0].message.contains("code 7"),
            "{f:?}"
        );
        std::fs::write(
            &p,
            r#"{"cniVersion":"1.0.0","name":"ibnet","type":"ib-sriov"}"#,
        )
        .unwrap();
        let paths = paths::Paths::under(d.path(), None);
        let (checks, f) = check_conf(&p, &paths, &BTreeMap::new(), None);
        assert!(checks[0].ok && f.is_empty(), "{checks:?} {f:?}");
        std::fs::write(&p, "{garbage").unwrap();
        assert!(check_conf(&p, &paths, &BTreeMap::new(), None).1[0]
            .message
            .contains("not JSON"));
        std::fs::write(&p, "garbage").unwrap();
        assert!(check_conf(&p, &paths, &BTreeMap::new(), None).1[0]
            .message
            .contains("no network configuration in it"));
    }
}
