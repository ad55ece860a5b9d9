//! RDMA netlink layer: talks `NETLINK_RDMA` (client `RDMA_NL_NLDEV`) to the
//! kernel's `ib_core` to read and set the RDMA network-namespace mode, list
//! RDMA devices and move an RDMA device into another network namespace.
//!
//! No maintained Rust crate speaks `NETLINK_RDMA`, so this module frames its
//! own messages on top of `netlink-packet-core` (header, `NLMSG_ERROR`,
//! `NLMSG_DONE`, `NLM_F_*`) and `netlink-sys` (the socket).
//!
//! Layout:
//! - [`codec`]: pure encoders/decoders and the request/response state machine
//!   ([`codec::Exchange`]); every wire constant is defined and cited there.
//! - [`RdmaSocket`]: the real kernel backend (synchronous, one socket).
//! - [`MemoryRdma`]: an in-memory test double with the same semantics and
//!   injectable failures.
//! - [`RdmaOps`]: the trait the plugin's orchestration is written against.
//!
//! Kernel behaviour this layer relies on (read in torvalds/linux
//! `drivers/infiniband/core/{nldev.c,netlink.c,device.c}`):
//! - Device lookups (`ib_device_get_by_index(sock_net(skb->sk), index)`) happen
//!   in the network namespace of the *netlink socket*; in exclusive mode a
//!   device is only visible in its own netns, in shared mode every device of
//!   the initial netns is visible everywhere (`rdma_dev_access_netns()`).
//! - `RDMA_NLDEV_CMD_GET` with an unknown index, and `RDMA_NLDEV_CMD_SET` with
//!   an unknown index, both answer `-EINVAL` (not `-ENODEV`).
//! - A move (`nldev_set_doit` -> `ib_device_set_netns_put`) fails with
//!   `-EPERM` without `CAP_NET_ADMIN` over the target netns's user namespace,
//!   with `-EOPNOTSUPP` when the mode is shared *or* the driver lacks
//!   `disassociate_ucontext`, and (in `rdma_dev_change_netns`) with `-ENODEV`
//!   when the device is not in the calling thread's netns
//!   (`current->nsproxy->net_ns`): send a move from a thread that is in the
//!   netns the socket was opened in.
//! - `RDMA_NLDEV_CMD_SYS_SET` (`rdma_compatdev_set`) answers `-EBUSY` when the
//!   mode would change while any network namespace other than the initial one
//!   exists, so on a running Kubernetes node the mode is in practice set with
//!   the `ib_core` module parameter `netns_mode=0` at load time.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

pub mod codec;
#[cfg(any(test, feature = "test-doubles"))]
mod memory;
mod socket;

#[cfg(any(test, feature = "test-doubles"))]
pub use memory::{MemoryRdma, NetnsKey, RdmaOp};
pub use socket::RdmaSocket;

/// `errno` values used when mapping kernel answers, from `nix::errno::Errno` (the
/// platform's libc values; Linux generic values, `include/uapi/asm-generic/errno*.h`).
pub mod errno {
    use nix::errno::Errno;
    /// Operation not permitted.
    pub const EPERM: i32 = Errno::EPERM as i32;
    /// No such file or directory.
    pub const ENOENT: i32 = Errno::ENOENT as i32;
    /// Interrupted system call.
    pub const EINTR: i32 = Errno::EINTR as i32;
    /// Bad file descriptor.
    pub const EBADF: i32 = Errno::EBADF as i32;
    /// Device or resource busy.
    pub const EBUSY: i32 = Errno::EBUSY as i32;
    /// File exists (a rename to a name the kernel finds taken, `ib_device_rename`).
    pub const EEXIST: i32 = Errno::EEXIST as i32;
    /// No such device.
    pub const ENODEV: i32 = Errno::ENODEV as i32;
    /// Invalid argument.
    pub const EINVAL: i32 = Errno::EINVAL as i32;
    /// Protocol not supported (socket(2) for an unknown netlink protocol).
    pub const EPROTONOSUPPORT: i32 = Errno::EPROTONOSUPPORT as i32;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = Errno::EOPNOTSUPP as i32;
}

