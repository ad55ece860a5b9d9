//! The CNI protocol: environment, `CNI_ARGS`, versions, results and errors
//! (containernetworking/cni SPEC.md). This layer knows nothing of VFs.

pub mod args;
pub mod env;
pub mod error;
pub mod exec;
pub mod result;
pub mod version;

pub use args::CniArgs;
pub use env::{validate_container_id, validate_ifname, CniEnv, Command};
pub use error::{code, CniError, CniResult};
pub use exec::Delegate;
pub use result::{CniOutput, Interface, IpConfig, Route};
pub use version::{parse_version, version_reply, Version};
