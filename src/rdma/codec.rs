//! Pure encoders and decoders for `NETLINK_RDMA` / `RDMA_NL_NLDEV` messages,
//! plus [`Exchange`], the one request/response state machine (sequence and
//! port checks, multi-part until `NLMSG_DONE`, `NLMSG_ERROR` acks) that the
//! socket backend drives with each received datagram.
//!
//! Wire layout (no family header follows `nlmsghdr` for `RDMA_NL_NLDEV`:
//! nldev.c parses with `nlmsg_parse(nlh, 0, ...)`, hdrlen 0):
//! ```text
//! struct nlmsghdr (16 bytes, host byte order):
//!   u32 nlmsg_len    whole message incl. header, excl. trailing padding
//!   u16 nlmsg_type   RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op) = (5 << 10) + op
//!   u16 nlmsg_flags  NLM_F_*
//!   u32 nlmsg_seq    echoed by the kernel
//!   u32 nlmsg_pid    0 in requests; our port id in replies
//! then attributes, each: u16 nla_len (4 + payload), u16 nla_type, payload,
//! zero padding to a multiple of 4.
//! ```
//! Every constant below was checked by compiling a C program against this
//! machine's `/usr/include/rdma/rdma_netlink.h` (Debian linux-libc-dev 6.1,
//! exported from torvalds/linux `include/uapi/rdma/rdma_netlink.h`) and
//! against iproute2's copy `rdma/include/uapi/rdma/rdma_netlink.h`
//! (iproute2/iproute2 ee2a4a86); the enum order was also read in
//! torvalds/linux@60675d4c.

use std::convert::Infallible;

use netlink_packet_core::{
    Emitable, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable, Nla, NlasIterator, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP,
    NLM_F_REQUEST,
};

use super::{NetnsMode, RdmaDevice, RdmaError};

/// `NETLINK_RDMA` protocol number for `socket(AF_NETLINK, _, 20)`
/// (`include/uapi/linux/netlink.h`; same value as
/// `netlink_sys::protocols::NETLINK_RDMA`).
pub const NETLINK_RDMA: isize = 20;

/// `RDMA_NL_NLDEV` = 5, the "RDMA device interface" client (first anonymous
/// enum of rdma_netlink.h: `RDMA_NL_IWCM = 2, RDMA_NL_RSVD, RDMA_NL_LS,
/// RDMA_NL_NLDEV`).
pub const RDMA_NL_NLDEV: u16 = 5;

/// `enum rdma_nldev_command`: `RDMA_NLDEV_CMD_GET` = 1 (doit by index, or
/// dump of all visible devices).
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SET` = 2 (rename with `DEV_NAME`, netns move with
/// `NET_NS_FD`, DIM with `DEV_DIM`; `RDMA_NL_ADMIN_PERM`).
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
/// `RDMA_NLDEV_CMD_PORT_GET` = 5 (the only reply carrying `NDEV_INDEX` /
/// `NDEV_NAME`; not used by this module, listed for reference).
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
/// `RDMA_NLDEV_CMD_SYS_GET` = 6 (doit only in current kernels:
/// `nldev_sys_get_doit`).
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_CMD_SYS_SET` = 7 (`nldev_set_sys_set_doit`;
/// `RDMA_NL_ADMIN_PERM`).
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;

/// `RDMA_NLDEV_ATTR_PAD` = 0 (= `RDMA_NLDEV_ATTR_UNSPEC`; 64-bit alignment
/// padding before u64 attributes, skipped when decoding).
pub const RDMA_NLDEV_ATTR_PAD: u16 = 0;
/// `RDMA_NLDEV_ATTR_DEV_INDEX` = 1, u32 (`nldev_policy`: `NLA_U32`).
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME` = 2, NUL-terminated string (`NLA_NUL_STRING`,
/// `.len = IB_DEVICE_NAME_MAX`). Never sent by this module: in `CMD_SET` it
/// renames the device instead of moving it.
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_PORT_INDEX` = 3, u32 (`NLA_U32`); in a `CMD_GET` reply it
/// is the number of ports.
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// `RDMA_NLDEV_ATTR_NODE_GUID` = 6, u64 (`NLA_U64`), host byte order.
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
/// `RDMA_NLDEV_ATTR_NDEV_INDEX` = 50, u32 (`NLA_U32`); only in `PORT_GET`
/// replies (nldev.c `fill_port_info`), and only when the netdev is in the
/// socket's netns.
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
/// `RDMA_NLDEV_ATTR_NDEV_NAME` = 51, NUL-terminated string (`NLA_NUL_STRING`,
/// `.len = IFNAMSIZ`); same scope as [`RDMA_NLDEV_ATTR_NDEV_INDEX`].
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE` = 66, u8 (`NLA_U8`): 0 exclusive,
/// 1 shared; `SYS_SET` rejects values > 1 with `EINVAL`.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// `RDMA_NLDEV_ATTR_DEV_PROTOCOL` = 67, NUL-terminated string (`ib`, `roce`,
/// ...).
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// `RDMA_NLDEV_NET_NS_FD` = 68, u32 (`NLA_U32`): a file descriptor of the
/// sender referring to the target network namespace.
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

/// `RDMA_NLDEV_CMD_STAT_GET` = 17 (`enum rdma_nldev_command`, after `GET_CHARDEV` = 15
/// and `STAT_SET` = 16). Without `RDMA_NLDEV_ATTR_STAT_RES` the doit answers a port's
/// default hw counters (drivers/infiniband/core/nldev.c `nldev_stat_get_doit()` ->
/// `stat_get_doit_default_counter()`); read-only, no `RDMA_NL_ADMIN_PERM`.
pub const RDMA_NLDEV_CMD_STAT_GET: u16 = 17;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTERS` = 80: nested table of
/// [`RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY`] nests.
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTERS: u16 = 80;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY` = 81: one counter, a nest of its name and
/// value.
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME` = 82, NUL-terminated string (the driver's
/// counter name, the same as the sysfs `hw_counters/<name>` file).
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE` = 83, u64 (sent with
/// `nla_put_u64_64bit`, so a `PAD` attribute may precede it).
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;

/// `NLMSG_NOOP` = 1 (`include/uapi/linux/netlink.h`).
pub const NLMSG_NOOP: u16 = netlink_packet_core::NLMSG_NOOP;
/// `NLMSG_ERROR` = 2: `struct nlmsgerr { int error; struct nlmsghdr msg; }`
/// (+ echoed payload unless `NLM_F_CAPPED`, + TLVs if `NLM_F_ACK_TLVS`).
pub const NLMSG_ERROR: u16 = netlink_packet_core::NLMSG_ERROR;
/// `NLMSG_DONE` = 3: ends a dump; payload `int` (the dump's return code).
pub const NLMSG_DONE: u16 = netlink_packet_core::NLMSG_DONE;
/// `NLMSG_OVERRUN` = 4.
pub const NLMSG_OVERRUN: u16 = netlink_packet_core::NLMSG_OVERRUN;
/// `NLMSGERR_ATTR_MSG` = 1: extended-ack message string
/// (`enum nlmsgerr_attrs`, `include/uapi/linux/netlink.h`).
pub const NLMSGERR_ATTR_MSG: u16 = 1;
/// `sizeof(struct nlmsghdr)`.
pub const NLMSG_HDRLEN: usize = 16;

/// Operation name used in errors for `RDMA_NLDEV_CMD_SYS_GET`.
pub const OP_SYS_GET: &str = "RDMA_NLDEV_CMD_SYS_GET (netns mode query)";
/// Operation name used in errors for `RDMA_NLDEV_CMD_SYS_SET`.
pub const OP_SYS_SET: &str = "RDMA_NLDEV_CMD_SYS_SET (netns mode change)";
/// Operation name used in errors for a `RDMA_NLDEV_CMD_GET` dump.
pub const OP_LIST: &str = "RDMA_NLDEV_CMD_GET (device dump)";
/// Operation name used in errors for a `RDMA_NLDEV_CMD_GET` by index.
pub const OP_GET: &str = "RDMA_NLDEV_CMD_GET (device by index)";
/// Operation name used in errors for a `RDMA_NLDEV_CMD_STAT_GET` of a port.
pub const OP_STAT_GET: &str = "RDMA_NLDEV_CMD_STAT_GET (port hw counters)";
/// Operation name used in errors for a `RDMA_NLDEV_CMD_SET` netns move.
pub const OP_MOVE: &str = "RDMA_NLDEV_CMD_SET (netns move)";
/// Operation name used in errors for a `RDMA_NLDEV_CMD_SET` rename.
pub const OP_RENAME: &str = "RDMA_NLDEV_CMD_SET (rename)";

/// `RDMA_NL_GET_TYPE(client, op)` = `(client << 10) + op` (rdma_netlink.h).
pub const fn nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_CLIENT(type)` = `(type & (((1 << 6) - 1) << 10)) >> 10`.
pub const fn nl_get_client(message_type: u16) -> u16 {
    (message_type & (((1 << 6) - 1) << 10)) >> 10
}

/// `RDMA_NL_GET_OP(type)` = `type & ((1 << 10) - 1)`.
pub const fn nl_get_op(message_type: u16) -> u16 {
    message_type & ((1 << 10) - 1)
}

/// `nlmsg_type` of an NLDEV command: `nl_get_type(RDMA_NL_NLDEV, cmd)`;
/// e.g. `CMD_GET` -> `0x1401`, `CMD_SET` -> `0x1402`, `SYS_GET` -> `0x1406`,
/// `SYS_SET` -> `0x1407`.
pub const fn nldev_type(cmd: u16) -> u16 {
    nl_get_type(RDMA_NL_NLDEV, cmd)
}

/// A request attribute: fixed-size integers, and one NUL-terminated string
/// (`DEV_NAME`, sent only by [`encode_set_name`], the one rename request).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attr {
    U32(u16, u32),
    U8(u16, u8),
    /// `NLA_NUL_STRING`: the bytes then one NUL.
    Str(u16, String),
}

impl Nla for Attr {
    fn value_len(&self) -> usize {
        match self {
            Attr::U32(..) => 4,
            Attr::U8(..) => 1,
            Attr::Str(_, v) => v.len() + 1,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Attr::U32(kind, _) | Attr::U8(kind, _) | Attr::Str(kind, _) => *kind,
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Attr::U32(_, v) => buffer[..4].copy_from_slice(&v.to_ne_bytes()),
            Attr::U8(_, v) => buffer[0] = *v,
            Attr::Str(_, v) => {
                buffer[..v.len()].copy_from_slice(v.as_bytes());
                buffer[v.len()] = 0;
            }
        }
    }
}

/// An `RDMA_NL_NLDEV` request body: the command and its attributes. It plugs
/// into `netlink_packet_core::NetlinkMessage` for the framing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NldevRequest {
    cmd: u16,
    attrs: Vec<Attr>,
}