/// Network-namespace mode of the RDMA subsystem
/// (`RDMA_NLDEV_SYS_ATTR_NETNS_MODE`, a `u8`).
///
/// The kernel reports `(u8)ib_devices_shared_netns` (nldev.c
/// `nldev_sys_get_doit`): `0` = exclusive, `1` = shared; iproute2
/// `rdma/sys.c` names them in that order (`netns_modes_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetnsMode {
    /// `0`: each RDMA device belongs to exactly one network namespace and can
    /// be moved with `RDMA_NLDEV_CMD_SET` + `RDMA_NLDEV_NET_NS_FD`.
    Exclusive,
    /// `1` (kernel default, `ib_core netns_mode=1`): devices of the initial
    /// netns are visible in every netns; moves are refused (`EOPNOTSUPP`).
    Shared,
}

impl NetnsMode {
    /// Decodes the attribute value: `0` -> `Exclusive`, `1` -> `Shared`, any
    /// other value -> `None` (the kernel only accepts/reports 0 and 1).
    pub fn from_attr(value: u8) -> Option<Self> {
        match value {
            0 => Some(NetnsMode::Exclusive),
            1 => Some(NetnsMode::Shared),
            _ => None,
        }
    }

    /// The attribute value (`0` exclusive, `1` shared).
    pub fn to_attr(self) -> u8 {
        match self {
            NetnsMode::Exclusive => 0,
            NetnsMode::Shared => 1,
        }
    }
}

impl fmt::Display for NetnsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetnsMode::Exclusive => "exclusive",
            NetnsMode::Shared => "shared",
        })
    }
}

/// One RDMA device as reported by `RDMA_NLDEV_CMD_GET` (nldev.c
/// `fill_dev_info`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RdmaDevice {
    /// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32): the kernel's device index. It is
    /// global and stays the same across netns moves, but a driver rebind
    /// creates a new device with a new index.
    pub index: u32,
    /// `RDMA_NLDEV_ATTR_DEV_NAME` (NUL-terminated string, e.g. `mlx5_3`),
    /// without the NUL. Newer kernels make names unique only per netns in
    /// exclusive mode, so prefer the index after a move.
    pub name: String,
    /// `RDMA_NLDEV_ATTR_NODE_GUID` (u64, host byte order as sent by the kernel:
    /// `be64_to_cpu(device->node_guid)`); `None` if absent.
    pub node_guid: Option<u64>,
    /// `RDMA_NLDEV_ATTR_PORT_INDEX` in a `CMD_GET` reply: the number of ports
    /// (`rdma_end_port(device)`); `None` if absent.
    pub port_count: Option<u32>,
    /// `RDMA_NLDEV_ATTR_DEV_PROTOCOL` (string: `ib`, `roce`, `iw`, `opa`,
    /// `usnic`); `None` on kernels that do not send it.
    pub protocol: Option<String>,
}

impl RdmaDevice {
    /// A device with only index and name set (the two attributes every
    /// `CMD_GET` reply carries, `fill_nldev_handle`).
    pub fn new(index: u32, name: impl Into<String>) -> Self {
        RdmaDevice {
            index,
            name: name.into(),
            node_guid: None,
            port_count: None,
            protocol: None,
        }
    }
}

/// Errors of the RDMA netlink layer. Each message tells the operator what to
/// do where there is something to do.
#[derive(Debug)]
pub enum RdmaError {
    /// `socket(AF_NETLINK, SOCK_DGRAM, NETLINK_RDMA)` failed with
    /// `EPROTONOSUPPORT`: the kernel has no RDMA subsystem (`ib_core` is not
    /// loaded, or not built).
    NoSubsystem,
    /// A netns move was refused with `EOPNOTSUPP` and the subsystem reports
    /// shared netns mode.
    SharedMode,
    /// The device is not visible in the socket's netns (the kernel's
    /// `EINVAL` on an unknown index, confirmed by a lookup) or the kernel
    /// answered `ENODEV`. The string describes which device and why.
    NotFound(String),
    /// Any other kernel refusal (`NLMSG_ERROR` with a negative errno, or a
    /// dump ending with a negative `NLMSG_DONE` code).
    Kernel {
        /// Which request failed (e.g. `"RDMA_NLDEV_CMD_SET (netns move)"`).
        op: &'static str,
        /// The positive errno (the kernel sends it negated).
        errno: i32,
        /// Human-readable explanation: strerror, the kernel's extended-ack
        /// message if any, and advice for the errnos we know.
        msg: String,
    },
    /// A reply that does not follow the protocol (truncated message, bad
    /// attribute length, missing mandatory attribute, ...).
    Protocol(String),
    /// A socket-level error (open, bind, send, recv, receive timeout).
    Io(io::Error),
}

