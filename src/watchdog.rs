//! The verb's hard time bound: whatever one system call of the verb does, the process
//! answers the runtime and exits at the bound.
//!
//! The verbs bound every wait of their own (the VF lock, the rebind queue, a delegated
//! IPAM plugin, netlink receives: [`crate::plugin::DEL_BUDGET`] and the others), but a
//! system call that never returns (a read of a file on a hung network filesystem, a
//! FIFO opened where a regular file was expected, stdin that the runtime never closes)
//! would hold the process for ever, and a DEL holds SIGTERM
//! ([`crate::process::hold_termination_signals`]), so the runtime's own timeout could
//! only SIGKILL it. [`arm`] starts, with the call, one thread that sleeps until the
//! verb's bound ([`bound_for`]: ADD [`crate::plugin::ADD_BUDGET`] 220 s, DEL
//! [`crate::plugin::DEL_BUDGET`] 60 s, CHECK, GC and STATUS
//! [`crate::plugin::VERB_BUDGET`] 80 s, counted from the process start,
//! [`crate::process::process_start`]). Reaching it, the thread writes the CNI error
//! (SPEC.md "Error": code 11, "try again later") on stdout, logs where the main thread
//! was waiting (`/proc/self/task/<tid>/syscall` and `wchan`, proc(5)), and ends the
//! process with `_exit(2)` (exit status 1, as every error). The call's journal stays as
//! the interrupted step left it: an exit there is what a SIGKILL there is (the OOM
//! killer's, or a runtime's context timeout), which the journal makes recoverable: the
//! next DEL (or GC) resumes from it, each undo checking the current state.
//!
//! One answer only: the main thread claims stdout before it writes its result
//! ([`claim_output`]) and records its exit status when done ([`output_done`]); the
//! watchdog writes only when nothing was claimed. A result already written is left
//! alone (the process exits with that result's status); a result being written gets one
//! more second; a main thread that reaches its output after the watchdog answered
//! waits for the exit ([`claim_output`] never returns then).
//!
//! What cannot be bounded: a thread in uninterruptible sleep (state `D`) keeps the
//! process from exiting until that system call returns: `_exit` (`exit_group(2)`) kills
//! every thread, but a task in `D` state ends only when it leaves the kernel. That is
//! the kernel's own driver unbind/bind, and a read whose request is already with the
//! server of a network or FUSE file system: on a fatal signal the kernel still waits
//! for that server's answer (fs/fuse/dev.c `request_wait_answer()`; net/9p/client.c
//! `p9_client_rpc()` first sends a flush and waits for it), so a hung 9p, NFS (hard
//! mount) or FUSE server holds the process. The watchdog's answer is on stdout even
//! then, but stdout stays open (the file table goes with the last thread), so a
//! runtime that reads to end of file (libcni's `RawExec`, Go's `exec.Cmd.Run`) does not
//! see it until the process is gone. Every other wait (a pipe or FIFO, a lock, a
//! socket, a sleep) ends with the exit.
//!
//! Cost on every call: one `clone3(2)` of a thread on a static stack (no `mmap(2)`, no
//! allocation until it fires), with glibc's one-time set-up of its first thread, and
//! three `sched_*affinity(2)` calls: the thread starts on another CPU than the main
//! thread's, which keeps the netdev move's `rcu_barrier()` from waiting on two CPUs
//! (`other_cpus`), and is moved back onto the main thread's CPU for the exit
//! ([`before_exit`]), so the exit does not wait for another CPU to wake.

use crate::cni::{CniError, Command};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nothing written on stdout yet.
const IDLE: u8 = 0;
/// The main thread is writing its result.
const WRITING: u8 = 1;
/// The main thread is done with stdout; its exit status is in [`EXIT_STATUS`].
const DONE: u8 = 2;
/// The watchdog answered: the main thread must not write.
const FIRED: u8 = 3;

