//! Network namespace handles: open a netns by path, check it is a live namespace,
//! and run a closure inside it just long enough to open sockets there
//! (the pattern of containers/netavark `core_utils.rs`).

use nix::fcntl::{open, OFlag};
use nix::sched::{setns, CloneFlags};
use nix::sys::stat::{fstat, Mode};
use nix::sys::statfs::fstatfs;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// `NSFS_MAGIC` (include/uapi/linux/magic.h): the filesystem type of a namespace file.
pub const NSFS_MAGIC: i64 = 0x6e73_6673;

nix::ioctl_none!(
    /// `NS_GET_NSTYPE` (include/uapi/linux/nsfs.h: `_IO(NSIO, 0x3)`, `NSIO` 0xb7; Linux
    /// 4.11) on an nsfs fd: returns the `CLONE_NEW*` flag of the namespace's type
    /// (`CLONE_NEWNET` for a network namespace); `ENOTTY` on older kernels.
    ///
    /// # Safety
    /// `fd` must be an open file descriptor.
    ns_get_nstype,
    0xb7,
    0x3
);

/// Why a netns path could not be used.
#[derive(Debug)]
pub enum NetnsError {
    /// The path does not exist: the namespace is gone.
    Gone(PathBuf),
    /// The path exists but is not a namespace file: not on nsfs (a stale bind mount left
    /// on tmpfs after the namespace died: sriov-cni#447; or a regular file, a FIFO, a
    /// device, a directory). Treated like [`NetnsError::Gone`] by DEL.
    NotNamespace(PathBuf),
    /// The path is a namespace file, but of another type than network (e.g.
    /// `/proc/<pid>/ns/mnt`); the value is the type `NS_GET_NSTYPE` returned
    /// (a `CLONE_NEW*` flag). Not "gone" ([`NetnsError::is_gone`] is false): the
    /// caller was given a wrong path, so nothing can be said about the pod's netns.
    NotNetwork(PathBuf, i32),
    /// Any other error opening or entering it.
    Io(PathBuf, io::Error),
}

/// The name of a `CLONE_NEW*` namespace type, for messages.
fn nstype_name(t: i32) -> String {
    let known = [
        (CloneFlags::CLONE_NEWNS, "mount"),
        (CloneFlags::CLONE_NEWCGROUP, "cgroup"),
        (CloneFlags::CLONE_NEWUTS, "uts"),
        (CloneFlags::CLONE_NEWIPC, "ipc"),
        (CloneFlags::CLONE_NEWUSER, "user"),
        (CloneFlags::CLONE_NEWPID, "pid"),
        (CloneFlags::CLONE_NEWNET, "network"),
    ];
    known
        .iter()
        .find(|(f, _)| f.bits() == t)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("type {t:#x}"))
}

