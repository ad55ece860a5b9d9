//! Typed errors of the host adapters turned into CNI errors with their code, keeping the
//! source's message (the failed operation and the kernel's errno text) in `msg`, and an
//! error list for best-effort sweeps (the model: containers/netavark
//! `src/error/mod.rs` `NetavarkErrorList`).

use crate::cni::{code, CniError};
use crate::journal::JournalError;
use crate::netlink::NlError;
use crate::netns::NetnsError;
use crate::rdma::RdmaError;
use crate::sysfs::DiscoveryError;

impl From<NlError> for CniError {
    /// Code 102: a netlink operation failed (`<operation>: <errno text>`).
    fn from(e: NlError) -> Self {
        CniError::host(e.to_string())
    }
}

impl From<NetnsError> for CniError {
    /// Code 3 when the namespace is gone or its path is not a namespace file (SPEC.md
    /// "Container unknown or does not exist"), code 4 when the path is a namespace of
    /// another type (a `CNI_NETNS` that cannot be right), else 102.
    fn from(e: NetnsError) -> Self {
        match e {
            NetnsError::NotNetwork(..) => CniError::env(e.to_string()),
            e if e.is_gone() => CniError::new(code::UNKNOWN_CONTAINER, e.to_string()),
            e => CniError::host(e.to_string()),
        }
    }
}

impl From<JournalError> for CniError {
    /// Code 5 (I/O failure) for every journal error; the message names the file and
    /// says what a person must do with an unreadable one.
    fn from(e: JournalError) -> Self {
        CniError::new(code::IO_FAILURE, e.to_string())
    }
}

impl From<RdmaError> for CniError {
    /// Code 102: an RDMA netlink operation failed.
    fn from(e: RdmaError) -> Self {
        CniError::host(e.to_string())
    }
}

impl From<DiscoveryError> for CniError {
    /// Code 102: sysfs did not show what the kernel should have (a timeout waiting for
    /// a netdev, an unreadable entry). Discovery before any change maps to code 7 at its
    /// call site instead.
    fn from(e: DiscoveryError) -> Self {
        CniError::host(e.to_string())
    }
}

/// The errors of a best-effort sweep (undo, DEL, GC), kept with their codes.
#[derive(Debug, Default)]
pub struct ErrorList(pub Vec<CniError>);

impl ErrorList {
    /// Records the error of `r`, if any; returns whether `r` was `Ok`.
    pub fn check<T>(&mut self, r: Result<T, CniError>) -> bool {
        match r {
            Ok(_) => true,
            Err(e) => {
                self.0.push(e);
                false
            }
        }
    }

    /// True when nothing failed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Folds the list into one result: none -> Ok; one -> itself; several -> code 11
    /// when every one is a "try again later" (a lock timeout, a VF not yet returned by
    /// the kernel), else the code all share, else 102; `msg` heads the combined error
    /// and every message and detail goes into `details`.
    pub fn into_result(self, msg: String) -> Result<(), CniError> {
        let errs = self.0;
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.into_iter().next().expect("one error")),
            _ => {
                let first = errs[0].code;
                let code = if errs.iter().all(|e| e.code == first) {
                    first
                } else {
                    code::HOST_OPERATION
                };
                let details: Vec<String> = errs
                    .iter()
                    .map(|e| {
                        if e.details.is_empty() {
                            e.msg.clone()
                        } else {
                            format!("{} ({})", e.msg, e.details)
                        }
                    })
                    .collect();
                Err(CniError::new(code, msg).with_details(details.join("; ")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_one_error_and_folds_several_by_code() {
        assert_eq!(ErrorList::default().into_result("m".into()), Ok(()));
        let busy = CniError::try_later("lock busy");
        assert_eq!(
            ErrorList(vec![busy.clone()]).into_result("m".into()),
            Err(busy.clone())
        );
        let e = ErrorList(vec![busy.clone(), busy.clone()])
            .into_result("sweep".into())
            .unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (code::TRY_AGAIN_LATER, "sweep"));
        assert_eq!(e.details, "lock busy; lock busy");
        let host = CniError::host("netlink").with_details("EBUSY");
        let e = ErrorList(vec![busy, host])
            .into_result("sweep".into())
            .unwrap_err();
        assert_eq!(e.code, code::HOST_OPERATION);
        assert_eq!(e.details, "lock busy; netlink (EBUSY)");
    }

    #[test]
    fn netns_gone_is_code_3() {
        let e: CniError = NetnsError::Gone("/x".into()).into();
        assert_eq!(e.code, code::UNKNOWN_CONTAINER);
    }
}