/// Who owns stdout: [`IDLE`], [`WRITING`], [`DONE`] or [`FIRED`].
static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The main thread's exit status once [`DONE`].
static EXIT_STATUS: AtomicI32 = AtomicI32::new(0);
/// The `cniVersion` of the call's error object (set once stdin is read).
static VERSION: OnceLock<String> = OnceLock::new();

/// How long a result being written when the bound passes is given to finish.
const WRITE_GRACE: Duration = Duration::from_secs(1);

/// How long the watchdog's log record may take after its answer is out before the
/// process is SIGKILLed (a log that blocks must not hold the exit).
const LOG_GRACE: Duration = Duration::from_secs(2);

/// The hard bound of a CNI verb (its name as in `CNI_COMMAND`), counted from the process
/// start, and the name of the constant that gives it: ADD 220 s (`ADD_BUDGET`), DEL 60 s
/// (`DEL_BUDGET`), CHECK, GC and STATUS 80 s (`VERB_BUDGET`); `None` for VERSION and
/// anything else (no watchdog).
pub fn bound_for(command: &str) -> Option<(Duration, &'static str)> {
    use crate::plugin::{ADD_BUDGET, DEL_BUDGET, VERB_BUDGET};
    match Command::parse(command)? {
        Command::Add => Some((ADD_BUDGET, "ADD_BUDGET")),
        Command::Del => Some((DEL_BUDGET, "DEL_BUDGET")),
        Command::Check | Command::Gc | Command::Status => Some((VERB_BUDGET, "VERB_BUDGET")),
        Command::Version => None,
    }
}

/// What the watchdog thread needs: the verb, its bound, the bound's constant name and
/// the deadline as a CLOCK_MONOTONIC time (set once, before the thread is created).
struct Watch {
    command: String,
    bound: Duration,
    name: &'static str,
    deadline: nix::libc::timespec,
}

static WATCH: OnceLock<Watch> = OnceLock::new();

/// The watchdog thread, once created (for [`before_exit`]).
static THREAD: OnceLock<nix::libc::pthread_t> = OnceLock::new();

/// The watchdog thread's stack: static (zero pages until touched), so starting the
/// thread maps nothing. Sleeping takes a few hundred bytes of it; firing (the message,
/// the log) a few tens of KiB.
#[repr(C, align(64))]
struct Stack([u8; STACK_SIZE]);
const STACK_SIZE: usize = 512 << 10;
static mut STACK: Stack = Stack([0; STACK_SIZE]);

extern "C" {
    /// glibc 2.32: the signal mask the new thread starts with (pthread_attr_setsigmask_np(3)).
    fn pthread_attr_setsigmask_np(
        attr: *mut nix::libc::pthread_attr_t,
        sigmask: *const nix::libc::sigset_t,
    ) -> nix::libc::c_int;
}

/// Starts the watchdog of the verb `command` (`CNI_COMMAND`): a thread, every signal
/// blocked in it (a held SIGTERM is never delivered to it), that sleeps in
/// `clock_nanosleep(2)` until the verb's bound ([`bound_for`]) after the process start
/// and then answers and exits (see the module). Nothing for VERSION, an unknown
/// command, or a library run without a process start. Call once, before reading stdin.
/// A thread that cannot be created is logged to stderr, and the call goes on without
/// it. The thread is created with `pthread_create(3)` on a static stack and touches no
/// allocator until it fires: starting it costs a `clone3(2)` and no `mmap(2)`. It
/// runs on the other CPUs than the caller's, from its start on ([`other_cpus`] says
/// why).
pub fn arm(command: &str) {
    use nix::libc as c;
    let (Some((bound, name)), Some(start)) = (bound_for(command), crate::process::process_start())
    else {
        return;
    };
    let left = (start + bound).saturating_duration_since(Instant::now());
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32))
        .unwrap_or_default();
    let at = now + left;
    let deadline = c::timespec {
        tv_sec: at.as_secs() as c::time_t,
        tv_nsec: at.subsec_nanos() as _,
    };
    if WATCH
        .set(Watch {
            command: command.to_string(),
            bound,
            name,
            deadline,
        })
        .is_err()
    {
        return;
    }
    let rc = start_thread();
    if rc != 0 {
        crate::logging::emergency(&format!(
            "cannot start the watchdog ({}): this call has no hard time bound ({name})",
            nix::errno::Errno::from_raw(rc)
        ));
    }
}