impl NetlinkSerializable for NldevRequest {
    fn message_type(&self) -> u16 {
        nldev_type(self.cmd)
    }

    fn buffer_len(&self) -> usize {
        Emitable::buffer_len(&self.attrs.as_slice())
    }

    fn serialize(&self, buffer: &mut [u8]) {
        Emitable::emit(&self.attrs.as_slice(), buffer)
    }
}

/// A received message body kept raw; attributes are decoded afterwards
/// according to the message type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawBody(Vec<u8>);

impl NetlinkDeserializable for RawBody {
    type Error = Infallible;

    fn deserialize(_header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Infallible> {
        Ok(RawBody(payload.to_vec()))
    }
}

fn encode(seq: u32, flags: u16, cmd: u16, attrs: Vec<Attr>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(NldevRequest { cmd, attrs }),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// `RDMA_NLDEV_CMD_SYS_GET` request, no attributes, flags
/// `NLM_F_REQUEST | NLM_F_ACK` (as iproute2 `rdma/sys.c` `sys_show_no_args`;
/// current kernels only have a doit handler, a dump request gets `EINVAL`).
/// 16 bytes. The kernel answers one `SYS_GET` message then an ack.
pub fn encode_sys_get(seq: u32) -> Vec<u8> {
    encode(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RDMA_NLDEV_CMD_SYS_GET,
        Vec::new(),
    )
}

/// `RDMA_NLDEV_CMD_SYS_SET` request with `SYS_ATTR_NETNS_MODE` (u8: 0
/// exclusive, 1 shared), flags `NLM_F_REQUEST | NLM_F_ACK` (iproute2
/// `sys_set_netns_cmd`). 24 bytes (u8 attribute padded to 8).
pub fn encode_sys_set(seq: u32, mode: NetnsMode) -> Vec<u8> {
    encode(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RDMA_NLDEV_CMD_SYS_SET,
        vec![Attr::U8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, mode.to_attr())],
    )
}

/// `RDMA_NLDEV_CMD_GET` request.
///
/// `Some(index)`: one device, `DEV_INDEX` attribute, flags
/// `NLM_F_REQUEST | NLM_F_ACK` (iproute2 `rdma/dev.c` `dev_no_args`);
/// 24 bytes; answered by one `CMD_GET` message then an ack, or `EINVAL` for
/// an index not visible in the socket's netns.
///
/// `None`: dump of all visible devices, no attribute, flags
/// `NLM_F_REQUEST | NLM_F_DUMP` (iproute2 `rd_dev_init_cb` also sets
/// `NLM_F_ACK`, which the kernel ignores for dumps: `rdma_nl_rcv_skb` skips
/// the ack when `netlink_dump_start` returns `-EINTR`); 16 bytes; answered by
/// `NLM_F_MULTI` messages ending with `NLMSG_DONE`.
///
/// There is no "by name" form: `nldev_get_doit` requires `DEV_INDEX` and
/// ignores `DEV_NAME`; look names up in a dump.
pub fn encode_get(seq: u32, index: Option<u32>) -> Vec<u8> {
    match index {
        Some(index) => encode(
            seq,
            NLM_F_REQUEST | NLM_F_ACK,
            RDMA_NLDEV_CMD_GET,
            vec![Attr::U32(RDMA_NLDEV_ATTR_DEV_INDEX, index)],
        ),
        None => encode(
            seq,
            NLM_F_REQUEST | NLM_F_DUMP,
            RDMA_NLDEV_CMD_GET,
            Vec::new(),
        ),
    }
}

/// `RDMA_NLDEV_CMD_SET` netns move: `DEV_INDEX` (u32) then `NET_NS_FD` (u32,
/// a descriptor valid in the sending process), flags
/// `NLM_F_REQUEST | NLM_F_ACK` (iproute2 `rdma/dev.c` `dev_set_netns`).
/// 32 bytes. Answered by an ack or an error.
pub fn encode_set_netns(seq: u32, index: u32, netns_fd: u32) -> Vec<u8> {
    encode(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RDMA_NLDEV_CMD_SET,
        vec![
            Attr::U32(RDMA_NLDEV_ATTR_DEV_INDEX, index),
            Attr::U32(RDMA_NLDEV_NET_NS_FD, netns_fd),
        ],
    )
}

/// `RDMA_NLDEV_CMD_SET` rename: `DEV_INDEX` (u32) then `DEV_NAME` (the new
/// name, NUL-terminated, padded to 4 bytes), flags `NLM_F_REQUEST | NLM_F_ACK`
/// (iproute2 `rdma/dev.c` `dev_set_name`; the kernel's `nldev_set_doit` calls
/// `ib_device_rename`, drivers/infiniband/core/nldev.c). Answered by an ack
/// or an error (`EEXIST`: the name is taken; `EINVAL`: unknown index or a
/// name the kernel refuses).
pub fn encode_set_name(seq: u32, index: u32, name: &str) -> Vec<u8> {
    encode(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RDMA_NLDEV_CMD_SET,
        vec![
            Attr::U32(RDMA_NLDEV_ATTR_DEV_INDEX, index),
            Attr::Str(RDMA_NLDEV_ATTR_DEV_NAME, name.to_string()),
        ],
    )
}

/// `RDMA_NLDEV_CMD_STAT_GET` request for the default hw counters of one port:
/// `DEV_INDEX` (u32) then `PORT_INDEX` (u32), flags `NLM_F_REQUEST | NLM_F_ACK`
/// (iproute2 `rdma/stat.c` `stat_show_one_link()` sends the same two attributes).
/// 32 bytes. Answered by one `STAT_GET` message (`DEV_INDEX`, `DEV_NAME`,
/// `PORT_INDEX`, `STAT_HWCOUNTERS`) then an ack; `EINVAL` when the index is not a
/// device of the socket's netns (`ib_device_get_by_index(sock_net(...))`) or the port
/// has no hw counters; `EOPNOTSUPP` when the driver has no `get_hw_stats`.
pub fn encode_stat_get(seq: u32, index: u32, port: u32) -> Vec<u8> {
    encode(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RDMA_NLDEV_CMD_STAT_GET,
        vec![
            Attr::U32(RDMA_NLDEV_ATTR_DEV_INDEX, index),
            Attr::U32(RDMA_NLDEV_ATTR_PORT_INDEX, port),
        ],
    )
}

/// Decoded `RDMA_NLDEV_CMD_STAT_GET` reply (default counters of one port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStats {
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`.
    pub index: u32,
    /// `RDMA_NLDEV_ATTR_PORT_INDEX` (1-based port number), `0` if absent.
    pub port: u32,
    /// `(name, value)` of each `STAT_HWCOUNTER_ENTRY`, in the kernel's order. The
    /// values are the driver's raw counts (the port's hw stats plus those of its bound
    /// counters, `rdma_counter_get_hwstat_value()`), as the sysfs
    /// `ports/<port>/hw_counters/<name>` files give them.
    pub counters: Vec<(String, u64)>,
}

/// Decoded `RDMA_NLDEV_CMD_SYS_GET` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysInfo {
    /// `SYS_ATTR_NETNS_MODE`, `None` if absent.
    pub netns_mode: Option<NetnsMode>,
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A `CMD_GET` message (single reply or one part of a dump).
    Device(RdmaDevice),
    /// A `SYS_GET` message.
    System(SysInfo),
    /// A `STAT_GET` message.
    Stats(PortStats),
    /// `NLMSG_ERROR` with error 0.
    Ack,
    /// `NLMSG_ERROR` with a non-zero error, or `NLMSG_DONE` with a negative
    /// code. `errno` is positive; `message` is the extended-ack text
    /// (`NLMSGERR_ATTR_MSG`) when the kernel sent one.
    Error {
        /// Positive errno.
        errno: i32,
        /// Extended-ack message, if any.
        message: Option<String>,
    },
    /// `NLMSG_DONE` with code >= 0.
    Done,
    /// `NLMSG_NOOP`.
    Noop,
    /// Any other message type (e.g. another NLDEV command's reply); ignored
    /// by [`Exchange`].
    Other {
        /// The `nlmsg_type`.
        message_type: u16,
    },
}

/// One decoded message with the header fields the exchange checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `nlmsg_type`.
    pub message_type: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid` (the receiving socket's port id in kernel replies).
    pub port: u32,
    /// The decoded body.
    pub reply: Reply,
}

fn protocol(msg: impl Into<String>) -> RdmaError {
    RdmaError::Protocol(msg.into())
}

const fn align4(len: usize) -> usize {
    (len + 3) & !3
}

fn attr_u32(kind: u16, value: &[u8]) -> Result<u32, RdmaError> {
    let bytes: [u8; 4] = value.try_into().map_err(|_| {
        protocol(format!(
            "attribute {kind}: expected 4 bytes (u32), got {}",
            value.len()
        ))
    })?;
    Ok(u32::from_ne_bytes(bytes))
}

fn attr_u64(kind: u16, value: &[u8]) -> Result<u64, RdmaError> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        protocol(format!(
            "attribute {kind}: expected 8 bytes (u64), got {}",
            value.len()
        ))
    })?;
    Ok(u64::from_ne_bytes(bytes))
}

