//! The human form of the report: sections in a fixed order, one line per fact, so two
//! runs on the same node print the same text.

use super::report::Report;
use std::fmt::Write;

fn opt(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("-")
}

/// Renders `r` as text (ends with a newline).
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let n = &r.node;
    let _ = writeln!(
        o,
        "ib-sriov doctor {} (host root {})",
        r.plugin_version, r.host_root
    );
    let _ = writeln!(o, "\nnode");
    let _ = writeln!(o, "  kernel            {}", opt(&n.kernel));
    let mods: Vec<String> = n
        .modules
        .iter()
        .map(|m| format!("{} {}", m.name, if m.loaded { "yes" } else { "no" }))
        .collect();
    let _ = writeln!(o, "  modules           {}", mods.join(", "));
    let _ = writeln!(o, "  rdma netns mode   {}", opt(&n.rdma_netns_mode));
    let _ = writeln!(o, "  VF GUIDs via      {}", n.vf_guid_source);
    let gf = &r.guid_file;
    let _ = writeln!(
        o,
        "  VF GUID file      {} ({})",
        gf.path,
        match (gf.state.as_str(), gf.entries, &gf.error) {
            ("valid", Some(1), _) => "valid, 1 entry".to_string(),
            ("valid", Some(n), _) => format!("valid, {n} entries"),
            ("invalid", _, Some(e)) => format!("invalid: {e}"),
            (s, ..) => s.to_string(),
        }
    );
    let nf = &r.node_file;
    let _ = writeln!(
        o,
        "  node file         {} ({})",
        nf.path,
        match (nf.state.as_str(), &nf.error) {
            ("valid", _) if nf.defaults.is_empty() => "valid, no defaults".to_string(),
            ("valid", _) => format!(
                "valid, defaults {}",
                serde_json::to_string(&nf.defaults).unwrap_or_default()
            ),
            ("invalid", Some(e)) => format!("invalid: {e}"),
            (s, _) => s.to_string(),
        }
    );
    let _ = writeln!(o, "\nPFs");
    if r.pfs.is_empty() {
        let _ = writeln!(o, "  (none: no PCI device with sriov_totalvfs)");
    }
    for p in &r.pfs {
        let _ = writeln!(
            o,
            "  {}  netdev {}  driver {}  {}  VFs {}/{}  port guid {}",
            p.pci,
            if p.netdevs.is_empty() {
                "-".into()
            } else {
                p.netdevs.join(",")
            },
            opt(&p.driver),
            p.link_layer,
            p.num_vfs.map_or("-".into(), |v| v.to_string()),
            p.total_vfs.map_or("-".into(), |v| v.to_string()),
            opt(&p.port_guid),
        );
    }
    let _ = writeln!(o, "\nVFs");
    for v in &r.vfs {
        let nd = if v.netdevs.is_empty() {
            v.netdev_location.clone()
        } else {
            v.netdevs
                .iter()
                .map(|d| {
                    format!(
                        "{} ({}{})",
                        d.name,
                        if d.up { "up" } else { "down" },
                        if d.carrier { ", carrier" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            o,
            "  {} (PF {} VF {})  driver {}  netdev {}  rdma {}",
            v.pci,
            v.pf,
            v.index,
            opt(&v.driver),
            nd,
            if v.rdma_devices.is_empty() {
                "-".into()
            } else {
                v.rdma_devices.join(",")
            },
        );
        let _ = writeln!(
            o,
            "      node guid {}  port guid {}  link state {}",
            opt(&v.node_guid),
            opt(&v.port_guid),
            opt(&v.link_state)
        );
        let file = match (&v.file_guid, v.file_entry, &v.file_error) {
            (Some(g), Some(i), _) => format!("{g} (entry {i})"),
            (_, _, Some(e)) => format!("none: {e}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "      ipoib guid {}  without a GUID: file {}  derived {}",
            opt(&v.ipoib_guid),
            file,
            opt(&v.derived_guid)
        );
        if !v.pkeys.is_empty() {
            let _ = writeln!(o, "      pkeys {}", v.pkeys.join(" "));
        }
        for h in &v.holders {
            let _ = writeln!(
                o,
                "      held by {} {}{}  network {}  netns {} ({})  ips {}{}",
                h.source,
                h.container_id,
                h.ifname
                    .as_deref()
                    .map(|i| format!("/{i}"))
                    .unwrap_or_default(),
                h.network,
                opt(&h.netns),
                opt(&h.netns_state),
                if h.ips.is_empty() {
                    "-".into()
                } else {
                    h.ips.join(",")
                },
                match h.complete {
                    Some(false) => "  (ADD not complete)",
                    _ => "",
                }
            );
        }
    }
    let _ = writeln!(o, "\nattachments");
    if r.attachments.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for a in &r.attachments {
        let _ = writeln!(
            o,
            "  pod {}  {}  network {}  VF {}  rdma {}",
            opt(&a.pod),
            a.attachment,
            a.network,
            a.vf,
            opt(&a.rdma_device)
        );
        let _ = writeln!(
            o,
            "      guid {}  PF port guid {}  pkey {}",
            opt(&a.guid),
            opt(&a.pf_port_guid),
            match (&a.pkey, a.pkey_in_table) {
                (None, _) => "-".to_string(),
                (Some(p), Some(true)) => format!("{p} (in the VF's pkey table)"),
                (Some(p), Some(false)) => format!("{p} (NOT in the VF's pkey table)"),
                (Some(p), None) => format!("{p} (pkey table unknown)"),
            }
        );
    }
    let _ = writeln!(o, "\nholder sources");
    for h in &r.holder_sources {
        let from = if h.from.is_empty() {
            String::new()
        } else {
            format!(" (from {})", h.from)
        };
        let _ = writeln!(o, "  {:<13} {}{}  {}", h.kind, h.path, from, h.state);
    }
    let _ = writeln!(o, "\nbuilt-in IPAM");
    if r.ipam.is_empty() {
        let _ = writeln!(o, "  (no store)");
    }
    for s in &r.ipam {
        let _ = writeln!(
            o,
            "  {}  range {}  allocated {}/{}  boot {}",
            s.dir,
            opt(&s.range),
            s.allocated,
            s.total.map_or("?".into(), |t| t.to_string()),
            opt(&s.boot)
        );
        for orphan in &s.orphans {
            let _ = writeln!(o, "      no attachment: {orphan}");
        }
    }
    if !r.conf.is_empty() {
        let _ = writeln!(o, "\n--conf");
        for c in &r.conf {
            let _ = writeln!(
                o,
                "  {}{}  {}",
                c.name,
                c.nad.as_ref().map_or(String::new(), |n| format!(
                    " (NetworkAttachmentDefinition {n})"
                )),
                if c.ok {
                    "valid"
                } else {
                    c.error.as_deref().unwrap_or("invalid")
                }
            );
        }
    }
    let _ = writeln!(o, "\nfindings");
    if r.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for f in &r.findings {
        let _ = writeln!(
            o,
            "  {:<7} {}  {}: {}",
            f.severity.as_str(),
            f.code,
            f.subject,
            f.message
        );
        let _ = writeln!(o, "          fix: {}", f.fix);
    }
    o
}
