//! The counters the exporter reads per attachment, read-only:
//! - the pod's IPoIB netdev statistics: `IFLA_STATS64` (`struct rtnl_link_stats64`,
//!   include/uapi/linux/if_link.h) of an RTM_GETLINK sent on a NETLINK_ROUTE socket
//!   created inside the pod netns;
//! - the PF's per-VF statistics: `IFLA_VFINFO_LIST` > `IFLA_VF_INFO` > `IFLA_VF_STATS`
//!   (`IFLA_VF_STATS_*`, include/uapi/linux/if_link.h) of an RTM_GETLINK of the PF with
//!   `RTEXT_FILTER_VF` (net/core/rtnetlink.c `rtnl_fill_vfinfo()`);
//! - the RDMA device's port counters and hw_counters from sysfs
//!   (`/sys/class/infiniband/<dev>/ports/<port>/counters/*` and `.../hw_counters/*`,
//!   Documentation/ABI/stable/sysfs-class-infiniband), reached through the VF's PCI
//!   device directory.
//! - in RDMA exclusive netns mode, once ADD moved the RDMA device into the pod netns
//!   (the host's sysfs no longer lists it), its ports' hw counters over RDMA netlink:
//!   `RDMA_NLDEV_CMD_STAT_GET` (include/uapi/rdma/rdma_netlink.h) sent on a
//!   `NETLINK_RDMA` socket created inside the pod netns ([`rdma_counters_netlink`]).
//!   The PMA port counters (`ports/<port>/counters/*`, e.g. `port_xmit_data`) have no
//!   RDMA netlink request (ib_core reads them with a MAD, drivers/infiniband/core/sysfs.c
//!   `show_pma_counter()`): for such a device every counter file is read from a sysfs
//!   mounted in the pod netns, in a private mount namespace of a short-lived thread
//!   ([`rdma_counters_in_netns`]), which shows the device as the pod sees it.
//!
//! One synchronous request and reply each (no runtime, no thread): a scrape of many
//! attachments stays cheap.

use crate::rdma::{RdmaOps, RdmaSocket};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkMessage, LinkVfInfo, VfInfo, VfStats,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

/// How long one rtnetlink reply is waited for, in seconds.
const RECV_TIMEOUT_SECS: i64 = 2;

/// A NETLINK_ROUTE socket bound to the netns it was created in.
pub struct Route {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// The counters of `struct rtnl_link_stats64` the exporter exports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetdevStats {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bad packets received.
    pub rx_errors: u64,
    /// Packets that could not be sent.
    pub tx_errors: u64,
    /// Packets received and dropped (no buffer, filtered).
    pub rx_dropped: u64,
    /// Packets dropped on send.
    pub tx_dropped: u64,
    /// Multicast packets received.
    pub multicast: u64,
}

/// A link as the exporter needs it.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// ifindex.
    pub index: u32,
    /// `IFLA_ADDRESS` (20 bytes on IPoIB: flags+QPN, subnet prefix, port GUID).
    pub address: Vec<u8>,
    /// `IFLA_STATS64`, when sent.
    pub stats: Option<NetdevStats>,
    /// `IFLA_VF_STATS` of each VF (by VF index), when asked for and sent.
    pub vf_stats: Vec<(u32, Vec<VfStats>)>,
}

