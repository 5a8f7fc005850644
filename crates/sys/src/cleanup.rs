//! The process's one answer to SIGINT, SIGTERM and SIGHUP: undo every system change a run still
//! holds, say so on one line, and exit with 128 + the signal number.
//!
//! A run changes the machine beyond its own memory: it starts child processes, makes network
//! namespaces, splits cpusets. Their owners undo them on drop, which covers returns, errors and
//! panics, but not a signal: its default action ends the process without running a single
//! destructor. So each owner, when it makes a change, [`register`]s an undo action and keeps
//! the [`Registration`]; dropping it (the normal path) withdraws the action. [`install`] starts
//! one thread that waits for the three signals (through `signal-hook`, so the work is not done
//! in a signal handler's restricted context); on the first it runs every registered action once,
//! newest first (a child started in a namespace goes before the namespace), prints
//! `kairos: interrupted by SIGTERM; removed ...` on stderr and exits with 128 + the signal.
//!
//! Mechanism and contract:
//! - A change and its registration must not be split by the signal: a namespace made just after
//!   the handler ran would outlive the process. Owners make the change while holding
//!   [`hold_off`]; the handler waits for every hold to end (at most [`HOLD_OFF_LIMIT`], so a
//!   stuck owner cannot keep the process alive) before it takes the actions.
//! - Once the handler has taken the actions, they are its alone: a thread that then registers,
//!   withdraws or holds off waits until the process exits, so an owner's drop never undoes a
//!   change the handler is undoing too (a child's process id reaped twice could name another
//!   process by then).
//! - Undo actions run on the handler's thread, may start processes (`ip netns del`) and may
//!   use [`crate::child::OwnedChild`]: on that thread registering is a no-op.
//! - The handler's thread must run while real-time threads spin: the experiments pin theirs to
//!   the last core, so it runs on the other cores, and at `SCHED_FIFO` 99 where permitted (with
//!   reset-on-fork, so the commands it starts run at normal priority).

use std::cell::Cell;
use std::io;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long the handler waits for owners in the middle of a change ([`hold_off`]) before it
/// undoes what is registered anyway.
pub const HOLD_OFF_LIMIT: Duration = Duration::from_secs(5);

/// The signals that end a run cleanly.
pub const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The `SCHED_FIFO` priority of the handler's thread, above every thread Kairos makes real-time.
const HANDLER_PRIORITY: i32 = 99;

type Undo = Box<dyn FnOnce() + Send>;

struct Action {
    id: u64,
    what: String,
    undo: Undo,
}

struct Registry {
    next_id: u64,
    actions: Vec<Action>,
    /// Owners in the middle of a change ([`hold_off`]).
    holding: usize,
    /// A signal arrived: no new hold begins.
    signalled: bool,
    /// The handler took the actions: they are its alone.
    taken: bool,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { next_id: 0, actions: Vec::new(), holding: 0, signalled: false, taken: false });
/// Notified when a hold ends.
static HOLDS_ENDED: Condvar = Condvar::new();

thread_local! {
    /// Whether this thread is the handler's (its undo actions may register and hold off freely).
    static IS_HANDLER: Cell<bool> = const { Cell::new(false) };
    /// How many holds this thread has (a change made of smaller ones nests them).
    static HOLDS_HERE: Cell<usize> = const { Cell::new(0) };
}

fn registry() -> MutexGuard<'static, Registry> {
    // The registry's state stays consistent across a panic (each change is one push or
    // retain), so a poisoned lock is still the truth.
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_handler() -> bool {
    IS_HANDLER.with(Cell::get)
}

/// The handler has taken over: the process exits as soon as it has undone everything, so the
/// calling thread waits for that instead of racing it.
fn wait_for_exit(guard: MutexGuard<'static, Registry>) -> ! {
    drop(guard);
    loop {
        std::thread::park();
    }
}

/// Starts the signal thread and returns once it is placed (once; later calls return the first
/// call's answer). Called by
/// [`register`] too, but a program calls it first thing so that a signal before any change
/// still exits with 128 + its number.
pub fn install() -> io::Result<()> {
    static INSTALLED: OnceLock<Result<(), InstallFailure>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let mut signals = signal_hook::iterator::Signals::new(SIGNALS)
                .map_err(|e| InstallFailure::Catch(e.to_string()))?;
            let (placed, was_placed) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("kairos-cleanup".into())
                .spawn(move || {
                    place_handler_thread();
                    let _ = placed.send(());
                    if let Some(signal) = signals.forever().next() {
                        let removed = undo_all();
                        eprintln!("{}", interrupted_line(signal, &removed));
                        std::process::exit(128 + signal);
                    }
                })
                .map_err(|e| InstallFailure::Spawn(e.to_string()))?;
            // Returns once the thread runs where it should; a signal before that waits for it
            // in signal-hook's queue.
            was_placed.recv().map_err(|_| InstallFailure::Died)
        })
        .clone()
        .map_err(io::Error::other)
}