fn attr_u8(kind: u16, value: &[u8]) -> Result<u8, RdmaError> {
    match value {
        [v] => Ok(*v),
        _ => Err(protocol(format!(
            "attribute {kind}: expected 1 byte (u8), got {}",
            value.len()
        ))),
    }
}

/// A NUL-terminated string attribute: the bytes up to the first NUL (or all
/// bytes if none), which must be UTF-8.
fn attr_string(kind: u16, value: &[u8]) -> Result<String, RdmaError> {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8(value[..end].to_vec())
        .map_err(|_| protocol(format!("attribute {kind}: string is not UTF-8")))
}

/// Iterates the attributes of `payload`, yielding `(type, value)` with the
/// `NLA_F_NESTED` / `NLA_F_NET_BYTEORDER` bits masked off.
fn for_each_attr(
    payload: &[u8],
    mut f: impl FnMut(u16, &[u8]) -> Result<(), RdmaError>,
) -> Result<(), RdmaError> {
    for nla in NlasIterator::new(payload) {
        let nla = nla.map_err(|e| protocol(format!("bad attribute: {e}")))?;
        f(nla.kind(), nla.value())?;
    }
    Ok(())
}

fn decode_device(payload: &[u8]) -> Result<RdmaDevice, RdmaError> {
    let mut index = None;
    let mut name = None;
    let mut dev = RdmaDevice::new(0, "");
    for_each_attr(payload, |kind, value| {
        match kind {
            RDMA_NLDEV_ATTR_DEV_INDEX => index = Some(attr_u32(kind, value)?),
            RDMA_NLDEV_ATTR_DEV_NAME => name = Some(attr_string(kind, value)?),
            RDMA_NLDEV_ATTR_PORT_INDEX => dev.port_count = Some(attr_u32(kind, value)?),
            RDMA_NLDEV_ATTR_NODE_GUID => dev.node_guid = Some(attr_u64(kind, value)?),
            RDMA_NLDEV_ATTR_DEV_PROTOCOL => dev.protocol = Some(attr_string(kind, value)?),
            _ => {} // PAD, CAP_FLAGS, FW_VERSION, ... and future attributes.
        }
        Ok(())
    })?;
    dev.index = index.ok_or_else(|| protocol("CMD_GET reply without RDMA_NLDEV_ATTR_DEV_INDEX"))?;
    dev.name = name.ok_or_else(|| protocol("CMD_GET reply without RDMA_NLDEV_ATTR_DEV_NAME"))?;
    Ok(dev)
}

