//! The kernel facts the plugin relies on (docs/design.md "Kernel facts"), and which of
//! them the node's running kernel lacks: one finding `kernel-lacks-<fact>` each, saying
//! what the plugin does instead and the fix.
//!
//! Each fact is read from the running kernel where a harmless request shows it, else
//! from the release in `/proc/sys/kernel/osrelease` compared with the first mainline
//! release that has it. A release is only a hint: distribution kernels backport
//! (RHEL 8's 4.18 and RHEL 9's 5.14 carry much of later kernels), so a probe's answer,
//! when there is one, always wins over the release.
//! - `parent-dev`: the links of one rtnetlink dump (the doctor's own). A link reporting
//!   `IFLA_PARENT_DEV_NAME` proves the kernel has it; a netdev whose sysfs
//!   `class/net/<name>/device` exists (the kernel sets `IFLA_PARENT_DEV_NAME` exactly
//!   when the netdev has a parent device, `rtnl_fill_ifinfo()` in net/core/rtnetlink.c,
//!   and sysfs shows that parent as `device`) with no link reporting one shows it
//!   missing, confirmed by the release (a release that has it means the sysfs tree is
//!   not the kernel's: the emulated host's veths).
//! - `rdma-netns`: the RDMA netns mode the doctor reads (`RDMA_NLDEV_CMD_SYS_GET`): an
//!   answer proves it; no RDMA subsystem leaves the release to tell.
//! - `vf-guid-read`: VF GUIDs read from a PF's VF table (`IFLA_VF_IB_NODE_GUID` in
//!   `RTM_GETLINK`) prove it; none (a PF driver without `ndo_get_vf_guid` looks the
//!   same) leaves the release to tell.
//! - `altnames`, `skip-vf-stats`: no harmless request tells; the release only.

use super::report::{Finding, Severity};
use crate::netlink::Link;
use std::path::Path;

/// One kernel fact the plugin relies on.
#[derive(Debug, Clone, Copy)]
pub struct Fact {
    /// The finding's code is `kernel-lacks-<id>`.
    pub id: &'static str,
    /// What the kernel provides.
    pub what: &'static str,
    /// First mainline release with it, (major, minor).
    pub first: (u32, u32),
    /// Severity of its absence.
    pub severity: Severity,
    /// What the plugin does without it.
    pub changes: &'static str,
    /// The fix.
    pub fix: &'static str,
}

/// The facts the doctor checks, in docs/design.md "Kernel facts" order (that table
/// names the kernel commit of each).
pub const FACTS: &[Fact] = &[
    Fact {
        id: "parent-dev",
        what: "the netdev's parent device in rtnetlink (IFLA_PARENT_DEV_NAME, IFLA_PARENT_DEV_BUS_NAME)",
        first: (5, 14),
        severity: Severity::Info,
        changes: "the plugin finds a VF's netdev by the kernel's listing under /sys/bus/pci/devices/<VF>/net/ and by the hardware address and ifindex it recorded, not by parent device: a pod link that copied the VF's address is told apart only by the recorded ifindex, and when several links carry the VF's identity ADD and DEL touch none of them (logged)",
        fix: "nothing is required; a kernel from 5.14 on (RHEL 9's 5.14, Ubuntu 22.04's 5.15) reports the parent and makes the identity checks exact",
    },
    Fact {
        id: "altnames",
        what: "alternative netdev names (IFLA_PROP_LIST > IFLA_ALT_IFNAME, RTM_NEWLINKPROP/RTM_DELLINKPROP)",
        first: (5, 5),
        severity: Severity::Info,
        changes: "no netdev has an alternative name, so none can hold the name a VF's netdev returns to: the step that frees a name held as an altname never runs; nothing else changes",
        fix: "nothing to do",
    },
    Fact {
        id: "rdma-netns",
        what: "the RDMA subsystem's netns mode (RDMA_NLDEV_CMD_SYS_GET/SYS_SET, RDMA_NLDEV_SYS_ATTR_NETNS_MODE) and moving an RDMA device to a netns (RDMA_NLDEV_NET_NS_FD)",
        first: (5, 2),
        severity: Severity::Warning,
        changes: "RDMA devices are visible in every netns and cannot be moved: ADD refuses a network with rdmaIsolation: true (code 7, the netns mode cannot be read), and the pod sees every RDMA device of the node",
        fix: "use a kernel from 5.2 on for rdmaIsolation (rdma system set netns exclusive); networks without rdmaIsolation work as they are",
    },
    Fact {
        id: "vf-guid-read",
        what: "a VF's GUIDs read back through its PF (IFLA_VF_IB_NODE_GUID/IFLA_VF_IB_PORT_GUID in RTM_GETLINK with RTEXT_FILTER_VF, ndo_get_vf_guid; 5.5 added it, answering VF 0's GUIDs for every VF until 5.6)",
        first: (5, 6),
        severity: Severity::Warning,
        changes: "the plugin reads a VF's GUIDs from MLNX_OFED's <PF>/sriov/<N>/ files or its IPoIB netdev's address where there are some; otherwise ADD records the original GUID as unknown and DEL gives the VF its derived GUID (ib-sriov doctor shows it) instead of the original",
        fix: "use a kernel from 5.6 on (or MLNX_OFED, whose sriov files give the GUIDs); setting GUIDs (IFLA_VF_IB_NODE_GUID in RTM_SETLINK, since 4.6) is not affected",
    },
    Fact {
        id: "skip-vf-stats",
        what: "RTEXT_FILTER_SKIP_STATS leaving IFLA_VF_STATS out of a PF's VF table",
        first: (6, 5),
        severity: Severity::Info,
        changes: "every read of a PF's VF table also gathers each VF's counters (a firmware query per VF on mlx5) and carries 103 more bytes per VF: slower ADD/DEL on PFs with many VFs, and the single reply overflows sooner (the plugin then reads the VF table from a link dump)",
        fix: "nothing is required; a kernel from 6.5 on makes VF table reads cheaper on PFs with many VFs",
    },
];

