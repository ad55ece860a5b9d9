//! The real backend: one synchronous `NETLINK_RDMA` socket.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::codec::{self, Exchange, Reply};
use super::{errno, refine_move_error, NetnsMode, RdmaDevice, RdmaError, RdmaOps};
use crate::nlsock::NlSocket;

/// How many dumps [`RdmaSocket`]'s lookup by name tries before it answers "absent".
const DUMP_TRIES: usize = 3;

/// How long one `recv` may wait for the kernel before the request fails with
/// `TimedOut` (`SO_RCVTIMEO`). The kernel answers synchronously, so this
/// only guards against a hung plugin.
const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// A synchronous RDMA netlink socket talking to the kernel (`ib_core`).
///
/// The socket belongs to the network namespace of the thread that called
/// [`RdmaSocket::open`]; all device lookups happen there (nldev.c uses
/// `sock_net(skb->sk)`). Use it from a thread that is still in that netns:
/// the kernel runs requests in the sender's context and the move path
/// (`rdma_dev_change_netns`) compares the device's netns with the *calling
/// thread's* (`current->nsproxy->net_ns`), failing with `ENODEV` otherwise.
/// One request at a time (`&mut self` everywhere). Answers left over from an
/// earlier request are skipped by sequence number, but after an
/// [`RdmaError::Protocol`] or [`RdmaError::Io`] in the middle of a device
/// dump the kernel may still hold that dump open (a new dump would get
/// `EBUSY`): drop the socket and open a new one after such errors.
#[derive(Debug)]
pub struct RdmaSocket {
    nl: NlSocket,
    port: u32,
}

impl RdmaSocket {
    /// Opens a `NETLINK_RDMA` socket in the calling thread's current network
    /// namespace: `socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 20)`, bind
    /// with a kernel-assigned port id, connect to the kernel (port 0), enable
    /// extended acks (`NETLINK_EXT_ACK`, best effort) and capped acks
    /// (`NETLINK_CAP_ACK`, best effort), set a 10 s receive timeout.
    ///
    /// Errors: [`RdmaError::NoSubsystem`] when `socket(2)` fails with
    /// `EPROTONOSUPPORT` (no `ib_core`: the `NETLINK_RDMA` kernel socket is
    /// created by `ib_core`'s per-netns init, `rdma_nl_net_init`);
    /// [`RdmaError::Io`] for anything else.
    pub fn open() -> Result<Self, RdmaError> {
        Self::open_protocol(codec::NETLINK_RDMA)
    }

    /// [`RdmaSocket::open`] for any netlink protocol; the tests use
    /// `NETLINK_ROUTE` to drive the request loop against a real kernel on
    /// machines without `ib_core`.
    fn open_protocol(protocol: isize) -> Result<Self, RdmaError> {
        let mut socket = Socket::new(protocol).map_err(|e| {
            if e.raw_os_error() == Some(errno::EPROTONOSUPPORT) {
                RdmaError::NoSubsystem
            } else {
                RdmaError::Io(e)
            }
        })?;
        let local = socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        if let Err(e) = socket.set_ext_ack(true) {
            log::debug!("NETLINK_EXT_ACK not available: {e}");
        }
        if let Err(e) = socket.set_cap_ack(true) {
            log::debug!("NETLINK_CAP_ACK not available: {e}");
        }
        let timeout = TimeVal::new(RECV_TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket, sockopt::ReceiveTimeout, &timeout)
            .map_err(|e| RdmaError::Io(io::Error::from(e)))?;
        Ok(RdmaSocket {
            nl: NlSocket::new(socket),
            port: local.port_number(),
        })
    }

    /// The socket's netlink port id (assigned by the kernel at bind).
    pub fn port_id(&self) -> u32 {
        self.port
    }

