//! The node's rebind queue (`ib_sriov_cni::plugin::rebind_queue`, issue 31): turns in
//! arrival order, entries of killed processes (holding or waiting) never block it, a
//! waiter gives up (code 11) only when the queue stops moving for `lockTimeoutMs` or its
//! time bound comes, waiting costs no CPU, and the older binaries' node-wide flock
//! excludes and is excluded. Holders and waiters are threads of this process (flock(2)
//! locks belong to open file descriptions, so threads exclude each other as processes
//! do) and, where a process must die, children: this test binary re-executed running
//! only the ignored [`child_process`] test. Needs no root.

use ib_sriov_cni::cni::{code, CniError};
use ib_sriov_cni::fsutil::{lock_with_timeout, FileLock, LockError};
use ib_sriov_cni::plugin::rebind_queue::{Limits, QueueError, RebindQueue, RebindTurn};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Environment of a child: `<queue dir>\n<legacy lock>\n<status file>`.
const CHILD_ENV: &str = "IB_SRIOV_REBIND_QUEUE_CHILD";

/// Child side: enters the queue (waiting up to 60 s), writes `acquired` (or `error
/// <msg>`) to the status file, then holds its turn until killed (at most 60 s).
#[test]
#[ignore = "run by the tests below in a child process"]
fn child_process() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = job.split('\n').collect();
    let q = RebindQueue::new(parts[0], parts[1]);
    match q.enter(&limits(60_000, 120)) {
        Ok(turn) => {
            fs::write(parts[2], "acquired").unwrap();
            std::thread::sleep(Duration::from_secs(60));
            drop(turn);
        }
        Err(e) => fs::write(parts[2], format!("error {e}")).unwrap(),
    }
}

/// A child in the queue, SIGKILLed when dropped.
struct ChildInQueue {
    child: Child,
    status: PathBuf,
}

impl ChildInQueue {
    fn spawn(t: &T, name: &str) -> Self {
        let status = t.dir.path().join(format!("{name}.status"));
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!(
                    "{}\n{}\n{}",
                    t.q.dir().display(),
                    t.legacy.display(),
                    status.display()
                ),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        ChildInQueue { child, status }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn status(&self) -> Option<String> {
        fs::read_to_string(&self.status).ok()
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ChildInQueue {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A queue in a temporary directory.
struct T {
    dir: tempfile::TempDir,
    q: RebindQueue,
    legacy: PathBuf,
}

fn queue() -> T {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("locks/rebind");
    let q = RebindQueue::new(dir.path().join("locks/rebind.queue"), &legacy);
    T { dir, q, legacy }
}

/// `no_progress_ms` of stillness allowed; the turn must begin within `bound_s`.
fn limits(no_progress_ms: u64, bound_s: u64) -> Limits {
    Limits {
        no_progress: Duration::from_millis(no_progress_ms),
        begin_by: Instant::now() + Duration::from_secs(bound_s),
    }
}

/// Limits no test reaches: only a turn ends a wait.
fn patient() -> Limits {
    limits(30_000, 60)
}

/// Polls `f` (test side only) until true, failing after `secs`.
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pids(q: &RebindQueue) -> Vec<u32> {
    q.entries().unwrap().iter().map(|e| e.pid).collect()
}

/// What a waiter thread `w` (answering when its turn came, and the turn) got: its turn,
/// which came less than 2 s after `since` (`what` names that moment). Panics otherwise.
#[track_caller]
fn turn_soon_after<T, E: std::fmt::Debug>(
    w: std::thread::ScopedJoinHandle<'_, (Instant, Result<T, E>)>,
    since: Instant,
    what: &str,
) -> T {
    let (at, turn) = w.join().unwrap();
    let turn = turn.unwrap();
    let lag = at.duration_since(since);
    assert!(
        lag < Duration::from_secs(2),
        "turn came {lag:?} after {what}"
    );
    turn
}

fn len(q: &RebindQueue) -> usize {
    q.entries().unwrap().len()
}

/// Eight waiters arriving one after the other while a holder holds the queue get their
/// turns in exactly that order; a process that comes back right after its turn (the next
/// rail of a pod, the holder here, then each waiter) goes to the back and does not barge
/// in ahead of those already waiting, as it would on a bare flock (the releasing process
/// takes it again before the woken waiters run).
#[test]
fn turns_are_given_in_arrival_order() {
    const HOLDER: usize = 99;
    let t = queue();
    let q = &t.q;
    let holder = q.enter(&patient()).unwrap();
    let order = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..8 {
            let order = &order;
            s.spawn(move || {
                let turn = q.enter(&patient()).unwrap();
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(5));
                drop(turn);
                let again = q.enter(&patient()).unwrap();
                order.lock().unwrap().push(100 + i);
                drop(again);
            });
            wait_until(10, "the waiter's entry", || len(q) == i + 2);
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            order.lock().unwrap().is_empty(),
            "a waiter ran past the holder"
        );
        drop(holder);
        let again = q.enter(&patient()).unwrap();
        order.lock().unwrap().push(HOLDER);
        drop(again);
    });
    let want: Vec<usize> = (0..8).chain([HOLDER]).chain(100..108).collect();
    assert_eq!(*order.lock().unwrap(), want);
    assert!(q.entries().unwrap().is_empty());
}

/// A child holding its turn is SIGKILLed: the waiter behind it gets the turn at once (the
/// kernel released the dead owner's flock; no timeout is involved), and the dead entry
/// is gone.
#[test]
fn a_killed_holder_frees_the_queue_at_once() {
    let t = queue();
    let q = &t.q;
    let mut child = ChildInQueue::spawn(&t, "holder");
    wait_until(30, "the child's turn", || {
        child.status().as_deref() == Some("acquired")
    });
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let turn = q.enter(&patient());
            (Instant::now(), turn)
        });
        wait_until(10, "the waiter's entry", || len(q) == 2);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!w.is_finished(), "the waiter ran past a live holder");
        let killed = Instant::now();
        child.kill();
        let turn: RebindTurn = turn_soon_after(w, killed, "the kill");
        assert_eq!(pids(q), vec![std::process::id()], "the dead entry stays");
        drop(turn);
    });
    assert!(q.entries().unwrap().is_empty());
}

