//! The doctor's rules: what is wrong on the node, each finding with its severity and a
//! one-line fix (docs/operations.md "Diagnosing a node" lists the codes).

use super::collect::{GoFile, Note};
use super::report::{Finding, Report, Severity};
use std::collections::BTreeMap;

fn finding(sev: Severity, code: &str, subject: &str, message: String, fix: &str) -> Finding {
    Finding {
        severity: sev,
        code: code.into(),
        subject: subject.into(),
        message,
        fix: fix.into(),
    }
}

/// Whether the VF has a usable GUID: its IPoIB address's port GUID (the truth when it
/// has a netdev in the host), else the node or port GUID the PF reports, neither
/// all-zero nor all-ones.
fn vf_has_guid(vf: &super::report::Vf) -> bool {
    let usable = |g: &Option<String>| {
        g.as_deref()
            .and_then(|g| g.parse::<crate::types::Guid>().ok())
            .is_some_and(|g| g.is_assignable())
    };
    match &vf.ipoib_guid {
        Some(_) => usable(&vf.ipoib_guid),
        None => usable(&vf.node_guid) || usable(&vf.port_guid),
    }
}

/// The finding for a VF bound to a netdev driver with no netdev in the host and no
/// holder found. Its netdev may be in a live pod whose holder the doctor could not see,
/// and an unbind/bind would pull it out of that pod: so the fix touches the VF
/// (`netdev-missing`) only when every holder source was read and no runtime record
/// names the VF; otherwise it is `holder-unknown`, with read-only advice.
fn without_netdev(
    vf: &super::report::Vf,
    claims: &[&super::holders::Claim],
    unaccounted: &[&str],
) -> Finding {
    let driver = vf.driver.as_deref().unwrap_or("?");
    let mine: Vec<String> = claims
        .iter()
        .filter(|c| c.vf == vf.pci)
        .map(|c| {
            format!(
                "{} records attachment {} on it (stateDir {}), and no journal or Go cache file of it was found",
                c.file, c.attachment, c.state_dir
            )
        })
        .collect();
    let read_only = "do not unbind/bind it or write its GUID: it may be in a live pod. Find its holder first (the pods on this node with an InfiniBand network; `ip -all netns exec ip -o link` shows netdevs in pod netns); make the sources above readable, or rerun the doctor with --state-dir DIR for a stateDir no configuration on this node names: it suggests a fix only once every holder is accounted for";
    let why = if !mine.is_empty() {
        format!(": {}", mine.join("; "))
    } else if !unaccounted.is_empty() {
        format!(
            " and no holder found, but not every holder could be accounted for: {}",
            unaccounted.join("; ")
        )
    } else {
        String::new()
    };
    if !why.is_empty() {
        let msg = format!(
            "VF {} is bound to {driver} with no netdev in the host{why}",
            vf.pci
        );
        return finding(Severity::Warning, "holder-unknown", &vf.pci, msg, read_only);
    }
    finding(
        Severity::Warning,
        "netdev-missing",
        &vf.pci,
        format!(
            "VF {} is bound to {driver} but has no netdev in the host and no attachment in any stateDir, the Go cache or the runtimes' records (holder sources above)",
            vf.pci
        ),
        "rebind it: echo <BDF> > /sys/bus/pci/drivers/<driver>/unbind, then > .../bind (udev names the new netdev)",
    )
}

