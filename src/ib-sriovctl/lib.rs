//! `ib-sriovctl`: the node tools of the ib-sriov CNI plugin, a binary of their own so the
//! CNI binary that the runtime runs as root on every pod start and stop links none of
//! them (no HTTP server, no Prometheus encoder, no terminal UI, no doctor; the check is
//! tests/cni_deps.rs). Named as the field names a node's command-line companion of a
//! daemon or plugin (`crictl`, `calicoctl`, `cilium-dbg`'s old `cilium`): the plugin's
//! name and `ctl`.
//!
//! - [`doctor`]: the node's state as the plugin sees it and what is wrong with it;
//! - [`exporter`]: the node's attachment counters and the plugin's call metrics for
//!   Prometheus;
//! - [`top`]: the same, live in the terminal.
//!
//! Users keep typing `ib-sriov doctor|exporter|top ...`: the CNI binary runs this one,
//! found beside itself or on `PATH`, with the same arguments (`ib_sriov_cni::cli`).
//!
//! The library's modules are re-exported under their names, so the tools name them as
//! the plugin does (`crate::plugin`, `crate::sysfs`, ...).

pub use ib_sriov_cni::{
    boot, callmetrics, cni, config, failpoint, fsutil, gocache, ipam, journal, logging, netlink,
    netns, nlsock, plugin, policy, process, rdma, sysfs, types, version, vfguid,
};

pub mod doctor;
pub mod exporter;
pub mod top;

/// A command of the node tools (`ib-sriovctl <name> ...`, or `ib-sriov <name> ...`
/// through the CNI binary): its flags, its usage text, its parser and its entry.
pub struct Subcommand {
    /// The first argument that selects it.
    pub name: &'static str,
    /// The flags it takes ([`crate::process::Flag`]): what `check` accepts besides
    /// `-h`/`--help`.
    pub flags: &'static [crate::process::Flag],
    /// Its usage text (`--help`), first line `usage: ` and the synopsis
    /// ([`crate::process::synopsis`] of `flags`).
    pub usage: &'static str,
    /// Parses its arguments without running: `Err("")` for `-h`/`--help`, else the
    /// error `run` prints with exit status 2.
    pub check: fn(&[String]) -> Result<(), String>,
    /// Runs it with the arguments after its name; the exit status.
    pub run: fn(&[String]) -> i32,
}

/// Every command of the node tools, as [`main`] dispatches them. Their names are
/// `ib_sriov_cni::cli::TOOLS`, the words the CNI binary hands over to this one.
pub const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "doctor",
        flags: crate::doctor::FLAGS,
        usage: crate::doctor::USAGE,
        check: crate::doctor::check_args,
        run: crate::doctor::run,
    },
    Subcommand {
        name: "exporter",
        flags: crate::exporter::FLAGS,
        usage: crate::exporter::USAGE,
        check: |a| crate::exporter::parse_args(a).map(|_| ()),
        run: crate::exporter::run,
    },
    Subcommand {
        name: "top",
        flags: crate::top::FLAGS,
        usage: crate::top::USAGE,
        check: |a| crate::top::parse_args(a).map(|_| ()),
        run: crate::top::run,
    },
];