impl Route {
    /// A socket in the calling thread's current netns.
    pub fn open() -> io::Result<Route> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        // A reply the kernel never sends must not hang the scrape.
        nix::sys::socket::setsockopt(
            &sock,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(RECV_TIMEOUT_SECS, 0),
        )
        .map_err(io::Error::from)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Route {
            sock,
            seq: 0,
            buf: vec![0; 64 << 10],
        })
    }

    /// The link named `name` (with its VF statistics when `vfs`); `None` when the netns
    /// has none (`ENODEV`).
    pub fn link(&mut self, name: &str, vfs: bool) -> io::Result<Option<LinkStats>> {
        let mut lm = LinkMessage::default();
        lm.attributes.push(LinkAttribute::IfName(name.to_string()));
        if vfs {
            lm.attributes
                .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Vf]));
        }
        self.seq = self.seq.wrapping_add(1);
        let mut req = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::GetLink(lm)),
        );
        req.header.flags = NLM_F_REQUEST;
        req.header.sequence_number = self.seq;
        req.finalize();
        let mut out = vec![0; req.buffer_len()];
        req.serialize(&mut out);
        self.sock.send(&out, 0)?;
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], 0)?;
            let mut off = 0;
            while off < n {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number == self.seq {
                    match msg.payload {
                        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => {
                            return Ok(Some(parse(&m)));
                        }
                        NetlinkPayload::Error(e) => {
                            let errno = e.code.map(|c| -c.get()).unwrap_or(0);
                            if errno == nix::libc::ENODEV {
                                return Ok(None);
                            }
                            return Err(io::Error::from_raw_os_error(errno));
                        }
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                off += len;
            }
        }
    }
}

fn parse(m: &LinkMessage) -> LinkStats {
    let mut l = LinkStats {
        index: m.header.index,
        ..LinkStats::default()
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::Address(v) => l.address = v.clone(),
            LinkAttribute::Stats64(s) => {
                l.stats = Some(NetdevStats {
                    rx_bytes: s.rx_bytes,
                    tx_bytes: s.tx_bytes,
                    rx_packets: s.rx_packets,
                    tx_packets: s.tx_packets,
                    rx_errors: s.rx_errors,
                    tx_errors: s.tx_errors,
                    rx_dropped: s.rx_dropped,
                    tx_dropped: s.tx_dropped,
                    multicast: s.multicast,
                })
            }
            LinkAttribute::VfInfoList(list) => {
                for LinkVfInfo(infos) in list {
                    let mut vf = None;
                    let mut stats = Vec::new();
                    for i in infos {
                        match i {
                            VfInfo::Mac(m) => vf = Some(m.vf_id),
                            VfInfo::Stats(s) => stats = s.clone(),
                            _ => {}
                        }
                    }
                    if let (Some(vf), false) = (vf, stats.is_empty()) {
                        l.vf_stats.push((vf, stats));
                    }
                }
            }
            _ => {}
        }
    }
    l
}

/// One RDMA counter read from sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaCounter {
    /// The port number.
    pub port: String,
    /// `counters` or `hw_counters`.
    pub group: &'static str,
    /// The file name (`port_xmit_data`, `out_of_sequence`, ...).
    pub name: String,
    /// Its value as the file gives it (unconverted).
    pub value: u64,
}

/// Largest counter file read, in bytes.
const MAX_COUNTER: u64 = 64;

/// The port counters and hw_counters of RDMA device `dev` under `<vf_dir>/infiniband/`
/// (every port; device-level `hw_counters` are reported with port `0`). Files that are
/// unreadable or not numbers (some `hw_counters` files are, e.g. `lifespan`) are left
/// out; an absent device gives nothing.
pub fn rdma_counters(vf_dir: &Path, dev: &str) -> Vec<RdmaCounter> {
    let mut out = Vec::new();
    let base = vf_dir.join("infiniband").join(dev);
    let mut read_group = |dir: &Path, port: &str, group: &'static str| {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "lifespan")
            .collect();
        names.sort();
        for name in names {
            let Ok(b) = crate::fsutil::read_regular_bounded(&dir.join(&name), MAX_COUNTER) else {
                continue;
            };
            if let Ok(v) = String::from_utf8_lossy(&b).trim().parse::<u64>() {
                out.push(RdmaCounter {
                    port: port.to_string(),
                    group,
                    name,
                    value: v,
                });
            }
        }
    };
    read_group(&base.join("hw_counters"), "0", "hw_counters");
    let Ok(rd) = std::fs::read_dir(base.join("ports")) else {
        return out;
    };
    let mut ports: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ports.sort();
    for p in ports {
        let pd = base.join("ports").join(&p);
        read_group(&pd.join("counters"), &p, "counters");
        read_group(&pd.join("hw_counters"), &p, "hw_counters");
    }
    out
}