    /// Sends one request built by `build(seq)` and runs the exchange until
    /// it completes. Returns the data messages.
    fn request(
        &mut self,
        op: &'static str,
        build: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<Vec<Reply>, RdmaError> {
        let seq = self.nl.next_seq();
        let request = build(seq);
        let mut exchange = Exchange::new(op, seq, self.port);
        self.nl.request(
            &request,
            |e| RdmaError::Io(io::Error::new(e.kind(), format!("{op}: {e}"))),
            |datagram| exchange.feed(datagram),
        )
    }
}

impl RdmaSocket {
    /// The default hw counters of port `port` (1-based) of the device with index
    /// `index` in this socket's netns: one `RDMA_NLDEV_CMD_STAT_GET` doit
    /// ([`codec::encode_stat_get`]), read-only. `(name, value)` pairs as the driver
    /// names them (the sysfs `ports/<port>/hw_counters/<name>` files); `Ok(None)` when
    /// the kernel answers `EINVAL` (no such device in this netns, or a port without hw
    /// counters) or `EOPNOTSUPP` (a driver without `get_hw_stats`).
    pub fn port_hw_counters(
        &mut self,
        index: u32,
        port: u32,
    ) -> Result<Option<Vec<(String, u64)>>, RdmaError> {
        let replies = match self.request(codec::OP_STAT_GET, |seq| {
            codec::encode_stat_get(seq, index, port)
        }) {
            Ok(r) => r,
            Err(RdmaError::Kernel { errno, .. })
                if errno == errno::EINVAL || errno == errno::EOPNOTSUPP =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        match replies.into_iter().find_map(|r| match r {
            Reply::Stats(s) => Some(s),
            _ => None,
        }) {
            Some(s) if s.index != index => Err(RdmaError::Protocol(format!(
                "asked for the counters of RDMA device {index}, the kernel answered for device {}",
                s.index
            ))),
            Some(s) => Ok(Some(s.counters)),
            None => Err(RdmaError::Protocol(format!(
                "STAT_GET for device {index} port {port} was acknowledged without a STAT_GET message"
            ))),
        }
    }
}

impl RdmaOps for RdmaSocket {
    /// `SYS_GET` doit. A kernel without a `SYS_GET` doit handler (no RDMA
    /// netns support, or the short-lived dump-only variant seen in
    /// torvalds/linux@2e5b8a01) answers `EINVAL`, reported as
    /// [`RdmaError::Kernel`] saying so.
    fn netns_mode(&mut self) -> Result<NetnsMode, RdmaError> {
        let replies = match self.request(codec::OP_SYS_GET, codec::encode_sys_get) {
            Ok(r) => r,
            Err(RdmaError::Kernel { op, errno, msg }) if errno == errno::EINVAL => {
                return Err(RdmaError::Kernel {
                    op,
                    errno,
                    msg: format!(
                        "{msg}: this kernel does not answer RDMA_NLDEV_CMD_SYS_GET requests, so it \
                         has no (usable) RDMA network-namespace support"
                    ),
                })
            }
            Err(e) => return Err(e),
        };
        replies
            .into_iter()
            .find_map(|r| match r {
                Reply::System(info) => Some(info.netns_mode),
                _ => None,
            })
            .flatten()
            .ok_or_else(|| {
                RdmaError::Protocol(
                    "SYS_GET answered without RDMA_NLDEV_SYS_ATTR_NETNS_MODE".into(),
                )
            })
    }

    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), RdmaError> {
        self.request(codec::OP_SYS_SET, |seq| codec::encode_sys_set(seq, mode))
            .map(|_| ())
    }

    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        let replies = self.request(codec::OP_LIST, |seq| codec::encode_get(seq, None))?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                Reply::Device(d) => Some(d),
                _ => None,
            })
            .collect())
    }

    /// A dump, looked through for `name`, repeated up to [`DUMP_TRIES`] times while the
    /// name is missing: the kernel resumes a `CMD_GET` dump by position
    /// (`_nldev_get_dumpit()` in drivers/infiniband/core/nldev.c puts one device per
    /// part and keeps its count in `cb->args[0]`), so a device that leaves this netns
    /// during the dump (another ADD moving its VF's device into a pod) shifts the
    /// positions and hides the device after it from that dump.
    fn device_by_name(&mut self, name: &str) -> Result<Option<RdmaDevice>, RdmaError> {
        for _ in 1..DUMP_TRIES {
            if let Some(d) = self.list_devices()?.into_iter().find(|d| d.name == name) {
                return Ok(Some(d));
            }
        }
        Ok(self.list_devices()?.into_iter().find(|d| d.name == name))
    }

    /// `CMD_GET` doit. `EINVAL` means "no such index in this netns":
    /// `nldev_get_doit` returns it for a failed lookup, and otherwise only
    /// for a request without `DEV_INDEX`, which [`codec::encode_get`] never
    /// produces.
    fn device_by_index(&mut self, index: u32) -> Result<Option<RdmaDevice>, RdmaError> {
        let replies = match self.request(codec::OP_GET, |seq| codec::encode_get(seq, Some(index))) {
            Ok(r) => r,
            Err(RdmaError::Kernel { errno, .. }) if errno == errno::EINVAL => return Ok(None),
            Err(e) => return Err(e),
        };
        let dev = replies.into_iter().find_map(|r| match r {
            Reply::Device(d) => Some(d),
            _ => None,
        });
        match dev {
            Some(d) if d.index != index => Err(RdmaError::Protocol(format!(
                "asked for RDMA device {index}, the kernel answered with device {}",
                d.index
            ))),
            Some(d) => Ok(Some(d)),
            None => Err(RdmaError::Protocol(format!(
                "CMD_GET for device {index} was acknowledged without a device message"
            ))),
        }
    }

    /// `CMD_SET` with `DEV_INDEX` + `NET_NS_FD` (the fd number is valid in
    /// this process, which is where the kernel resolves it:
    /// `get_net_ns_by_fd`). Errors are refined with [`refine_move_error`]
    /// (a mode query on `EOPNOTSUPP`, an index lookup on `EINVAL`).
    fn move_to_netns(&mut self, index: u32, netns_fd: BorrowedFd<'_>) -> Result<(), RdmaError> {
        // A BorrowedFd is never negative, so the cast is lossless.
        let fd = netns_fd.as_raw_fd() as u32;
        match self.request(codec::OP_MOVE, |seq| {
            codec::encode_set_netns(seq, index, fd)
        }) {
            Ok(_) => Ok(()),
            Err(e) => Err(refine_move_error(self, index, e)),
        }
    }

    fn rename(&mut self, index: u32, name: &str) -> Result<(), RdmaError> {
        self.request(codec::OP_RENAME, |seq| {
            codec::encode_set_name(seq, index, name)
        })
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this kernel accepts `socket(AF_NETLINK, SOCK_DGRAM,
    /// NETLINK_RDMA)`, asked directly through libc (not through the code
    /// under test).
    fn kernel_has_netlink_rdma() -> Result<(), i32> {
        // SAFETY: plain socket(2)/close(2) calls with constant arguments.
        unsafe {
            let fd = nix::libc::socket(
                nix::libc::AF_NETLINK,
                nix::libc::SOCK_DGRAM | nix::libc::SOCK_CLOEXEC,
                codec::NETLINK_RDMA as nix::libc::c_int,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            nix::libc::close(fd);
        }
        Ok(())
    }

    /// `open()` either works (a kernel with `ib_core`) or fails with exactly
    /// `NoSubsystem` (this build machine has no `ib_core`, so `socket(2)`
    /// answers `EPROTONOSUPPORT`); any other outcome is a bug. When `ib_core`
    /// is present, the read-only queries must work too.
    #[test]
    fn open_is_ok_or_no_subsystem() {
        match RdmaSocket::open() {
            Ok(mut s) => {
                assert_ne!(s.port_id(), 0);
                s.netns_mode().expect("SYS_GET on a kernel with ib_core");
                s.list_devices()
                    .expect("device dump on a kernel with ib_core");
            }
            Err(RdmaError::NoSubsystem) => {
                assert_eq!(kernel_has_netlink_rdma(), Err(errno::EPROTONOSUPPORT));
                let text = RdmaError::NoSubsystem.to_string();
                assert!(text.contains("ib_core not loaded"), "{text}");
            }
            Err(e) => panic!("RdmaSocket::open must be Ok or NoSubsystem, got {e:?}"),
        }
    }

    /// The request loop (send, seq/port filtering, multi-part until DONE,
    /// reply-then-ack, error acks) driven against the real kernel through
    /// NETLINK_ROUTE, which exists everywhere: rtnetlink messages decode as
    /// `Reply::Other` and are ignored, so each exchange returns no data but
    /// must terminate correctly.
    #[test]
    fn request_loop_against_the_kernel_via_rtnetlink() {
        use crate::nlsock::test_getlink as getlink;
        use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
        let mut s = RdmaSocket::open_protocol(0).expect("NETLINK_ROUTE socket");
        assert_ne!(s.port_id(), 0);
        // Dump of all links: multi-part, ends with NLMSG_DONE.
        let r = s.request("RTM_GETLINK dump", |seq| {
            getlink(seq, NLM_F_REQUEST | NLM_F_DUMP, 0)
        });
        assert_eq!(r.unwrap(), vec![]);
        // Doit for lo (ifindex 1) with ACK: RTM_NEWLINK then the ack.
        let r = s.request("RTM_GETLINK lo", |seq| {
            getlink(seq, NLM_F_REQUEST | NLM_F_ACK, 1)
        });
        assert_eq!(r.unwrap(), vec![]);
        // An unknown ifindex: NLMSG_ERROR -ENODEV, mapped like RDMA errors.
        let r = s.request("RTM_GETLINK missing", |seq| {
            getlink(seq, NLM_F_REQUEST | NLM_F_ACK, 0x7fff_fff0)
        });
        assert!(matches!(r, Err(RdmaError::NotFound(_))), "{r:?}");
        // The socket is still in sync afterwards.
        let r = s.request("RTM_GETLINK dump again", |seq| {
            getlink(seq, NLM_F_REQUEST | NLM_F_DUMP, 0)
        });
        assert_eq!(r.unwrap(), vec![]);
        assert_eq!(s.nl.last_seq(), 4);
    }

    #[test]
    fn open_matches_the_kernel_capability() {
        match kernel_has_netlink_rdma() {
            Err(e) if e == errno::EPROTONOSUPPORT => {
                assert!(matches!(RdmaSocket::open(), Err(RdmaError::NoSubsystem)))
            }
            Ok(()) => assert!(RdmaSocket::open().is_ok()),
            Err(other) => panic!("unexpected socket(2) errno {other}"),
        }
    }
}
