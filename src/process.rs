//! Process-level concerns of every entry point (the CNI plugin, the IPAM plugin, the
//! doctor): when the process started (the verb's time bound counts from it), holding
//! the termination signals while a command changes the host, and opening the log of one
//! CNI call. Below [`crate::plugin`], [`crate::ipam_plugin`] and [`crate::cli`], which
//! use it; it uses only [`crate::logging`] and [`crate::cni`].

/// When [`crate::cli::main`] began: the start of the process, for the verb's time bound
/// ([`crate::plugin::VERB_BUDGET`]).
static PROCESS_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Environment variable that moves the process start this many milliseconds into the
/// past in test builds (feature `failpoints`), so a test can show a time bound
/// ([`crate::plugin::DEL_BUDGET`]) at work without waiting it out.
#[cfg(feature = "failpoints")]
pub const TEST_STARTED_AGO_ENV: &str = "IB_SRIOV_TEST_STARTED_AGO_MS";

fn start_instant() -> std::time::Instant {
    let now = std::time::Instant::now();
    #[cfg(feature = "failpoints")]
    if let Some(ms) = std::env::var(TEST_STARTED_AGO_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        return now
            .checked_sub(std::time::Duration::from_millis(ms))
            .unwrap_or(now);
    }
    now
}

/// The instant [`crate::cli::main`] began (the process start, to within the loading of
/// the executable), or `None` when the library runs in-process without it.
pub fn process_start() -> Option<std::time::Instant> {
    PROCESS_START.get().copied()
}

/// Records the process start ([`process_start`]); called first by [`crate::cli::main`].
/// Later calls keep the first instant.
pub fn mark_start() {
    PROCESS_START.get_or_init(start_instant);
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

/// Opens the log of one CNI call ([`crate::logging::init`]): records prefixed
/// `<program><COMMAND> <containerID>/<ifname>` (`program` empty for ib-sriov, else the
/// program's name and a space), journal fields `CNI_COMMAND`, `CNI_CONTAINERID`,
/// `CNI_IFNAME` and then `extra`.
pub fn init_call_log(
    level: log::LevelFilter,
    file: Option<&std::path::Path>,
    program: &str,
    env: &crate::cni::CniEnv,
    extra: &[(&str, &str)],
) {
    let mut fields = vec![
        ("CNI_COMMAND", env.command.as_str()),
        ("CNI_CONTAINERID", env.container_id.as_str()),
        ("CNI_IFNAME", env.ifname.as_str()),
    ];
    fields.extend_from_slice(extra);
    crate::logging::init(
        level,
        file,
        format!(
            "{program}{} {}/{}",
            env.command.as_str(),
            env.container_id,
            env.ifname
        ),
        &fields,
    );
}