/// What a probe of the running kernel showed about one fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The kernel showed it has the fact: what showed it.
    Present(String),
    /// The kernel showed it lacks the fact: what showed it.
    Absent(String),
    /// No harmless request tells (no RDMA subsystem, no netdev with a parent device...).
    Unknown,
}

/// The probes the collector made, by fact id; a fact not listed is [`Probe::Unknown`].
#[derive(Debug, Clone, Default)]
pub struct Probes(pub Vec<(&'static str, Probe)>);

impl Probes {
    fn get(&self, id: &str) -> &Probe {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| p)
            .unwrap_or(&Probe::Unknown)
    }
}

/// The `parent-dev` probe over the links of one rtnetlink dump of this netns and the
/// sysfs tree `sys`: [`Probe::Present`] when a link reports `IFLA_PARENT_DEV_NAME`,
/// [`Probe::Absent`] when none does but a netdev has a sysfs `class/net/<name>/device`
/// (with the same ifindex as the link, when sysfs lists one), else [`Probe::Unknown`].
pub fn probe_parent_dev(links: &[Link], sys: &Path) -> Probe {
    if let Some(l) = links.iter().find(|l| l.parent_dev.is_some()) {
        return Probe::Present(format!(
            "netdev {} reports parent device {}",
            l.name,
            l.parent_dev.as_deref().unwrap_or_default()
        ));
    }
    for l in links {
        let dir = sys.join("class/net").join(&l.name);
        let Ok(dev) = std::fs::read_link(dir.join("device")) else {
            continue;
        };
        let ifindex = crate::fsutil::read_regular_bounded(&dir.join("ifindex"), 64)
            .ok()
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u32>().ok());
        if ifindex.is_some_and(|i| i != l.index) {
            continue;
        }
        let dev = dev
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Probe::Absent(format!(
            "netdev {} has parent device {dev} in sysfs but the kernel reports no IFLA_PARENT_DEV_NAME for it or any other link",
            l.name
        ));
    }
    Probe::Unknown
}