impl RdmaError {
    /// The kernel errno carried by this error, if any (`EOPNOTSUPP` for
    /// [`RdmaError::SharedMode`], `EPROTONOSUPPORT` for
    /// [`RdmaError::NoSubsystem`]).
    pub fn errno(&self) -> Option<i32> {
        match self {
            RdmaError::NoSubsystem => Some(errno::EPROTONOSUPPORT),
            RdmaError::SharedMode => Some(errno::EOPNOTSUPP),
            RdmaError::Kernel { errno, .. } => Some(*errno),
            RdmaError::Io(e) => e.raw_os_error(),
            RdmaError::NotFound(_) | RdmaError::Protocol(_) => None,
        }
    }

    /// Builds the error for a kernel refusal of `op` with positive `errno`
    /// and the optional extended-ack text, adding operator advice for the
    /// errnos whose cause is known from the kernel source:
    /// `EPERM` (needs `CAP_NET_ADMIN`, nldev `RDMA_NL_ADMIN_PERM` and
    /// `ib_device_set_netns_put`), `ENODEV` (becomes [`RdmaError::NotFound`]),
    /// `EBUSY` on `SYS_SET` (`rdma_compatdev_set`). `EOPNOTSUPP` on a move is
    /// refined separately (see [`refine_move_error`]) because it needs a mode
    /// query.
    pub fn from_kernel(op: &'static str, errno: i32, extack: Option<&str>) -> RdmaError {
        let strerror = io::Error::from_raw_os_error(errno).to_string();
        let ext = match extack {
            Some(m) if !m.is_empty() => format!(" (kernel says: {m})"),
            _ => String::new(),
        };
        match errno {
            errno::ENODEV => RdmaError::NotFound(format!(
                "{op}: {strerror}{ext}: the RDMA device is not in the network namespace of the \
                 calling thread/socket, or is being unregistered"
            )),
            errno::EPERM => RdmaError::Kernel {
                op,
                errno,
                msg: format!(
                    "{strerror}{ext}: RDMA netlink set operations need CAP_NET_ADMIN (for a netns \
                     move, CAP_NET_ADMIN over the target network namespace's user namespace); run \
                     the plugin as root in the initial user namespace"
                ),
            },
            errno::EBUSY if op == codec::OP_SYS_SET => RdmaError::Kernel {
                op,
                errno,
                msg: format!(
                    "{strerror}{ext}: the kernel only changes the RDMA netns mode while no network \
                     namespace other than the initial one exists; on a node with pods set the \
                     ib_core module parameter netns_mode=0 (e.g. `options ib_core netns_mode=0` in \
                     /etc/modprobe.d) and reload ib_core or reboot"
                ),
            },
            _ => RdmaError::Kernel {
                op,
                errno,
                msg: format!("{strerror}{ext}"),
            },
        }
    }
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaError::NoSubsystem => f.write_str(
                "the kernel has no RDMA subsystem (ib_core not loaded): opening a NETLINK_RDMA \
                 socket failed with EPROTONOSUPPORT; load ib_core and the HCA driver (e.g. \
                 `modprobe mlx5_ib`)",
            ),
            RdmaError::SharedMode => f.write_str(
                "the RDMA subsystem is in shared netns mode, so RDMA devices cannot be moved into \
                 a pod's network namespace: set `rdma system set netns exclusive` or ib_core \
                 netns_mode=0 (the runtime switch only works while no other network namespace \
                 exists; on a node with pods use `options ib_core netns_mode=0` and reload ib_core \
                 or reboot)",
            ),
            RdmaError::NotFound(what) => write!(f, "RDMA device not found: {what}"),
            RdmaError::Kernel { op, errno, msg } => {
                write!(f, "RDMA netlink {op} failed (errno {errno}): {msg}")
            }
            RdmaError::Protocol(what) => write!(f, "malformed RDMA netlink reply: {what}"),
            RdmaError::Io(e) => write!(f, "RDMA netlink socket error: {e}"),
        }
    }
}

impl std::error::Error for RdmaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RdmaError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for RdmaError {
    fn from(e: io::Error) -> Self {
        RdmaError::Io(e)
    }
}