/// The CPUs the watchdog thread may start on: the process's allowed CPUs
/// (`sched_getaffinity(2)`) without the one this thread runs on (`sched_getcpu(3)`);
/// `None` when that leaves none (a process confined to one CPU) or either call fails.
///
/// Why: a new thread is often queued on its creator's CPU (in about half the calls
/// traced on the 2-vCPU VM where this was measured) and first runs there when the
/// main thread first sleeps, which for an ADD or DEL is inside the netdev move
/// (`RTM_SETLINK` with `IFLA_NET_NS_FD`). The main thread is then woken on the other
/// CPU, so the RCU callbacks the move queues are on both CPUs, and the move's
/// `rcu_barrier()` (net/core/dev.c `__dev_change_net_namespace()`) waits for both
/// CPUs to run theirs. Measured with `scripts/bench.sh --spawn` and its ftrace
/// (`BENCH_SPAWN_SCHED`, docs/testing.md "Comparing two builds"): the barrier's wait
/// was ended by a wake-up from the other CPU in 39-53 % of the calls with the thread
/// started anywhere, 8-24 % with no thread and 13-18 % with the thread started on
/// another CPU; in three same-run A/Bs (96 ADD+DEL cycles each) the cycle's median
/// wall was 0.9-1.3 ms shorter started on another CPU, and 3.3-5.6 ms shorter with no
/// thread at all: the rest was the exit ([`before_exit`]).
fn other_cpus() -> Option<nix::libc::cpu_set_t> {
    use nix::libc as c;
    // SAFETY: a zeroed cpu_set_t is an empty set; both calls write into it only.
    unsafe {
        let mut set: c::cpu_set_t = std::mem::zeroed();
        if c::sched_getaffinity(0, std::mem::size_of::<c::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        c::CPU_CLR(current_cpu()?, &mut set);
        (c::CPU_COUNT(&set) > 0).then_some(set)
    }
}

/// The CPU this thread runs on (`sched_getcpu(3)`), when it fits a `cpu_set_t`.
fn current_cpu() -> Option<usize> {
    use nix::libc as c;
    // SAFETY: no arguments; returns a CPU number or -1.
    let cpu = unsafe { c::sched_getcpu() };
    usize::try_from(cpu)
        .ok()
        .filter(|&n| n < c::CPU_SETSIZE as usize)
}

/// Creates the watchdog thread: detached, every signal blocked, and, when the process
/// may run on another CPU than this thread's ([`other_cpus`]), on those other CPUs
/// from its first instruction on (`pthread_attr_setaffinity_np(3)`: glibc starts the
/// thread stopped on a lock, sets its affinity, then releases it; glibc
/// nptl/pthread_create.c `create_thread()`). On [`STACK`]; but if that attempt fails
/// after the `clone3(2)` (the affinity refused: the cpuset changed meanwhile), glibc's
/// thread may still be running on that stack to its exit, so the second attempt,
/// without affinity, lets glibc map a stack of its own. Returns
/// `pthread_create(3)`'s error number (0: started).
fn start_thread() -> nix::libc::c_int {
    let others = other_cpus();
    let rc = create(others.as_ref(), true);
    if rc != 0 && others.is_some() {
        return create(None, false);
    }
    rc
}

/// One `pthread_create(3)` of [`watch_thread`]: detached, every signal blocked, on
/// `cpus` when given, on [`STACK`] when `static_stack` (else on a stack glibc maps).
fn create(cpus: Option<&nix::libc::cpu_set_t>, static_stack: bool) -> nix::libc::c_int {
    use nix::libc as c;
    // SAFETY: the attribute object is initialised before use and destroyed after; the
    // static stack is used by one thread only (WATCH is set once, so this runs once
    // per process with `static_stack`); the signal mask is a full set.
    unsafe {
        let mut attr: c::pthread_attr_t = std::mem::zeroed();
        let mut rc = c::pthread_attr_init(&mut attr);
        if rc != 0 {
            return rc;
        }
        let mut all: c::sigset_t = std::mem::zeroed();
        c::sigfillset(&mut all);
        if static_stack {
            let stack = std::ptr::addr_of_mut!(STACK).cast::<c::c_void>();
            rc = c::pthread_attr_setstack(&mut attr, stack, STACK_SIZE);
        } else {
            rc = c::pthread_attr_setstacksize(&mut attr, STACK_SIZE);
        }
        if rc == 0 {
            rc = c::pthread_attr_setdetachstate(&mut attr, c::PTHREAD_CREATE_DETACHED);
        }
        if rc == 0 {
            rc = pthread_attr_setsigmask_np(&mut attr, &all);
        }
        if let (0, Some(cpus)) = (rc, cpus) {
            rc = c::pthread_attr_setaffinity_np(
                &mut attr,
                std::mem::size_of::<c::cpu_set_t>(),
                cpus,
            );
        }
        if rc == 0 {
            let mut t: c::pthread_t = 0;
            rc = c::pthread_create(&mut t, &attr, watch_thread, std::ptr::null_mut());
            if rc == 0 {
                let _ = THREAD.set(t);
            }
        }
        c::pthread_attr_destroy(&mut attr);
        rc
    }
}

/// The watchdog thread: sleeps until the deadline, then answers and exits.
extern "C" fn watch_thread(_: *mut nix::libc::c_void) -> *mut nix::libc::c_void {
    let Some(w) = WATCH.get() else {
        return std::ptr::null_mut();
    };
    loop {
        // SAFETY: sleeps on a timespec that lives in a static.
        let rc = unsafe {
            nix::libc::clock_nanosleep(
                nix::libc::CLOCK_MONOTONIC,
                nix::libc::TIMER_ABSTIME,
                &w.deadline,
                std::ptr::null_mut(),
            )
        };
        if rc != nix::libc::EINTR {
            break;
        }
    }
    fire(&w.command, w.bound, w.name)
}

/// Moves the watchdog thread onto the CPU this thread runs on (`sched_getcpu(3)`,
/// `pthread_setaffinity_np(3)`), for the process's exit; nothing without a watchdog.
/// Call last, once the result is out and the call's work done.
///
/// Why: `exit_group(2)` kills the watchdog with SIGKILL, and the process is reaped only
/// once it too has exited, tearing down the address space and the file table as the
/// last thread. Asleep on another CPU ([`other_cpus`]), it must first be woken there,
/// a CPU usually idle (here a halted vCPU). On this CPU it is queued beside the exiting
/// main thread and runs as soon as that one is gone. The move costs one system call on
/// a sleeping thread, which changes its mask only. Measured (docs/testing.md "Where
/// the watchdog's wall went"): the ADD+DEL cycle's median wall 3.8 and 5.2 ms shorter
/// than with the thread left on the other CPUs (two same-run A/Bs), and 1.00-1.03x of
/// a build without a watchdog in three more. The bound still holds: the watchdog runs
/// on this CPU whenever the main thread waits.
pub fn before_exit() {
    use nix::libc as c;
    let Some(t) = THREAD.get() else {
        return;
    };
    let Some(cpu) = current_cpu() else {
        return;
    };
    // SAFETY: `t` names the watchdog thread, which does not end before the process
    // does (it sleeps until the bound, then ends the process); the set is initialised.
    unsafe {
        let mut one: c::cpu_set_t = std::mem::zeroed();
        c::CPU_SET(cpu, &mut one);
        c::pthread_setaffinity_np(*t, std::mem::size_of::<c::cpu_set_t>(), &one);
    }
}

/// Sets the `cniVersion` of the watchdog's error object (the call's, once stdin is
/// read; the latest version before). Later calls are ignored.
pub fn set_version(v: &str) {
    let _ = VERSION.set(v.to_string());
}

/// Claims stdout for the main thread's result. Returns at once unless the watchdog has
/// answered, in which case it never returns (the watchdog ends the process).
pub fn claim_output() {
    match STATE.compare_exchange(IDLE, WRITING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) | Err(WRITING) | Err(DONE) => {}
        Err(_) => park_forever(),
    }
}

