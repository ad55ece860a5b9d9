//! `ib-sriov`: the CNI executable. All logic lives in the library; see `cli::main`.
//!
//! The entry is the C `main` itself (`#![no_main]`), not std's runtime start
//! (`std::rt::lang_start`). A CNI call is a process that lives a few milliseconds, and
//! that start costs each call ~47,000 instructions (a sixth of what the plugin adds to
//! an ADD+DEL cycle). Most of it is the main thread's stack-overflow handler, which asks
//! glibc's `pthread_getattr_np` for the stack bounds, and glibc reads and `sscanf`s
//! `/proc/self/maps` for them. What std's start does that the plugin relies on is done
//! here:
//! - `SIGPIPE` is ignored, so a write to a closed pipe or socket returns `EPIPE` to its
//!   caller (the exporter's HTTP server, a result printed to a runtime that went away)
//!   instead of killing the process (library/std/src/sys/pal/unix/mod.rs, `init`);
//! - a panic that escapes is caught and exits 101, as std's start does;
//! - `std::process::exit` runs std's cleanup (stdout is flushed) before `exit(3)`.
//!
//! What is given up: the "thread 'main' has overflowed its stack" message (an overflow
//! still ends the process, by `SIGSEGV` at the kernel's guard gap). Arguments and the
//! environment need nothing: on glibc, std reads `argc`/`argv` from an `.init_array`
//! function (library/std/src/sys/args/unix.rs), which runs before any `main`.
#![no_main]

/// The C entry point (`int main(int argc, char **argv)`, called by glibc's
/// `__libc_start_main`); the arguments are read through `std::env::args_os`.
#[no_mangle]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    // SAFETY: setting a signal's disposition to SIG_IGN before any other thread exists.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_IGN);
    }
    let rc = std::panic::catch_unwind(ib_sriov_cni::cli::main).unwrap_or(101);
    std::process::exit(rc)
}
