//! A real Prometheus for the tests that scrape the exporter (tests/exporter.rs,
//! tests/fleet_alerts.rs): the Debian package `prometheus` (scripts/deps.sh test),
//! started on a free loopback port with a configuration the test gives, its TSDB in the
//! test's directory, ended and reaped with the test ([`Reaped`]).

use super::reaped::Reaped;
use std::path::Path;

/// A free TCP port on 127.0.0.1 (bound once by the kernel's choice, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Percent-encoding of a query parameter, e.g. a PromQL expression in
/// `/api/v1/query?query=` (every byte but RFC 3986's unreserved ones).
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A running Prometheus; killed and reaped when dropped.
pub struct Prometheus {
    /// Where its HTTP API listens, `127.0.0.1:<port>`.
    pub addr: String,
    _process: Reaped,
}

impl Prometheus {
    /// Writes `config` (a prometheus.yml) to `dir/prometheus.yml` and starts Prometheus
    /// on it, its TSDB in `dir/data`, listening on a free port. Panics when the file
    /// cannot be written or Prometheus cannot be started.
    #[track_caller]
    pub fn start(dir: &Path, config: &str) -> Prometheus {
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let process = Reaped::spawn(
            std::process::Command::new("prometheus")
                .arg(format!("--config.file={}", cfg.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
            "prometheus (Debian package prometheus, scripts/deps.sh test)",
        );
        Prometheus {
            addr,
            _process: process,
        }
    }
}
