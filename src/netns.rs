//! Network namespace handles: open a netns by path, check it is a live namespace,
//! and run a closure inside it just long enough to open sockets there
//! (the pattern of containers/netavark `core_utils.rs`).

use nix::sched::{setns, CloneFlags};
use nix::sys::stat::fstat;
use nix::sys::statfs::fstatfs;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// `NSFS_MAGIC` (include/uapi/linux/magic.h): the filesystem type of a namespace file.
pub const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Why a netns path could not be used.
#[derive(Debug)]
pub enum NetnsError {
    /// The path does not exist: the namespace is gone.
    Gone(PathBuf),
    /// The path exists but is not a namespace file (a stale bind mount left on tmpfs
    /// after the namespace died: sriov-cni#447); treated like [`NetnsError::Gone`] by DEL.
    NotNamespace(PathBuf),
    /// Any other error opening or entering it.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for NetnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetnsError::Gone(p) => write!(f, "network namespace {} does not exist", p.display()),
            NetnsError::NotNamespace(p) => write!(
                f,
                "{} is not a network namespace (a stale mount point?)",
                p.display()
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
    /// Errors: [`NetnsError::Gone`] when absent, [`NetnsError::NotNamespace`] when the
    /// file is not on nsfs (checked with `fstatfs`, magic [`NSFS_MAGIC`]).
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs, NetnsError> {
        let path = path.as_ref().to_path_buf();
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NetnsError::Gone(path)),
            Err(e) => return Err(NetnsError::Io(path, e)),
        };
        let st = fstatfs(&file).map_err(|e| NetnsError::Io(path.clone(), e.into()))?;
        if st.filesystem_type().0 as i64 != NSFS_MAGIC {
            return Err(NetnsError::NotNamespace(path));
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
}