/// A child waiting in the middle of the queue is SIGKILLed: the waiter behind it still
/// waits for the live holder, and gets its turn as soon as the holder ends, past the
/// dead entry (which is removed); the killed child never had a turn.
#[test]
fn a_killed_waiter_does_not_block_those_behind_it() {
    let t = queue();
    let q = &t.q;
    let holder = q.enter(&patient()).unwrap();
    let mut child = ChildInQueue::spawn(&t, "waiter");
    let child_pid = child.pid();
    wait_until(30, "the child's entry", || pids(q).contains(&child_pid));
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let turn = q.enter(&patient());
            (Instant::now(), turn)
        });
        wait_until(10, "the waiter's entry", || len(q) == 3);
        child.kill();
        std::thread::sleep(Duration::from_millis(200));
        assert!(!w.is_finished(), "the waiter ran past a live holder");
        let released = Instant::now();
        drop(holder);
        let turn = turn_soon_after(w, released, "the release");
        assert_eq!(pids(q), vec![std::process::id()], "the dead entry stays");
        drop(turn);
    });
    assert_eq!(child.status(), None, "the killed waiter had a turn");
    assert!(q.entries().unwrap().is_empty());
}

/// A live holder (a child process) that never ends its turn: a waiter with
/// `lockTimeoutMs` 300 gives up after 300 ms with code 11, saying the queue has not moved
/// and how many are ahead, naming the queue directory and the holder's pid; its own
/// entry is gone.
#[test]
fn a_queue_that_does_not_move_gives_up_after_lock_timeout_with_code_11() {
    let t = queue();
    let q = &t.q;
    let child = ChildInQueue::spawn(&t, "holder");
    wait_until(30, "the child's turn", || {
        child.status().as_deref() == Some("acquired")
    });
    let t0 = Instant::now();
    let e = q.enter(&limits(300, 60)).unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(
        matches!(e, QueueError::NoProgress { ahead: 1, .. }),
        "{e:?}"
    );
    let e = CniError::from(e);
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    for want in [
        "has not moved for 0.3 s",
        "1 rebind(s) ahead",
        &q.dir().display().to_string(),
        &format!("pid {}", child.pid()),
    ] {
        assert!(e.msg.contains(want), "{want}: {}", e.msg);
    }
    assert_eq!(pids(q), vec![child.pid()]);
}