/// Why the signal thread could not be started: kept, and given to every later caller (an
/// `io::Error` cannot be cloned, so the causes are kept as text).
#[derive(Debug, Clone, thiserror::Error)]
enum InstallFailure {
    /// signal-hook could not take the signals.
    #[error("cannot catch SIGINT, SIGTERM and SIGHUP: {0}")]
    Catch(String),
    /// The thread could not be spawned.
    #[error("cannot start the signal thread: {0}")]
    Spawn(String),
    /// The thread ended before it said it was placed.
    #[error("the signal thread died as it started")]
    Died,
}

/// Keeps the handler's thread off the last core (where the experiments pin their real-time
/// threads) and above them where permitted. Both are best effort: on one core, or without
/// `CAP_SYS_NICE`, nothing here runs real-time threads either.
fn place_handler_thread() {
    IS_HANDLER.with(|flag| flag.set(true));
    let cores = crate::proc::online_cores();
    if cores > 1 {
        let others: Vec<usize> = (0..cores - 1).collect();
        let _ = crate::thread::pin_current_thread_to(&others);
    }
    let _ = crate::thread::set_fifo_reset_on_fork(HANDLER_PRIORITY);
}

/// Waits for changes under way, takes every action and runs each once, newest first; what each
/// undid, in that order.
fn undo_all() -> Vec<String> {
    let mut registry = registry();
    registry.signalled = true;
    let (mut registry, _) = HOLDS_ENDED
        .wait_timeout_while(registry, HOLD_OFF_LIMIT, |r| r.holding > 0)
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    registry.taken = true;
    let actions = std::mem::take(&mut registry.actions);
    drop(registry);
    actions
        .into_iter()
        .rev()
        .map(|action| {
            (action.undo)();
            action.what
        })
        .collect()
}

/// The line the handler prints.
fn interrupted_line(signal: i32, removed: &[String]) -> String {
    let name = match signal {
        libc::SIGINT => "SIGINT".to_string(),
        libc::SIGTERM => "SIGTERM".to_string(),
        libc::SIGHUP => "SIGHUP".to_string(),
        other => format!("signal {other}"),
    };
    if removed.is_empty() {
        format!("kairos: interrupted by {name}; nothing to remove")
    } else {
        format!("kairos: interrupted by {name}; removed {}", removed.join("; "))
    }
}

/// An undo action the handler runs if a signal comes before this is dropped. Dropping it
/// withdraws the action (the owner undoes the change itself).
#[must_use = "dropping a registration withdraws its undo action at once"]
#[derive(Debug)]
pub struct Registration {
    /// `None` on the handler's own thread, where there is nothing to register with.
    id: Option<u64>,
}

/// Registers `undo` for a change just made (under [`hold_off`]); `what` says what it removes,
/// for the handler's line ("network namespaces a, b").
pub fn register(what: impl Into<String>, undo: impl FnOnce() + Send + 'static) -> Registration {
    if is_handler() {
        return Registration { id: None };
    }
    // Without the signal thread the action would never run; its failure is the caller's to
    // report through `install`, which the program calls first.
    let _ = install();
    let mut registry = registry();
    if registry.taken {
        wait_for_exit(registry);
    }
    let id = registry.next_id;
    registry.next_id += 1;
    registry.actions.push(Action { id, what: what.into(), undo: Box::new(undo) });
    Registration { id: Some(id) }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut registry = registry();
        if registry.taken {
            wait_for_exit(registry);
        }
        registry.actions.retain(|a| a.id != id);
    }
}