/// The usage text (`ib-sriovctl --help`): the synopsis of every [`SUBCOMMANDS`] entry
/// made from its flag table, so it lists every flag of every command.
pub fn usage() -> String {
    let mut s = String::from("usage: ib-sriovctl [-v|--version|-h|--help]\n");
    for c in SUBCOMMANDS {
        s += &format!("       {}\n", crate::process::synopsis(c.name, c.flags));
    }
    s + "ib-sriovctl holds the node tools of the ib-sriov CNI plugin; `ib-sriov <command>`
runs the same commands through it.
`doctor` prints the node's InfiniBand SR-IOV state as the plugin sees it and
what is wrong with it, read-only (`ib-sriovctl doctor --help`; docs/operations.md \"Diagnosing a node\").
`exporter` serves the node's attachment counters and the plugin's call metrics
to Prometheus, read-only (`ib-sriovctl exporter --help`; docs/operations.md \"Metrics\");
`top` shows them live in the terminal."
}

/// The version line (`ib-sriovctl --version`): the CNI binary's line
/// ([`ib_sriov_cni::cli::version_string`]) under this binary's name.
pub fn version_string() -> String {
    ib_sriov_cni::cli::version_string().replacen("ib-sriov cni", "ib-sriovctl", 1)
}

/// Runs the node tools with `args` (argv without argv[0]); the exit status: the
/// command's, or 0 for `-v`/`--version` and `-h`/`--help` (on stdout), 2 with the usage
/// on stderr for no argument or an unknown one.
pub fn main(args: &[String]) -> i32 {
    crate::process::mark_start();
    if let Some(c) = args
        .first()
        .and_then(|a| SUBCOMMANDS.iter().find(|c| a == c.name))
    {
        return (c.run)(&args[1..]);
    }
    match args.first().map(String::as_str) {
        Some("-v" | "--v" | "-version" | "--version") if args.len() == 1 => {
            crate::process::print_out(&format!("{}\n", version_string()));
            0
        }
        Some("-h" | "--h" | "-help" | "--help") if args.len() == 1 => {
            crate::process::print_out(&format!("{}\n", usage()));
            0
        }
        _ => {
            crate::process::print_err(&format!(
                "ib-sriovctl: unexpected arguments {args:?}\n{}\n",
                usage()
            ));
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag tables are what the parsers take, and the usage texts show exactly
    /// them: every table flag is accepted by its command's parser (with a value when it
    /// takes one) and refused without its value; a word that is no flag is refused;
    /// the command's usage text begins with its synopsis made from the table, names no
    /// `--flag` outside it and describes each flag on a line of its own where it
    /// describes any; the top-level usage shows the same synopsis. A new flag must be
    /// added to the command's table (`doctor::FLAGS`, ...) or its parser refuses it.
    #[test]
    fn usage_texts_list_exactly_the_flags_the_parsers_take() {
        let top = usage();
        for c in SUBCOMMANDS {
            let syn = crate::process::synopsis(c.name, c.flags);
            assert_eq!(
                c.usage.lines().next(),
                Some(format!("usage: {syn}").as_str()),
                "{}: the first line of its usage is not its table's synopsis",
                c.name
            );
            assert!(
                top.lines().any(|l| l.trim_start() == syn),
                "ib-sriovctl --help lacks {syn:?}:\n{top}"
            );
            let described = c
                .usage
                .lines()
                .filter(|l| l.trim_start().starts_with("--"))
                .count();
            for f in c.flags {
                let mut args = vec![f.name.to_string()];
                if let Some(v) = f.value {
                    // A value each parser takes for this flag.
                    let good = match (f.name, v) {
                        ("--listen", _) => "127.0.0.1:1",
                        ("--interval" | "--doctor-interval", _) => "1",
                        _ => "/x",
                    };
                    args.push(good.into());
                    assert!(
                        (c.check)(&args[..1]).is_err_and(|e| e.contains("needs")),
                        "{} {}: accepted without its value",
                        c.name,
                        f.name
                    );
                }
                assert_eq!((c.check)(&args), Ok(()), "{} {args:?}", c.name);
                if described > 0 {
                    assert!(
                        c.usage
                            .lines()
                            .any(|l| l.trim_start().starts_with(&format!("{} ", f.name))),
                        "{}: {} has no line of its own in\n{}",
                        c.name,
                        f.name,
                        c.usage
                    );
                }
            }
            assert_eq!((c.check)(&["--help".into()]), Err(String::new()));
            assert_eq!((c.check)(&["-h".into()]), Err(String::new()));
            assert!((c.check)(&["--no-such-flag".into()]).is_err());
            for word in c
                .usage
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-'))
            {
                if word.starts_with("--") && word.len() > 2 && word != "--help" {
                    assert!(
                        c.flags.iter().any(|f| f.name == word),
                        "{}: its usage names {word}, which its parser refuses",
                        c.name
                    );
                }
            }
        }
    }
}
