//! The executable's entry: read environment and stdin, run the command, print the result
//! or the error JSON on stdout, exit non-zero on error (SPEC.md "Result", "Error").
//! A panic is caught and reported as a CNI error (code 100), never as raw text on stdout
//! (the panic message goes to the log, see [`crate::logging::emergency`]).
//!
//! Checked here, before anything else happens:
//! - the configuration's paths against the node policy ([`crate::policy`]), after parsing
//!   and before the log is opened: a `logFile` outside it is not opened (the log goes to
//!   the journal or stderr, with one warning); another key outside it makes ADD, CHECK
//!   and STATUS answer code 7 naming the key, the path and the node file, and DEL and GC
//!   succeed touching nothing; then the node file's `defaults` fill the keys the
//!   configuration leaves out ([`crate::policy::NodeDefaults`]);
//! - stdin is read up to [`MAX_STDIN`] bytes; a larger input is refused with code 6
//!   before any parsing (a network configuration is a few KiB; an unbounded read and
//!   parse of a huge one costs about 30 times its size in memory);
//! - a process started with [`DELEGATED_ENV`] set (this plugin run as the IPAM plugin of
//!   itself, through a copy or wrapper under another name) fails at once with code 7 for
//!   every command but VERSION and DEL, so a delegation loop stops after one fork; DEL
//!   succeeds doing nothing (such a delegate never allocated anything, and a failing
//!   DEL would keep the calling attachment's journal for ever). This guard is for the
//!   ib-sriov plugin only: started under the file name `ib-sriov-ipam`, the executable is
//!   the IPAM plugin ([`crate::ipam_plugin`]), which runs the allocator and nothing else
//!   (no plugin logic, no exec), so it cannot loop and ignores [`DELEGATED_ENV`].

use crate::cni::exec::DELEGATED_ENV;
use crate::cni::{code, CniEnv, CniError, Command, Version};
use crate::config::{sniff_version, NetConf};
use crate::policy::{screen, PathKey, Verdict, HOST_ROOT};
use crate::process::{
    hold_termination_signals, init_call_log, print_err, print_out, process_start,
};
use std::io::{Read, Write};
use std::path::Path;

/// Largest accepted network configuration on stdin: 4 MiB.
pub const MAX_STDIN: u64 = 4 << 20;

