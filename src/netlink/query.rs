//! RTM_GETLINK on a blocking NETLINK_ROUTE socket of its own, each answer decoded only
//! as far as the plugin reads it.
//!
//! The reads of links (by name, by ifindex, a dump, a PF's VF table) are most of the
//! netlink work of a call, and a kernel's RTM_NEWLINK carries some 40 attributes (the
//! `IFLA_AF_SPEC` of every address family, `IFLA_LINKINFO`, qdisc, map, ...). Through
//! rtnetlink's connection each of them is decoded into a `LinkAttribute`, about 25,000
//! instructions a message, and a dump decodes every link of the namespace (a node
//! holds a veth per pod). Here the request is sent and its answer read on this thread
//! (no async runtime turn), the message header and attribute walk use
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
//! net/core/rtnetlink.c `rtnl_getlink()`).

use super::NlError;
use netlink_packet_core::{
    ErrorBuffer, NetlinkBuffer, NetlinkMessage, NlasIterator, ParseableParametrized, NLMSG_DONE,
    NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkHeader, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;

/// `RTM_NEWLINK`, the type of each link message of an answer.
const RTM_NEWLINK: u16 = 16;
/// `sizeof(struct ifinfomsg)`: the link message header before its attributes.
const IFINFOMSG_LEN: usize = 16;
/// The attributes decoded (the rest are walked over): `IFLA_ADDRESS` (1), `IFLA_IFNAME`
/// (3), `IFLA_MTU` (4), `IFLA_VFINFO_LIST` (22), `IFLA_PROP_LIST` (52, the alternative
/// names), `IFLA_PARENT_DEV_NAME` (56): what [`super::Link`] and the VF table read.
pub(super) const KEPT: [u16; 6] = [1, 3, 4, 22, 52, 56];
/// The receive buffer's first capacity (never zeroed); a larger datagram (a PF's answer
/// with a long VF table: ~31 KB at 127 VFs) grows it to that datagram's size.
const FIRST_BUF: usize = 32 << 10;

/// A blocking NETLINK_ROUTE socket for link queries, bound in the namespace it was
/// opened in.
pub(super) struct Query {
    socket: netlink_sys::Socket,
    seq: Cell<u32>,
    buf: RefCell<Vec<u8>>,
    /// [`FIRST_BUF`] (tests set less, to make every datagram grow the buffer).
    first_buf: usize,
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
            socket,
            seq: Cell::new(0),
            buf: RefCell::new(Vec::new()),
            first_buf: FIRST_BUF,
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
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetLink(msg));
        req.header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        req.header.sequence_number = seq;
        req.finalize();
        let mut out = vec![0u8; req.buffer_len()];
        req.serialize(&mut out);
        self.socket
            .send(&out, 0)
            .map_err(|e| NlError::io(op(), e))?;
        let mut buf = self.buf.borrow_mut();
        loop {
            let n = self.recv(&mut buf).map_err(|e| NlError::io(op(), e))?;
            let mut off = 0;
            while off < n {
                let m =
                    NetlinkBuffer::new_checked(&buf[off..n]).map_err(|e| NlError::io(op(), e))?;
                let len = m.length() as usize;
                off += (len + 3) & !3;
                if m.sequence_number() != seq {
                    continue; // the answer of an earlier request that gave up early
                }
                match m.message_type() {
                    NLMSG_ERROR => {
                        let e = ErrorBuffer::new_checked(m.payload())
                            .map_err(|e| NlError::io(op(), e))?;
                        return match e.code() {
                            None => Ok(()),
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
                            Ok(())
                        };
                    }
                    RTM_NEWLINK => {
                        each(decode(m.payload()).map_err(|e| NlError::io(op(), e))?);
                        if !dump {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Receives one datagram whole into `buf`: its size is peeked first (`MSG_PEEK |
    /// MSG_TRUNC` with no buffer; netlink(7): the real length is returned), `buf` grows
    /// to hold it, and it is read into `buf`'s capacity without zeroing it first.
    /// Returns its length (`buf.len()`). `EINTR` is retried.
    fn recv(&self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        use nix::libc;
        let fd = self.socket.as_raw_fd();
        let call = |ptr: *mut u8, len: usize, flags: libc::c_int| loop {
            // SAFETY: recv(2) writes at most `len` bytes at `ptr`, which the caller
            // gives as writable (a stack byte, or `buf`'s spare capacity).
            let n = unsafe { libc::recv(fd, ptr.cast(), len, flags) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut probe = 0u8;
        let n = call(&mut probe, 0, libc::MSG_PEEK | libc::MSG_TRUNC)?;
        buf.clear();
        buf.reserve(n.max(self.first_buf));
        let spare = buf.spare_capacity_mut();
        let got = call(spare.as_mut_ptr().cast(), spare.len(), 0)?;
        // SAFETY: recv(2) initialized the first `got` bytes of the spare capacity, and
        // `got` is at most its length (without MSG_TRUNC it returns what it copied).
        unsafe { buf.set_len(got.min(buf.capacity())) };
        Ok(buf.len())
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
    use futures::TryStreamExt;
    use netlink_packet_route::link::LinkExtentMask;

    /// Every link of this namespace, decoded here and by rtnetlink's full parse of the
    /// same request, reads the same as a [`super::super::Link`]; with a 16-byte first
    /// buffer, the buffer is sized from the peeked length of the first datagram.
    #[test]
    fn the_selective_decode_reads_every_link_as_the_full_parse_does() {
        let nl = super::super::Netlink::open().expect("NETLINK_ROUTE socket");
        let mut q = Query::open().unwrap();
        q.first_buf = 16;
        let mut ours = Vec::new();
        q.links(
            &|| "dump".into(),
            super::super::get_message(&[]),
            true,
            |m| ours.push(super::super::Link::from_msg(&m)),
        )
        .unwrap();
        let req = nl.handle.link().get().set_filter_mask(
            netlink_packet_route::AddressFamily::Unspec,
            vec![LinkExtentMask::SkipStats],
        );
        let full: Vec<LinkMessage> = nl.rt.block_on(req.execute().try_collect()).unwrap();
        let theirs: Vec<_> = full.iter().map(super::super::Link::from_msg).collect();
        assert!(!ours.is_empty(), "no link decoded (lo at least exists)");
        assert_eq!(ours, theirs);
        // Only the kept attributes were decoded.
        q.links(
            &|| "dump".into(),
            super::super::get_message(&[]),
            true,
            |m| {
                for a in &m.attributes {
                    use netlink_packet_core::Nla;
                    assert!(KEPT.contains(&(a.kind() & !0xc000)), "{a:?} decoded");
                }
            },
        )
        .unwrap();
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
