//! rtnetlink access (NETLINK_ROUTE): links, addresses, routes in one namespace, and VF
//! configuration on a PF (`vf.rs`). Messages are built with the `rtnetlink` crate's
//! builders and netlink-packet-route's types, and sent on one blocking socket
//! (`query.rs`), which also decodes the answers.
//!
//! A [`Netlink`] owns that socket, opened in a chosen namespace; every call blocks until
//! the kernel answers (no async runtime: a call is a short-lived process, and a tokio
//! runtime's set-up, wake-ups and teardown cost more than its requests). Opening the
//! socket inside the pod netns and then working from the host thread is the pattern of
//! containers/netavark `core_utils.rs`.

mod query;
pub mod vf;

use crate::cni::Route;
use crate::netns::{NetNs, NetnsError};
use ipnetwork::IpNetwork;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkFlags, LinkMessage, Prop};
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::{LinkMessageBuilder, LinkUnspec, RouteMessageBuilder};
use std::fmt;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `EOPNOTSUPP` (include/uapi/asm-generic/errno.h): the driver lacks the ndo.
pub const EOPNOTSUPP: i32 = nix::errno::Errno::EOPNOTSUPP as i32;
/// `ENODEV`: no such device.
pub const ENODEV: i32 = nix::errno::Errno::ENODEV as i32;

/// A failed netlink operation: what was attempted and the kernel's errno if any.
#[derive(Debug, Clone)]
pub struct NlError {
    /// The operation, e.g. "set link 12 up".
    pub op: String,
    /// Positive errno from the kernel's NLMSG_ERROR, when the kernel answered one.
    pub errno: Option<i32>,
    /// Human-readable cause.
    pub msg: String,
}

impl NlError {
    /// An errno injected by a fail point ([`crate::failpoint::errno_at`]), as the kernel
    /// would have answered it.
    pub(crate) fn injected(op: impl Into<String>, errno: i32) -> Self {
        NlError {
            op: op.into(),
            errno: Some(errno),
            msg: format!("{} (injected)", std::io::Error::from_raw_os_error(errno)),
        }
    }

    /// The kernel's answer `errno` (positive) to `op`.
    fn errno(op: impl Into<String>, errno: i32) -> Self {
        NlError {
            op: op.into(),
            errno: Some(errno),
            msg: std::io::Error::from_raw_os_error(errno).to_string(),
        }
    }

    fn io(op: impl Into<String>, e: impl fmt::Display) -> Self {
        NlError {
            op: op.into(),
            errno: None,
            msg: e.to_string(),
        }
    }

    /// True when the kernel answered `EOPNOTSUPP` (the driver has no such operation).
    pub fn is_not_supported(&self) -> bool {
        self.errno == Some(EOPNOTSUPP)
    }

    /// True when the kernel answered `ENODEV`.
    pub fn is_no_device(&self) -> bool {
        self.errno == Some(ENODEV)
    }
}

impl fmt::Display for NlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.msg)
    }
}

impl std::error::Error for NlError {}

/// A link as the kernel reports it (RTM_NEWLINK).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// IFLA_IFNAME.
    pub name: String,
    /// IFF_UP set.
    pub up: bool,
    /// IFF_LOWER_UP set: the driver reports carrier (`netif_carrier_ok()`; an IPoIB
    /// port is up once the subnet manager made it active). include/uapi/linux/if.h.
    pub carrier: bool,
    /// IFLA_MTU in bytes.
    pub mtu: Option<u32>,
    /// IFLA_ADDRESS: 6 bytes on Ethernet, 20 on IPoIB.
    pub address: Vec<u8>,
    /// IFLA_PARENT_DEV_NAME (kernel >= 5.14, torvalds/linux@00e77ed8e64d): the parent
    /// device, a PCI address for a VF netdev; `None` for virtual links (veth) and for
    /// every link on an older kernel.
    pub parent_dev: Option<String>,
    /// Alternative names (IFLA_PROP_LIST > IFLA_ALT_IFNAME, kernel >= 5.5), e.g. the
    /// predictable names udev's `AlternativeNamesPolicy` adds.
    pub altnames: Vec<String>,
}