/// Prints `v` and a newline on stdout, once stdout is this thread's
/// ([`crate::watchdog::claim_output`]: never returns when the watchdog has answered).
fn emit(v: &serde_json::Value) {
    crate::watchdog::claim_output();
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, v);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Runs the call ([`run_call`]); a call refused before its log was opened (an
/// environment or a configuration the plugin refuses) still leaves a line where the
/// admin looks ([`init_refused_log`]).
fn run(stdin: &[u8]) -> Result<Option<serde_json::Value>, CniError> {
    let r = run_call(stdin);
    if let Err(e) = &r {
        if !crate::logging::installed() {
            init_refused_log(stdin, log::LevelFilter::Error);
            log::error!("{} refused: {e}", command_name());
        }
    }
    r
}

/// `CNI_COMMAND` as the runtime set it (`?` when unset), for a refused call's record.
fn command_name() -> String {
    std::env::var("CNI_COMMAND").unwrap_or_else(|_| "?".into())
}

/// Opens the log of a call whose environment or configuration is refused, so the
/// refusal is logged where the admin looks: the configuration's `logFile` when stdin is
/// JSON naming one that the node policy allows ([`crate::policy::screen`]), at its
/// `logLevel` when that is valid (`min` at least), else the journal (or stderr without
/// journald), as a call without `logFile` logs. The prefix and journal fields are the
/// raw `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_IFNAME` (refused, so perhaps odd: logged as
/// data, [`crate::logging`]).
fn init_refused_log(stdin: &[u8], min: log::LevelFilter) {
    let raw = serde_json::from_slice::<serde_json::Value>(stdin).ok();
    let screened = raw
        .as_ref()
        .map(|v| screen(v, Path::new(HOST_ROOT), &[PathKey::LogFile]))
        .unwrap_or_default();
    let level = raw
        .as_ref()
        .and_then(|v| v.get("logLevel"))
        .and_then(serde_json::Value::as_str)
        .and_then(|s| crate::config::parse_level(s).ok())
        .unwrap_or(log::LevelFilter::Info)
        .max(min);
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let (cmd, cid, ifname) = (
        var("CNI_COMMAND"),
        var("CNI_CONTAINERID"),
        var("CNI_IFNAME"),
    );
    crate::logging::init(
        level,
        screened.log_file.as_deref(),
        format!("{cmd} {cid}/{ifname}"),
        &[
            ("CNI_COMMAND", &cmd),
            ("CNI_CONTAINERID", &cid),
            ("CNI_IFNAME", &ifname),
        ],
    );
    for w in &screened.warnings {
        log::warn!("{w}");
    }
}

fn run_call(stdin: &[u8]) -> Result<Option<serde_json::Value>, CniError> {
    let is_del = std::env::var("CNI_COMMAND").is_ok_and(|c| c == "DEL");
    let env = match CniEnv::from_process() {
        Ok(env) => env,
        // DEL of an attachment whose container ID or interface name ADD would have
        // refused: ADD made nothing, so there is nothing to delete (SPEC.md DEL).
        Err(e) if is_del => {
            init_refused_log(stdin, log::LevelFilter::Warn);
            log::warn!(
                "DEL with an environment ADD refuses ({e}): ADD made nothing, nothing left to undo"
            );
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if env.command == Command::Version {
        return Ok(Some(crate::cni::version_reply(
            sniff_version(stdin).as_deref(),
        )));
    }
    let mut conf = match NetConf::parse_for(stdin, env.command) {
        Ok(c) => c,
        // DEL with a configuration ADD refuses: the journal (if any) holds ADD's.
        Err(e) if env.command == Command::Del => {
            init_refused_log(stdin, log::LevelFilter::Warn);
            hold_termination_signals();
            // A path outside the node policy: ADD refused it, so nothing was made
            // through it, and nothing is touched through it now.
            if let Ok(raw) = serde_json::from_slice::<serde_json::Value>(stdin) {
                let screened = screen(&raw, Path::new(HOST_ROOT), &PathKey::ALL);
                if screened.verdict(Command::Del, "paths")? == Verdict::NothingTouched {
                    return Ok(None);
                }
            }
            let r = crate::plugin::del_unparsed(&env, stdin, &e);
            if let Err(e) = &r {
                log::error!("DEL failed: {e}");
            }
            return r.map(|_| None);
        }
        Err(e) => return Err(e),
    };
    let device_id = conf.device_id.map(|d| d.to_string()).unwrap_or_default();
    let screened = screen(&conf.raw, Path::new(HOST_ROOT), &PathKey::ALL);
    init_call_log(
        conf.log_level,
        screened.log_file.as_deref(),
        "",
        &env,
        &[("CNI_NETWORK", &conf.name), ("CNI_DEVICEID", &device_id)],
    );
    for w in conf.warnings.iter().chain(&screened.warnings) {
        log::warn!("{w}");
    }
    // The verdict logs its refusal (or the DEL/GC that touches nothing) itself, once.
    if screened.verdict(env.command, "paths")? == Verdict::NothingTouched {
        return Ok(None);
    }
    // The node's defaults for keys the network leaves out (the node file's `defaults`;
    // none when the file could not be used, which ADD, CHECK and STATUS refused above).
    for filled in screened.defaults.apply(&mut conf) {
        log::info!("{filled}");
    }
    // The call metrics go to this stateDir, now that the node policy allows it and the
    // node's defaults are in (a call refused before this point counts in the default
    // one).
    crate::callmetrics::set_state_dir(&conf.state_dir);
    for seg in env.args.skipped() {
        log::warn!("CNI_ARGS: ignoring malformed segment {seg:?} (expected KEY=VALUE)");
    }
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

/// One line naming the build, in the Go plugin's format
/// (`ib-sriov cni version:<v>, commit:<c>, date:<d>`, `printVersionString` in
/// k8snetworkplumbingwg/ib-sriov-cni `cmd/ib-sriov-cni/main.go`, commit 543060da), so
/// scripts that parse it keep working. The values: [`crate::version`] (Cargo's package
/// version, or a snapshot's), then from `build.rs` the git commit, the build date (UTC,
/// RFC 3339) or `SOURCE_DATE_EPOCH`.
pub fn version_string() -> String {
    format!(
        "ib-sriov cni version:{}, commit:{}, date:{}",
        crate::version(),
        env!("IB_SRIOV_COMMIT"),
        env!("IB_SRIOV_BUILD_DATE")
    )
}

/// The commands of the node tools (`ib-sriov <name> ...`): the CNI binary links none of
/// them, and runs the tools binary [`TOOLS_BIN`] with the same arguments instead
/// ([`run_tools`]). A CNI runtime never passes arguments, so a command name as the first
/// argument cannot collide with a CNI invocation.
pub const TOOLS: &[&str] = &["doctor", "exporter", "top"];

/// The node tools' executable's file name (package `ib-sriovctl`, src/ib-sriovctl).
pub const TOOLS_BIN: &str = "ib-sriovctl";

/// Where to get [`TOOLS_BIN`] when it is not installed (docs/install.md "Node tools").
pub const TOOLS_WHERE: &str = "it is in the image at /usr/bin/ib-sriovctl (copy it out: docs/install.md \"Node tools\") and a release asset (ib-sriovctl-<version>-linux-<arch>)";

/// The node tools' executable: [`TOOLS_BIN`] in the directory of this executable
/// (`/proc/self/exe`, the file the kernel ran, whatever argv[0] says), else the first
/// `PATH` entry holding an executable file of that name; `None` when neither has one.
pub fn find_tools() -> Option<std::path::PathBuf> {
    let exe = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let beside = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(TOOLS_BIN)));
    if let Some(p) = beside.filter(|p| exe(p)) {
        return Some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(TOOLS_BIN))
        .find(|p| exe(p))
}

/// `ib-sriov <tool> args...`: replaces this process with [`find_tools`]'s executable,
/// run as `ib-sriovctl <tool> args...` (`execv(2)`: same pid, environment, stdio, so
/// the exit status is the tool's); returns only on failure: 2, after saying on stderr
/// that the tools are not installed and [`TOOLS_WHERE`] (or why the exec failed).
fn run_tools(args: &[std::ffi::OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    let Some(bin) = find_tools() else {
        print_err(&format!(
            "ib-sriov: `{}` is a node tool, in the binary {TOOLS_BIN}, which is installed neither beside this one nor on PATH; {TOOLS_WHERE}\n",
            args[0].to_string_lossy()
        ));
        return 2;
    };
    let e = std::process::Command::new(&bin)
        .arg0(TOOLS_BIN)
        .args(args)
        .exec();
    print_err(&format!("ib-sriov: running {}: {e}\n", bin.display()));
    2
}

/// The usage text (`ib-sriov --help`): the plugin's own flags, and the node tools'
/// commands, which [`TOOLS_BIN`] runs.
pub fn usage() -> String {
    format!(
        "usage: ib-sriov [-v|--version|-h|--help]
       ib-sriov {{{}}} [ARGS...]
ib-sriov is a CNI plugin: a container runtime runs it with CNI_COMMAND and the other
CNI_* variables set and the network configuration on stdin (CNI SPEC.md).
`ib-sriov doctor`, `ib-sriov exporter` and `ib-sriov top`, the node tools (the node's
state and what is wrong with it, Prometheus metrics, a live view; docs/operations.md),
are in the binary {TOOLS_BIN}: ib-sriov runs {TOOLS_BIN} with the same arguments, found
in its own directory, else on PATH; when neither has one, it says so and exits 2:
{TOOLS_WHERE}.
`{TOOLS_BIN} --help` lists the commands' flags.",
        TOOLS.join("|")
    )
}

/// What a run by hand (no CNI protocol) prints, as the Go plugin's flag handling and
/// skel do: `-v`/`--version` (Go's flag package also takes `-version`, `--v`): the
/// version line on stdout, exit 0; `-h`/`--help`: usage on stdout, exit 0; any other
/// argument: usage on stderr, exit 2; no argument and no `CNI_COMMAND`: the version line
/// and the supported CNI versions on stderr, exit 0 (skel's `PluginMainFuncs` with an
/// `about` text), without reading stdin. A first argument naming one of [`TOOLS`]
/// runs the node tools' binary ([`run_tools`]). `None`: a CNI call, run the protocol.
fn manual_run() -> Option<i32> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| TOOLS.iter().any(|t| a == t)) {
        return Some(run_tools(&args));
    }
    manual_args("ib-sriov", &args, version_string, usage)
}

/// The run by hand of [`manual_run`] and [`manual_run_ipam`], for the program `name`
/// with `args` (argv without argv[0]): `-v`/`--version` prints `version()` on stdout,
/// `-h`/`--help` `usage()`, exit 0; any other argument: usage on stderr, exit 2; no
/// argument and no `CNI_COMMAND`: `version()` and the supported CNI versions on stderr,
/// exit 0. `None`: a CNI call (`version` is not called).
fn manual_args(
    name: &str,
    args: &[std::ffi::OsString],
    version: impl Fn() -> String,
    usage: impl Fn() -> String,
) -> Option<i32> {
    if let Some(a) = args.first() {
        return Some(match a.to_str() {
            Some("-v" | "--v" | "-version" | "--version") if args.len() == 1 => {
                print_out(&format!("{}\n", version()));
                0
            }
            Some("-h" | "--h" | "-help" | "--help") if args.len() == 1 => {
                print_out(&format!("{}\n", usage()));
                0
            }
            _ => {
                print_err(&format!(
                    "{name}: unexpected arguments {args:?}\n{}\n",
                    usage()
                ));
                2
            }
        });
    }
    if std::env::var_os("CNI_COMMAND").is_none_or(|c| c.is_empty()) {
        print_err(&format!(
            "{}\nCNI protocol versions supported: {}\n",
            version(),
            crate::cni::Version::ALL
                .iter()
                .map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return Some(0);
    }
    None
}

/// [`manual_run`] for the IPAM plugin: `-v`/`--version` prints its version line,
/// `-h`/`--help` its usage, no argument and no `CNI_COMMAND` both on stderr; exit 0.
/// Any other argument: usage on stderr, exit 2. `None`: a CNI call.
fn manual_run_ipam() -> Option<i32> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let line = || version_string().replacen("ib-sriov cni", crate::ipam::BUILTIN_TYPE, 1);
    const IPAM_USAGE: &str = "usage: ib-sriov-ipam [-v|--version|-h|--help]
ib-sriov-ipam is a CNI IPAM plugin (ib-sriov's built-in allocator, host-local's
configuration and store): a CNI plugin runs it with CNI_COMMAND and the other CNI_*
variables set and the network configuration on stdin (CNI SPEC.md \"Plugin Delegation\").";
    manual_args(crate::ipam::BUILTIN_TYPE, &args, line, || IPAM_USAGE.into())
}

/// The outcome for a process started as a delegate of ib-sriov ([`DELEGATED_ENV`] set,
/// any value): `None` when not delegated or for VERSION; `Some(Ok)` for DEL (nothing to
/// release: it allocated nothing); `Some(Err)` (code 7) for every other command.
fn delegation_loop() -> Option<Result<(), CniError>> {
    std::env::var_os(DELEGATED_ENV)?;
    match std::env::var_os("CNI_COMMAND") {
        Some(c) if c == "VERSION" => return None,
        Some(c) if c == "DEL" => return Some(Ok(())),
        _ => {}
    }
    Some(Err(CniError::config(
        "ib-sriov was invoked as an IPAM plugin of ib-sriov (delegation loop): ipam.type names this plugin under another name; use \"ib-sriov-ipam\" for the built-in allocator or a real IPAM plugin",
    )))
}

/// Runs the plugin; returns the process exit code (0 success, 1 error; see
/// [`manual_run`] for a run by hand). Started under the file name `ib-sriov-ipam`, it
/// is the IPAM plugin instead ([`crate::ipam_plugin`]), never the ib-sriov plugin.
pub fn main() -> i32 {
    crate::process::mark_start();
    if crate::ipam_plugin::invoked_as_ipam() {
        if let Some(rc) = manual_run_ipam() {
            return rc;
        }
        // No delegation-loop guard: the IPAM plugin never runs the plugin's logic nor
        // execs anything, so it cannot recurse (see `crate::ipam_plugin`).
        return serve(crate::ipam_plugin::run, false);
    }
    if let Some(rc) = manual_run() {
        return rc;
    }
    // The verb's hard time bound, whatever one system call does (crate::watchdog).
    crate::watchdog::arm(&command_name());
    serve(run, true)
}

/// Reads stdin (at most [`MAX_STDIN`]), runs `verb` on it with panics caught, prints
/// its result or error; with `guard`, first the delegation-loop check
/// ([`delegation_loop`]). Returns the exit code.
fn serve(verb: fn(&[u8]) -> Result<Option<serde_json::Value>, CniError>, guard: bool) -> i32 {
    let (rc, code) = serve_call(verb, guard);
    // From here a watchdog reaching the bound exits with this status, writing nothing.
    crate::watchdog::output_done(rc);
    // The plugin's own call metrics, after the result is out: never in the call's way
    // (crate::callmetrics). The IPAM plugin's calls are not counted (they are part of
    // the ib-sriov call that delegated to it), nor a delegate refused as a loop.
    if guard {
        if let (Some(code), Some(t0)) = (code, process_start()) {
            let verb = std::env::var("CNI_COMMAND").unwrap_or_default();
            crate::callmetrics::record(&verb, code, t0.elapsed());
        }
    }
    // The watchdog onto this CPU for the exit (crate::watchdog::before_exit); the fail
    // point lets a test see it there.
    crate::watchdog::before_exit();
    let _ = crate::failpoint::hit("cli.exit");
    rc
}

/// [`serve`] without the call metrics: the exit code, and the CNI result code (0 on
/// success; `None` for a delegate refused as a loop).
fn serve_call(
    verb: fn(&[u8]) -> Result<Option<serde_json::Value>, CniError>,
    guard: bool,
) -> (i32, Option<u32>) {
    std::panic::set_hook(Box::new(|info| {
        crate::logging::emergency(&format!("panic: {info}"))
    }));
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut stdin);
    if stdin.len() as u64 > MAX_STDIN {
        emit(
            &CniError::new(
                code::DECODE_FAILURE,
                format!(
                    "the network configuration on stdin is larger than {} MiB ({MAX_STDIN} bytes); refused before parsing",
                    MAX_STDIN >> 20
                ),
            )
            .to_json(Version::LATEST.as_str()),
        );
        return (1, Some(code::DECODE_FAILURE));
    }
    let version = sniff_version(&stdin)
        .filter(|v| crate::cni::parse_version(v).is_ok())
        .unwrap_or_else(|| Version::LATEST.as_str().to_string());
    crate::watchdog::set_version(&version);
    if let Err(e) = read {
        emit(&CniError::new(code::IO_FAILURE, format!("reading stdin: {e}")).to_json(&version));
        return (1, Some(code::IO_FAILURE));
    }
    match delegation_loop().filter(|_| guard) {
        Some(Ok(())) => return (0, None),
        Some(Err(e)) => {
            emit(&e.to_json(&version));
            return (1, None);
        }
        None => {}
    }
    // A panic's message goes to the log (the hook above) and the panic becomes code 100 here.
    let result = std::panic::catch_unwind(|| verb(&stdin));
    match result {
        Ok(Ok(Some(v))) => {
            emit(&v);
            (0, Some(0))
        }
        Ok(Ok(None)) => (0, Some(0)),
        Ok(Err(e)) => {
            emit(&e.to_json(&version));
            (1, Some(e.code))
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            emit(&CniError::internal(format!("internal error (panic): {msg}")).to_json(&version));
            (1, Some(code::INTERNAL))
        }
    }
}