/// (major, minor) of a kernel release (`/proc/sys/kernel/osrelease`: `5.10.0-46-amd64`,
/// `4.18.0-553.el8_10.x86_64`); `None` when it does not start with `N.N`.
pub fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The findings for the facts the running kernel lacks: by its probe where it gave an
/// answer, else by the release `release` (`None`: unreadable, then only a probe
/// that found the fact absent gives a finding). A probe that found the fact absent
/// while the release has it gives none: no kernel from that release on leaves it out,
/// so the sysfs tree the probe compared with is not the kernel's own.
pub fn findings(release: Option<&str>, probes: &Probes) -> Vec<Finding> {
    let version = release.and_then(release_version);
    let backports = "; a distribution kernel may have it backported (RHEL 8's 4.18, RHEL 9's 5.14), which only a probe of the kernel tells";
    let mut out = Vec::new();
    for f in FACTS {
        let older = version.map(|v| v < f.first);
        let rel = release.unwrap_or("unknown");
        let why = match (probes.get(f.id), older) {
            (Probe::Present(_), _) => continue,
            (Probe::Absent(_), Some(false)) => continue,
            (Probe::Absent(seen), _) => format!("{seen} (kernel {rel})"),
            (Probe::Unknown, Some(true)) => format!(
                "kernel {rel} is older than {}.{}, the first with it (read from the release: no harmless request shows it on this node{backports})",
                f.first.0, f.first.1
            ),
            (Probe::Unknown, _) => continue,
        };
        out.push(Finding {
            severity: f.severity,
            code: format!("kernel-lacks-{}", f.id),
            subject: "kernel".into(),
            message: format!(
                "the running kernel lacks {}: {why}. What changes: {}",
                f.what, f.changes
            ),
            fix: f.fix.into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, index: u32, parent: Option<&str>) -> Link {
        Link {
            index,
            name: name.into(),
            up: true,
            carrier: true,
            mtu: None,
            address: Vec::new(),
            parent_dev: parent.map(str::to_string),
            altnames: Vec::new(),
        }
    }

    fn codes(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn releases_parse_to_major_minor() {
        assert_eq!(release_version("5.10.0-46-amd64"), Some((5, 10)));
        assert_eq!(release_version("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
        assert_eq!(release_version("7.3.4+deb13-amd64"), Some((7, 3)));
        assert_eq!(release_version("6.12"), Some((6, 12)));
        assert_eq!(release_version("linux"), None);
        assert_eq!(release_version("6"), None);
    }

    #[test]
    fn release_decides_only_where_no_probe_answered() {
        let none = Probes::default();
        assert_eq!(
            codes(&findings(Some("5.10.0-46-amd64"), &none)),
            ["kernel-lacks-parent-dev", "kernel-lacks-skip-vf-stats"]
        );
        assert_eq!(
            codes(&findings(Some("4.18.0-553.el8_10.x86_64"), &none)),
            [
                "kernel-lacks-parent-dev",
                "kernel-lacks-altnames",
                "kernel-lacks-rdma-netns",
                "kernel-lacks-vf-guid-read",
                "kernel-lacks-skip-vf-stats"
            ]
        );
        assert!(findings(Some("6.12.95+deb12-amd64"), &none).is_empty());
        assert!(findings(None, &none).is_empty());
        assert!(findings(Some("garbage"), &none).is_empty());
        // A RHEL 8 kernel that backported what the probes show.
        let seen = Probes(vec![
            ("parent-dev", Probe::Present("x".into())),
            ("rdma-netns", Probe::Present("x".into())),
            ("vf-guid-read", Probe::Present("x".into())),
        ]);
        assert_eq!(
            codes(&findings(Some("4.18.0-553.el8_10.x86_64"), &seen)),
            ["kernel-lacks-altnames", "kernel-lacks-skip-vf-stats"]
        );
    }

    #[test]
    fn an_absent_probe_needs_an_older_or_unknown_release() {
        let absent = Probes(vec![("parent-dev", Probe::Absent("netdev v0 ...".into()))]);
        let f = findings(Some("5.10.0-46-amd64"), &absent);
        assert_eq!(f[0].code, "kernel-lacks-parent-dev");
        assert!(f[0]
            .message
            .contains("netdev v0 ... (kernel 5.10.0-46-amd64)"));
        assert_eq!(codes(&findings(None, &absent)), ["kernel-lacks-parent-dev"]);
        assert!(findings(Some("6.12.95+deb12-amd64"), &absent).is_empty());
    }

    #[test]
    fn parent_dev_probe_reads_links_and_sysfs() {
        let sys = tempfile::tempdir().unwrap();
        let net = sys.path().join("class/net");
        std::fs::create_dir_all(net.join("v0")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:03.0",
            net.join("v0/device"),
        )
        .unwrap();
        std::fs::write(net.join("v0/ifindex"), "7\n").unwrap();
        assert_eq!(
            probe_parent_dev(&[link("lo", 1, None)], sys.path()),
            Probe::Unknown
        );
        assert_eq!(
            probe_parent_dev(&[link("v0", 8, None)], sys.path()),
            Probe::Unknown,
            "another link under that name"
        );
        assert!(matches!(
            probe_parent_dev(&[link("lo", 1, None), link("v0", 7, None)], sys.path()),
            Probe::Absent(s) if s.contains("v0 has parent device 0000:00:03.0")
        ));
        assert!(matches!(
            probe_parent_dev(&[link("v0", 7, None), link("eth0", 2, Some("0000:00:04.0"))], sys.path()),
            Probe::Present(s) if s.contains("eth0 reports parent device 0000:00:04.0")
        ));
    }
}