/// Seven turns of 100 ms ahead (holders releasing one after the other): a waiter with
/// `lockTimeoutMs` 300 waits over twice that in total without giving up, because the
/// queue keeps moving.
#[test]
fn a_moving_queue_is_waited_for_past_lock_timeout() {
    let t = queue();
    let q = &t.q;
    let hold = Duration::from_millis(100);
    let holder = q.enter(&patient()).unwrap();
    std::thread::scope(|s| {
        for i in 0..6 {
            s.spawn(move || {
                let turn = q.enter(&patient()).unwrap();
                std::thread::sleep(hold);
                drop(turn);
            });
            wait_until(10, "the waiter's entry", || len(q) == i + 2);
        }
        let last = s.spawn(|| q.enter(&limits(300, 60)));
        wait_until(10, "the last waiter's entry", || len(q) == 8);
        std::thread::sleep(hold);
        drop(holder);
        let turn = last.join().unwrap().unwrap();
        assert!(
            turn.waited() >= Duration::from_millis(600),
            "{:?}",
            turn.waited()
        );
    });
}

/// A waiter whose turn cannot begin by its time bound (400 ms here; the plugin's is
/// the verb's 80 s from its start minus 20 s for the rebind) gives up at that bound with
/// code 11 naming it, though the queue's `lockTimeoutMs` is far away; with the bound
/// already past, even a free queue is refused at once. No entry is left behind.
#[test]
fn the_time_bound_gives_up_with_code_11_naming_it() {
    let t = queue();
    let q = &t.q;
    let holder = q.enter(&patient()).unwrap();
    let t0 = Instant::now();
    let e = q
        .enter(&Limits {
            no_progress: Duration::from_secs(30),
            begin_by: t0 + Duration::from_millis(400),
        })
        .unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(matches!(e, QueueError::TimeBound { ahead: 1, .. }), "{e:?}");
    let e = CniError::from(e);
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    assert!(e.msg.contains("time bound"), "{}", e.msg);
    assert!(e.msg.contains(&q.dir().display().to_string()), "{}", e.msg);
    drop(holder);
    let t0 = Instant::now();
    let e = q
        .enter(&Limits {
            no_progress: Duration::from_secs(30),
            begin_by: t0,
        })
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert!(matches!(e, QueueError::TimeBound { ahead: 0, .. }), "{e:?}");
    assert!(q.entries().unwrap().is_empty());
}

/// An older binary holding the node-wide flock `locks/rebind` stops the first of the
/// queue (code 11 after `lockTimeoutMs`, naming that file); a turn in the queue holds
/// that flock, so an older binary cannot take it meanwhile; it is free after the turn.
#[test]
fn older_binaries_and_the_queue_exclude_each_other() {
    let t = queue();
    let q = &t.q;
    let old = lock_with_timeout(&t.legacy, Duration::from_millis(10)).unwrap();
    let e = CniError::from(q.enter(&limits(300, 60)).unwrap_err());
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    assert!(e.msg.contains(&t.legacy.display().to_string()), "{}", e.msg);
    assert!(q.entries().unwrap().is_empty());
    // Released while the queue's first waits for it: the turn begins.
    released_lets_the_first_in_and_a_turn_holds(q, old, &t.legacy);
}

/// `held`, the lock `file` the queue's first waits for, released while a waiter is the
/// queue's first: the waiter's turn begins only then. Then a turn holds `file` (another
/// taker times out) and frees it when it ends. Panics otherwise.
fn released_lets_the_first_in_and_a_turn_holds(q: &RebindQueue, held: FileLock, file: &Path) {
    std::thread::scope(|s| {
        let w = s.spawn(|| q.enter(&patient()));
        wait_until(10, "the waiter's entry", || len(q) == 1);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!w.is_finished());
        drop(held);
        drop(w.join().unwrap().unwrap());
    });
    let turn = q.enter(&patient()).unwrap();
    assert!(matches!(
        lock_with_timeout(file, Duration::from_millis(100)),
        Err(LockError::Timeout(..))
    ));
    drop(turn);
    drop(lock_with_timeout(file, Duration::from_millis(10)).unwrap());
}

/// CPU time and voluntary context switches of the calling thread
/// (`getrusage(RUSAGE_THREAD)`).
fn thread_usage() -> (Duration, i64) {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: nix::libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { nix::libc::getrusage(nix::libc::RUSAGE_THREAD, &mut ru) },
        0
    );
    let tv = |t: nix::libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_nvcsw)
}

