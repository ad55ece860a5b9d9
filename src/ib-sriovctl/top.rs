//! `ib-sriov top`: a live terminal view of the node's attachments for an admin, drawn
//! with `ratatui` on `crossterm`. One row per live attachment (pod, rail, GUID, VF,
//! receive and transmit rate, errors and drops), sorted by rate (receive plus transmit,
//! highest first), refreshed each second; `q` (or Esc, Ctrl-C) quits.
//!
//! It reads the node exactly as one scrape of `ib-sriov exporter` does
//! ([`crate::exporter::scrape`]): read-only, no lock, no CNI call. Rates are the change
//! of the pod netdev's `IFLA_STATS64` byte counters between two reads, divided by the
//! time between them; a row's rate is blank until it has been read twice.

use crate::exporter::{self, Attachment};
use crate::process::{flag, print_err, print_out, Flag};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::Constraint;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Row, Table};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The flags `ib-sriov top` takes, in the order [`USAGE`] shows them: what
/// [`parse_args`] accepts, and what the usage texts must list (a test holds them to it;
/// a new flag goes here, in [`parse_args`]'s match and in [`USAGE`]; `ib-sriov --help`
/// is made from this table).
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "--interval",
        value: Some("SECONDS"),
        repeatable: false,
    },
    crate::process::HOST_ROOT,
    crate::process::STATE_DIR,
];

/// Usage text.
pub const USAGE: &str =
    "usage: ib-sriov top [--interval SECONDS] [--host-root DIR] [--state-dir DIR]...
A live view of the node's InfiniBand SR-IOV attachments: one row per attachment (pod,
rail, GUID, VF, receive/transmit rate, errors, drops), sorted by rate, refreshed every
SECONDS (default 1). q quits. Read-only (docs/operations.md \"Metrics\").";

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct TopRow {
    /// `namespace/pod`, or the container ID when the journal names no pod.
    pub pod: String,
    /// `network/ifname`.
    pub rail: String,
    /// The effective port GUID (the exporter's `port_guid` label, the doctor's `attachments[].guid`).
    pub guid: String,
    /// The VF's PCI address.
    pub vf: String,
    /// Receive and transmit rates in bytes per second, when read twice.
    pub rate: Option<(f64, f64)>,
    /// Receive plus transmit errors.
    pub errors: u64,
    /// Receive plus transmit drops.
    pub drops: u64,
}

fn label<'a>(a: &'a Attachment, k: &str) -> &'a str {
    a.labels
        .iter()
        .find(|(l, _)| *l == k)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// The rows of `snap`, with rates against `prev` (bytes received and sent per
/// attachment key, read `dt` before), sorted by rate; also the byte counters of this
/// read for the next.
pub fn rows(
    snap: &exporter::Snapshot,
    prev: &HashMap<String, (u64, u64)>,
    dt: Duration,
) -> (Vec<TopRow>, HashMap<String, (u64, u64)>) {
    let mut now = HashMap::new();
    let mut out = Vec::new();
    for a in &snap.attachments {
        let key = format!("{}/{}", a.container_id, label(a, "ifname"));
        let n = a.netdev.unwrap_or_default();
        now.insert(key.clone(), (n.rx_bytes, n.tx_bytes));
        let secs = dt.as_secs_f64();
        let rate = prev.get(&key).filter(|_| secs > 0.0).map(|(rx, tx)| {
            (
                n.rx_bytes.saturating_sub(*rx) as f64 / secs,
                n.tx_bytes.saturating_sub(*tx) as f64 / secs,
            )
        });
        let (ns, pod) = (label(a, "namespace"), label(a, "pod"));
        out.push(TopRow {
            pod: if pod.is_empty() {
                a.container_id.chars().take(24).collect()
            } else {
                format!("{ns}/{pod}")
            },
            rail: format!("{}/{}", label(a, "network"), label(a, "ifname")),
            guid: label(a, "port_guid").to_string(),
            vf: label(a, "vf").to_string(),
            rate,
            errors: n.rx_errors + n.tx_errors,
            drops: n.rx_dropped + n.tx_dropped,
        });
    }
    let total = |r: &TopRow| r.rate.map(|(a, b)| a + b).unwrap_or(-1.0);
    out.sort_by(|a, b| {
        total(b)
            .total_cmp(&total(a))
            .then_with(|| (&a.pod, &a.rail).cmp(&(&b.pod, &b.rail)))
    });
    (out, now)
}