fn decode_stats(payload: &[u8]) -> Result<PortStats, RdmaError> {
    let mut st = PortStats {
        index: 0,
        port: 0,
        counters: Vec::new(),
    };
    let mut index = None;
    for_each_attr(payload, |kind, value| {
        match kind {
            RDMA_NLDEV_ATTR_DEV_INDEX => index = Some(attr_u32(kind, value)?),
            RDMA_NLDEV_ATTR_PORT_INDEX => st.port = attr_u32(kind, value)?,
            RDMA_NLDEV_ATTR_STAT_HWCOUNTERS => for_each_attr(value, |k, entry| {
                if k != RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY {
                    return Ok(());
                }
                let (mut name, mut v) = (None, None);
                for_each_attr(entry, |k, x| {
                    match k {
                        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME => {
                            name = Some(attr_string(k, x)?)
                        }
                        RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE => v = Some(attr_u64(k, x)?),
                        _ => {} // PAD before the u64.
                    }
                    Ok(())
                })?;
                match (name, v) {
                    (Some(n), Some(v)) => st.counters.push((n, v)),
                    _ => return Err(protocol("STAT_HWCOUNTER_ENTRY without a name or a value")),
                }
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    st.index = index.ok_or_else(|| protocol("STAT_GET reply without RDMA_NLDEV_ATTR_DEV_INDEX"))?;
    Ok(st)
}

fn decode_sys(payload: &[u8]) -> Result<SysInfo, RdmaError> {
    let mut info = SysInfo { netns_mode: None };
    for_each_attr(payload, |kind, value| {
        if kind == RDMA_NLDEV_SYS_ATTR_NETNS_MODE {
            let raw = attr_u8(kind, value)?;
            info.netns_mode = Some(
                NetnsMode::from_attr(raw)
                    .ok_or_else(|| protocol(format!("unknown netns mode value {raw}")))?,
            );
        }
        Ok(())
    })?;
    Ok(info)
}

/// Extracts `NLMSGERR_ATTR_MSG` from the part of an `NLMSG_ERROR` payload
/// after the error code: the echoed request header, the echoed request body
/// unless `NLM_F_CAPPED`, then TLVs if `NLM_F_ACK_TLVS`
/// (`netlink_ack()`, net/netlink/af_netlink.c). Best effort: a malformed
/// tail yields `None`, never an error.
fn extack_message(flags: u16, after_code: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || after_code.len() < NLMSG_HDRLEN {
        return None;
    }
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        let len = u32::from_ne_bytes(after_code[..4].try_into().ok()?) as usize;
        align4(len.max(NLMSG_HDRLEN))
    };
    let tlvs = after_code.get(echoed..)?;
    let mut message = None;
    for nla in NlasIterator::new(tlvs) {
        let nla = nla.ok()?;
        if nla.kind() == NLMSGERR_ATTR_MSG {
            message = attr_string(NLMSGERR_ATTR_MSG, nla.value()).ok();
        }
    }
    message.filter(|m| !m.is_empty())
}

/// Decodes every netlink message in one received datagram, keeping the
/// header fields. Messages follow each other at `NLMSG_ALIGN(nlmsg_len)`.
///
/// Errors ([`RdmaError::Protocol`], never a panic): fewer than 16 bytes left
/// where a header should start, `nlmsg_len` < 16 or beyond the buffer
/// (truncated message), a malformed attribute, a `CMD_GET` reply without
/// index or name, `NLMSG_OVERRUN`.
pub fn decode_messages(datagram: &[u8]) -> Result<Vec<Message>, RdmaError> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = &datagram[offset..];
        let buf = NetlinkBuffer::new_checked(rest)
            .map_err(|e| protocol(format!("at byte {offset}: {e}")))?;
        let len = buf.length() as usize;
        let msg = NetlinkMessage::<RawBody>::deserialize(rest)
            .map_err(|e| protocol(format!("at byte {offset}: {e}")))?;
        let header = msg.header;
        let reply = match msg.payload {
            NetlinkPayload::Error(err) => match err.code {
                None => Reply::Ack,
                Some(code) => Reply::Error {
                    errno: code.get().saturating_abs(),
                    message: extack_message(header.flags, &err.header),
                },
            },
            NetlinkPayload::Done(done) if done.code < 0 => Reply::Error {
                errno: done.code.saturating_abs(),
                message: None,
            },
            NetlinkPayload::Done(_) => Reply::Done,
            NetlinkPayload::Noop => Reply::Noop,
            NetlinkPayload::Overrun(_) => {
                return Err(protocol("NLMSG_OVERRUN: the kernel dropped reply data"))
            }
            NetlinkPayload::InnerMessage(RawBody(body)) => {
                let t = header.message_type;
                if nl_get_client(t) != RDMA_NL_NLDEV {
                    Reply::Other { message_type: t }
                } else {
                    match nl_get_op(t) {
                        RDMA_NLDEV_CMD_GET => Reply::Device(decode_device(&body)?),
                        RDMA_NLDEV_CMD_SYS_GET => Reply::System(decode_sys(&body)?),
                        RDMA_NLDEV_CMD_STAT_GET => Reply::Stats(decode_stats(&body)?),
                        _ => Reply::Other { message_type: t },
                    }
                }
            }
            _ => Reply::Other {
                message_type: header.message_type,
            },
        };
        out.push(Message {
            message_type: header.message_type,
            flags: header.flags,
            seq: header.sequence_number,
            port: header.port_number,
            reply,
        });
        offset += align4(len);
    }
    Ok(out)
}

/// Decodes every message of one datagram into [`Reply`] values (multi-part
/// parts, `NLMSG_DONE`, `NLMSG_ERROR` acks with errno 0 -> [`Reply::Ack`],
/// errors -> [`Reply::Error`]); `NLMSG_NOOP` is dropped. No sequence/port
/// filtering: that is [`Exchange`]'s job.
pub fn decode_reply(datagram: &[u8]) -> Result<Vec<Reply>, RdmaError> {
    Ok(decode_messages(datagram)?
        .into_iter()
        .map(|m| m.reply)
        .filter(|r| *r != Reply::Noop)
        .collect())
}

/// The state of one request awaiting its answer, fed one received datagram
/// at a time. This is the only request/response loop of the layer:
/// - messages whose `nlmsg_seq` differs from the request's, or whose
///   `nlmsg_pid` differs from our port id (when known, non-zero), are stale
///   answers to an earlier request or not for us: skipped and counted;
/// - data messages (`CMD_GET`, `SYS_GET`) accumulate;
/// - `NLMSG_ERROR` with error 0 (ack) or `NLMSG_DONE` completes the exchange
///   (a dump ends with `NLMSG_DONE`, a doit request sent with `NLM_F_ACK`
///   ends with the ack after its data message);
/// - `NLMSG_ERROR` with an errno, or `NLMSG_DONE` with a negative code,
///   fails it with [`RdmaError::from_kernel`].
#[derive(Debug)]
pub struct Exchange {
    op: &'static str,
    seq: u32,
    port: u32,
    replies: Vec<Reply>,
    skipped: usize,
    finished: bool,
}

impl Exchange {
    /// A new exchange for request `seq` sent from port id `port` (0 = do not
    /// check ports); `op` names the request in errors.
    pub fn new(op: &'static str, seq: u32, port: u32) -> Self {
        Exchange {
            op,
            seq,
            port,
            replies: Vec::new(),
            skipped: 0,
            finished: false,
        }
    }

    /// Number of messages skipped so far because of a sequence or port
    /// mismatch.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Feeds one received datagram. Returns `Ok(Some(replies))` (data
    /// messages in arrival order, without the closing ack/`DONE`) once the
    /// exchange is complete, `Ok(None)` if more datagrams are needed, or the
    /// kernel's refusal / a protocol error. Messages after the closing one in
    /// the same datagram are ignored. Feeding a finished exchange is a
    /// protocol error.
    pub fn feed(&mut self, datagram: &[u8]) -> Result<Option<Vec<Reply>>, RdmaError> {
        if self.finished {
            return Err(protocol("exchange already finished"));
        }
        for msg in decode_messages(datagram)? {
            if msg.seq != self.seq || (self.port != 0 && msg.port != self.port) {
                self.skipped += 1;
                log::debug!(
                    "RDMA netlink {}: skipping message type {} seq {} port {} (want seq {} port {})",
                    self.op,
                    msg.message_type,
                    msg.seq,
                    msg.port,
                    self.seq,
                    self.port
                );
                continue;
            }
            match msg.reply {
                Reply::Ack | Reply::Done => {
                    self.finished = true;
                    return Ok(Some(std::mem::take(&mut self.replies)));
                }
                Reply::Error { errno, message } => {
                    self.finished = true;
                    return Err(RdmaError::from_kernel(self.op, errno, message.as_deref()));
                }
                Reply::Noop | Reply::Other { .. } => {}
                data => self.replies.push(data),
            }
        }
        Ok(None)
    }
}

// The expected bytes are hand-assembled from the uapi layout for a
// little-endian host (nlmsghdr and attribute fields are host byte order).
#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::super::errno;
    use super::*;

    /// Hand-packs one netlink message (little endian), independent of the
    /// code under test.
    fn nlmsg(msg_type: u16, flags: u16, seq: u32, pid: u32, body: &[u8]) -> Vec<u8> {
        let len = 16 + body.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u32).to_le_bytes());
        v.extend_from_slice(&msg_type.to_le_bytes());
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&seq.to_le_bytes());
        v.extend_from_slice(&pid.to_le_bytes());
        v.extend_from_slice(body);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// Hand-packs one attribute with padding.
    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + value.len()) as u16).to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn device_body(index: u32, name: &str) -> Vec<u8> {
        let mut name_z = name.as_bytes().to_vec();
        name_z.push(0);
        let mut b = nla(1, &index.to_le_bytes());
        b.extend(nla(2, &name_z));
        b.extend(nla(3, &1u32.to_le_bytes()));
        b.extend(nla(67, b"ib\0"));
        b
    }

    const PORT: u32 = 0x3039; // 12345

    #[test]
    fn message_type_values() {
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_GET), (5 << 10) + 1);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_GET), 0x1401);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_SET), 0x1402);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_SYS_GET), 0x1406);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_SYS_SET), 0x1407);
        assert_eq!(nl_get_client(0x1407), RDMA_NL_NLDEV);
        assert_eq!(nl_get_op(0x1407), RDMA_NLDEV_CMD_SYS_SET);
    }

    #[test]
    fn attribute_values_match_uapi() {
        assert_eq!(RDMA_NLDEV_ATTR_DEV_INDEX, 1);
        assert_eq!(RDMA_NLDEV_ATTR_DEV_NAME, 2);
        assert_eq!(RDMA_NLDEV_ATTR_PORT_INDEX, 3);
        assert_eq!(RDMA_NLDEV_ATTR_NODE_GUID, 6);
        assert_eq!(RDMA_NLDEV_ATTR_NDEV_INDEX, 50);
        assert_eq!(RDMA_NLDEV_ATTR_NDEV_NAME, 51);
        assert_eq!(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 66);
        assert_eq!(RDMA_NLDEV_ATTR_DEV_PROTOCOL, 67);
        assert_eq!(RDMA_NLDEV_NET_NS_FD, 68);
        assert_eq!(RDMA_NLDEV_CMD_STAT_GET, 17);
        assert_eq!(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS, 80);
        assert_eq!(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, 81);
        assert_eq!(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, 82);
        assert_eq!(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, 83);
        assert_eq!(NETLINK_RDMA, netlink_sys::protocols::NETLINK_RDMA);
    }

    #[test]
    fn encode_sys_get_bytes() {
        #[rustfmt::skip]
        let want = [
            0x10, 0x00, 0x00, 0x00, // nlmsg_len 16
            0x06, 0x14,             // type 0x1406 = (5 << 10) + 6
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x04, 0x03, 0x02, 0x01, // seq
            0x00, 0x00, 0x00, 0x00, // pid
        ];
        assert_eq!(encode_sys_get(0x0102_0304), want);
    }

    #[test]
    fn encode_sys_set_bytes() {
        #[rustfmt::skip]
        let want = [
            0x18, 0x00, 0x00, 0x00, // nlmsg_len 24
            0x07, 0x14,             // type 0x1407
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x07, 0x00, 0x00, 0x00, // seq 7
            0x00, 0x00, 0x00, 0x00, // pid
            0x05, 0x00, 0x42, 0x00, // nla_len 5, SYS_ATTR_NETNS_MODE (66)
            0x00, 0x00, 0x00, 0x00, // u8 0 (exclusive) + 3 bytes padding
        ];
        assert_eq!(encode_sys_set(7, NetnsMode::Exclusive), want);
        let mut shared = want;
        shared[20] = 0x01;
        assert_eq!(encode_sys_set(7, NetnsMode::Shared), shared);
    }

    #[test]
    fn encode_get_by_index_bytes() {
        #[rustfmt::skip]
        let want = [
            0x18, 0x00, 0x00, 0x00, // nlmsg_len 24
            0x01, 0x14,             // type 0x1401
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x01, 0x00, 0x00, 0x00, // seq 1
            0x00, 0x00, 0x00, 0x00, // pid
            0x08, 0x00, 0x01, 0x00, // nla_len 8, DEV_INDEX (1)
            0x03, 0x00, 0x00, 0x00, // u32 3
        ];
        assert_eq!(encode_get(1, Some(3)), want);
    }

    #[test]
    fn encode_stat_get_bytes() {
        #[rustfmt::skip]
        let want = [
            0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
            0x11, 0x14,             // type 0x1411 = (5 << 10) + 17
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x04, 0x00, 0x00, 0x00, // seq 4
            0x00, 0x00, 0x00, 0x00, // pid
            0x08, 0x00, 0x01, 0x00, // nla_len 8, DEV_INDEX (1)
            0x07, 0x00, 0x00, 0x00, // u32 7
            0x08, 0x00, 0x03, 0x00, // nla_len 8, PORT_INDEX (3)
            0x01, 0x00, 0x00, 0x00, // u32 1
        ];
        assert_eq!(encode_stat_get(4, 7, 1), want);
    }

    /// A `STAT_GET` reply as nldev.c builds it: handle, port, then the
    /// `STAT_HWCOUNTERS` nest (with `NLA_F_NESTED`, 0x8000) of entries whose u64
    /// value is preceded by a `PAD` attribute (`nla_put_u64_64bit`), then the ack.
    #[test]
    fn stat_get_reply_then_ack() {
        let entry = |name: &str, v: u64, pad: bool| {
            let mut z = name.as_bytes().to_vec();
            z.push(0);
            let mut e = nla(82, &z);
            if pad {
                e.extend(nla(0, &[]));
            }
            e.extend(nla(83, &v.to_le_bytes()));
            nla(0x8000 | 81, &e)
        };
        let mut table = entry("out_of_buffer", 42, true);
        table.extend(entry("rx_write_requests", 1 << 40, false));
        let mut body = nla(1, &7u32.to_le_bytes());
        body.extend(nla(2, b"ibvf_0\0"));
        body.extend(nla(3, &1u32.to_le_bytes()));
        body.extend(nla(0x8000 | 80, &table));
        let mut dgram = nlmsg(0x1411, 0, 4, PORT, &body);
        let mut ack = 0i32.to_le_bytes().to_vec();
        ack.extend(nlmsg(0x1411, 5, 4, PORT, &[]));
        dgram.extend(nlmsg(2, 0x100, 4, PORT, &ack));
        let mut ex = Exchange::new(OP_STAT_GET, 4, PORT);
        let got = ex.feed(&dgram).unwrap().unwrap();
        assert_eq!(
            got,
            vec![Reply::Stats(PortStats {
                index: 7,
                port: 1,
                counters: vec![
                    ("out_of_buffer".into(), 42),
                    ("rx_write_requests".into(), 1 << 40)
                ],
            })]
        );
        // An entry without its value is malformed.
        let mut z = b"x\0".to_vec();
        z.resize(4, 0);
        let bad = nla(0x8000 | 80, &nla(81, &nla(82, &z)));
        let mut body = nla(1, &7u32.to_le_bytes());
        body.extend(bad);
        assert!(matches!(
            decode_messages(&nlmsg(0x1411, 0, 4, PORT, &body)),
            Err(RdmaError::Protocol(_))
        ));
    }

    #[test]
    fn encode_get_dump_bytes() {
        #[rustfmt::skip]
        let want = [
            0x10, 0x00, 0x00, 0x00, // nlmsg_len 16
            0x01, 0x14,             // type 0x1401
            0x01, 0x03,             // NLM_F_REQUEST | NLM_F_DUMP (0x301)
            0x02, 0x00, 0x00, 0x00, // seq 2
            0x00, 0x00, 0x00, 0x00, // pid
        ];
        assert_eq!(encode_get(2, None), want);
    }

    #[test]
    fn encode_set_netns_bytes() {
        #[rustfmt::skip]
        let want = [
            0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
            0x02, 0x14,             // type 0x1402
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x09, 0x00, 0x00, 0x00, // seq 9
            0x00, 0x00, 0x00, 0x00, // pid
            0x08, 0x00, 0x01, 0x00, // nla_len 8, DEV_INDEX (1)
            0x03, 0x00, 0x00, 0x00, // u32 3
            0x08, 0x00, 0x44, 0x00, // nla_len 8, NET_NS_FD (68)
            0x0c, 0x00, 0x00, 0x00, // u32 fd 12
        ];
        assert_eq!(encode_set_netns(9, 3, 12), want);
    }

    /// iproute2 `rdma dev set ibvf_0 name ibvf_1` sends DEV_INDEX then DEV_NAME with
    /// its NUL, padded to 4 bytes.
    #[test]
    fn encode_set_name_bytes() {
        #[rustfmt::skip]
        let want = [
            0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
            0x02, 0x14,             // type 0x1402
            0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
            0x09, 0x00, 0x00, 0x00, // seq 9
            0x00, 0x00, 0x00, 0x00, // pid
            0x08, 0x00, 0x01, 0x00, // nla_len 8, DEV_INDEX (1)
            0x03, 0x00, 0x00, 0x00, // u32 3
            0x0b, 0x00, 0x02, 0x00, // nla_len 11, DEV_NAME (2)
            b'i', b'b', b'v', b'f', b'_', b'1', 0x00, 0x00, // "ibvf_1\0" + pad
        ];
        assert_eq!(encode_set_name(9, 3, "ibvf_1"), want);
    }

    /// A `CMD_GET` doit reply laid out like `fill_dev_info` (index, name,
    /// port count, PAD, cap flags, node GUID, node type, protocol) plus an
    /// attribute type this code does not know.
    #[rustfmt::skip]
    const GET_REPLY: [u8; 96] = [
        0x60, 0x00, 0x00, 0x00, // nlmsg_len 96
        0x01, 0x14, 0x00, 0x00, // type 0x1401, flags 0
        0x2a, 0x00, 0x00, 0x00, // seq 42
        0x39, 0x30, 0x00, 0x00, // pid 12345
        0x08, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, // DEV_INDEX 3
        0x0b, 0x00, 0x02, 0x00, b'm', b'l', b'x', b'5', b'_', b'3', 0x00, 0x00, // DEV_NAME "mlx5_3\0"
        0x08, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, // PORT_INDEX 1 (port count)
        0x04, 0x00, 0x00, 0x00, // RDMA_NLDEV_ATTR_PAD
        0x0c, 0x00, 0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // CAP_FLAGS (ignored)
        0x0c, 0x00, 0x06, 0x00, 0xc3, 0xb2, 0xa1, 0x00, 0x03, 0xc9, 0x02, 0x00, // NODE_GUID
        0x05, 0x00, 0x0e, 0x00, 0x01, 0x00, 0x00, 0x00, // DEV_NODE_TYPE u8 1 (ignored)
        0x07, 0x00, 0x43, 0x00, b'i', b'b', 0x00, 0x00, // DEV_PROTOCOL "ib\0"
        0x08, 0x00, 0xc8, 0x00, 0xde, 0xad, 0xbe, 0xef, // unknown type 200 (ignored)
    ];

    #[test]
    fn decode_single_get_reply_ignores_unknown_attributes() {
        let msgs = decode_messages(&GET_REPLY).unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].seq, 42);
        assert_eq!(msgs[0].port, PORT);
        assert_eq!(msgs[0].message_type, 0x1401);
        let want = RdmaDevice {
            index: 3,
            name: "mlx5_3".into(),
            node_guid: Some(0x0002_c903_00a1_b2c3),
            port_count: Some(1),
            protocol: Some("ib".into()),
        };
        assert_eq!(msgs[0].reply, Reply::Device(want.clone()));
        assert_eq!(decode_reply(&GET_REPLY).unwrap(), vec![Reply::Device(want)]);
    }

    #[test]
    fn exchange_get_doit_reply_then_ack() {
        let mut datagram = GET_REPLY.to_vec();
        // NLMSG_ERROR ack (error 0), NLM_F_CAPPED: code + echoed header only.
        datagram.extend(nlmsg(
            2,
            NLM_F_CAPPED,
            42,
            PORT,
            &[&0i32.to_le_bytes()[..], &encode_get(42, Some(3))[..16]].concat(),
        ));
        let mut ex = Exchange::new(OP_GET, 42, PORT);
        let replies = ex.feed(&datagram).unwrap().expect("complete");
        assert_eq!(replies.len(), 1);
        assert!(matches!(&replies[0], Reply::Device(d) if d.index == 3 && d.name == "mlx5_3"));
    }

    #[test]
    fn dump_of_three_devices_over_two_datagrams() {
        let multi = 0x2; // NLM_F_MULTI
        let mut first = nlmsg(0x1401, multi, 5, PORT, &device_body(0, "mlx5_0"));
        // A stale answer to an earlier request (seq 4) must be skipped.
        first.extend(nlmsg(0x1401, 0, 4, PORT, &device_body(9, "stale")));
        first.extend(nlmsg(0x1401, multi, 5, PORT, &device_body(1, "mlx5_1")));
        let mut second = nlmsg(0x1401, multi, 5, PORT, &device_body(2, "mlx5_2"));
        second.extend(nlmsg(3, multi, 5, PORT, &0i32.to_le_bytes())); // NLMSG_DONE

        let mut ex = Exchange::new(OP_LIST, 5, PORT);
        assert_eq!(ex.feed(&first).unwrap(), None, "no DONE yet");
        let replies = ex.feed(&second).unwrap().expect("DONE completes the dump");
        let names: Vec<String> = replies
            .into_iter()
            .map(|r| match r {
                Reply::Device(d) => format!("{}:{}", d.index, d.name),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(names, ["0:mlx5_0", "1:mlx5_1", "2:mlx5_2"]);
        assert_eq!(ex.skipped(), 1);
        assert!(
            ex.feed(&second).is_err(),
            "a finished exchange takes no more input"
        );

        // decode_reply sees the raw sequence of the second datagram.
        let raw = decode_reply(&second).unwrap();
        assert_eq!(raw.len(), 2);
        assert_eq!(raw[1], Reply::Done);
    }

    #[test]
    fn exchange_skips_other_ports() {
        let mut d = nlmsg(0x1401, 0, 8, PORT + 1, &device_body(0, "mlx5_0"));
        d.extend(nlmsg(2, NLM_F_CAPPED, 8, PORT + 1, &[0u8; 20]));
        let mut ex = Exchange::new(OP_GET, 8, PORT);
        assert_eq!(ex.feed(&d).unwrap(), None);
        assert_eq!(ex.skipped(), 2);
    }

    #[test]
    fn decode_sys_get_reply_modes() {
        for (raw, mode) in [(0u8, NetnsMode::Exclusive), (1u8, NetnsMode::Shared)] {
            #[rustfmt::skip]
            let datagram = [
                0x28, 0x00, 0x00, 0x00, // nlmsg_len 40
                0x06, 0x14, 0x00, 0x00, // type 0x1406, flags 0
                0x03, 0x00, 0x00, 0x00, // seq 3
                0x39, 0x30, 0x00, 0x00, // pid 12345
                0x05, 0x00, 0x42, 0x00, raw, 0x00, 0x00, 0x00, // NETNS_MODE
                0x05, 0x00, 0x60, 0x00, 0x00, 0x00, 0x00, 0x00, // PRIVILEGED_QKEY_MODE (96), ignored
                0x05, 0x00, 0x5d, 0x00, 0x01, 0x00, 0x00, 0x00, // COPY_ON_FORK (93), ignored
            ];
            assert_eq!(
                decode_reply(&datagram).unwrap(),
                vec![Reply::System(SysInfo {
                    netns_mode: Some(mode)
                })]
            );
        }
    }

    #[test]
    fn decode_ack() {
        #[rustfmt::skip]
        let datagram = [
            0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
            0x02, 0x00, 0x00, 0x01, // NLMSG_ERROR, flags NLM_F_CAPPED (0x100)
            0x07, 0x00, 0x00, 0x00, // seq 7
            0x39, 0x30, 0x00, 0x00, // pid 12345
            0x00, 0x00, 0x00, 0x00, // error 0 = ack
            0x18, 0x00, 0x00, 0x00, 0x07, 0x14, 0x05, 0x00, // echoed request header
            0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(decode_reply(&datagram).unwrap(), vec![Reply::Ack]);
        let mut ex = Exchange::new(OP_SYS_SET, 7, PORT);
        assert_eq!(ex.feed(&datagram).unwrap(), Some(vec![]));
    }

    /// `NLMSG_ERROR` -EOPNOTSUPP for a netns move, capped, with an
    /// extended-ack message TLV (`NLM_F_ACK_TLVS`).
    #[rustfmt::skip]
    const MOVE_EOPNOTSUPP: [u8; 60] = [
        0x3c, 0x00, 0x00, 0x00, // nlmsg_len 60
        0x02, 0x00, 0x00, 0x03, // NLMSG_ERROR, flags NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x09, 0x00, 0x00, 0x00, // seq 9
        0x39, 0x30, 0x00, 0x00, // pid 12345
        0xa1, 0xff, 0xff, 0xff, // error -95 (EOPNOTSUPP)
        0x20, 0x00, 0x00, 0x00, 0x02, 0x14, 0x05, 0x00, // echoed move request header
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x18, 0x00, 0x01, 0x00, // nla_len 24, NLMSGERR_ATTR_MSG
        b't', b'e', b's', b't', b' ', b'e', b'x', b't', b'a', b'c', b'k', b' ',
        b'm', b's', b'g', b' ', b'1', b'2', b'3', 0x00,
    ];

    #[test]
    fn decode_eopnotsupp_error_with_extack() {
        assert_eq!(
            decode_reply(&MOVE_EOPNOTSUPP).unwrap(),
            vec![Reply::Error {
                errno: errno::EOPNOTSUPP,
                message: Some("test extack msg 123".into()),
            }]
        );
        let mut ex = Exchange::new(OP_MOVE, 9, PORT);
        match ex.feed(&MOVE_EOPNOTSUPP) {
            Err(RdmaError::Kernel { op, errno, msg }) => {
                assert_eq!(op, OP_MOVE);
                assert_eq!(errno, errno::EOPNOTSUPP);
                assert!(msg.contains("test extack msg 123"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn uncapped_error_skips_echoed_body_before_tlvs() {
        // Not capped: the whole 32-byte move request is echoed, then TLVs.
        let mut body = (-(errno::EPERM)).to_le_bytes().to_vec();
        body.extend(encode_set_netns(11, 3, 12));
        body.extend(nla(NLMSGERR_ATTR_MSG, b"no perm\0"));
        let datagram = nlmsg(2, NLM_F_ACK_TLVS, 11, PORT, &body);
        assert_eq!(
            decode_reply(&datagram).unwrap(),
            vec![Reply::Error {
                errno: errno::EPERM,
                message: Some("no perm".into()),
            }]
        );
        let err = Exchange::new(OP_MOVE, 11, PORT)
            .feed(&datagram)
            .unwrap_err();
        assert!(err.to_string().contains("CAP_NET_ADMIN"), "{err}");
    }

    #[test]
    fn done_with_negative_code_is_an_error() {
        let datagram = nlmsg(3, 0x2, 5, PORT, &(-(errno::EINVAL)).to_le_bytes());
        let err = Exchange::new(OP_LIST, 5, PORT).feed(&datagram).unwrap_err();
        assert_eq!(err.errno(), Some(errno::EINVAL));
    }

    #[test]
    fn truncated_and_malformed_input_is_a_protocol_error() {
        // nlmsg_len says 96, only 50 bytes arrived.
        assert!(matches!(
            decode_reply(&GET_REPLY[..50]),
            Err(RdmaError::Protocol(_))
        ));
        // Shorter than a header.
        assert!(matches!(
            decode_reply(&GET_REPLY[..10]),
            Err(RdmaError::Protocol(_))
        ));
        // A whole message followed by 8 stray bytes.
        let mut trailing = GET_REPLY.to_vec();
        trailing.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(matches!(
            decode_reply(&trailing),
            Err(RdmaError::Protocol(_))
        ));
        // nlmsg_len smaller than the header.
        let mut tiny = GET_REPLY.to_vec();
        tiny[0] = 8;
        assert!(matches!(decode_reply(&tiny), Err(RdmaError::Protocol(_))));
        // An attribute whose nla_len runs past the message.
        let mut bad_nla = GET_REPLY.to_vec();
        bad_nla[16] = 0xf0;
        assert!(matches!(
            decode_reply(&bad_nla),
            Err(RdmaError::Protocol(_))
        ));
        // DEV_INDEX with 2 bytes instead of 4.
        let short_index = nlmsg(0x1401, 0, 1, PORT, &nla(1, &[3, 0]));
        assert!(matches!(
            decode_reply(&short_index),
            Err(RdmaError::Protocol(_))
        ));
        // CMD_GET without DEV_NAME.
        let no_name = nlmsg(0x1401, 0, 1, PORT, &nla(1, &3u32.to_le_bytes()));
        assert!(matches!(
            decode_reply(&no_name),
            Err(RdmaError::Protocol(_))
        ));
        // NLMSG_ERROR shorter than its error code.
        let short_err = nlmsg(2, 0, 1, PORT, &[0xff, 0xff]);
        assert!(matches!(
            decode_reply(&short_err),
            Err(RdmaError::Protocol(_))
        ));
        // An unknown netns mode value.
        let bad_mode = nlmsg(0x1406, 0, 1, PORT, &nla(66, &[7]));
        assert!(matches!(
            decode_reply(&bad_mode),
            Err(RdmaError::Protocol(_))
        ));
        // The exchange reports the same protocol error.
        let mut ex = Exchange::new(OP_GET, 42, PORT);
        assert!(matches!(
            ex.feed(&GET_REPLY[..50]),
            Err(RdmaError::Protocol(_))
        ));
    }

    #[test]
    fn every_prefix_of_valid_input_decodes_or_errors_without_panic() {
        let mut datagram = GET_REPLY.to_vec();
        datagram.extend_from_slice(&MOVE_EOPNOTSUPP);
        for cut in 0..datagram.len() {
            let _ = decode_reply(&datagram[..cut]);
        }
    }

    #[test]
    fn noop_and_foreign_types_are_ignored_by_the_exchange() {
        let mut d = nlmsg(1, 0, 6, PORT, &[]); // NLMSG_NOOP
        d.extend(nlmsg(0x1405, 0, 6, PORT, &device_body(0, "x"))); // PORT_GET reply
        d.extend(nlmsg(0x1401, 0, 6, PORT, &device_body(4, "mlx5_4")));
        d.extend(nlmsg(2, NLM_F_CAPPED, 6, PORT, &[0u8; 20]));
        let replies = Exchange::new(OP_GET, 6, PORT).feed(&d).unwrap().unwrap();
        assert_eq!(
            replies,
            vec![Reply::Device(RdmaDevice {
                index: 4,
                name: "mlx5_4".into(),
                node_guid: None,
                port_count: Some(1),
                protocol: Some("ib".into()),
            })]
        );
    }
}
