//! A process a test starts that is ended and reaped whatever the test does: dropped
//! (the test returns, or panics and unwinds), it is killed with SIGKILL, with every
//! process of its process group (what it started itself, e.g. strace's tracee), and
//! waited for; if the test process itself dies without unwinding (aborted, killed), the
//! kernel sends the child SIGKILL (`PR_SET_PDEATHSIG`, prctl(2)).
//!
//! Standalone (no other module of `common`), so a test that does not use `common` can
//! include it with `#[path = "common/reaped.rs"] mod reaped;`.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A started child; killed (with its process group) and reaped when dropped.
pub struct Reaped(Child);

impl Reaped {
    /// Starts `cmd` as the leader of a process group of its own, with
    /// `PR_SET_PDEATHSIG` `SIGKILL`: it dies when the thread that started it ends (a
    /// test's thread, so with the test at the latest) or the test process dies. Panics
    /// naming `what` when it cannot be started.
    #[track_caller]
    pub fn spawn(cmd: &mut Command, what: &str) -> Reaped {
        cmd.process_group(0);
        Reaped::start(cmd, what, false)
    }

    /// [`Reaped::spawn`] in a session of its own (setsid(2)): no controlling terminal,
    /// so `/dev/tty` cannot be opened; also the leader of its own process group.
    #[track_caller]
    pub fn spawn_in_session(cmd: &mut Command, what: &str) -> Reaped {
        Reaped::start(cmd, what, true)
    }

    #[track_caller]
    fn start(cmd: &mut Command, what: &str, session: bool) -> Reaped {
        let parent = std::process::id() as i32;
        // SAFETY: setsid(2), prctl(2) and getppid(2) are async-signal-safe; nothing is
        // allocated.
        unsafe {
            cmd.pre_exec(move || {
                if session && nix::libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The test died between the fork and the prctl: no signal will come.
                if nix::libc::getppid() != parent {
                    nix::libc::_exit(1);
                }
                Ok(())
            });
        }
        Reaped(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("starting {what}: {e}")),
        )
    }

    /// Its process ID (and process group ID).
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// The child, for its pipes and `try_wait`.
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }

    /// Its exit status when it ends within `limit`; `None` (still running) otherwise.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.0.try_wait().expect("waitpid") {
                return Some(st);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL to its process group, then reaps it; its exit status.
    pub fn kill(&mut self) -> ExitStatus {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.kill();
        self.0.wait().expect("waitpid")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            // Reaped already; its group may still hold what it started.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.0.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            return;
        }
        let _ = self.kill();
    }
}