/// Holds the handler off while a change is made and registered, or undone and withdrawn.
#[must_use = "the hold ends when this is dropped"]
#[derive(Debug)]
pub struct HoldOff {
    counted: bool,
    /// Counted in its thread's `HOLDS_HERE`, so it ends there.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Starts a hold: a signal arriving now is handled once the hold ends, so the change under way
/// is either registered (and undone by the handler) or not made. Holds nest. After a signal,
/// a thread that holds none waits for the exit instead.
pub fn hold_off() -> HoldOff {
    if is_handler() {
        return HoldOff { counted: false, _not_send: std::marker::PhantomData };
    }
    let mut registry = registry();
    // A thread already holding finishes its change: the handler is waiting for it.
    if registry.signalled && HOLDS_HERE.with(Cell::get) == 0 {
        wait_for_exit(registry);
    }
    registry.holding += 1;
    HOLDS_HERE.with(|holds| holds.set(holds.get() + 1));
    HoldOff { counted: true, _not_send: std::marker::PhantomData }
}

impl Drop for HoldOff {
    fn drop(&mut self) {
        if self.counted {
            HOLDS_HERE.with(|holds| holds.set(holds.get() - 1));
            registry().holding -= 1;
            HOLDS_ENDED.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    use crate::proc::ProcStat;

    /// Set in the copy of this test binary that a test starts and signals.
    const ROLE: &str = "KAIROS_CLEANUP_TEST_ROLE";

    #[test]
    fn the_line_names_the_signal_and_what_was_removed() {
        assert_eq!(
            interrupted_line(libc::SIGTERM, &["network namespaces a, b".into(), "child x (pid 7)".into()]),
            "kairos: interrupted by SIGTERM; removed network namespaces a, b; child x (pid 7)"
        );
        assert_eq!(interrupted_line(libc::SIGHUP, &[]), "kairos: interrupted by SIGHUP; nothing to remove");
    }

    /// The body of the signalled process (runs only when started by the tests below): registers
    /// two actions that write files, withdraws a third, says it is ready and sleeps. Ignored, so
    /// it never counts as a pass of its own; the tests below start it with `--ignored`.
    #[test]
    #[ignore = "the body of the signalled process; the signal tests start it"]
    fn signalled_process_body() {
        let dir = std::env::var(ROLE).expect("started by the signal tests, which set the role");
        let dir = std::path::PathBuf::from(dir);
        install().unwrap();
        let first = dir.join("first");
        let _kept_first = register("first", move || std::fs::write(first, "").unwrap());
        let second = dir.join("second");
        let (order, first) = (dir.join("order"), dir.join("first"));
        let _kept_second = register("second", move || {
            // Newest first: the first action has not run yet.
            std::fs::write(order, if first.exists() { "wrong" } else { "right" }).unwrap();
            std::fs::write(second, "").unwrap();
        });
        let withdrawn = dir.join("withdrawn");
        drop(register("withdrawn", move || std::fs::write(withdrawn, "").unwrap()));
        // A thread in the middle of a change when the signal comes: the handler waits for it,
        // and its nested hold does not wait for the exit.
        let (holding, is_holding) = std::sync::mpsc::channel();
        let late = dir.join("late");
        std::thread::spawn(move || {
            let outer = hold_off();
            holding.send(()).unwrap();
            while !registry().signalled {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(100));
            let inner = hold_off();
            let _kept_late = register("late", move || std::fs::write(late, "").unwrap());
            drop((inner, outer));
            std::thread::sleep(Duration::from_secs(60));
        });
        is_holding.recv().unwrap();
        // Where the handler's thread runs, for the parent to check.
        let handler_thread = || {
            std::fs::read_dir("/proc/self/task").unwrap().flatten().find(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "kairos-cleanup")
            })
        };
        let task = handler_thread().expect("no kairos-cleanup thread");
        println!("ready {}", task.file_name().to_string_lossy());
        std::thread::sleep(Duration::from_secs(60));
        panic!("no signal came");
    }

    fn signalled(signal: i32) {
        let dir = std::env::temp_dir().join(format!("kairos-cleanup-test-{}-{signal}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cleanup::tests::signalled_process_body",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let handler_tid = loop {
            let line = lines.next().expect("the body ended before it was ready").unwrap();
            // libtest prints the test's name on the same line first.
            if let Some((_, tid)) = line.split_once("ready ") {
                break tid.trim().to_string();
            }
        };
        let pid = child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{handler_tid}/status")).unwrap();
        let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
        let last = crate::proc::last_core().to_string();
        if crate::proc::online_cores() > 1 {
            assert!(
                !allowed.split([',', '-']).any(|c| c == last),
                "the handler may run on the last core: {allowed}"
            );
        }
        if crate::user::is_root() {
            let stat = ProcStat::read(format!("/proc/{pid}/task/{handler_tid}/stat")).unwrap();
            assert_eq!(
                (stat.realtime_priority(), stat.policy()),
                (Some(99), Some(libc::SCHED_FIFO as u32)),
                "the handler is not SCHED_FIFO 99"
            );
        }
        // SAFETY: kill has no memory preconditions; `pid` is our unreaped child.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(128 + signal), "{stderr}");
        let line = interrupted_line(signal, &["late".into(), "second".into(), "first".into()]);
        assert!(stderr.lines().any(|l| l == line), "no line {line:?} in {stderr}");
        for action in ["first", "second", "late"] {
            assert!(dir.join(action).exists(), "action {action} did not run");
        }
        assert_eq!(std::fs::read_to_string(dir.join("order")).unwrap(), "right");
        assert!(!dir.join("withdrawn").exists(), "a withdrawn action ran");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sigterm_runs_every_action_once_and_exits_143() {
        signalled(libc::SIGTERM);
    }

    #[test]
    fn sigint_runs_every_action_once_and_exits_130() {
        signalled(libc::SIGINT);
    }

    #[test]
    fn sighup_runs_every_action_once_and_exits_129() {
        signalled(libc::SIGHUP);
    }

    #[test]
    fn a_withdrawn_action_leaves_the_registry() {
        let registration = register("nothing", || {});
        let id = registration.id.unwrap();
        assert!(registry().actions.iter().any(|a| a.id == id));
        drop(registration);
        assert!(!registry().actions.iter().any(|a| a.id == id));
    }
}
