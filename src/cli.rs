//! The executable's entry: read environment and stdin, run the command, print the result
//! or the error JSON on stdout, exit non-zero on error (SPEC.md "Result", "Error").
//! A panic is caught and reported as a CNI error (code 100), never as raw text on stdout.

use crate::cni::{code, CniEnv, CniError, Command, Version};
use crate::config::{sniff_version, NetConf};
use std::io::{Read, Write};

fn emit(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, v);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn run(stdin: &[u8]) -> Result<Option<serde_json::Value>, CniError> {
    let env = CniEnv::from_process()?;
    if env.command == Command::Version {
        return Ok(Some(crate::cni::version_reply(
            sniff_version(stdin).as_deref(),
        )));
    }
    let conf = NetConf::parse(stdin)?;
    crate::logging::init(
        conf.log_level,
        conf.log_file.as_deref(),
        format!(
            "{} {}/{}",
            env.command.as_str(),
            env.container_id,
            env.ifname
        ),
    );
    log::debug!("config: {}", conf.raw);
    if matches!(env.command, Command::Add | Command::Del | Command::Gc) {
        hold_termination_signals();
    }
    let r = crate::plugin::run(&env, &conf);
    match &r {
        Ok(_) => log::info!("{} succeeded", env.command.as_str()),
        Err(e) => log::error!("{} failed: {e}", env.command.as_str()),
    }
    r
}

/// Signals a runtime sends to stop a plugin (a timeout, a shutdown): held, not
/// delivered, while a command changes the host.
pub const HELD_SIGNALS: [nix::sys::signal::Signal; 3] = [
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGHUP,
];

/// Blocks [`HELD_SIGNALS`] for the rest of the process, so ADD, DEL and GC run their
/// transaction to its end (an interrupted DEL would leave the VF half restored). The
/// signals stay pending and die with the process when it exits after printing its
/// result. SIGKILL cannot be blocked: the journal makes that case recoverable.
/// Threads started later inherit the mask; delegated plugins do not (std resets the
/// signal mask of a spawned child).
pub fn hold_termination_signals() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut set = SigSet::empty();
    for s in HELD_SIGNALS {
        set.add(s);
    }
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        log::warn!("cannot block termination signals: {e}");
    }
}

/// Runs the plugin; returns the process exit code (0 success, 1 error).
pub fn main() -> i32 {
    let mut stdin = Vec::new();
    let read = std::io::stdin().read_to_end(&mut stdin);
    let version = sniff_version(&stdin)
        .filter(|v| crate::cni::parse_version(v).is_ok())
        .unwrap_or_else(|| Version::LATEST.as_str().to_string());
    if let Err(e) = read {
        emit(&CniError::new(code::IO_FAILURE, format!("reading stdin: {e}")).to_json(&version));
        return 1;
    }
    // Panics print their message on stderr (the default hook) and become code 100 here.
    let result = std::panic::catch_unwind(|| run(&stdin));
    match result {
        Ok(Ok(Some(v))) => {
            emit(&v);
            0
        }
        Ok(Ok(None)) => 0,
        Ok(Err(e)) => {
            emit(&e.to_json(&version));
            1
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            emit(&CniError::internal(format!("internal error (panic): {msg}")).to_json(&version));
            1
        }
    }
}