impl Link {
    fn from_msg(m: &LinkMessage) -> Link {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            up: m.header.flags.contains(LinkFlags::Up),
            carrier: m.header.flags.contains(LinkFlags::LowerUp),
            mtu: None,
            address: Vec::new(),
            parent_dev: None,
            altnames: Vec::new(),
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Mtu(v) => l.mtu = Some(*v),
                LinkAttribute::Address(v) => l.address = v.clone(),
                LinkAttribute::ParentDevName(p) => l.parent_dev = Some(p.clone()),
                LinkAttribute::PropList(props) => {
                    l.altnames.extend(props.iter().filter_map(|p| match p {
                        Prop::AltIfName(n) => Some(n.clone()),
                        _ => None,
                    }))
                }
                _ => {}
            }
        }
        l
    }
}

/// An RTM_GETLINK with `IFLA_EXT_MASK = RTEXT_FILTER_SKIP_STATS` (1 << 3,
/// include/uapi/linux/rtnetlink.h): the kernel then leaves out the IPv6 MIB counters
/// of `IFLA_AF_SPEC` (net/ipv6/addrconf.c `inet6_fill_ifla6_attrs()`), which it folds
/// from per-CPU counters at every request and nothing here reads (on 6.18, 368 of the
/// 1468 bytes of `lo`'s answer; `IFLA_STATS`/`IFLA_STATS64` are still sent). A
/// kernel that predates the flag ignores the bit. `extra`: further filter flags
/// (`RTEXT_FILTER_VF` for a PF's VF table), sent in the same `IFLA_EXT_MASK`.
fn get_message(extra: &[LinkExtentMask]) -> LinkMessage {
    let mut mask = vec![LinkExtentMask::SkipStats];
    mask.extend_from_slice(extra);
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::ExtMask(mask));
    m
}

/// A blocking rtnetlink connection bound to one network namespace.
pub struct Netlink {
    /// The blocking socket every request goes through (`query.rs`).
    query: query::Query,
}

impl Netlink {
    /// Opens a connection in the calling thread's current namespace.
    pub fn open() -> Result<Netlink, NlError> {
        let query =
            query::Query::open().map_err(|e| NlError::io("open NETLINK_ROUTE socket", e))?;
        Ok(Netlink { query })
    }

    /// Opens a connection whose socket lives in `ns`: the thread enters `ns` only to
    /// create the socket.
    pub fn open_in(ns: &NetNs) -> Result<Netlink, NlError> {
        ns.run_in(Netlink::open)
            .map_err(|e: NetnsError| NlError::io("enter network namespace", e))?
    }

