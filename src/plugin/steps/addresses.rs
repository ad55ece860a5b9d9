//! The pod interface's addresses and routes, configured as containernetworking/plugins
//! `pkg/ipam/ipam_linux.go` `ConfigureIface` configures them (what the Go plugin calls).

use super::Pod;
use crate::cni::{CniError, IpConfig, Route};
use crate::netlink::Netlink;
use std::time::{Duration, Instant};

/// Bound on the wait for IPv6 duplicate address detection (containernetworking/plugins
/// `pkg/ipam/ipam_linux.go` `ConfigureIface` waits up to 10 s in `ip.SettleAddresses`).
pub const DAD_WAIT: Duration = Duration::from_secs(10);

/// Configures the interface as containernetworking/plugins `pkg/ipam/ipam_linux.go`
/// `ConfigureIface` does (what the Go plugin calls):
/// 1. before the first IPv6 address, `net.ipv6.conf.{lo,<ifname>}.disable_ipv6` is set to
///    0 in the pod netns when it is not 0 already (a netns created with IPv6 disabled
///    would refuse the address), and `net.ipv6.conf.<ifname>.keep_addr_on_down` to 1.
///    No undo: the interface's IPv6 settings go with it when it leaves the pod, and `lo`
///    belongs to the pod;
/// 2. every address is added;
/// 3. IPv6 duplicate address detection is waited for, as `ConfigureIface` does, only
///    when an IPv6 gateway is configured, and only while the link has carrier
///    (`IFF_LOWER_UP`: without it, e.g. an IB port the subnet manager has not brought up
///    yet, the kernel keeps the address tentative until it has, RFC 4862 section 5.4),
///    bounded by [`DAD_WAIT`]. An address still tentative is never an error (a warning;
///    the kernel finishes DAD later); one that failed DAD (`IFA_F_DADFAILED`: another
///    node on the fabric has it) is, also when DAD was not waited for and had already
///    failed;
/// 4. every route is added with `RouteAddEcmp` semantics ([`Netlink::add_route`]: beside an
///    existing route to the same destination, e.g. the pod's default route on `eth0` or
///    another rail's route), with its `priority`, `table`, `scope`, `mtu` and `advmss`;
///    a route without `gw` takes the gateway of the first address of its family.
///
/// Errors: code 102 (a host operation failed) naming the failed address or route, or
/// the address that failed DAD.
pub(super) fn configure_iface(
    pod: &Pod,
    ifname: &str,
    index: u32,
    ips: &[IpConfig],
    routes: &[Route],
) -> Result<(), CniError> {
    let nl = pod.nl()?;
    let has_ipv6 = ips.iter().any(|ip| ip.address.is_ipv6());
    if has_ipv6 {
        pod.ns
            .run_in(|| enable_ipv6(ifname))
            .map_err(|e| CniError::host(format!("entering the pod netns: {e}")))??;
    }
    for ip in ips {
        nl.add_address(index, ip.address)?;
    }
    if has_ipv6 {
        let v6_gateway = ips
            .iter()
            .any(|ip| ip.address.is_ipv6() && ip.gateway.is_some());
        let carrier = nl.link_by_index(index)?.is_some_and(|l| l.carrier);
        let bound = if v6_gateway && carrier {
            DAD_WAIT
        } else {
            log::debug!(
                "{ifname}: not waiting for IPv6 DAD ({})",
                if carrier {
                    "no IPv6 gateway"
                } else {
                    "no carrier"
                }
            );
            Duration::ZERO
        };
        settle_addresses(nl, ifname, index, bound)?;
    }
    for r in routes {
        let gw = r.gw.or_else(|| {
            ips.iter()
                .filter(|ip| ip.address.is_ipv4() == r.dst.is_ipv4())
                .find_map(|ip| ip.gateway)
        });
        nl.add_route(index, &Route { gw, ..r.clone() })?;
    }
    Ok(())
}

/// Sets `/proc/sys/net/ipv6/conf/{lo,<ifname>}/disable_ipv6` to 0 where it is not, then
/// `/proc/sys/net/ipv6/conf/<ifname>/keep_addr_on_down` to 1, in the calling thread's
/// netns (containernetworking/plugins v1.9.1 `ConfigureIface`). An unreadable
/// `disable_ipv6` is left alone, as there.
///
/// Errors: code 11 naming the sysctl that could not be written.
fn enable_ipv6(ifname: &str) -> Result<(), CniError> {
    for dev in ["lo", ifname] {
        let path = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
        match std::fs::read_to_string(&path) {
            Ok(v) if v.trim() == "0" => {}
            Ok(_) => std::fs::write(&path, "0")
                .map_err(|e| CniError::host(format!("enabling IPv6 on {dev} ({path}): {e}")))?,
            Err(_) => {}
        }
    }
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/keep_addr_on_down");
    std::fs::write(&path, "1").map_err(|e| CniError::host(format!("setting {path} to 1: {e}")))
}

/// Waits until no IPv6 address of the link is tentative (`IFA_F_TENTATIVE`), polling
/// every 50 ms as `ip.SettleAddresses` does, up to `bound` (zero: one look). An address
/// still tentative at the bound is logged, not refused.
///
/// Errors: code 102 when an address failed DAD (`IFA_F_DADFAILED`, include/uapi/linux/
/// if_addr.h: another node on the fabric has it), or a netlink failure.
fn settle_addresses(
    nl: &Netlink,
    ifname: &str,
    index: u32,
    bound: Duration,
) -> Result<(), CniError> {
    const IFA_F_DADFAILED: u32 = 0x08;
    const IFA_F_TENTATIVE: u32 = 0x40;
    let deadline = Instant::now() + bound;
    loop {
        let addrs = nl.addresses_with_flags(index)?;
        if let Some((a, _)) = addrs
            .iter()
            .find(|(a, f)| a.is_ipv6() && f & IFA_F_DADFAILED != 0)
        {
            return Err(CniError::host(format!(
                "IPv6 address {a} on {ifname} failed duplicate address detection: another node on the network has it"
            )));
        }
        let Some((a, _)) = addrs
            .iter()
            .find(|(a, f)| a.is_ipv6() && f & IFA_F_TENTATIVE != 0)
        else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            if !bound.is_zero() {
                log::warn!(
                    "IPv6 address {a} on {ifname} is still tentative (duplicate address detection) after {} s; going on, the kernel finishes DAD later",
                    bound.as_secs()
                );
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