/// The RDMA operations the plugin needs, abstracted so its orchestration can
/// be tested against [`MemoryRdma`] and run against [`RdmaSocket`].
///
/// Every lookup is relative to the backend's network namespace (for
/// [`RdmaSocket`]: the netns the socket was opened in).
pub trait RdmaOps {
    /// Current netns mode (`RDMA_NLDEV_CMD_SYS_GET`).
    fn netns_mode(&mut self) -> Result<NetnsMode, RdmaError>;
    /// Sets the netns mode (`RDMA_NLDEV_CMD_SYS_SET`, needs `CAP_NET_ADMIN`).
    /// Setting the current mode succeeds; changing it fails with `EBUSY`
    /// while any non-initial netns exists.
    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), RdmaError>;
    /// All devices visible in this netns (`RDMA_NLDEV_CMD_GET` with
    /// `NLM_F_DUMP`, multi-part until `NLMSG_DONE`), in kernel order.
    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError>;
    /// The visible device named `name`, or `None`. The kernel has no lookup
    /// by name (`nldev_get_doit` requires `DEV_INDEX`), so this filters a dump.
    fn device_by_name(&mut self, name: &str) -> Result<Option<RdmaDevice>, RdmaError>;
    /// The visible device with this index, or `None` (the kernel's `EINVAL`
    /// for an unknown index is mapped to `None`).
    fn device_by_index(&mut self, index: u32) -> Result<Option<RdmaDevice>, RdmaError>;
    /// CMD_SET with DEV_INDEX + NET_NS_FD; the device is looked up in the socket's own netns.
    ///
    /// Moves device `index` into the network namespace `netns_fd` refers to
    /// (an open `/proc/<pid>/ns/net` or bind-mounted nsfs file). Errors:
    /// [`RdmaError::SharedMode`] (`EOPNOTSUPP` in shared mode),
    /// [`RdmaError::NotFound`] (index not visible here, or `ENODEV`),
    /// [`RdmaError::Kernel`] (`EPERM`, `EOPNOTSUPP` from a driver that cannot
    /// change netns, a bad netns fd, ...).
    fn move_to_netns(&mut self, index: u32, netns_fd: BorrowedFd<'_>) -> Result<(), RdmaError>;
    /// CMD_SET with DEV_INDEX + DEV_NAME: renames device `index` (looked up in the
    /// socket's netns) to `name` (at most `IB_DEVICE_NAME_MAX` - 1 = 63 bytes, no `%`;
    /// nldev.c `nldev_set_doit` -> device.c `ib_device_rename`). Renaming to the current
    /// name succeeds without change. Errors: [`RdmaError::Kernel`] with `EEXIST` (the
    /// name is taken by a device the kernel compares against), `EPERM` (needs
    /// `CAP_NET_ADMIN`), `EINVAL` (unknown index or a refused name).
    fn rename(&mut self, index: u32, name: &str) -> Result<(), RdmaError>;
}