/// The RDMA device under `<class_dir>/infiniband/` whose `parent` file names netdev
/// `ifname`: a software RDMA device made on a netdev, as `rdma link add NAME type rxe
/// netdev IFNAME` makes one (rxe's `parent` attribute, `parent_show()` in
/// drivers/infiniband/sw/rxe/rxe_verbs.c, prints the name of the netdev it runs on; the
/// device itself is virtual, `/sys/devices/virtual/infiniband/<dev>`, under no PCI
/// device). Read in the sysfs of the netns the netdev is in, so the name is unique
/// there. Devices in name order; the first match, `None` when none names it. Devices
/// without a `parent` file (hardware RDMA devices) never match.
pub fn rdma_device_on_netdev(class_dir: &Path, ifname: &str) -> Option<String> {
    let rd = std::fs::read_dir(class_dir.join("infiniband")).ok()?;
    let mut devs: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    devs.sort();
    devs.into_iter().find(|d| {
        let f = class_dir.join("infiniband").join(d).join("parent");
        crate::fsutil::read_regular_bounded(&f, MAX_COUNTER)
            .is_ok_and(|b| String::from_utf8_lossy(&b).trim() == ifname)
    })
}

/// The RDMA device a pod made on its own netdev `ifname` and its counters (as
/// [`rdma_counters`] reads them), both from a sysfs mounted in pod netns `ns` (see
/// [`rdma_counters_in_netns`]): in exclusive RDMA netns mode an rxe device created on
/// `net1` and moved into the pod netns (`rdma dev set DEV netns POD`) is visible only
/// there. `None` when no device there names `ifname` as its `parent`
/// ([`rdma_device_on_netdev`]) or a step of the mount is refused.
pub fn pod_rdma_on_netdev(ns: BorrowedFd<'_>, ifname: &str) -> Option<(String, Vec<RdmaCounter>)> {
    with_netns_sysfs(ns, |sys| {
        let class = sys.join("class");
        let dev = rdma_device_on_netdev(&class, ifname)?;
        let counters = rdma_counters(&class, &dev);
        Some((dev, counters))
    })
    .flatten()
}

/// The hw counters of each port of RDMA device `dev` as seen by `sock`'s netns (the
/// socket must be created in the netns where the device is: nldev.c looks devices up
/// in `sock_net()`): a `RDMA_NLDEV_CMD_GET` dump for the device's index and port count,
/// then one `RDMA_NLDEV_CMD_STAT_GET` per port ([`RdmaSocket::port_hw_counters`]).
/// Read-only. Group `hw_counters`, ports `1..`; the device-level hw counters (sysfs
/// `<dev>/hw_counters`, port `0`) have no STAT_GET form and are left out. An absent
/// device, a port without hw counters or a failed request gives nothing for it.
pub fn rdma_counters_netlink(sock: &mut RdmaSocket, dev: &str) -> Vec<RdmaCounter> {
    let Ok(Some(d)) = sock.device_by_name(dev) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for port in 1..=d.port_count.unwrap_or(1) {
        let Ok(Some(counters)) = sock.port_hw_counters(d.index, port) else {
            continue;
        };
        let mut counters = counters;
        counters.sort();
        for (name, value) in counters {
            out.push(RdmaCounter {
                port: port.to_string(),
                group: "hw_counters",
                name,
                value,
            });
        }
    }
    out
}

