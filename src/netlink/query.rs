//! The plugin's rtnetlink requests on one blocking NETLINK_ROUTE socket: changes wait
//! for the kernel's acknowledgement ([`Query::ack`]), and RTM_GETLINK answers are
//! decoded only as far as the plugin reads them ([`Query::links`]).
//!
//! The reads of links (by name, by ifindex, a dump, a PF's VF table) are most of the
//! netlink work of a call, and a kernel's RTM_NEWLINK carries some 40 attributes (the
//! `IFLA_AF_SPEC` of every address family, `IFLA_LINKINFO`, qdisc, map, ...). Through
//! rtnetlink's async connection each of them was decoded into a `LinkAttribute`, about
//! 25,000 instructions a message, and a dump decodes every link of the namespace (a
//! node holds a veth per pod). Here the request is sent and its answer read on this
//! thread (no async runtime), the message header and attribute walk use
//! netlink-packet-core's buffers, and only the attributes [`KEPT`] lists are decoded,
//! each by netlink-packet-route's own `LinkAttribute` parser: the plugin decodes no
//! attribute itself.
//!
//! Wire facts: `struct nlmsghdr`, `NLMSG_ERROR`/`NLMSG_DONE` and 4-byte message
//! alignment (include/uapi/linux/netlink.h); `struct ifinfomsg` of 16 bytes and
//! `RTM_NEWLINK` = 16 (include/uapi/linux/rtnetlink.h); `IFLA_*` numbers
//! (include/uapi/linux/if_link.h). A dump's answer ends with `NLMSG_DONE`, whose
//! payload is an `int` error (negative errno, 0 for none); a single request's answer is
//! one `RTM_NEWLINK` or an `NLMSG_ERROR` (net/netlink/af_netlink.c `netlink_dump_done()`,
//! net/core/rtnetlink.c `rtnl_getlink()`); a request with `NLM_F_ACK` ends with an
//! `NLMSG_ERROR` whose error is 0 on success (netlink(7), `netlink_ack()`).

use super::NlError;
use netlink_packet_core::{
    ErrorBuffer, NetlinkBuffer, NetlinkMessage, NlasIterator, ParseableParametrized, NLMSG_DONE,
    NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkHeader, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

/// `RTM_NEWLINK`, the type of each link message of an answer.
const RTM_NEWLINK: u16 = 16;
/// `sizeof(struct ifinfomsg)`: the link message header before its attributes.
const IFINFOMSG_LEN: usize = 16;
/// The attributes decoded (the rest are walked over): `IFLA_ADDRESS` (1), `IFLA_IFNAME`
/// (3), `IFLA_MTU` (4), `IFLA_VFINFO_LIST` (22), `IFLA_PROP_LIST` (52, the alternative
/// names), `IFLA_PARENT_DEV_NAME` (56): what [`super::Link`] and the VF table read.
pub(super) const KEPT: [u16; 6] = [1, 3, 4, 22, 52, 56];
/// A blocking NETLINK_ROUTE socket for link queries and changes, in the namespace it
/// was opened in.
pub(super) struct Query {
    nl: crate::nlsock::NlSocket,
}

impl Query {
    /// Opens the socket in the calling thread's network namespace. It is not bound: the
    /// kernel binds it to a port of its choice at its first `send` (net/netlink/af_netlink.c
    /// `netlink_sendmsg()` calls `netlink_autobind()`), and nothing here needs the port.
    ///
    /// Errors: `socket(2)`'s.
    pub(super) fn open() -> std::io::Result<Query> {
        let socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)?;
        Ok(Query {
            nl: crate::nlsock::NlSocket::new(socket),
        })
    }

    /// Sends `msg` as an RTM_GETLINK (`NLM_F_DUMP` when `dump`) and calls `each` with
    /// every link of the answer, decoded to its header and the [`KEPT`] attributes.
    ///
    /// Errors: the kernel's `NLMSG_ERROR` (its errno in [`NlError::errno`]), a
    /// `send`/`recv` failure, an answer that does not decode; `op` names the request.
    pub(super) fn links(
        &self,
        op: &dyn Fn() -> String,
        msg: LinkMessage,
        dump: bool,
        mut each: impl FnMut(LinkMessage),
    ) -> Result<(), NlError> {
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        self.request(
            op,
            RouteNetlinkMessage::GetLink(msg),
            flags,
            |t, payload| {
                if t == RTM_NEWLINK {
                    each(decode(payload)?);
                }
                Ok(())
            },
        )
    }

    /// Sends `msg` with `NLM_F_REQUEST | NLM_F_ACK | flags` and waits for the kernel's
    /// acknowledgement (an `NLMSG_ERROR` whose error is 0): a change (RTM_SETLINK,
    /// RTM_NEWADDR, ...), as rtnetlink's requests send it.
    ///
    /// Errors: the kernel's errno; a `send`/`recv` failure.
    pub(super) fn ack(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), NlError> {
        self.request(op, msg, NLM_F_REQUEST | NLM_F_ACK | flags, |_, _| Ok(()))
    }

    /// Sends `msg` with `flags` and calls `each` with the type and payload of every
    /// message of its answer, until the answer ends: `NLMSG_DONE` (a dump), the
    /// `NLMSG_ERROR` acknowledgement (`NLM_F_ACK`), else the first message (a single
    /// request). Messages of other sequence numbers (an earlier request's late answer)
    /// are skipped.
    ///
    /// Errors: the kernel's `NLMSG_ERROR` or negative `NLMSG_DONE` (its errno in
    /// [`NlError::errno`]), a `send`/`recv` failure, `each` refusing a payload; `op`
    /// names the request.
    pub(super) fn request(
        &self,
        op: &dyn Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
        mut each: impl FnMut(u16, &[u8]) -> Result<(), netlink_packet_core::DecodeError>,
    ) -> Result<(), NlError> {
        let seq = self.nl.next_seq();
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = flags;
        req.header.sequence_number = seq;
        req.finalize();
        let mut out = vec![0u8; req.buffer_len()];
        req.serialize(&mut out);
        let ends_at_first = flags & (NLM_F_DUMP | NLM_F_ACK) == 0;
        self.nl.request(
            &out,
            |e| NlError::io(op(), e),
            |datagram| {
                let mut off = 0;
                while off < datagram.len() {
                    let m = NetlinkBuffer::new_checked(&datagram[off..])
                        .map_err(|e| NlError::io(op(), e))?;
                    off += (m.length() as usize + 3) & !3;
                    if m.sequence_number() != seq {
                        continue; // the answer of an earlier request that gave up early
                    }
                    match m.message_type() {
                        NLMSG_ERROR => {
                            let e = ErrorBuffer::new_checked(m.payload())
                                .map_err(|e| NlError::io(op(), e))?;
                            return match e.code() {
                                None => Ok(Some(())),
                                Some(c) => Err(NlError::errno(op(), -c.get())),
                            };
                        }
                        NLMSG_DONE => {
                            let code = m
                                .payload()
                                .get(..4)
                                .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                            return if code < 0 {
                                Err(NlError::errno(op(), -code))
                            } else {
                                Ok(Some(()))
                            };
                        }
                        t => {
                            each(t, m.payload()).map_err(|e| NlError::io(op(), e))?;
                            if ends_at_first {
                                return Ok(Some(()));
                            }
                        }
                    }
                }
                Ok(None)
            },
        )
    }
}

