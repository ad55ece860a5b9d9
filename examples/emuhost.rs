//! `emuhost`: the emulated SR-IOV InfiniBand host of the integration tests, for shell
//! scripts (demo, bench). Build with `cargo build --release --example emuhost` and run
//! `target/release/examples/emuhost` as root.
//!
//! ```text
//! emuhost create --prefix P [--vfs N] [--pf1-vfs N] [--vfio I,..] [--root DIR] [--no-ofed] [--zero-guids] [--mtu M]
//!     Creates netns P-host with the veths and the sysfs tree under DIR (created, must be
//!     empty; default a new temp dir), keeps them, and prints the JSON description (also
//!     stored as DIR/.emuhost.json): root, host_netns, host_netns_path, pf, vfs[] with
//!     index/addr/netdev/peer/driver/rdma/pkeys/ofed_dir/node_guid/port_guid.
//! emuhost describe --root DIR
//!     Prints the description again.
//! emuhost sync --root DIR
//!     Makes the sysfs net/ entries show which netdevs are in the host netns (after the
//!     plugin moved VFs into pods or back).
//! emuhost probe --root DIR [--delay-ms MS]
//!     Serves the mlx5_core unbind/bind files as a driver whose probe takes MS
//!     milliseconds (default 300), until killed (EmuHost::fifo_probe; for the storm
//!     benchmark, on a host nothing else uses).
//! emuhost destroy --prefix P --root DIR
//!     Deletes netns P-host and any P-pod<k>, and DIR (only when DIR/.emuhost.json names
//!     prefix P).
//! ```
//! Use the plugin with `ip netns exec P-host env IB_SRIOV_SYSFS_ROOT=DIR CNI_...=... ib-sriov`.

#[path = "../tests/common/emuhost.rs"]
mod emuhost;

use emuhost::{EmuHost, EmuOptions};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  emuhost create --prefix P [--vfs N] [--pf1-vfs N] [--vfio I,..] [--root DIR] [--no-ofed] [--zero-guids] [--mtu M]
  emuhost describe --root DIR
  emuhost sync --root DIR
  emuhost probe --root DIR [--delay-ms MS]
  emuhost destroy --prefix P --root DIR";

#[derive(Default)]
struct Args {
    prefix: Option<String>,
    root: Option<PathBuf>,
    vfs: Option<u32>,
    pf1_vfs: Option<u32>,
    vfio: Vec<u32>,
    no_ofed: bool,
    zero_guids: bool,
    mtu: Option<u32>,
    delay_ms: Option<u32>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let num = |v: String| {
            v.parse::<u32>()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--prefix" => a.prefix = Some(value()?),
            "--root" => a.root = Some(PathBuf::from(value()?)),
            "--vfs" => a.vfs = Some(num(value()?)?),
            "--pf1-vfs" => a.pf1_vfs = Some(num(value()?)?),
            "--mtu" => a.mtu = Some(num(value()?)?),
            "--delay-ms" => a.delay_ms = Some(num(value()?)?),
            "--vfio" => {
                for i in value()?.split(',').filter(|s| !s.is_empty()) {
                    a.vfio.push(num(i.to_string())?);
                }
            }
            "--no-ofed" => a.no_ofed = true,
            "--zero-guids" => a.zero_guids = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn run(cmd: &str, a: Args) -> Result<(), String> {
    let need_root = |a: &Args| a.root.clone().ok_or("--root DIR is required".to_string());
    match cmd {
        "create" => {
            let prefix = a.prefix.clone().ok_or("--prefix P is required")?;
            let defaults = EmuOptions::default();
            let mut host = EmuHost::try_build(EmuOptions {
                vfs: a.vfs.unwrap_or(defaults.vfs),
                pf1_vfs: a.pf1_vfs.unwrap_or(defaults.pf1_vfs),
                vfio: a.vfio,
                ofed: !a.no_ofed,
                zero_guids: a.zero_guids,
                mtu: a.mtu.unwrap_or(defaults.mtu),
                prefix: Some(prefix),
                root: a.root,
                ..defaults
            })
            .map_err(|e| e.to_string())?;
            host.keep();
            println!(
                "{}",
                serde_json::to_string_pretty(&host.describe()).unwrap()
            );
            Ok(())
        }
        "describe" => {
            let host = EmuHost::attach(&need_root(&a)?).map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&host.describe()).unwrap()
            );
            Ok(())
        }
        "probe" => {
            let host = EmuHost::attach(&need_root(&a)?).map_err(|e| e.to_string())?;
            let delay = std::time::Duration::from_millis(u64::from(a.delay_ms.unwrap_or(300)));
            host.fifo_probe(delay, None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        "sync" => {
            let host = EmuHost::attach(&need_root(&a)?).map_err(|e| e.to_string())?;
            host.sync_netdevs().map_err(|e| e.to_string())
        }
        "destroy" => {
            let prefix = a.prefix.clone().ok_or("--prefix P is required")?;
            let root = need_root(&a)?;
            // Pods first: their VF veths go with the host's peers anyway, but the
            // namespaces themselves would stay mounted.
            if let Ok(rd) = std::fs::read_dir(emuhost::NETNS_DIR) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let is_pod = name
                        .strip_prefix(&format!("{prefix}-pod"))
                        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
                    if is_pod {
                        emuhost::delete_netns(&name).map_err(|e| e.to_string())?;
                    }
                }
            }
            emuhost::delete_netns(&format!("{prefix}-host")).map_err(|e| e.to_string())?;
            match EmuHost::attach(&root) {
                Ok(mut host) if host.prefix() == prefix => {
                    host.unkeep();
                    drop(host);
                    Ok(())
                }
                Ok(host) => Err(format!(
                    "{} belongs to prefix {:?}, not {prefix:?}; left in place",
                    root.display(),
                    host.prefix()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !root.exists() => Ok(()),
                Err(e) => Err(format!(
                    "{} is not an emulated host root ({}/{}: {e}); left in place",
                    root.display(),
                    root.display(),
                    emuhost::MARKER
                )),
            }
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd == "-h" || cmd == "--help" {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(rest) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("emuhost {cmd}: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(cmd, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("emuhost {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}