/// Evaluates every rule over the report and the collector's notes; sorted most severe
/// first, then by code and subject.
pub fn evaluate(r: &Report, notes: &[Note]) -> Vec<Finding> {
    use Severity::*;
    let mut out = Vec::new();
    if r.pfs.is_empty() && r.vfs.is_empty() {
        out.push(finding(
            Info,
            "nothing-to-check",
            "node",
            "no SR-IOV PF on this node (no PCI device with sriov_totalvfs), so no VF: nothing to check".to_string(),
            "run the doctor on a node with InfiniBand SR-IOV PFs, or with --host-root naming that node's root",
        ));
    }
    for n in notes {
        match n {
            Note::Unreadable(what, why) if what == "RDMA netlink" => out.push(finding(
                Info,
                "rdma-unavailable",
                what,
                format!("no RDMA view: {why}"),
                "load the RDMA stack (modprobe mlx5_ib, which loads ib_core) if this node serves RDMA networks",
            )),
            Note::Unreadable(what, why) => out.push(finding(
                Info,
                "partial-view",
                what,
                format!("could not read {what}: {why}"),
                "run as root in the host's network namespace (kubectl debug node/...: hostNetwork), with --host-root when the host's / is mounted elsewhere",
            )),
            Note::BadJournal(path, why) => out.push(finding(
                Error,
                "journal-unreadable",
                path,
                format!("unusable journal or Go cache file: {why}"),
                "inspect the file; if its pod is gone, restore its VF by hand and remove the file (DEL answers code 5 for it)",
            )),
            Note::VfTable(pf, netdev, why) => out.push(finding(
                Warning,
                "vf-table-unreadable",
                pf,
                format!("the VF table of PF {pf} ({netdev}) cannot be read over netlink, by the single RTM_GETLINK or by a link dump: {why}; its VFs' link state and GUIDs are unknown where no MLNX_OFED file gives them"),
                "a kernel that undercounts the VF GUIDs in its reply size fails with EMSGSIZE on PFs with many VFs: update the kernel (or use MLNX_OFED's sriov files); meanwhile DEL restores link state auto and gives a VF whose GUID it could not read its derived GUID",
            )),
            Note::OriginalUnknown(att, vf, what) => out.push(finding(
                Info,
                "original-unknown",
                vf,
                format!("{att} recorded the original {what} of VF {vf} as unknown (it could not be read at ADD)"),
                if *what == "GUID" {
                    "nothing to do: DEL gives the VF its derived GUID (ib-sriov doctor shows it) rather than leave the pod's"
                } else {
                    "nothing to do: DEL restores link state auto, what a new VF has"
                },
            )),
            Note::GoCache(att, vf, GoFile::None) => out.push(finding(
                Error,
                "rollback-unready",
                vf,
                format!("{att} (VF {vf}) has no Go plugin cache file (its ADD wrote none: an ib-sriov before goCacheDir, \"goCacheDir\": \"\", or its name was another file's): after a rollback to the Go ib-sriov-cni, its DEL would find nothing to undo and leave the VF in the pod"),
                "before rolling this node back, let this pod end (or re-create it) under this version with goCacheDir set (the default), or keep this node on ib-sriov",
            )),
            Note::GoCache(att, vf, GoFile::Unready { file, why, journal, missing }) => {
                let by_hand = format!(
                    "(umask 077; set -o noclobber; jq -j '.steps[] | select(.step == \"go_cache\") | .content' {journal} > {file})"
                );
                let fix = if *missing {
                    format!("the plugin rewrites it from the journal (byte for byte what ADD wrote) at the network's next CNI GC that lists the attachment, or a CHECK of it; or by hand, on the node: {by_hand}; or let this pod end under ib-sriov before rolling this node back")
                } else {
                    format!("inspect it; if it is no other attachment's, move it out of the directory, then the network's next CNI GC (or a CHECK of the attachment) rewrites it from the journal, or by hand, on the node: {by_hand}; or let this pod end under ib-sriov before rolling this node back")
                };
                out.push(finding(
                    Error,
                    "rollback-unready",
                    vf,
                    format!("{att} (VF {vf}) is live but its Go plugin cache file {file} {why}: after a rollback to the Go ib-sriov-cni, its DEL would not undo this attachment and would leave the VF in the pod"),
                    &fix,
                ))
            }
            Note::GoCache(att, vf, GoFile::UndoneByGo(found)) => out.push(finding(
                Info,
                "undone-by-go",
                vf,
                format!("{att} (VF {vf}): its Go plugin cache file is gone and the host shows the attachment ended by the Go ib-sriov-cni after a rollback: {found}"),
                "nothing to do: the next DEL or GC of it reads the VF again and drops the journal without touching the VF",
            )),
            Note::Kernel(probes) => {
                let mut probes = probes.clone();
                if let Some(m) = &r.node.rdma_netns_mode {
                    probes.0.push((
                        "rdma-netns",
                        super::kernel::Probe::Present(format!("RDMA netns mode {m}")),
                    ));
                }
                out.extend(super::kernel::findings(r.node.kernel.as_deref(), &probes));
            }
            Note::IbKubernetes(_)
            | Note::WantsIsolation(_)
            | Note::Unaccounted(_)
            | Note::Claim(_) => {}
        }
    }
    let mut unaccounted: Vec<&str> = notes
        .iter()
        .filter_map(|n| match n {
            Note::Unaccounted(why) => Some(why.as_str()),
            _ => None,
        })
        .collect();
    unaccounted.sort();
    let claims: Vec<&super::holders::Claim> = notes
        .iter()
        .filter_map(|n| match n {
            Note::Claim(c) => Some(c),
            _ => None,
        })
        .collect();
    let mut guids: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for vf in &r.vfs {
        for h in &vf.holders {
            if h.source == "journal" && h.netns_state.as_deref() == Some("gone") {
                out.push(finding(
                    Warning,
                    "netns-gone",
                    &vf.pci,
                    format!(
                        "{}/{} holds VF {} but its pod netns {} is gone",
                        h.container_id,
                        h.ifname.as_deref().unwrap_or("?"),
                        vf.pci,
                        h.netns.as_deref().unwrap_or("?")
                    ),
                    "the runtime's DEL or GC releases it; by hand: CNI_COMMAND=DEL with the attachment's containerID and ifname",
                ));
            }
            if !h.vfio && vf.driver.as_deref() == Some("vfio-pci") {
                out.push(finding(
                    Error,
                    "vfio-under-netdev-attachment",
                    &vf.pci,
                    format!(
                        "VF {} is bound to vfio-pci but {} attached it as a netdev VF",
                        vf.pci, h.container_id
                    ),
                    "do not rebind it while it may serve a vfio user (a VM or DPDK pod of the SR-IOV device plugin's vfio pool holds it without any CNI record): find who bound it to vfio-pci; if the attachment is wrong, DEL it; if the network is a vfio one, give it vfioPciMode (the device plugin's resource decides the driver)",
                ));
            }
        }
        if vf.holders.len() > 1 {
            let who: Vec<String> = vf
                .holders
                .iter()
                .map(|h| format!("{} {}", h.source, h.container_id))
                .collect();
            out.push(finding(
                Error,
                "vf-held-twice",
                &vf.pci,
                format!("VF {} is held by {} attachments: {}", vf.pci, vf.holders.len(), who.join(", ")),
                "DEL the attachment whose pod is gone; two pods must never share a VF (check the SR-IOV device plugin's pool)",
            ));
        }
        for g in [&vf.node_guid, &vf.port_guid] {
            if let Some(g) = g.as_deref().filter(|g| *g != "00:00:00:00:00:00:00:00") {
                let vfs = guids.entry(g.to_string()).or_default();
                if !vfs.contains(&vf.pci.as_str()) {
                    vfs.push(&vf.pci);
                }
            }
        }
        if vf.driver.as_deref().is_some_and(|d| d != "vfio-pci")
            && vf.netdevs.is_empty()
            && vf.holders.is_empty()
        {
            out.push(without_netdev(vf, &claims, &unaccounted));
        }
    }
    for n in notes {
        if let Note::IbKubernetes(vf_pci) = n {
            if let Some(vf) = r.vfs.iter().find(|v| &v.pci == vf_pci) {
                let zero = |g: &Option<String>| {
                    g.as_deref().is_none_or(|g| g == "00:00:00:00:00:00:00:00")
                };
                if zero(&vf.node_guid) && zero(&vf.port_guid) && !vf.holders.is_empty() {
                    out.push(finding(
                        Error,
                        "zero-guid",
                        &vf.pci,
                        format!("VF {} is attached with ibKubernetesEnabled but the PF reports no GUID for it", vf.pci),
                        "check that ib-kubernetes runs and annotated the pod (runtimeConfig.infinibandGUID); the pod has no fabric identity until then",
                    ));
                }
            }
        }
    }
    if r.guid_file.state == "invalid" {
        out.push(finding(
            Error,
            "guid-file-invalid",
            &r.guid_file.path,
            format!(
                "the SR-IOV operator's VF GUID file is invalid: {}",
                r.guid_file.error.as_deref().unwrap_or("?")
            ),
            "correct it (format: docs/configuration.md \"VFs without a GUID\"); until then an ADD of a VF without a GUID fails with code 7, and so does the operator",
        ));
    }
    let ib_k8s: Vec<&str> = notes
        .iter()
        .filter_map(|n| match n {
            Note::IbKubernetes(v) => Some(v.as_str()),
            _ => None,
        })
        .collect();
    for vf in &r.vfs {
        if ib_k8s.contains(&vf.pci.as_str()) || vf_has_guid(vf) {
            continue;
        }
        let file = &r.guid_file.path;
        if let Some(g) = &vf.file_guid {
            out.push(finding(
                Info,
                "vf-guid-from-file",
                &vf.pci,
                format!(
                    "VF {} has no GUID; an ADD without one gives it {g} from {file} (entry {})",
                    vf.pci,
                    vf.file_entry.unwrap_or_default()
                ),
                "nothing to do (the SR-IOV operator sets the same GUID when it applies a policy)",
            ));
        } else if let Some(e) = &vf.file_error {
            out.push(finding(
                Error,
                "guid-file-exhausted",
                &vf.pci,
                format!(
                    "VF {} has no GUID and {file} cannot give it one: {e}",
                    vf.pci
                ),
                "extend that entry's guids list or range to cover every VF of the PF",
            ));
        } else {
            let derived = match &vf.derived_guid {
                Some(d) => format!("; with \"deriveGuid\": true it gets {d}"),
                None => "; its PF's port GUID is unknown, so deriveGuid cannot help".into(),
            };
            out.push(finding(
                Warning,
                "vf-guid-unset",
                &vf.pci,
                format!(
                    "VF {} has no GUID (node {}, port {}): an ADD that gives none fails with code 7{derived}",
                    vf.pci,
                    vf.node_guid.as_deref().unwrap_or("unreadable"),
                    vf.port_guid.as_deref().unwrap_or("unreadable"),
                ),
                "set \"deriveGuid\": true in its networks and add the derived GUID to the subnet manager's partitions, or list its PF in the SR-IOV operator's GUID file, or give pods GUIDs (ib-kubernetes, runtimeConfig.infinibandGUID)",
            ));
        }
    }
    if r.node.rdma_netns_mode.as_deref() == Some("shared") {
        for n in notes {
            if let Note::WantsIsolation(att) = n {
                out.push(finding(
                    Error,
                    "rdma-shared-with-isolation",
                    att,
                    format!("{att} asked for RDMA isolation (rdmaIsolation: true) but the RDMA subsystem is in shared netns mode"),
                    "rdma system set netns exclusive (with no pod netns alive; persist with ib_core netns_mode=0), or set rdmaIsolation: false",
                ));
            }
        }
    }
    for (g, vfs) in guids {
        if vfs.len() > 1 {
            out.push(finding(
                Error,
                "duplicate-guid",
                &vfs.join(","),
                format!("VFs {} share the GUID {}", vfs.join(", "), g),
                "give each VF its own GUID (ib-kubernetes' pool, or the network's GUIDs): the subnet manager sees one port",
            ));
        }
    }
    for net in &r.ipam {
        if let (Some(b), Some(now)) = (&net.boot, &r.node.boot_id) {
            if b != now && net.allocated > 0 {
                out.push(finding(
                    Warning,
                    "allocations-of-another-boot",
                    &net.dir,
                    format!(
                        "{} holds {} record(s) written before this boot",
                        net.dir, net.allocated
                    ),
                    "nothing to do: the next ADD on this network frees them (or GC)",
                ));
            }
        }
        if !net.orphans.is_empty() {
            out.push(finding(
                Warning,
                "ipam-orphans",
                &net.dir,
                format!(
                    "{} record(s) whose attachment has no journal: {}",
                    net.orphans.len(),
                    net.orphans.join(", ")
                ),
                "the runtime's GC releases them; or CNI_COMMAND=DEL for each containerID/ifname",
            ));
        }
    }
    out.sort_by(|a, b| (a.severity, &a.code, &a.subject).cmp(&(b.severity, &b.code, &b.subject)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::{Holder, Vf};

    fn vf(pci: &str, driver: &str, guid: &str) -> Vf {
        Vf {
            pci: pci.into(),
            pf: "0000:af:00.0".into(),
            index: 0,
            driver: Some(driver.into()),
            netdevs: Vec::new(),
            netdev_location: "in-pod".into(),
            rdma_devices: Vec::new(),
            node_guid: Some(guid.into()),
            port_guid: Some(guid.into()),
            ipoib_guid: None,
            link_state: None,
            file_guid: None,
            file_entry: None,
            file_error: None,
            derived_guid: None,
            pkeys: Vec::new(),
            holders: vec![Holder {
                source: "journal".into(),
                container_id: "c".into(),
                ifname: Some("net1".into()),
                netns: None,
                netns_state: Some("alive".into()),
                network: "n".into(),
                ips: Vec::new(),
                complete: Some(true),
                vfio: false,
            }],
        }
    }

    /// The RDMA rule needs a kernel RDMA subsystem, which the emulated host lacks: a
    /// journal asking for isolation is an error only in shared mode.
    #[test]
    fn rdma_isolation_in_shared_mode_is_an_error_and_not_in_exclusive() {
        let mut r = Report::default();
        r.vfs
            .push(vf("0000:af:00.2", "mlx5_core", "02:00:00:00:00:00:00:01"));
        let notes = [Note::WantsIsolation("c/net1".into())];
        r.node.rdma_netns_mode = Some("shared".into());
        let f = evaluate(&r, &notes);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].severity, f[0].code.as_str()),
            (Severity::Error, "rdma-shared-with-isolation")
        );
        r.node.rdma_netns_mode = Some("exclusive".into());
        assert!(evaluate(&r, &notes).is_empty());
    }

    /// One finding per shared GUID (node and port alike), naming each VF once; zero
    /// GUIDs are unassigned, never duplicates.
    #[test]
    fn duplicate_guids_are_reported_once_per_guid() {
        let mut r = Report::default();
        let g = "02:00:00:00:00:00:00:07";
        r.vfs.push(vf("0000:af:00.2", "mlx5_core", g));
        r.vfs.push(vf("0000:af:00.3", "mlx5_core", g));
        r.vfs
            .push(vf("0000:af:00.4", "mlx5_core", "00:00:00:00:00:00:00:00"));
        r.vfs
            .push(vf("0000:af:00.5", "mlx5_core", "00:00:00:00:00:00:00:00"));
        let f = evaluate(&r, &[]);
        let dups: Vec<&Finding> = f.iter().filter(|f| f.code == "duplicate-guid").collect();
        assert_eq!(dups.len(), 1, "{f:?}");
        assert_eq!(dups[0].subject, "0000:af:00.2,0000:af:00.3");
        // The zero ones are VFs without a GUID instead.
        let unset: Vec<&str> = f
            .iter()
            .filter(|f| f.code == "vf-guid-unset")
            .map(|f| f.subject.as_str())
            .collect();
        assert_eq!(unset, ["0000:af:00.4", "0000:af:00.5"], "{f:?}");
        assert!(
            f[1].message.contains("its PF's port GUID is unknown"),
            "{f:?}"
        );
    }
}