/// Records that the main thread is done with stdout and will exit with `status`, so a
/// watchdog that reaches the bound from now on exits with it and writes nothing. Never
/// returns when the watchdog has already answered.
pub fn output_done(status: i32) {
    EXIT_STATUS.store(status, Ordering::Release);
    let mut cur = STATE.load(Ordering::Acquire);
    loop {
        if cur == FIRED {
            park_forever();
        }
        match STATE.compare_exchange(cur, DONE, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// At the bound: answers (once) and exits; see the module.
fn fire(command: &str, bound: Duration, name: &str) -> ! {
    if STATE
        .compare_exchange(IDLE, FIRED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // The main thread's result is out (or going out): its exit status stands.
        let until = Instant::now() + WRITE_GRACE;
        while STATE.load(Ordering::Acquire) == WRITING && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = match STATE.load(Ordering::Acquire) {
            DONE => EXIT_STATUS.load(Ordering::Acquire),
            _ => 1,
        };
        exit_now(status);
    }
    let waiting = main_thread_wait();
    let msg = format!(
        "{command} did not end within {} s of its start ({name}): the process exits now, leaving its journal for the next DEL or GC, which go on from the steps already done; the main thread was {waiting}",
        bound.as_secs()
    );
    let version = VERSION
        .get()
        .map(String::as_str)
        .unwrap_or(crate::cni::Version::LATEST.as_str());
    let mut out = CniError::try_later(msg.clone())
        .to_json(version)
        .to_string();
    out.push('\n');
    write_all_raw(1, out.as_bytes());
    kill_after(LOG_GRACE);
    crate::logging::emergency(&msg);
    exit_now(1);
}

/// Ends the process at once with `status` (`_exit(2)`: no destructors, no atexit
/// handlers, stdout's buffer is not flushed: the main thread's result, when it has
/// one, was flushed before [`output_done`]).
fn exit_now(status: i32) -> ! {
    // SAFETY: _exit ends the process; it touches no memory of ours.
    unsafe { nix::libc::_exit(status) }
}

/// Writes all of `buf` to `fd` with `write(2)`, retrying on `EINTR` and after a short
/// write; gives up on any other error (a closed stdout: nobody reads the answer).
/// Never takes std's stdout lock, which the main thread may hold.
fn write_all_raw(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: writes from a live buffer of the given length.
        let n = unsafe { nix::libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Arms a one-shot CLOCK_MONOTONIC timer that SIGKILLs the process after `after`
/// (`timer_create(2)` with `SIGEV_SIGNAL`): a backstop for what the watchdog does after
/// its answer is out. The timer is never deleted (the process ends first).
fn kill_after(after: Duration) {
    use nix::sys::signal::{SigEvent, SigevNotify, Signal};
    use nix::sys::time::TimeSpec;
    use nix::sys::timer::{Expiration, Timer, TimerSetTimeFlags};
    let Ok(mut t) = Timer::new(
        nix::time::ClockId::CLOCK_MONOTONIC,
        SigEvent::new(SigevNotify::SigevSignal {
            signal: Signal::SIGKILL,
            si_value: 0,
        }),
    ) else {
        return;
    };
    if t.set(
        Expiration::OneShot(TimeSpec::from_duration(after)),
        TimerSetTimeFlags::empty(),
    )
    .is_ok()
    {
        std::mem::forget(t);
    }
}

/// Where the main thread (whose thread ID is the process ID) is, for the log and the
/// error message: the system call it is in and the kernel function it sleeps in, from
/// `/proc/self/task/<tid>/syscall` (the call number first, or `running`) and `wchan`
/// (proc(5)). `running` means on a CPU, in user space or inside a system call, so a
/// `running` thread is looked at again, up to [`LOOKS`] times 5 ms apart, until it is
/// seen blocked; its system time (`stat` field 15, `stime`) tells a thread running in
/// the kernel from one in user space. Issue 50's hung DEL was such a thread: a read(2)
/// of the node file looping in the guest kernel's 9p client (netfs retrying a short
/// read for ever), on a CPU most of the time; [`describe_wait`] words it.
fn main_thread_wait() -> String {
    let tid = crate::fsutil::pid();
    let read = |f: &str| {
        crate::fsutil::read_text(std::path::Path::new(&format!("/proc/self/task/{tid}/{f}")))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let stime = || stat_stime(&read("stat"));
    let before = stime();
    let mut looks = Vec::new();
    for i in 0..LOOKS {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let look = (read("syscall"), read("wchan"));
        let running = look.0 == "running";
        looks.push(look);
        if !running {
            break;
        }
    }
    let grew = match (before, stime()) {
        (Some(b), Some(a)) => Some(a > b),
        _ => None,
    };
    describe_wait(&looks, grew)
}

/// How many times [`main_thread_wait`] looks at a `running` main thread.
const LOOKS: usize = 20;

/// Field 15 (`stime`, clock ticks) of a `/proc/<pid>/task/<tid>/stat` line (proc(5));
/// `None` when it does not parse.
fn stat_stime(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields 3 on follow
    // the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(12)?.parse().ok()
}

/// The words for the main thread's looks (`syscall` and `wchan` of proc(5), the last one
/// the first not `running`, if any) and whether its system time grew meanwhile.
fn describe_wait(looks: &[(String, String)], kernel_time_grew: Option<bool>) -> String {
    let running = looks.iter().filter(|(s, _)| s == "running").count();
    let Some((syscall, wchan)) = looks.last() else {
        return "in an unknown state".into();
    };
    let first = syscall.split_whitespace().next().unwrap_or("");
    if first == "running" {
        return match kernel_time_grew {
            Some(true) => format!(
                "on a CPU in each of {running} looks, its system time growing: running inside a system call, in the kernel"
            ),
            Some(false) => format!(
                "on a CPU in each of {running} looks, its system time not growing: running in user space"
            ),
            None => format!("on a CPU in each of {running} looks (in user space or the kernel)"),
        };
    }
    let also = if running > 0 {
        format!(" (on a CPU in {running} of {} looks before)", looks.len())
    } else {
        String::new()
    };
    let Ok(nr) = first.parse::<i64>() else {
        return match first {
            "" => "in an unknown state".into(),
            s => format!("{s} (not in a system call)"),
        };
    };
    if nr < 0 {
        return format!("not in a system call{also}");
    }
    let at = match wchan.as_str() {
        "" | "0" => String::new(),
        w => format!(", sleeping in the kernel at {w}"),
    };
    format!("in system call {nr} ({}){at}{also}", syscall_name(nr))
}

/// The name of system call `nr` for the calls a verb can wait in; `?` for the others.
fn syscall_name(nr: i64) -> &'static str {
    use nix::libc as c;
    match nr {
        c::SYS_read => "read",
        c::SYS_write => "write",
        c::SYS_openat => "openat",
        c::SYS_close => "close",
        c::SYS_flock => "flock",
        c::SYS_recvfrom => "recvfrom",
        c::SYS_recvmsg => "recvmsg",
        c::SYS_sendmsg => "sendmsg",
        c::SYS_sendto => "sendto",
        c::SYS_wait4 => "wait4",
        c::SYS_waitid => "waitid",
        c::SYS_clock_nanosleep => "clock_nanosleep",
        c::SYS_nanosleep => "nanosleep",
        c::SYS_futex => "futex",
        c::SYS_ppoll => "ppoll",
        c::SYS_pselect6 => "pselect6",
        c::SYS_statx => "statx",
        c::SYS_fsync => "fsync",
        c::SYS_fdatasync => "fdatasync",
        c::SYS_renameat2 => "renameat2",
        c::SYS_getdents64 => "getdents64",
        c::SYS_setns => "setns",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_but_version_has_its_bound() {
        assert_eq!(
            bound_for("DEL"),
            Some((Duration::from_secs(60), "DEL_BUDGET"))
        );
        assert_eq!(
            bound_for("ADD"),
            Some((Duration::from_secs(220), "ADD_BUDGET"))
        );
        for v in ["CHECK", "GC", "STATUS"] {
            assert_eq!(bound_for(v), Some((Duration::from_secs(80), "VERB_BUDGET")));
        }
        assert_eq!(bound_for("VERSION"), None);
        assert_eq!(bound_for("bogus"), None);
    }

    /// The main thread's wait as /proc shows it: this test's thread sleeping in the
    /// kernel is not the main thread, so only the shape is checked.
    #[test]
    fn the_main_threads_wait_is_named() {
        let w = main_thread_wait();
        assert!(!w.is_empty());
        assert_eq!(syscall_name(nix::libc::SYS_read), "read");
        assert_eq!(syscall_name(-5), "?");
    }

    fn look(syscall: &str, wchan: &str) -> (String, String) {
        (syscall.to_string(), wchan.to_string())
    }

    /// Issue 50's hung DEL, as the lab showed it (tests/real_kernel/churn.rs with
    /// `LAB_CHURN_SHRINK=1`): a read(2) looping in the kernel's 9p client, `running` in
    /// /proc most of the time. It is in a system call, in the kernel; never "not in a
    /// system call".
    #[test]
    fn a_thread_running_inside_a_system_call_is_not_called_out_of_one() {
        let blocked = look(
            "0 0x6 0x55d0 0x2000 0x0 0x0 0x0 0x7ffc 0x7f12",
            "p9_client_rpc",
        );
        assert_eq!(
            describe_wait(&[look("running", "0"), blocked.clone()], Some(true)),
            "in system call 0 (read), sleeping in the kernel at p9_client_rpc (on a CPU in 1 of 2 looks before)"
        );
        assert_eq!(
            describe_wait(&[blocked], Some(false)),
            "in system call 0 (read), sleeping in the kernel at p9_client_rpc"
        );
        let spinning = vec![look("running", "0"); LOOKS];
        let w = describe_wait(&spinning, Some(true));
        assert_eq!(
            w,
            "on a CPU in each of 20 looks, its system time growing: running inside a system call, in the kernel"
        );
        assert!(!w.contains("not in a system call"));
        assert!(describe_wait(&spinning, Some(false)).ends_with("running in user space"));
        assert_eq!(describe_wait(&[], None), "in an unknown state");
        assert_eq!(
            describe_wait(&[look("-1 0x7ffc 0x7f12", "0")], None),
            "not in a system call"
        );
    }

    #[test]
    fn stime_is_field_15_after_the_command_name() {
        let stat = "356 (ib-sriov (x) y) R 341 340 293 0 -1 4194560 326 0 0 0 2 263 0 0 20 0";
        assert_eq!(stat_stime(stat), Some(263));
        assert_eq!(stat_stime("garbage"), None);
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        assert!(stat_stime(&own).is_some(), "{own}");
    }
}
