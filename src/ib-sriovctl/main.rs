//! `ib-sriovctl`: the node tools' executable (doctor, exporter, top); all logic lives in
//! the library (`ib_sriovctl::main`). std's start ignores `SIGPIPE`, so the exporter's
//! writes to a closed socket return `EPIPE`.

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(ib_sriovctl::main(&args))
}