/// Every counter of RDMA device `dev` (the groups and ports of [`rdma_counters`]) as a
/// sysfs mounted in network namespace `ns` lists them: in exclusive RDMA netns mode a
/// sysfs instance shows the RDMA devices of the netns it was mounted in
/// (`/sys/class/infiniband` is tagged by network namespace, drivers/infiniband/core/device.c
/// `ib_class`'s `ns_type`), and the host's `/sys` was mounted in the host netns.
///
/// As `ip netns exec` does (iproute2 lib/namespace.c `netns_switch()`), but in a
/// short-lived thread of its own so that nothing else changes: the thread unshares its
/// mount namespace (`unshare(CLONE_NEWNS)`, which also unshares its filesystem context),
/// makes every mount in it a slave (`MS_SLAVE | MS_REC`: nothing it does propagates to
/// the host's mounts), enters `ns` (`setns(CLONE_NEWNET)`), detaches its `/sys` and
/// mounts a read-only sysfs there, reads, and exits, which frees that mount namespace.
/// No file on the host changes. Needs `CAP_SYS_ADMIN` (as the `setns(2)` of the netdev
/// counters does). `None` when any of these steps is refused.
pub fn rdma_counters_in_netns(ns: BorrowedFd<'_>, dev: &str) -> Option<Vec<RdmaCounter>> {
    with_netns_sysfs(ns, |sys| rdma_counters(&sys.join("class"), dev))
}