impl std::fmt::Display for NetnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetnsError::Gone(p) => write!(f, "network namespace {} does not exist", p.display()),
            NetnsError::NotNamespace(p) => write!(
                f,
                "{} is not a network namespace (not a namespace file: a stale mount point?)",
                p.display()
            ),
            NetnsError::NotNetwork(p, t) => write!(
                f,
                "{} is not a network namespace (it is a {} namespace)",
                p.display(),
                nstype_name(*t)
            ),
            NetnsError::Io(p, e) => write!(f, "network namespace {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for NetnsError {}

impl NetnsError {
    /// True when the namespace no longer exists (missing path or stale mount).
    pub fn is_gone(&self) -> bool {
        matches!(self, NetnsError::Gone(_) | NetnsError::NotNamespace(_))
    }
}

/// An open network namespace (an fd on its nsfs file).
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Opens the namespace at `path` (e.g. `/var/run/netns/<name>` or `/proc/<pid>/ns/net`).
    ///
    /// The open uses `O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY`, so whatever the path
    /// is, it returns at once (a FIFO would block a plain open until a writer comes; a
    /// terminal would become the controlling one). Then the file must be on nsfs
    /// (`fstatfs`, magic [`NSFS_MAGIC`]) and be a network namespace (`NS_GET_NSTYPE`
    /// returns `CLONE_NEWNET`; on kernels before 4.11, which lack the ioctl (`ENOTTY`),
    /// only the nsfs check applies and `setns` with `CLONE_NEWNET` refuses another type
    /// later).
    ///
    /// Errors: [`NetnsError::Gone`] when absent; [`NetnsError::NotNamespace`] when the
    /// file is not on nsfs (regular file, FIFO, device, directory, stale mount point);
    /// [`NetnsError::NotNetwork`] for a namespace of another type (`/proc/self/ns/mnt`);
    /// [`NetnsError::Io`] for any other failure (permission, the ioctl failing otherwise).
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs, NetnsError> {
        let path = path.as_ref().to_path_buf();
        let fd = match open(
            &path,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => return Err(NetnsError::Gone(path)),
            // A socket cannot be opened at all; it is no namespace either.
            Err(nix::errno::Errno::ENXIO) => return Err(NetnsError::NotNamespace(path)),
            Err(e) => return Err(NetnsError::Io(path, e.into())),
        };
        let file = File::from(fd);
        let st = fstatfs(&file).map_err(|e| NetnsError::Io(path.clone(), e.into()))?;
        if st.filesystem_type().0 as i64 != NSFS_MAGIC {
            return Err(NetnsError::NotNamespace(path));
        }
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd, which `file`
        // keeps open for the duration of the call.
        match unsafe { ns_get_nstype(file.as_raw_fd()) } {
            Ok(t) if t == CloneFlags::CLONE_NEWNET.bits() => {}
            Ok(t) => return Err(NetnsError::NotNetwork(path, t)),
            Err(nix::errno::Errno::ENOTTY) => {}
            Err(e) => return Err(NetnsError::Io(path, e.into())),
        }
        Ok(NetNs { file, path })
    }

    /// The calling thread's current network namespace (`/proc/thread-self/ns/net`).
    pub fn current() -> Result<NetNs, NetnsError> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace fd, for `IFLA_NET_NS_FD` / `RDMA_NLDEV_NET_NS_FD`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// True when both handles refer to the same namespace (same nsfs inode).
    pub fn same_as(&self, other: &NetNs) -> bool {
        match (fstat(&self.file), fstat(&other.file)) {
            (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
            _ => false,
        }
    }

    /// Runs `f` with the calling thread inside this namespace, then returns to the
    /// namespace the thread was in. If returning fails the process cannot safely go on
    /// (every later host operation would hit the wrong namespace), so it aborts.
    pub fn run_in<T>(&self, f: impl FnOnce() -> T) -> Result<T, NetnsError> {
        let origin = NetNs::current()?;
        setns(&self.file, CloneFlags::CLONE_NEWNET)
            .map_err(|e| NetnsError::Io(self.path.clone(), e.into()))?;
        let out = f();
        if let Err(e) = setns(&origin.file, CloneFlags::CLONE_NEWNET) {
            log::error!("cannot return to the original network namespace: {e}; aborting");
            std::process::abort();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_namespace_opens_and_equals_itself() {
        let a = NetNs::current().unwrap();
        let b = NetNs::open("/proc/self/ns/net").unwrap();
        assert!(a.same_as(&b));
    }

    #[test]
    fn missing_and_non_namespace_paths() {
        let e = NetNs::open("/nonexistent/netns/x").unwrap_err();
        assert!(matches!(e, NetnsError::Gone(_)));
        assert!(e.is_gone());
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let e = NetNs::open(tmp.path()).unwrap_err();
        assert!(matches!(e, NetnsError::NotNamespace(_)), "{e}");
        assert!(e.is_gone());
    }

    #[test]
    fn fifo_and_devices_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let t0 = std::time::Instant::now();
        let e = NetNs::open(&fifo).unwrap_err();
        assert!(matches!(e, NetnsError::NotNamespace(_)), "{e}");
        let e = NetNs::open("/dev/null").unwrap_err();
        assert!(matches!(e, NetnsError::NotNamespace(_)), "{e}");
        let e = NetNs::open(d.path()).unwrap_err();
        assert!(matches!(e, NetnsError::NotNamespace(_)), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_namespace_of_another_type_is_not_a_network_namespace() {
        for (p, kind) in [("/proc/self/ns/mnt", "mount"), ("/proc/self/ns/uts", "uts")] {
            let e = NetNs::open(p).unwrap_err();
            assert!(matches!(e, NetnsError::NotNetwork(..)), "{p}: {e}");
            assert!(!e.is_gone(), "{p}");
            let msg = e.to_string();
            assert!(msg.contains("is not a network namespace"), "{msg}");
            assert!(msg.contains(kind), "{msg}");
        }
    }
}