/// Refines the error of a failed move of device `index` by asking `ops`
/// (the same backend, same netns) one cheap question, because the kernel's
/// errno alone is ambiguous (device.c `ib_device_set_netns_put`, nldev.c
/// `nldev_set_doit`):
/// - `EOPNOTSUPP`: shared mode -> [`RdmaError::SharedMode`]; exclusive mode ->
///   [`RdmaError::Kernel`] explaining that the driver cannot change netns
///   (no `disassociate_ucontext`); mode unknown -> the original error.
/// - `EINVAL`: device not visible -> [`RdmaError::NotFound`]; visible ->
///   [`RdmaError::Kernel`] explaining that the netns fd was rejected;
///   lookup failed -> the original error.
/// - anything else is returned unchanged.
pub fn refine_move_error<O: RdmaOps + ?Sized>(
    ops: &mut O,
    index: u32,
    err: RdmaError,
) -> RdmaError {
    match err {
        RdmaError::Kernel { op, errno, msg } if errno == errno::EOPNOTSUPP => {
            match ops.netns_mode() {
                Ok(NetnsMode::Shared) => RdmaError::SharedMode,
                Ok(NetnsMode::Exclusive) => RdmaError::Kernel {
                    op,
                    errno,
                    msg: format!(
                        "{msg}: the netns mode is exclusive, so the driver of RDMA device {index} \
                         does not support moving between network namespaces (the kernel requires \
                         disassociate_ucontext; mlx5_ib provides it)"
                    ),
                },
                Err(_) => RdmaError::Kernel {
                    op,
                    errno,
                    msg: format!(
                        "{msg}: either the RDMA netns mode is shared (set `rdma system set netns \
                         exclusive` or ib_core netns_mode=0) or the driver cannot change netns"
                    ),
                },
            }
        }
        RdmaError::Kernel { op, errno, msg } if errno == errno::EINVAL => {
            match ops.device_by_index(index) {
                Ok(None) => RdmaError::NotFound(format!(
                    "no RDMA device with index {index} is visible in this network namespace"
                )),
                Ok(Some(dev)) => RdmaError::Kernel {
                    op,
                    errno,
                    msg: format!(
                        "{msg}: RDMA device {index} ({}) exists, so the kernel rejected the target \
                         netns fd (not a network namespace file?)",
                        dev.name
                    ),
                },
                Err(_) => RdmaError::Kernel { op, errno, msg },
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_mode_attribute_values() {
        assert_eq!(NetnsMode::from_attr(0), Some(NetnsMode::Exclusive));
        assert_eq!(NetnsMode::from_attr(1), Some(NetnsMode::Shared));
        assert_eq!(NetnsMode::from_attr(2), None);
        assert_eq!(NetnsMode::Exclusive.to_attr(), 0);
        assert_eq!(NetnsMode::Shared.to_attr(), 1);
        assert_eq!(NetnsMode::Shared.to_string(), "shared");
    }

    #[test]
    fn errno_constants_match_libc() {
        use nix::libc;
        assert_eq!(errno::EPERM, libc::EPERM);
        assert_eq!(errno::ENOENT, libc::ENOENT);
        assert_eq!(errno::EINTR, libc::EINTR);
        assert_eq!(errno::EBADF, libc::EBADF);
        assert_eq!(errno::EBUSY, libc::EBUSY);
        assert_eq!(errno::ENODEV, libc::ENODEV);
        assert_eq!(errno::EINVAL, libc::EINVAL);
        assert_eq!(errno::EPROTONOSUPPORT, libc::EPROTONOSUPPORT);
        assert_eq!(errno::EOPNOTSUPP, libc::EOPNOTSUPP);
    }

    #[test]
    fn kernel_errors_map_to_operator_advice() {
        let e = RdmaError::from_kernel(codec::OP_MOVE, errno::ENODEV, None);
        assert!(matches!(e, RdmaError::NotFound(_)), "{e:?}");
        let e = RdmaError::from_kernel(codec::OP_MOVE, errno::EPERM, Some("nope"));
        let text = e.to_string();
        assert!(
            text.contains("CAP_NET_ADMIN") && text.contains("nope"),
            "{text}"
        );
        let e = RdmaError::from_kernel(codec::OP_SYS_SET, errno::EBUSY, None);
        assert!(e.to_string().contains("netns_mode=0"), "{e}");
        let e = RdmaError::from_kernel(codec::OP_GET, errno::EBUSY, None);
        assert_eq!(e.errno(), Some(errno::EBUSY));
        assert!(!e.to_string().contains("netns_mode"), "{e}");
        assert_eq!(RdmaError::SharedMode.errno(), Some(errno::EOPNOTSUPP));
        assert_eq!(RdmaError::NoSubsystem.errno(), Some(errno::EPROTONOSUPPORT));
    }

    #[test]
    fn eopnotsupp_from_the_wire_becomes_shared_mode_when_shared() {
        // The kernel's refusal of a move, decoded from the wire...
        #[rustfmt::skip]
        let datagram: [u8; 36] = [
            0x24, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x01, // NLMSG_ERROR, capped
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 1, pid 0
            0xa1, 0xff, 0xff, 0xff,                         // -EOPNOTSUPP
            0x20, 0x00, 0x00, 0x00, 0x02, 0x14, 0x05, 0x00, // echoed request header
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let wire_err = || {
            codec::Exchange::new(codec::OP_MOVE, 1, 0)
                .feed(&datagram)
                .unwrap_err()
        };
        // ...is SharedMode when the subsystem reports shared mode...
        let mut shared = MemoryRdma::new(NetnsKey { dev: 1, ino: 1 }, NetnsMode::Shared);
        assert!(matches!(
            refine_move_error(&mut shared, 3, wire_err()),
            RdmaError::SharedMode
        ));
        // ...and a Kernel error carrying EOPNOTSUPP when it is exclusive.
        let mut exclusive = MemoryRdma::new(NetnsKey { dev: 1, ino: 1 }, NetnsMode::Exclusive);
        let e = refine_move_error(&mut exclusive, 3, wire_err());
        assert!(
            matches!(&e, RdmaError::Kernel { errno, .. } if *errno == errno::EOPNOTSUPP),
            "{e:?}"
        );
        // Other errors pass through untouched.
        let e = refine_move_error(&mut shared, 3, RdmaError::Protocol("x".into()));
        assert!(matches!(e, RdmaError::Protocol(_)));
    }
}