/// One RTM_NEWLINK payload: its header, and the [`KEPT`] attributes decoded by
/// netlink-packet-route (`LinkAttribute::parse_with_param`, with the header's family).
pub(super) fn decode(payload: &[u8]) -> Result<LinkMessage, netlink_packet_core::DecodeError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader::parse(payload)?;
    for nla in NlasIterator::new(payload.get(IFINFOMSG_LEN..).unwrap_or_default()) {
        let nla = nla?;
        if KEPT.contains(&nla.kind()) {
            m.attributes.push(LinkAttribute::parse_with_param(
                &nla,
                m.header.interface_family,
            )?);
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Nla, Parseable};

    /// Every link of this namespace, decoded here and by netlink-packet-route's full
    /// parse of the same payload, reads the same as a [`super::super::Link`], and only
    /// the [`KEPT`] attributes are decoded.
    #[test]
    fn the_selective_decode_reads_every_link_as_the_full_parse_does() {
        let q = Query::open().unwrap();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        q.request(
            &|| "dump".into(),
            RouteNetlinkMessage::GetLink(super::super::get_message(&[])),
            NLM_F_REQUEST | NLM_F_DUMP,
            |t, payload| {
                assert_eq!(t, RTM_NEWLINK);
                let m = decode(payload)?;
                for a in &m.attributes {
                    assert!(KEPT.contains(&(a.kind() & !0xc000)), "{a:?} decoded");
                }
                ours.push(super::super::Link::from_msg(&m));
                theirs.push(super::super::Link::from_msg(&LinkMessage::parse(payload)?));
                Ok(())
            },
        )
        .unwrap();
        assert!(!ours.is_empty(), "no link decoded (lo at least exists)");
        assert_eq!(ours, theirs);
    }

    /// The kernel's `ENODEV` to a single request reaches the caller as that errno.
    #[test]
    fn a_missing_link_answers_its_errno() {
        let q = Query::open().unwrap();
        let mut m = super::super::get_message(&[]);
        m.header.index = 0x7fff_fff0; // no namespace holds that many links
        let e = q
            .links(&|| "get link".into(), m, false, |_| {
                panic!("no link expected")
            })
            .unwrap_err();
        assert_eq!(e.errno, Some(nix::libc::ENODEV), "{e}");
        assert_eq!(e.op, "get link");
    }
}