/// A waiter blocked for a second behind a holder, with another waiter between them,
/// sleeps in the kernel on the first entry's flock and does not poll: next to no CPU,
/// and a handful of voluntary context switches (each blocking call is one; a poll every
/// 10 ms would be a hundred).
#[test]
fn waiting_does_not_poll() {
    let t = queue();
    let q = &t.q;
    let holder = q.enter(&patient()).unwrap();
    std::thread::scope(|s| {
        let middle = s.spawn(|| drop(q.enter(&patient()).unwrap()));
        wait_until(10, "the middle entry", || len(q) == 2);
        let w = s.spawn(|| {
            let (c0, n0) = thread_usage();
            let turn = q.enter(&patient()).unwrap();
            let (c1, n1) = thread_usage();
            (c1 - c0, n1 - n0, turn.waited())
        });
        wait_until(10, "the waiter's entry", || len(q) == 3);
        std::thread::sleep(Duration::from_secs(1));
        drop(holder);
        middle.join().unwrap();
        let (cpu, switches, waited) = w.join().unwrap();
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        assert!(
            cpu < Duration::from_millis(50),
            "{cpu:?} of CPU in {waited:?}"
        );
        assert!(
            switches < 20,
            "{switches} voluntary context switches in {waited:?}"
        );
    });
}

/// Entries are never visible unlocked while their owners live: four threads join and
/// leave 50 times each (more, until the scanner has seen an entry) while a scanner tries
/// to lock every entry it sees. Locking one must only ever succeed once its owner has
/// removed it (unlink, then close); an entry still in place that the scanner can lock
/// would be taken for dead by a waiter and removed under its live owner.
#[test]
fn an_entry_is_never_visible_unlocked() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = queue();
    let q = &t.q;
    let done = AtomicBool::new(false);
    let seen_unlocked = Mutex::new(Vec::new());
    let looked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let scanner = s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                for e in q.entries().unwrap_or_default() {
                    let p: &Path = &q.dir().join(&e.name);
                    let Ok(f) = fs::File::open(p) else { continue };
                    looked.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: flock on a descriptor this closure owns.
                    let r = unsafe {
                        nix::libc::flock(f.as_raw_fd(), nix::libc::LOCK_SH | nix::libc::LOCK_NB)
                    };
                    if r == 0 {
                        let ino = f.metadata().unwrap().ino();
                        if fs::metadata(p).is_ok_and(|m| m.ino() == ino) {
                            seen_unlocked.lock().unwrap().push(e.name.clone());
                        }
                    }
                }
            }
        });
        // Failures are collected, not panicked on, so the scanner always stops. Each
        // worker enters and leaves 50 times, and goes on (up to 20 s) until the scanner
        // has looked at an entry: on a loaded machine the scanner may not run at all
        // during the first 200 rounds, and a test whose scanner saw nothing shows nothing.
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    let mut errors = Vec::new();
                    let mut n = 0;
                    while n < 50
                        || (looked.load(Ordering::Relaxed) == 0
                            && std::time::Instant::now() < until)
                    {
                        if let Err(e) = q.enter(&patient()) {
                            errors.push(e.to_string());
                        }
                        n += 1;
                    }
                    errors
                })
            })
            .collect();
        let errors: Vec<String> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|_| vec!["panicked".into()]))
            .collect();
        done.store(true, Ordering::Relaxed);
        scanner.join().unwrap();
        assert_eq!(errors, Vec::<String>::new());
    });
    assert!(looked.into_inner() > 0, "the scanner saw no entry");
    assert_eq!(*seen_unlocked.lock().unwrap(), Vec::<String>::new());
    assert!(q.entries().unwrap().is_empty());
}

/// The Go ib-sriov-cni's node lock (issue 39 item 4), on a queue made `with_go_lock`:
/// held by a Go call, it stops the first of the queue (code 11 after `lockTimeoutMs`,
/// naming the file, the entry removed); released while waited for, the turn begins; a
/// turn holds it (a Go call cannot take it meanwhile) and releases it when it ends. Its
/// missing directory is created mode 0700, as the Go plugin creates it.
#[test]
fn the_go_plugins_node_lock_excludes_and_is_excluded() {
    use std::os::unix::fs::PermissionsExt;
    let t = queue();
    let go = t.dir.path().join("run/cni/ib-sriov/cni.lock");
    let q = &t.q.clone().with_go_lock(&go);
    drop(q.enter(&patient()).unwrap());
    let mode = fs::metadata(go.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let call = lock_with_timeout(&go, Duration::from_millis(10)).unwrap();
    let t0 = Instant::now();
    let e = CniError::from(q.enter(&limits(300, 60)).unwrap_err());
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    assert!(e.msg.contains(&go.display().to_string()), "{}", e.msg);
    assert!(e.msg.contains("Go ib-sriov-cni"), "{}", e.msg);
    assert!(q.entries().unwrap().is_empty());
    // The older binaries' lock is not kept while the Go lock is refused.
    drop(lock_with_timeout(&t.legacy, Duration::from_millis(10)).unwrap());
    released_lets_the_first_in_and_a_turn_holds(q, call, &go);
}
