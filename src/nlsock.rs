//! One blocking netlink socket and the request loop that both of the plugin's netlink
//! protocols run on it: `NETLINK_ROUTE` ([`crate::netlink`]'s link queries and changes)
//! and `NETLINK_RDMA` ([`crate::rdma`]'s device queries, moves and counters). The two
//! differ in how a message is built and decoded, which stays with each; sending a
//! request and receiving the datagrams of its answer whole are the same and live here.
//!
//! Wire facts (netlink(7), net/netlink/af_netlink.c): a request is one datagram; an
//! answer is one or more datagrams, each of one or more messages; `recv` with
//! `MSG_PEEK | MSG_TRUNC` returns a datagram's real length without consuming it; a
//! datagram from the kernel carries port id 0 in its `sockaddr_nl.nl_pid`
//! (`netlink_unicast` from the kernel socket); a message whose `nlmsg_seq` is 0 is
//! unsolicited, so a request never uses it.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::AsRawFd;

/// The receive buffer's first capacity (never zeroed). A larger datagram (a PF's
/// RTM_NEWLINK with a long VF table: ~31 KB at 127 VFs) grows it to that datagram's
/// size, so no answer is ever truncated.
const FIRST_BUF: usize = 32 << 10;

/// A netlink socket that sends one request at a time and reads its answer on the
/// calling thread. It talks to the network namespace it was created in (the kernel
/// resolves a netlink request in the socket's netns: `sock_net(skb->sk)`).
pub struct NlSocket {
    socket: netlink_sys::Socket,
    seq: Cell<u32>,
    buf: RefCell<Vec<u8>>,
    /// [`FIRST_BUF`] (tests set less, to make every datagram grow the buffer).
    first_buf: usize,
}

impl std::fmt::Debug for NlSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NlSocket")
            .field("fd", &self.socket.as_raw_fd())
            .field("seq", &self.seq.get())
            .finish()
    }
}

impl NlSocket {
    /// Wraps `socket`, already opened (and bound, connected, given options) by the
    /// protocol's owner. A socket never bound gets a port from the kernel at its first
    /// `send` (`netlink_sendmsg()` calls `netlink_autobind()`).
    pub fn new(socket: netlink_sys::Socket) -> NlSocket {
        NlSocket {
            socket,
            seq: Cell::new(0),
            buf: RefCell::new(Vec::new()),
            first_buf: FIRST_BUF,
        }
    }

    /// The next request's sequence number: 1, 2, ... and never 0 after a wrap (0 is
    /// what unsolicited kernel messages carry).
    pub fn next_seq(&self) -> u32 {
        let seq = match self.seq.get().wrapping_add(1) {
            0 => 1,
            s => s,
        };
        self.seq.set(seq);
        seq
    }

    /// The sequence number of the last request ([`NlSocket::next_seq`]), 0 before any.
    pub fn last_seq(&self) -> u32 {
        self.seq.get()
    }

    /// Sends `request` (one datagram, retried on `EINTR`), then gives `feed` every
    /// datagram of the answer, whole, until it returns `Some`. A datagram whose sender
    /// is not the kernel (port id 0) is skipped; `feed` skips the messages of other
    /// sequence numbers (an earlier request's late answer) itself.
    ///
    /// Errors: `feed`'s; a failing `send`/`recv`, a short send (`WriteZero`) and a
    /// receive timeout set on the socket (`SO_RCVTIMEO`: `TimedOut`), each mapped by
    /// `map_io`.
    pub fn request<T, E>(
        &self,
        request: &[u8],
        map_io: impl Fn(io::Error) -> E,
        mut feed: impl FnMut(&[u8]) -> Result<Option<T>, E>,
    ) -> Result<T, E> {
        loop {
            match self.socket.send(request, 0) {
                Ok(n) if n == request.len() => break,
                Ok(n) => {
                    return Err(map_io(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short send ({n} of {} bytes)", request.len()),
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(map_io(e)),
            }
        }
        let mut buf = self.buf.borrow_mut();
        loop {
            if !self.recv(&mut buf).map_err(&map_io)? {
                log::debug!("netlink: skipping a datagram that is not from the kernel");
                continue;
            }
            if let Some(t) = feed(&buf)? {
                return Ok(t);
            }
        }
    }

    /// Receives one datagram whole into `buf`: its size is peeked first (`MSG_PEEK |
    /// MSG_TRUNC` with no buffer), `buf` grows to hold it, and it is read into `buf`'s
    /// capacity without zeroing it first. Returns whether the kernel sent it (`false`
    /// with `buf` empty for another sender). `EINTR` is retried; `EAGAIN` (the receive
    /// timeout) becomes `TimedOut`.
    fn recv(&self, buf: &mut Vec<u8>) -> io::Result<bool> {
        use nix::libc;
        let fd = self.socket.as_raw_fd();
        let retry = |f: &mut dyn FnMut() -> isize| loop {
            let n = f();
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no answer from the kernel within the socket's receive timeout",
                    ))
                }
                _ => return Err(e),
            }
        };
        let mut probe = 0u8;
        // SAFETY: recv(2) writes at most 0 bytes at `probe`, a valid stack byte.
        let n = retry(&mut || unsafe {
            libc::recv(
                fd,
                (&mut probe as *mut u8).cast(),
                0,
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        })?;
        buf.clear();
        buf.reserve(n.max(self.first_buf));
        let spare = buf.spare_capacity_mut();
        let (ptr, len) = (spare.as_mut_ptr(), spare.len());
        // SAFETY: zeroed is a valid `sockaddr_nl` (plain integers).
        let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: recvfrom(2) writes at most `len` bytes at `ptr` (`buf`'s spare
        // capacity) and at most `from_len` bytes at `from`.
        let got = retry(&mut || unsafe {
            libc::recvfrom(
                fd,
                ptr.cast(),
                len,
                0,
                (&mut from as *mut libc::sockaddr_nl).cast(),
                &mut from_len,
            )
        })?;
        if from.nl_pid != 0 {
            return Ok(false);
        }
        // SAFETY: recvfrom(2) initialized the first `got` bytes of the spare capacity,
        // and `got` is at most its length (without MSG_TRUNC it returns what it copied).
        unsafe { buf.set_len(got.min(buf.capacity())) };
        Ok(true)
    }
}

/// RTM_GETLINK (18) of `ifindex` with `flags`, hand-packed from the uapi layout
/// (`struct nlmsghdr` + `struct ifinfomsg` of 16 bytes, all zero but `ifi_index`; host
/// byte order), independent of the crates under test: the request the tests of both
/// protocols' loops send over NETLINK_ROUTE, which every kernel has.
#[cfg(test)]
pub(crate) fn test_getlink(seq: u32, flags: u16, ifindex: i32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&32u32.to_ne_bytes());
    v.extend_from_slice(&18u16.to_ne_bytes());
    v.extend_from_slice(&flags.to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v.extend_from_slice(&[0u8; 4]); // family, pad, type
    v.extend_from_slice(&ifindex.to_ne_bytes());
    v.extend_from_slice(&[0u8; 8]); // flags, change
    v
}

#[cfg(test)]
mod tests {
    use super::test_getlink as getlink;
    use super::*;

