//! Process-level concerns of every entry point (the CNI plugin, the IPAM plugin, the
//! commands run by hand): when the process started (the verb's time bound counts from
//! it), holding the termination signals while a command changes the host, opening the
//! log of one CNI call, and for the commands run by hand (`doctor`, `exporter`, `top`,
//! `--help`, `--version`) writing to stdout and stderr without a panic ([`print_out`],
//! [`print_err`]) and their flag tables ([`Flag`]). Below [`crate::plugin`],
//! [`crate::ipam_plugin`], [`crate::cli`] and the node tools (`ib-sriovctl`: doctor, exporter and
//! top), which use it; it uses only [`crate::logging`] and [`crate::cni`].

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

/// Writes `text` to stdout and flushes it, for what a command run by hand prints (the
/// usage, the version line, `doctor`'s report, `exporter --once`'s scrape); never for a
/// CNI verb's result, which `cli` writes ignoring errors so that the verb's
/// transaction ends as it would have (SIGPIPE is ignored in the whole process, see
/// src/main.rs). A write that fails ends the process, as coreutils end:
/// - `EPIPE` (the reader went away, as in `ib-sriov doctor --json | head -c 100`):
///   silently, by `SIGPIPE` with its default action, so the shell sees status 141
///   (128 + 13) as for `cat` or `seq` in the same place, and never one of the
///   command's own statuses (doctor's 1 means "an error finding");
/// - any other error (`ENOSPC`, `EIO`): one line on stderr, exit status 1.
///
/// A closed stdout (`>&-`, `EBADF`) is not an error: std discards what is written to it.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            die_of_sigpipe();
        }
        print_err(&format!("ib-sriov: writing to stdout: {e}\n"));
        std::process::exit(1);
    }
}

/// Writes `text` to stderr, ignoring errors (a closed or broken stderr loses the
/// message; `eprintln!` would panic on `EPIPE` instead).
pub fn print_err(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Ends the process by `SIGPIPE` with its default action (terminate, no core): the
/// disposition restored, the signal unblocked and raised. If it still returns (it
/// cannot), exit status 141, the shell's status for it.
fn die_of_sigpipe() -> ! {
    use nix::sys::signal::Signal::SIGPIPE;
    use nix::sys::signal::{pthread_sigmask, raise, signal, SigHandler, SigSet, SigmaskHow};
    // SAFETY: SIG_DFL installs no handler; nothing else runs in between.
    let _ = unsafe { signal(SIGPIPE, SigHandler::SigDfl) };
    let mut set = SigSet::empty();
    set.add(SIGPIPE);
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = raise(SIGPIPE);
    std::process::exit(141)
}

/// One flag of a command run by hand (`ib-sriov doctor`, `exporter`, `top`): its name
/// (`--json`) and, for a flag that takes a value, the value's placeholder as the usage
/// text shows it (`FILE`). Each command's table of them (`doctor::FLAGS`, ...) is what
/// its parser accepts ([`flag`]), and a test holds the usage texts to it
/// (`cli::tests::usage_texts_list_exactly_the_flags_the_parsers_take`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// The flag, with its two dashes.
    pub name: &'static str,
    /// The placeholder of its value, `None` for a flag that takes none.
    pub value: Option<&'static str>,
    /// Whether it may be given more than once (the usage shows `...` after it).
    pub repeatable: bool,
}

/// `--host-root DIR`: where the host's `/` is mounted (doctor, exporter and top read
/// the node through it); the same flag in each of their tables.
pub const HOST_ROOT: Flag = Flag {
    name: "--host-root",
    value: Some("DIR"),
    repeatable: false,
};

/// `--state-dir DIR`, repeatable: a stateDir to read besides the default ones (doctor,
/// exporter and top); the same flag in each of their tables.
pub const STATE_DIR: Flag = Flag {
    name: "--state-dir",
    value: Some("DIR"),
    repeatable: true,
};

/// The flag `arg` names in `table` (`"-h"` and `"--help"` are not in any table: each
/// parser handles them first). Errors: `unknown argument "<arg>"`.
pub fn flag(table: &'static [Flag], arg: &str) -> Result<&'static Flag, String> {
    table
        .iter()
        .find(|f| f.name == arg)
        .ok_or_else(|| format!("unknown argument {arg:?}"))
}

/// The synopsis of a command run by hand, as its usage texts show it:
/// `ib-sriov <command> [--json] [--conf FILE] [--state-dir DIR]...`.
pub fn synopsis(command: &str, table: &[Flag]) -> String {
    let mut s = format!("ib-sriov {command}");
    for f in table {
        s += &match f.value {
            Some(v) => format!(" [{} {v}]", f.name),
            None => format!(" [{}]", f.name),
        };
        if f.repeatable {
            s += "...";
        }
    }
    s
}