/// `bytes` per second with an SI prefix (`12.3 MB/s`).
pub fn human_rate(bytes: f64) -> String {
    let units = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

fn draw(f: &mut ratatui::Frame, rows: &[TopRow], snap: &exporter::Snapshot, every: Duration) {
    let held: u64 = snap.vfs.iter().map(|v| v.1).sum();
    let free: u64 = snap.vfs.iter().map(|v| v.2).sum();
    let calls: u64 = snap.calls.verbs.iter().map(|v| v.count()).sum();
    let title = format!(
        " ib-sriov top: {} attachments, VFs {held} held {free} free, {calls} CNI calls since boot; every {:.0} s; q quits ",
        rows.len(),
        every.as_secs_f64()
    );
    let header = Row::new(["POD", "RAIL", "GUID", "VF", "RX", "TX", "ERRORS", "DROPS"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let body = rows.iter().map(|r| {
        let (rx, tx) = match r.rate {
            Some((rx, tx)) => (human_rate(rx), human_rate(tx)),
            None => ("-".into(), "-".into()),
        };
        Row::new([
            r.pod.clone(),
            r.rail.clone(),
            r.guid.clone(),
            r.vf.clone(),
            rx,
            tx,
            r.errors.to_string(),
            r.drops.to_string(),
        ])
    });
    let widths = [
        Constraint::Min(20),
        Constraint::Min(12),
        Constraint::Length(23),
        Constraint::Length(12),
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Length(7),
        Constraint::Length(7),
    ];
    let table = Table::new(body, widths)
        .header(header)
        .block(Block::bordered().title(Line::from(title)));
    f.render_widget(table, f.area());
}

/// Parses the arguments after `top`: the refresh interval and the exporter's arguments
/// it reads the node with. `Err("")` for `-h`/`--help`, else the error [`run`] prints
/// (exit status 2).
pub fn parse_args(args: &[String]) -> Result<(Duration, exporter::Args), String> {
    let mut every = Duration::from_secs(1);
    let mut ex_args: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if matches!(a.as_str(), "-h" | "--help") {
            return Err(String::new());
        }
        match flag(FLAGS, a)?.name {
            "--interval" => match it.next().and_then(|v| v.parse::<f64>().ok()) {
                Some(s) if (0.1..=3600.0).contains(&s) => every = Duration::from_secs_f64(s),
                _ => return Err("--interval needs seconds (0.1 to 3600)".into()),
            },
            "--host-root" | "--state-dir" => match it.next() {
                Some(v) => {
                    ex_args.push(a.clone());
                    ex_args.push(v.clone());
                }
                None => return Err(format!("{a} needs a value")),
            },
            other => return Err(format!("{other}: in FLAGS but not parsed")),
        }
    }
    Ok((every, exporter::parse_args(&ex_args)?))
}

/// Runs `ib-sriov top` with the arguments after `top`; returns the exit status: 0 when
/// quit, 1 when the terminal fails while drawing, 2 for bad arguments or no terminal.
pub fn run(args: &[String]) -> i32 {
    let (every, parsed) = match parse_args(args) {
        Ok(p) => p,
        Err(e) if e.is_empty() => {
            print_out(&format!("{USAGE}\n"));
            return 0;
        }
        Err(e) => {
            print_err(&format!("ib-sriov top: {e}\n{USAGE}\n"));
            return 2;
        }
    };
    if let Some(r) = parsed.host_root.as_ref().filter(|r| !r.is_dir()) {
        print_err(&format!(
            "ib-sriov top: --host-root {}: not a directory\n",
            r.display()
        ));
        return 2;
    }
    let paths = exporter::paths(&parsed);
    let mut terminal = match terminal() {
        Ok(t) => t,
        Err(e) => {
            print_err(&format!(
                "ib-sriov top: no terminal to draw on ({e}); for one read of the same counters: ib-sriov exporter --once\n"
            ));
            return 2;
        }
    };
    let r = live(&mut terminal, &paths, every);
    ratatui::restore();
    match r {
        Ok(()) => 0,
        Err(e) => {
            print_err(&format!("ib-sriov top: {e}\n"));
            1
        }
    }
}

/// The terminal `top` draws on: stdout, which must be a terminal (a pipe or a file
/// would get escape sequences), in raw mode on the alternate screen
/// ([`ratatui::try_init`]; crossterm takes the keys from stdin, or from `/dev/tty` when
/// stdin is not a terminal). Errors: stdout not a terminal; raw mode refused (no
/// controlling terminal: `/dev/tty` cannot be opened, `ENXIO`), with the terminal
/// restored.
fn terminal() -> std::io::Result<ratatui::DefaultTerminal> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(std::io::Error::other("stdout is not a terminal"));
    }
    ratatui::try_init().inspect_err(|_| ratatui::restore())
}

fn live(
    terminal: &mut ratatui::DefaultTerminal,
    paths: &crate::doctor::paths::Paths,
    every: Duration,
) -> std::io::Result<()> {
    let mut prev: HashMap<String, (u64, u64)> = HashMap::new();
    let mut last: Option<Instant> = None;
    loop {
        let snap = exporter::scrape(paths);
        let now = Instant::now();
        let dt = last.map(|l| now - l).unwrap_or_default();
        let (rows, counters) = rows(&snap, &prev, dt);
        prev = counters;
        last = Some(now);
        terminal.draw(|f| draw(f, &rows, &snap, every))?;
        let until = now + every;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            if let Event::Key(k) = event::read()? {
                let quit = k.kind == KeyEventKind::Press
                    && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL)));
                if quit {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::stats::NetdevStats;

    fn att(cid: &str, pod: &str, rx: u64, tx: u64) -> Attachment {
        Attachment {
            labels: vec![
                ("namespace", "ns".into()),
                ("pod", pod.into()),
                ("network", "ib".into()),
                ("ifname", "net1".into()),
            ],
            container_id: cid.into(),
            netdev: Some(NetdevStats {
                rx_bytes: rx,
                tx_bytes: tx,
                ..NetdevStats::default()
            }),
            ..Attachment::default()
        }
    }

    #[test]
    fn rows_are_sorted_by_rate_once_read_twice() {
        let mut s = exporter::Snapshot {
            attachments: vec![att("a", "slow", 0, 0), att("b", "fast", 0, 0)],
            ..Default::default()
        };
        let (r, prev) = rows(&s, &HashMap::new(), Duration::ZERO);
        assert!(r.iter().all(|r| r.rate.is_none()));
        s.attachments = vec![att("a", "slow", 1000, 0), att("b", "fast", 5000, 5000)];
        let (r, _) = rows(&s, &prev, Duration::from_secs(2));
        assert_eq!(r[0].pod, "ns/fast");
        assert_eq!(r[0].rate, Some((2500.0, 2500.0)));
        assert_eq!(r[1].rate, Some((500.0, 0.0)));
        assert_eq!(human_rate(2500.0), "2.5 kB/s");
        assert_eq!(human_rate(12.0), "12 B/s");
    }
}