    /// The link named `name`, or `None` when the namespace has none.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>, NlError> {
        let mut m = get_message(&[]);
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link(&|| format!("get link {name}"), m)
    }

    /// The link with ifindex `index`, or `None`.
    pub fn link_by_index(&self, index: u32) -> Result<Option<Link>, NlError> {
        let mut m = get_message(&[]);
        m.header.index = index;
        self.get_link(&|| format!("get link {index}"), m)
    }

    /// One RTM_GETLINK; `ENODEV` means "no such link" and gives `None`.
    fn get_link(&self, op: &dyn Fn() -> String, msg: LinkMessage) -> Result<Option<Link>, NlError> {
        let mut out = None;
        match self
            .query
            .links(op, msg, false, |m| out = Some(Link::from_msg(&m)))
        {
            Ok(()) => Ok(out),
            Err(e) if e.is_no_device() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every link in the namespace.
    pub fn links(&self) -> Result<Vec<Link>, NlError> {
        let mut out = Vec::new();
        self.query
            .links(&|| "dump links".to_string(), get_message(&[]), true, |m| {
                out.push(Link::from_msg(&m))
            })?;
        Ok(out)
    }

    /// One RTM_SETLINK, with the flags rtnetlink's `LinkSetRequest` sends
    /// (`NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE`).
    fn set(&self, op: String, msg: LinkMessage) -> Result<(), NlError> {
        use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
        self.query.ack(
            &|| op.clone(),
            RouteNetlinkMessage::SetLink(msg),
            NLM_F_EXCL | NLM_F_CREATE,
        )
    }

    /// Sets IFF_UP on the link.
    pub fn set_up(&self, index: u32) -> Result<(), NlError> {
        let m = LinkMessageBuilder::<LinkUnspec>::new()
            .index(index)
            .up()
            .build();
        self.set(format!("set link {index} up"), m)
    }

    /// Clears IFF_UP on the link.
    pub fn set_down(&self, index: u32) -> Result<(), NlError> {
        let m = LinkMessageBuilder::<LinkUnspec>::new()
            .index(index)
            .down()
            .build();
        self.set(format!("set link {index} down"), m)
    }

    /// Renames the link (it must be down); `EEXIST` when the name is taken.
    pub fn rename(&self, index: u32, name: &str) -> Result<(), NlError> {
        let m = LinkMessageBuilder::<LinkUnspec>::new()
            .index(index)
            .name(name.to_string())
            .build();
        self.set(format!("rename link {index} to {name}"), m)
    }

    /// Deletes alternative name `name` of the link (RTM_DELLINKPROP with
    /// IFLA_PROP_LIST > IFLA_ALT_IFNAME, as `ip link property del altname`); `ENOENT`
    /// when the link has no such altname.
    pub fn del_altname(&self, index: u32, name: &str) -> Result<(), NlError> {
        if let Some(errno) = crate::failpoint::errno_at("netlink.del_altname") {
            return Err(NlError::injected(
                format!("delete altname {name} of link {index}"),
                errno,
            ));
        }
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes
            .push(LinkAttribute::PropList(vec![Prop::AltIfName(
                name.to_string(),
            )]));
        self.query.ack(
            &|| format!("delete altname {name} of link {index}"),
            RouteNetlinkMessage::DelLinkProp(m),
            0,
        )
    }

    /// Moves the link into namespace `ns_fd` and gives it `name` there, in one
    /// RTM_SETLINK, so no temporary name is ever visible to udev. Not atomic in the
    /// kernel: `do_setlink()` calls `__dev_change_net_namespace()`, which uses `name` only
    /// when the link's current name is taken in the target, and then renames. So
    /// `EEXIST` means either that nothing moved (both names taken in the target) or that
    /// the link moved under its current name and the rename failed: callers find the
    /// link by identity to tell (`plugin::steps`).
    pub fn move_to_netns_named(
        &self,
        index: u32,
        ns_fd: BorrowedFd<'_>,
        name: &str,
    ) -> Result<(), NlError> {
        let m = LinkMessageBuilder::<LinkUnspec>::new()
            .index(index)
            .setns_by_fd(ns_fd.as_raw_fd())
            .name(name.to_string())
            .build();
        self.set(
            format!("move link {index} to another network namespace as {name}"),
            m,
        )
    }

    /// The link whose parent device (IFLA_PARENT_DEV_NAME) is PCI address `pci`. Always
    /// `None` on a kernel before 5.14, which sends no parent device (torvalds/linux@00e77ed8e64d,
    /// docs/design.md "Kernel facts"): callers fall back to the kernel's listing under
    /// `/sys/bus/pci/devices/<VF>/net/`.
    pub fn link_by_parent(&self, pci: &str) -> Result<Option<Link>, NlError> {
        Ok(self
            .links()?
            .into_iter()
            .find(|l| l.parent_dev.as_deref() == Some(pci)))
    }

    /// Adds `addr` (address with prefix) to the link.
    pub fn add_address(&self, index: u32, addr: IpNetwork) -> Result<(), NlError> {
        use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
        use rtnetlink::AddressMessageBuilder;
        let m = match addr.ip() {
            IpAddr::V4(a) => AddressMessageBuilder::<std::net::Ipv4Addr>::new()
                .index(index)
                .address(a, addr.prefix())
                .build(),
            IpAddr::V6(a) => AddressMessageBuilder::<std::net::Ipv6Addr>::new()
                .index(index)
                .address(a, addr.prefix())
                .build(),
        };
        // The flags of rtnetlink's `AddressAddRequest` (not `replace`).
        self.query.ack(
            &|| format!("add address {addr} to link {index}"),
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_EXCL | NLM_F_CREATE,
        )
    }

    /// The addresses (with prefix) on the link.
    pub fn addresses(&self, index: u32) -> Result<Vec<IpNetwork>, NlError> {
        Ok(self
            .addresses_with_flags(index)?
            .into_iter()
            .map(|(a, _)| a)
            .collect())
    }

    /// The addresses on the link with their `IFA_FLAGS` (`IFA_F_TENTATIVE` 0x40 while
    /// IPv6 duplicate address detection runs, `IFA_F_DADFAILED` 0x08 when it found a
    /// duplicate; include/uapi/linux/if_addr.h). The header's 8-bit `ifa_flags` is used
    /// when the kernel sends no `IFA_FLAGS`.
    pub fn addresses_with_flags(&self, index: u32) -> Result<Vec<(IpNetwork, u32)>, NlError> {
        use netlink_packet_core::{Parseable, NLM_F_DUMP, NLM_F_REQUEST};
        use netlink_packet_route::address::AddressMessage;
        const RTM_NEWADDR: u16 = 20; // include/uapi/linux/rtnetlink.h
        let mut msgs = Vec::new();
        self.query.request(
            &|| format!("list addresses of link {index}"),
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
            NLM_F_REQUEST | NLM_F_DUMP,
            |t, payload| {
                if t == RTM_NEWADDR {
                    msgs.push(AddressMessage::parse(payload)?);
                }
                Ok(())
            },
        )?;
        let mut out = Vec::new();
        for m in msgs {
            if m.header.index != index {
                continue;
            }
            let mut flags = u32::from(m.header.flags.bits());
            let mut addr = None;
            for a in &m.attributes {
                match a {
                    AddressAttribute::Address(ip) => addr = Some(*ip),
                    AddressAttribute::Flags(f) => flags = f.bits(),
                    _ => {}
                }
            }
            if let Some(n) = addr.and_then(|ip| IpNetwork::new(ip, m.header.prefix_len).ok()) {
                out.push((n, flags));
            }
        }
        Ok(out)
    }

    /// Adds `route` through the link with `NLM_F_CREATE` and neither `NLM_F_EXCL` nor
    /// `NLM_F_REPLACE`, as vishvananda/netlink `RouteAddEcmp` does for
    /// containernetworking/plugins `ipam.ConfigureIface` (what the Go plugin calls): a
    /// route whose destination already exists through another next hop (the pod's
    /// default route on `eth0`, another rail's route to the same subnet) is added beside
    /// it instead of failing with `EEXIST` (IPv4: a further route of the same prefix and
    /// metric, inserted before the existing one, as `ip route prepend`; IPv6: a further
    /// nexthop of an ECMP route). An identical route (same next hop and device) is still
    /// `EEXIST`. Protocol `RTPROT_BOOT`, as vishvananda/netlink's `NewRtMsg` (what
    /// `ip route` shows for the Go plugin's routes). `priority` (`RTA_PRIORITY`),
    /// `table` (`RTA_TABLE`), `scope`
    /// (`rtm_scope`), `mtu` and `advmss` (`RTA_METRICS`) are set when present
    /// (include/uapi/linux/rtnetlink.h). `route.gw` is used as given: resolving a missing
    /// gateway is the caller's business.
    ///
    /// Errors: the kernel's errno, e.g. `ENETUNREACH` for a gateway outside every
    /// on-link prefix; a gateway of the other family is refused here.
    pub fn add_route(&self, index: u32, route: &Route) -> Result<(), NlError> {
        use netlink_packet_core::NLM_F_CREATE;
        use netlink_packet_route::route::{
            RouteAttribute, RouteMessage, RouteMetric, RouteProtocol, RouteScope,
        };
        let dst = route.dst;
        let gw = route.gw;
        let op = format!(
            "add route {dst}{} on link {index}{}{}",
            gw.map(|g| format!(" via {g}")).unwrap_or_default(),
            route
                .priority
                .map(|p| format!(" metric {p}"))
                .unwrap_or_default(),
            route
                .table
                .map(|t| format!(" table {t}"))
                .unwrap_or_default(),
        );
        // What every family shares: device, protocol, metric, table, scope.
        fn common<T>(b: RouteMessageBuilder<T>, route: &Route, index: u32) -> RouteMessage {
            let mut b = b.output_interface(index).protocol(RouteProtocol::Boot);
            if let Some(p) = route.priority {
                b = b.priority(p);
            }
            if let Some(t) = route.table {
                b = b.table_id(t);
            }
            if let Some(sc) = route.scope {
                b = b.scope(RouteScope::from(sc));
            }
            b.build()
        }
        let mut msg = match (dst, gw) {
            (IpNetwork::V4(d), None | Some(IpAddr::V4(_))) => {
                let mut b = RouteMessageBuilder::<std::net::Ipv4Addr>::new()
                    .destination_prefix(d.network(), d.prefix());
                if let Some(IpAddr::V4(g)) = gw {
                    b = b.gateway(g);
                }
                common(b, route, index)
            }
            (IpNetwork::V6(d), None | Some(IpAddr::V6(_))) => {
                let mut b = RouteMessageBuilder::<std::net::Ipv6Addr>::new()
                    .destination_prefix(d.network(), d.prefix());
                if let Some(IpAddr::V6(g)) = gw {
                    b = b.gateway(g);
                }
                common(b, route, index)
            }
            _ => return Err(NlError::io(op, "gateway family differs from destination")),
        };
        let mut metrics = Vec::new();
        if let Some(m) = route.mtu.filter(|m| *m > 0) {
            metrics.push(RouteMetric::Mtu(m));
        }
        if let Some(m) = route.advmss.filter(|m| *m > 0) {
            metrics.push(RouteMetric::Advmss(m));
        }
        if !metrics.is_empty() {
            msg.attributes.push(RouteAttribute::Metrics(metrics));
        }
        // The flags vishvananda/netlink's `RouteAddEcmp` sends (see above).
        self.query.ack(
            &|| op.clone(),
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE,
        )
    }
}

/// A subscription to the kernel's link notifications (`RTNLGRP_LINK`, group 1 of
/// NETLINK_ROUTE, include/uapi/linux/rtnetlink.h) in the calling thread's netns: the
/// kernel's own signal that a link appeared, moved in, changed or went, so a waiter
/// sleeps until something happens instead of polling. Subscribe before the first look,
/// then [`LinkEvents::wait`] between looks: no event can fall between the two.
pub struct LinkEvents {
    socket: netlink_sys::Socket,
}

impl LinkEvents {
    /// Opens a NETLINK_ROUTE socket joined to `RTNLGRP_LINK`, non-blocking.
    ///
    /// Errors: the socket calls' (`socket`, `bind`, `setsockopt`).
    pub fn subscribe() -> Result<LinkEvents, NlError> {
        const RTNLGRP_LINK: u32 = 1;
        let op = "subscribe to link notifications";
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)
            .map_err(|e| NlError::io(op, e))?;
        socket
            .bind(&netlink_sys::SocketAddr::new(0, 0))
            .map_err(|e| NlError::io(op, e))?;
        socket
            .add_membership(RTNLGRP_LINK)
            .map_err(|e| NlError::io(op, e))?;
        socket
            .set_non_blocking(true)
            .map_err(|e| NlError::io(op, e))?;
        Ok(LinkEvents { socket })
    }

    /// Sleeps until at least one link notification arrives or `deadline` passes, then
    /// drains what is queued (an overrun, `ENOBUFS`, counts as an event: something
    /// happened). Returns `true` when woken by an event, `false` at the deadline.
    pub fn wait(&mut self, deadline: std::time::Instant) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
        let woke = matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0);
        if woke {
            let mut buf = vec![0u8; 16 << 10];
            // Each recv takes one datagram; EAGAIN ends the drain.
            while self.socket.recv(&mut &mut buf[..], 0).is_ok() {}
        }
        woke
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_requests_ask_the_kernel_to_skip_stats_and_are_answered() {
        let nl = Netlink::open().expect("NETLINK_ROUTE socket");
        let req = get_message(&[]);
        assert!(
            req.attributes.iter().any(
                |a| matches!(a, LinkAttribute::ExtMask(m) if m.contains(&LinkExtentMask::SkipStats))
            ),
            "RTM_GETLINK without RTEXT_FILTER_SKIP_STATS"
        );
        // The kernel accepts the mask on the three request shapes used here.
        let lo = nl.link_by_name("lo").unwrap().expect("lo by name");
        assert_eq!(
            nl.link_by_index(lo.index).unwrap().map(|l| l.name),
            Some("lo".to_string())
        );
        assert!(nl.links().unwrap().iter().any(|l| l.index == lo.index));
    }
}
