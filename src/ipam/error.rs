//! Error type of the built-in IPAM.

use std::fmt;

/// Every failure of the built-in IPAM, classified by what the caller should
/// report to the runtime.
///
/// Each variant carries a complete, human-readable message that already names
/// the offending value, network, path or range; `Display` prints that message
/// prefixed by the class (`invalid IPAM config: ...`, `IPAM busy: ...`, ...).
/// The suggested CNI error code of each class is given by
/// [`IpamError::cni_code`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamError {
    /// The `ipam` configuration, the network name, the container ID or the
    /// interface name is invalid (CNI code 7, "invalid network config").
    InvalidConfig(String),
    /// The per-network lock (`<dataDir>/<network>/lock`) could not be taken
    /// before the deadline: another process (ours or host-local) holds it
    /// (CNI code 11, "try again later").
    Busy(String),
    /// A range set has no free address left (host-local's
    /// `no IP addresses available in range set ...`).
    Exhausted(String),
    /// A filesystem operation under the data directory failed (CNI code 5,
    /// "I/O failure").
    Io(String),
}

impl IpamError {
    /// The CNI error code suggested for this error (CNI SPEC.md "Error"
    /// section): 7 invalid network config, 11 try again later, 5 I/O failure.
    /// Exhaustion has no well-known code; it maps to 100, the first
    /// plugin-specific code. Callers may override this mapping.
    pub fn cni_code(&self) -> u32 {
        match self {
            IpamError::InvalidConfig(_) => 7,
            IpamError::Busy(_) => 11,
            IpamError::Exhausted(_) => 100,
            IpamError::Io(_) => 5,
        }
    }

    /// The message without the class prefix.
    pub fn message(&self) -> &str {
        match self {
            IpamError::InvalidConfig(m)
            | IpamError::Busy(m)
            | IpamError::Exhausted(m)
            | IpamError::Io(m) => m,
        }
    }

    /// Build an [`IpamError::Io`] naming the operation and path.
    pub(crate) fn io(what: &str, path: &std::path::Path, err: &std::io::Error) -> IpamError {
        IpamError::Io(format!("{what} {}: {err}", path.display()))
    }
}

impl fmt::Display for IpamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpamError::InvalidConfig(m) => write!(f, "invalid IPAM config: {m}"),
            IpamError::Busy(m) => write!(f, "IPAM busy: {m}"),
            IpamError::Exhausted(m) => write!(f, "IPAM exhausted: {m}"),
            IpamError::Io(m) => write!(f, "IPAM I/O error: {m}"),
        }
    }
}

impl std::error::Error for IpamError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_class_and_message() {
        let e = IpamError::Busy("lock /x/lock".into());
        assert_eq!(e.to_string(), "IPAM busy: lock /x/lock");
        assert_eq!(e.cni_code(), 11);
        assert_eq!(e.message(), "lock /x/lock");
        assert_eq!(IpamError::InvalidConfig("a".into()).cni_code(), 7);
        assert_eq!(IpamError::Io("a".into()).cni_code(), 5);
        assert_eq!(
            IpamError::Exhausted("no".into()).to_string(),
            "IPAM exhausted: no"
        );
    }
}