/// Runs `f` with the root of a sysfs mounted in network namespace `ns` (see
/// [`rdma_counters_in_netns`] for how), in a short-lived thread; `None` when a step is
/// refused.
pub fn with_netns_sysfs<T: Send>(
    ns: BorrowedFd<'_>,
    f: impl FnOnce(&Path) -> T + Send,
) -> Option<T> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use nix::sched::{setns, unshare, CloneFlags};
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                unshare(CloneFlags::CLONE_NEWNS).ok()?;
                let none: Option<&str> = None;
                mount(none, "/", none, MsFlags::MS_SLAVE | MsFlags::MS_REC, none).ok()?;
                setns(ns, CloneFlags::CLONE_NEWNET).ok()?;
                // Not a mount point (EINVAL) is fine: the new sysfs goes on top.
                let _ = umount2("/sys", MntFlags::MNT_DETACH);
                let ro = MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                mount(Some("sysfs"), "/sys", Some("sysfs"), ro, none).ok()?;
                Some(f(Path::new("/sys")))
            })
            .join()
            .ok()
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::link::{Stats64, VfInfoMac};

    /// A reply as the kernel sends it (emitted, then parsed back), read by [`parse`].
    #[test]
    fn a_links_stats_and_its_vfs_stats_are_read() {
        let mut m = LinkMessage::default();
        m.header.index = 7;
        m.attributes.push(LinkAttribute::Address(vec![0xaa; 20]));
        let mut s = Stats64::default();
        s.rx_bytes = 1000;
        s.tx_bytes = 2000;
        s.rx_errors = 3;
        s.tx_dropped = 4;
        m.attributes.push(LinkAttribute::Stats64(s));
        let vf = |id: u32, rx: u64| {
            let mut mac = VfInfoMac::default();
            mac.vf_id = id;
            LinkVfInfo(vec![
                VfInfo::Mac(mac),
                VfInfo::Stats(vec![VfStats::RxBytes(rx), VfStats::TxPackets(rx / 10)]),
            ])
        };
        m.attributes
            .push(LinkAttribute::VfInfoList(vec![vf(0, 500), vf(3, 900)]));
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::NewLink(m)),
        );
        msg.finalize();
        let mut buf = vec![0; msg.buffer_len()];
        msg.serialize(&mut buf);
        let back = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf)
            .unwrap()
            .payload
        {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => m,
            other => panic!("{other:?}"),
        };
        let l = parse(&back);
        assert_eq!(l.index, 7);
        assert_eq!(l.address.len(), 20);
        let st = l.stats.unwrap();
        assert_eq!(
            (st.rx_bytes, st.tx_bytes, st.rx_errors, st.tx_dropped),
            (1000, 2000, 3, 4)
        );
        assert_eq!(l.vf_stats.len(), 2);
        assert_eq!(l.vf_stats[1].0, 3);
        assert!(l.vf_stats[1].1.contains(&VfStats::RxBytes(900)));
    }

    /// A sysfs mounted in another netns lists that netns' links, not the host's, and
    /// the host's mounts are the same afterwards. Needs root (CI runs it as root).
    #[test]
    fn a_sysfs_mounted_in_a_netns_shows_that_netns_and_changes_no_host_mount() {
        let sh = |args: &[&str]| {
            let st = std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap();
            assert!(st.success(), "ip {args:?} (needs root)");
        };
        let name = format!("exp-sysfs-{}", std::process::id());
        sh(&["netns", "add", &name]);
        struct Del(String);
        impl Drop for Del {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &self.0])
                    .status();
            }
        }
        let _del = Del(name.clone());
        // veth: the emulated host's kernel has it (it may lack dummy).
        sh(&[
            "-n", &name, "link", "add", "expveth0", "type", "veth", "peer", "name", "expveth1",
        ]);
        let mounts = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let before = mounts();
        let ns = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
        use std::os::fd::AsFd;
        let links = |sys: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(sys.join("class/net"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let seen = with_netns_sysfs(ns.as_fd(), links).expect("CAP_SYS_ADMIN");
        assert_eq!(
            seen,
            ["expveth0", "expveth1", "lo"].map(String::from).to_vec()
        );
        assert!(!links(Path::new("/sys")).contains(&"expveth0".to_string()));
        assert_eq!(mounts(), before, "no mount of this process changed");
    }

    /// An rxe device made on `net1` is found by its `parent` file; a hardware device
    /// (no `parent`) and an rxe device on another netdev are not.
    #[test]
    fn the_rdma_device_on_a_netdev_is_found_by_its_parent() {
        let d = tempfile::tempdir().unwrap();
        let dev = |name: &str, parent: Option<&str>| {
            let p = d.path().join("infiniband").join(name);
            std::fs::create_dir_all(p.join("ports/1/hw_counters")).unwrap();
            std::fs::write(p.join("ports/1/hw_counters/sent_bytes"), "4096\n").unwrap();
            if let Some(parent) = parent {
                std::fs::write(p.join("parent"), format!("{parent}\n")).unwrap();
            }
        };
        dev("mlx5_0", None);
        dev("rxa", Some("eth0"));
        dev("rxb", Some("net1"));
        assert_eq!(
            rdma_device_on_netdev(d.path(), "net1").as_deref(),
            Some("rxb")
        );
        assert_eq!(rdma_device_on_netdev(d.path(), "net2"), None);
        assert_eq!(rdma_device_on_netdev(d.path(), "mlx5_0"), None);
        assert_eq!(
            rdma_device_on_netdev(&d.path().join("absent"), "net1"),
            None
        );
        let c = rdma_counters(d.path(), "rxb");
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].port.as_str(), c[0].value), ("1", 4096));
    }

    #[test]
    fn rdma_counters_are_read_per_port_and_group() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("infiniband/mlx5_3");
        for (p, v) in [
            ("ports/1/counters/port_xmit_data", "12\n"),
            ("ports/1/hw_counters/out_of_sequence", "5\n"),
            ("ports/1/hw_counters/lifespan", "10\n"),
            ("hw_counters/rx_write_requests", "8\n"),
            ("ports/1/counters/not_a_number", "N/A\n"),
        ] {
            let f = dev.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        }
        let c = rdma_counters(d.path(), "mlx5_3");
        let got: Vec<(String, &str, String, u64)> = c
            .into_iter()
            .map(|c| (c.port, c.group, c.name, c.value))
            .collect();
        assert_eq!(
            got,
            vec![
                ("0".into(), "hw_counters", "rx_write_requests".into(), 8),
                ("1".into(), "counters", "port_xmit_data".into(), 12),
                ("1".into(), "hw_counters", "out_of_sequence".into(), 5),
            ]
        );
        assert!(rdma_counters(d.path(), "mlx5_9").is_empty());
    }
}
