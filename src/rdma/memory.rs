//! In-memory test double for [`RdmaOps`].

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::codec;
use super::{refine_move_error, NetnsMode, RdmaDevice, RdmaError, RdmaOps};

/// Identity of a network namespace: `(st_dev, st_ino)` of a file that refers
/// to it, the same identity the kernel exposes through nsfs
/// (`stat -L /proc/<pid>/ns/net`). For the test double any file works: a
/// test can create temporary files and use them as "netns" handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetnsKey {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

impl NetnsKey {
    /// The key of the file `fd` refers to (`fstat` on a duplicate of `fd`).
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let file = File::from(fd.try_clone_to_owned()?);
        let meta = file.metadata()?;
        Ok(NetnsKey {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The key of the file at `path`, following symlinks (so
    /// `/proc/self/ns/net` gives the caller's netns).
    pub fn of_path(path: impl AsRef<Path>) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        Ok(NetnsKey {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// The operations of [`RdmaOps`], to count calls and target injected
/// failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaOp {
    /// [`RdmaOps::netns_mode`].
    NetnsMode,
    /// [`RdmaOps::set_netns_mode`].
    SetNetnsMode,
    /// [`RdmaOps::list_devices`].
    ListDevices,
    /// [`RdmaOps::device_by_name`].
    DeviceByName,
    /// [`RdmaOps::device_by_index`].
    DeviceByIndex,
    /// [`RdmaOps::move_to_netns`].
    MoveToNetns,
    /// [`RdmaOps::rename`].
    Rename,
}

impl RdmaOp {
    fn name(self) -> &'static str {
        match self {
            RdmaOp::NetnsMode => codec::OP_SYS_GET,
            RdmaOp::SetNetnsMode => codec::OP_SYS_SET,
            RdmaOp::ListDevices | RdmaOp::DeviceByName => codec::OP_LIST,
            RdmaOp::DeviceByIndex => codec::OP_GET,
            RdmaOp::MoveToNetns => codec::OP_MOVE,
            RdmaOp::Rename => codec::OP_RENAME,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Injection {
    op: RdmaOp,
    /// `Some(n)`: only the n-th call (1-based, world-wide); `None`: every call.
    nth: Option<usize>,
    errno: i32,
}

#[derive(Debug)]
struct World {
    initial: NetnsKey,
    mode: NetnsMode,
    /// Every known netns (the initial one included) and its devices.
    netns: BTreeMap<NetnsKey, Vec<RdmaDevice>>,
    calls: HashMap<RdmaOp, usize>,
    injections: Vec<Injection>,
    moves: Vec<(u32, NetnsKey, NetnsKey)>,
}

impl World {
    /// Devices visible from `ns` (`rdma_dev_access_netns`): exclusive mode
    /// -> the devices of `ns`; shared mode -> also those of the initial
    /// netns. Sorted by index (the kernel dumps in index order).
    fn visible(&self, ns: NetnsKey) -> Vec<RdmaDevice> {
        let mut out: Vec<RdmaDevice> = self.netns.get(&ns).cloned().unwrap_or_default();
        if self.mode == NetnsMode::Shared && ns != self.initial {
            out.extend(self.netns.get(&self.initial).cloned().unwrap_or_default());
        }
        out.sort_by_key(|d| d.index);
        out
    }

    fn location(&self, index: u32) -> Option<NetnsKey> {
        self.netns
            .iter()
            .find(|(_, devs)| devs.iter().any(|d| d.index == index))
            .map(|(ns, _)| *ns)
    }

    /// Counts a call of `op` and returns the errno of a matching injection.
    fn enter(&mut self, op: RdmaOp) -> Option<i32> {
        let count = self.calls.entry(op).or_insert(0);
        *count += 1;
        let count = *count;
        self.injections
            .iter()
            .find(|i| i.op == op && i.nth.is_none_or(|n| n == count))
            .map(|i| i.errno)
    }
}

/// **Test double**: an in-memory model of the kernel's RDMA netns state,
/// implementing [`RdmaOps`] with the semantics read in the kernel source
/// (see the parent module's docs), for testing the plugin's
/// orchestration without RDMA hardware or `ib_core`.
///
/// Model: a *world* (shared by all clones and by [`MemoryRdma::in_netns`]
/// handles) holds the netns mode, a set of network namespaces keyed by
/// [`NetnsKey`] (the first is the initial netns) and the devices in each.
/// A handle, like a socket, lives in one netns and sees what the kernel
/// would show there:
/// - exclusive mode: only the devices of its netns; shared mode: also the
///   devices of the initial netns;
/// - `move_to_netns(index, fd)`: the target netns is the [`NetnsKey`] of
///   `fd` (registered on first use); the device must be visible
///   ([`RdmaError::NotFound`] otherwise), the mode must be exclusive
///   ([`RdmaError::SharedMode`] otherwise); it is then removed from the
///   handle's netns and appended to the target's, keeping index and name;
///   moving into its own netns succeeds and changes nothing;
/// - `set_netns_mode`: same mode -> `Ok`; a different mode while any netns
///   other than the initial one is known -> `EBUSY` (`rdma_compatdev_set`);
/// - [`MemoryRdma::remove_netns`] returns the devices of a destroyed netns
///   to the initial one (`rdma_dev_exit_net`).
///
/// Failure injection: [`MemoryRdma::fail_nth`] / [`MemoryRdma::fail_always`]
/// make an operation fail with a kernel errno before touching any state;
/// the error is built exactly as [`RdmaSocket`](super::RdmaSocket) builds it
/// ([`RdmaError::from_kernel`], and for a move [`refine_move_error`], which
/// may query the mode or the device on this same handle: those queries are
/// counted as calls too). Calls are counted per operation, world-wide,
/// starting at 1.
#[derive(Debug, Clone)]
pub struct MemoryRdma {
    world: Arc<Mutex<World>>,
    netns: NetnsKey,
}

impl MemoryRdma {
    /// A new world whose initial netns is `initial`, in `mode`, with no
    /// devices; the returned handle lives in the initial netns.
    pub fn new(initial: NetnsKey, mode: NetnsMode) -> Self {
        let mut netns = BTreeMap::new();
        netns.insert(initial, Vec::new());
        MemoryRdma {
            world: Arc::new(Mutex::new(World {
                initial,
                mode,
                netns,
                calls: HashMap::new(),
                injections: Vec::new(),
                moves: Vec::new(),
            })),
            netns: initial,
        }
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        // A panic in another test thread must not hide this world's state.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle on the same world living in `netns` (as if a socket were
    /// opened there); registers `netns` if unknown.
    pub fn in_netns(&self, netns: NetnsKey) -> MemoryRdma {
        self.add_netns(netns);
        MemoryRdma {
            world: Arc::clone(&self.world),
            netns,
        }
    }

    /// The netns this handle lives in.
    pub fn netns(&self) -> NetnsKey {
        self.netns
    }

    /// The initial netns of the world.
    pub fn initial_netns(&self) -> NetnsKey {
        self.lock().initial
    }

    /// Registers a network namespace (like a pod sandbox being created).
    pub fn add_netns(&self, netns: NetnsKey) {
        self.lock().netns.entry(netns).or_default();
    }

    /// Destroys a non-initial network namespace: its devices go back to the
    /// initial netns (kernel `rdma_dev_exit_net`). No-op for the initial or
    /// an unknown netns.
    pub fn remove_netns(&self, netns: NetnsKey) {
        let mut w = self.lock();
        if netns == w.initial {
            return;
        }
        if let Some(devs) = w.netns.remove(&netns) {
            let initial = w.initial;
            for d in devs {
                w.moves.push((d.index, netns, initial));
                w.netns.entry(initial).or_default().push(d);
            }
        }
    }

    /// Adds `device` to `netns` (registering it). Panics if a device with
    /// the same index already exists anywhere (the kernel's index is global).
    pub fn add_device(&self, netns: NetnsKey, device: RdmaDevice) {
        let mut w = self.lock();
        assert!(
            w.location(device.index).is_none(),
            "RDMA device index {} already exists",
            device.index
        );
        w.netns.entry(netns).or_default().push(device);
    }

    /// Removes device `index` wherever it is (driver unbind); returns it.
    pub fn remove_device(&self, index: u32) -> Option<RdmaDevice> {
        let mut w = self.lock();
        let ns = w.location(index)?;
        let devs = w.netns.get_mut(&ns)?;
        let pos = devs.iter().position(|d| d.index == index)?;
        Some(devs.remove(pos))
    }

    /// The devices that are in `netns` (its own, regardless of the mode).
    pub fn devices_in(&self, netns: NetnsKey) -> Vec<RdmaDevice> {
        self.lock().netns.get(&netns).cloned().unwrap_or_default()
    }

    /// The netns device `index` is in.
    pub fn netns_of(&self, index: u32) -> Option<NetnsKey> {
        self.lock().location(index)
    }

    /// Completed moves `(index, from, to)` in order (including returns to the
    /// initial netns by [`MemoryRdma::remove_netns`]).
    pub fn moves(&self) -> Vec<(u32, NetnsKey, NetnsKey)> {
        self.lock().moves.clone()
    }

    /// The current mode (not counted as a call, never fails).
    pub fn mode(&self) -> NetnsMode {
        self.lock().mode
    }

    /// Sets the mode directly (test setup, like a boot-time `ib_core
    /// netns_mode=` parameter): bypasses the `EBUSY` rule and injections.
    pub fn force_mode(&self, mode: NetnsMode) {
        self.lock().mode = mode;
    }

    /// Makes the `nth` call (1-based, counted world-wide from the world's
    /// creation) of `op` fail with kernel errno `errno` (positive, e.g.
    /// [`super::errno::EPERM`]).
    pub fn fail_nth(&self, op: RdmaOp, nth: usize, errno: i32) {
        self.lock().injections.push(Injection {
            op,
            nth: Some(nth),
            errno,
        });
    }

    /// Makes every call of `op` fail with kernel errno `errno` until
    /// [`MemoryRdma::clear_failures`].
    pub fn fail_always(&self, op: RdmaOp, errno: i32) {
        self.lock().injections.push(Injection {
            op,
            nth: None,
            errno,
        });
    }

    /// Removes all injected failures.
    pub fn clear_failures(&self) {
        self.lock().injections.clear();
    }

    /// How many times `op` was called so far (world-wide).
    pub fn calls(&self, op: RdmaOp) -> usize {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// Counts the call; returns the injected kernel error, if any.
    fn enter(&self, op: RdmaOp) -> Result<(), RdmaError> {
        match self.lock().enter(op) {
            Some(errno) => Err(RdmaError::from_kernel(op.name(), errno, None)),
            None => Ok(()),
        }
    }
}

impl RdmaOps for MemoryRdma {
    fn netns_mode(&mut self) -> Result<NetnsMode, RdmaError> {
        self.enter(RdmaOp::NetnsMode)?;
        Ok(self.lock().mode)
    }

    fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), RdmaError> {
        self.enter(RdmaOp::SetNetnsMode)?;
        let mut w = self.lock();
        if w.mode == mode {
            return Ok(());
        }
        if w.netns.len() > 1 {
            return Err(RdmaError::from_kernel(
                codec::OP_SYS_SET,
                super::errno::EBUSY,
                None,
            ));
        }
        w.mode = mode;
        Ok(())
    }

    fn list_devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        self.enter(RdmaOp::ListDevices)?;
        Ok(self.lock().visible(self.netns))
    }

    fn device_by_name(&mut self, name: &str) -> Result<Option<RdmaDevice>, RdmaError> {
        self.enter(RdmaOp::DeviceByName)?;
        Ok(self
            .lock()
            .visible(self.netns)
            .into_iter()
            .find(|d| d.name == name))
    }

    fn device_by_index(&mut self, index: u32) -> Result<Option<RdmaDevice>, RdmaError> {
        self.enter(RdmaOp::DeviceByIndex)?;
        Ok(self
            .lock()
            .visible(self.netns)
            .into_iter()
            .find(|d| d.index == index))
    }

    fn move_to_netns(&mut self, index: u32, netns_fd: BorrowedFd<'_>) -> Result<(), RdmaError> {
        if let Err(e) = self.enter(RdmaOp::MoveToNetns) {
            return Err(refine_move_error(self, index, e));
        }
        let target = NetnsKey::of(netns_fd)?;
        let mut w = self.lock();
        if !w.visible(self.netns).iter().any(|d| d.index == index) {
            return Err(RdmaError::NotFound(format!(
                "no RDMA device with index {index} is visible in this network namespace"
            )));
        }
        if w.mode == NetnsMode::Shared {
            return Err(RdmaError::SharedMode);
        }
        let source = self.netns;
        w.netns.entry(target).or_default();
        if target == source {
            return Ok(());
        }
        // Names are unique per netns (kernel 7.3, rdma-next "RDMA/core: Pass the net
        // namespace to the device name lookups"): `rdma_dev_change_netns()` refuses a
        // move into a netns that has a device of the same name.
        let name = w.netns[&source]
            .iter()
            .find(|d| d.index == index)
            .map(|d| d.name.clone())
            .expect("visible in exclusive mode means present in own netns");
        if w.netns[&target].iter().any(|d| d.name == name) {
            return Err(RdmaError::from_kernel(
                codec::OP_MOVE,
                super::errno::EEXIST,
                Some("Device name already exists in the target net namespace"),
            ));
        }
        let devs = w.netns.get_mut(&source).expect("source netns is known");
        let pos = devs
            .iter()
            .position(|d| d.index == index)
            .expect("visible in exclusive mode means present in own netns");
        let dev = devs.remove(pos);
        w.netns
            .get_mut(&target)
            .expect("registered above")
            .push(dev);
        w.moves.push((index, source, target));
        Ok(())
    }

    /// Renames within this netns; `EEXIST` when another device visible here has `name`.
    fn rename(&mut self, index: u32, name: &str) -> Result<(), RdmaError> {
        self.enter(RdmaOp::Rename)?;
        let mut w = self.lock();
        let visible = w.visible(self.netns);
        if visible.iter().any(|d| d.name == name && d.index != index) {
            return Err(RdmaError::from_kernel(
                codec::OP_RENAME,
                super::errno::EEXIST,
                None,
            ));
        }
        if !visible.iter().any(|d| d.index == index) {
            return Err(RdmaError::from_kernel(
                codec::OP_RENAME,
                super::errno::EINVAL,
                None,
            ));
        }
        for devs in w.netns.values_mut() {
            for d in devs.iter_mut().filter(|d| d.index == index) {
                d.name = name.to_string();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::errno;
    use super::*;
    use std::os::fd::AsFd;

    /// A temporary file standing in for a netns file, and its key.
    fn fake_netns() -> (File, NetnsKey) {
        let f = tempfile::tempfile().unwrap();
        let key = NetnsKey::of(f.as_fd()).unwrap();
        (f, key)
    }

    fn world(mode: NetnsMode) -> (MemoryRdma, File, NetnsKey) {
        let (host_file, host) = fake_netns();
        let rdma = MemoryRdma::new(host, mode);
        rdma.add_device(host, RdmaDevice::new(0, "mlx5_0"));
        rdma.add_device(host, RdmaDevice::new(3, "mlx5_3"));
        (rdma, host_file, host)
    }

    #[test]
    fn rename_by_index_refuses_a_taken_name() {
        let (rdma, _f, _host) = world(NetnsMode::Exclusive);
        let mut ops = rdma.clone();
        let e = ops.rename(3, "mlx5_0").unwrap_err();
        assert_eq!(e.errno(), Some(errno::EEXIST), "{e}");
        ops.rename(3, "mlx5_1").unwrap();
        assert_eq!(ops.device_by_index(3).unwrap().unwrap().name, "mlx5_1");
        assert!(ops.device_by_name("mlx5_3").unwrap().is_none());
        assert!(ops.rename(9, "mlx5_9").is_err());
    }

    #[test]
    fn netns_key_follows_the_file() {
        let (f, key) = fake_netns();
        let (_g, other) = fake_netns();
        assert_ne!(key, other);
        let dup = f.try_clone().unwrap();
        assert_eq!(NetnsKey::of(dup.as_fd()).unwrap(), key);
        let own = File::open("/proc/self/ns/net").unwrap();
        assert_eq!(
            NetnsKey::of(own.as_fd()).unwrap(),
            NetnsKey::of_path("/proc/self/ns/net").unwrap()
        );
    }

    #[test]
    fn move_removes_from_one_netns_and_adds_to_the_other() {
        let (mut host_rdma, host_file, host) = world(NetnsMode::Exclusive);
        let (pod_file, pod) = fake_netns();
        host_rdma.move_to_netns(3, pod_file.as_fd()).unwrap();

        assert_eq!(
            host_rdma.devices_in(host),
            vec![RdmaDevice::new(0, "mlx5_0")]
        );
        assert_eq!(
            host_rdma.devices_in(pod),
            vec![RdmaDevice::new(3, "mlx5_3")]
        );
        assert_eq!(host_rdma.netns_of(3), Some(pod));
        assert_eq!(host_rdma.device_by_index(3).unwrap(), None);
        assert_eq!(host_rdma.device_by_name("mlx5_3").unwrap(), None);
        assert_eq!(host_rdma.moves(), vec![(3, host, pod)]);

        // Inside the pod, the device is visible; the host is not.
        let mut pod_rdma = host_rdma.in_netns(pod);
        assert_eq!(
            pod_rdma.list_devices().unwrap(),
            vec![RdmaDevice::new(3, "mlx5_3")]
        );
        assert_eq!(
            pod_rdma.device_by_name("mlx5_3").unwrap(),
            Some(RdmaDevice::new(3, "mlx5_3"))
        );

        // A second move from the host no longer finds it.
        assert!(matches!(
            host_rdma.move_to_netns(3, pod_file.as_fd()),
            Err(RdmaError::NotFound(_))
        ));

        // Moving back is done from inside the pod, with the host netns fd.
        pod_rdma.move_to_netns(3, host_file.as_fd()).unwrap();
        assert_eq!(host_rdma.netns_of(3), Some(host));
        assert!(pod_rdma.list_devices().unwrap().is_empty());
        assert_eq!(host_rdma.list_devices().unwrap().len(), 2);
    }

    #[test]
    fn move_into_own_netns_is_a_no_op() {
        let (mut rdma, host_file, host) = world(NetnsMode::Exclusive);
        rdma.move_to_netns(0, host_file.as_fd()).unwrap();
        assert_eq!(rdma.netns_of(0), Some(host));
        assert!(rdma.moves().is_empty());
    }

    #[test]
    fn shared_mode_refuses_moves_and_shows_host_devices_everywhere() {
        let (mut host_rdma, _host_file, host) = world(NetnsMode::Shared);
        let (pod_file, pod) = fake_netns();
        let err = host_rdma.move_to_netns(3, pod_file.as_fd()).unwrap_err();
        assert!(matches!(err, RdmaError::SharedMode), "{err:?}");
        assert!(err.to_string().contains("rdma system set netns exclusive"));
        assert!(err.to_string().contains("netns_mode=0"));
        assert_eq!(host_rdma.netns_of(3), Some(host));
        // Shared: the pod sees the host's devices.
        let mut pod_rdma = host_rdma.in_netns(pod);
        assert_eq!(pod_rdma.list_devices().unwrap().len(), 2);
        // Exclusive: it does not.
        host_rdma.force_mode(NetnsMode::Exclusive);
        assert!(pod_rdma.list_devices().unwrap().is_empty());
    }

    #[test]
    fn injected_failure_on_the_nth_move_changes_nothing() {
        let (mut rdma, _host_file, host) = world(NetnsMode::Exclusive);
        let (pod_file, pod) = fake_netns();
        rdma.fail_nth(RdmaOp::MoveToNetns, 2, errno::EPERM);

        rdma.move_to_netns(0, pod_file.as_fd()).unwrap();
        let err = rdma.move_to_netns(3, pod_file.as_fd()).unwrap_err();
        match &err {
            RdmaError::Kernel { errno: e, msg, .. } => {
                assert_eq!(*e, errno::EPERM);
                assert!(msg.contains("CAP_NET_ADMIN"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(rdma.netns_of(3), Some(host), "failed move left state alone");
        rdma.move_to_netns(3, pod_file.as_fd()).unwrap(); // the 3rd call succeeds
        assert_eq!(rdma.netns_of(3), Some(pod));
        assert_eq!(rdma.calls(RdmaOp::MoveToNetns), 3);
    }

    #[test]
    fn injected_eopnotsupp_is_refined_like_the_socket_does() {
        // Exclusive mode: EOPNOTSUPP means the driver cannot change netns.
        let (mut rdma, _h, _) = world(NetnsMode::Exclusive);
        let (pod_file, _pod) = fake_netns();
        rdma.fail_always(RdmaOp::MoveToNetns, errno::EOPNOTSUPP);
        match rdma.move_to_netns(3, pod_file.as_fd()).unwrap_err() {
            RdmaError::Kernel { errno: e, msg, .. } => {
                assert_eq!(e, errno::EOPNOTSUPP);
                assert!(msg.contains("driver"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(rdma.calls(RdmaOp::NetnsMode), 1, "the mode was asked once");

        // If the mode query itself fails, the original error is kept.
        rdma.fail_always(RdmaOp::NetnsMode, errno::EPERM);
        match rdma.move_to_netns(3, pod_file.as_fd()).unwrap_err() {
            RdmaError::Kernel { errno: e, msg, .. } => {
                assert_eq!(e, errno::EOPNOTSUPP);
                assert!(msg.contains("shared"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        rdma.clear_failures();
        rdma.move_to_netns(3, pod_file.as_fd()).unwrap();
    }

    #[test]
    fn injected_einval_distinguishes_missing_device_from_bad_fd() {
        let (mut rdma, _h, _) = world(NetnsMode::Exclusive);
        let (pod_file, _pod) = fake_netns();
        rdma.fail_always(RdmaOp::MoveToNetns, errno::EINVAL);
        match rdma.move_to_netns(3, pod_file.as_fd()).unwrap_err() {
            RdmaError::Kernel { errno: e, msg, .. } => {
                assert_eq!(e, errno::EINVAL);
                assert!(msg.contains("netns fd"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            rdma.move_to_netns(42, pod_file.as_fd()),
            Err(RdmaError::NotFound(_))
        ));
    }

    #[test]
    fn injected_failures_on_queries() {
        let (mut rdma, _h, _) = world(NetnsMode::Exclusive);
        rdma.fail_nth(RdmaOp::ListDevices, 1, errno::EINVAL);
        rdma.fail_nth(RdmaOp::NetnsMode, 1, errno::EINVAL);
        assert_eq!(
            rdma.list_devices().unwrap_err().errno(),
            Some(errno::EINVAL)
        );
        assert_eq!(rdma.list_devices().unwrap().len(), 2);
        assert!(rdma.netns_mode().is_err());
        assert_eq!(rdma.netns_mode().unwrap(), NetnsMode::Exclusive);
        rdma.fail_always(RdmaOp::DeviceByIndex, errno::ENODEV);
        assert!(matches!(
            rdma.device_by_index(0),
            Err(RdmaError::NotFound(_))
        ));
    }

    #[test]
    fn set_mode_follows_rdma_compatdev_set() {
        let (mut rdma, _h, _) = world(NetnsMode::Shared);
        rdma.set_netns_mode(NetnsMode::Shared).unwrap(); // same mode: ok
        rdma.set_netns_mode(NetnsMode::Exclusive).unwrap(); // only init netns: ok
        assert_eq!(rdma.netns_mode().unwrap(), NetnsMode::Exclusive);

        let (_pod_file, pod) = fake_netns();
        rdma.add_netns(pod);
        match rdma.set_netns_mode(NetnsMode::Shared).unwrap_err() {
            RdmaError::Kernel { errno: e, msg, .. } => {
                assert_eq!(e, errno::EBUSY);
                assert!(msg.contains("netns_mode=0"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        rdma.set_netns_mode(NetnsMode::Exclusive).unwrap(); // unchanged: ok
        rdma.remove_netns(pod);
        rdma.set_netns_mode(NetnsMode::Shared).unwrap();
    }

    #[test]
    fn destroyed_netns_returns_devices_to_the_initial_netns() {
        let (mut rdma, _h, host) = world(NetnsMode::Exclusive);
        let (pod_file, pod) = fake_netns();
        rdma.move_to_netns(3, pod_file.as_fd()).unwrap();
        rdma.remove_netns(pod);
        assert_eq!(rdma.netns_of(3), Some(host));
        assert_eq!(rdma.moves(), vec![(3, host, pod), (3, pod, host)]);
        rdma.remove_netns(host); // the initial netns cannot be removed
        assert_eq!(rdma.list_devices().unwrap().len(), 2);
    }

    #[test]
    fn usable_as_a_trait_object() {
        let (rdma, _h, _) = world(NetnsMode::Exclusive);
        let mut ops: Box<dyn RdmaOps> = Box::new(rdma.clone());
        assert_eq!(ops.list_devices().unwrap().len(), 2);
        assert_eq!(rdma.calls(RdmaOp::ListDevices), 1, "clones share the world");
        assert!(rdma.remove_device(0).is_some());
        assert_eq!(
            ops.list_devices().unwrap(),
            vec![RdmaDevice::new(3, "mlx5_3")]
        );
    }
}