    /// A dump's datagrams reach `feed` whole, however small the first buffer (each
    /// grows it to the peeked length), and every one is a run of well-formed messages
    /// of the request's sequence number, the last ending with NLMSG_DONE (3).
    #[test]
    fn a_dump_arrives_whole_in_a_growing_buffer() {
        let mut s = NlSocket::new(netlink_sys::Socket::new(0).unwrap());
        s.first_buf = 16;
        let seq = s.next_seq();
        let req = getlink(seq, 0x1 | 0x300, 0); // NLM_F_REQUEST | NLM_F_DUMP
        let mut messages = 0;
        s.request(
            &req,
            |e| panic!("{e}"),
            |d: &[u8]| -> Result<Option<()>, ()> {
                let mut off = 0;
                while off < d.len() {
                    let len = u32::from_ne_bytes(d[off..off + 4].try_into().unwrap()) as usize;
                    let t = u16::from_ne_bytes(d[off + 4..off + 6].try_into().unwrap());
                    let sq = u32::from_ne_bytes(d[off + 8..off + 12].try_into().unwrap());
                    assert!(
                        len >= 16 && off + len <= d.len(),
                        "message overruns datagram"
                    );
                    assert_eq!(sq, seq);
                    messages += 1;
                    if t == 3 {
                        return Ok(Some(()));
                    }
                    off += (len + 3) & !3;
                }
                Ok(None)
            },
        )
        .unwrap();
        assert!(messages >= 2, "lo and NLMSG_DONE at least, got {messages}");
        assert_eq!(s.last_seq(), 1);
    }

    /// The sequence number skips 0 when it wraps.
    #[test]
    fn the_sequence_never_is_zero() {
        let s = NlSocket::new(netlink_sys::Socket::new(0).unwrap());
        s.seq.set(u32::MAX);
        assert_eq!(s.next_seq(), 1);
        assert_eq!(s.next_seq(), 2);
    }

    /// A receive timeout on the socket ends a request the kernel never answers (a
    /// message of a type no handler knows, without NLM_F_ACK, gets no answer) with
    /// `TimedOut`, mapped by the caller.
    #[test]
    fn an_unanswered_request_times_out() {
        use nix::sys::socket::{setsockopt, sockopt};
        let socket = netlink_sys::Socket::new(0).unwrap();
        let t = nix::sys::time::TimeVal::new(0, 50_000);
        setsockopt(&socket, sockopt::ReceiveTimeout, &t).unwrap();
        let s = NlSocket::new(socket);
        // NLMSG_NOOP (1) with NLM_F_REQUEST only: netlink_rcv_skb skips control
        // messages below NLMSG_MIN_TYPE without answering.
        let mut req = getlink(s.next_seq(), 0x1, 0);
        req[4..6].copy_from_slice(&1u16.to_ne_bytes());
        let e = s
            .request(&req, |e| e, |_: &[u8]| Ok::<_, io::Error>(Some(())))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }
}
