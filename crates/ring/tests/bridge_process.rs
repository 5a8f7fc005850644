//! Bridges between two processes over `kairos_sys::shm` regions. The test binary runs itself
//! again as the other side (the application; the test is the node): the environment variable
//! `KAIROS_BRIDGE_CHILD` names the child's role and the regions, and the child runs the ignored
//! test `child_side`. Regions are named after this process's id and unlinked on every path
//! (their owner is dropped on a panic too); the child is killed and reaped on every path.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kairos_ring::bridge::{Bridge, BridgeLayout, Mapped, SendError};
use kairos_sys::clock::monotonic_ns;
use kairos_sys::shm::{SharedRegion, shm_path};

mod bridge_messages;

const ROLE: &str = "KAIROS_BRIDGE_CHILD";
const MAX: usize = 120;
/// Long enough for a loaded 2-core machine; a hang fails instead of blocking the run.
const DEADLINE: Duration = Duration::from_secs(60);

type Memory = Mapped<SharedRegion>;

fn layout() -> BridgeLayout {
    BridgeLayout::for_messages(8, MAX).unwrap()
}

fn memory(region: SharedRegion) -> Memory {
    let (ptr, len) = (region.as_ptr(), region.len());
    // SAFETY: the region's mapping stays at `ptr` for `len` bytes until the region is dropped
    // (moving the handle does not move the mapping), and the region moves into the `Mapped`;
    // this process reaches the mapping only through the bridge's atomics.
    unsafe { Mapped::new(region, ptr, len) }.unwrap()
}

/// A region created by this test, named after the process and `what`, and its bridge.
fn create(what: &str) -> Bridge<Memory> {
    let path = shm_path(&format!("kairos-ring-bridge-{}-{what}", std::process::id())).unwrap();
    let region = SharedRegion::create(&path, layout().region_bytes()).unwrap();
    Bridge::init(memory(region), layout()).unwrap()
}

/// The child's side: attaches to a region the parent created.
fn attach(path: &Path) -> Bridge<Memory> {
    let region = SharedRegion::open(path, 1..=1 << 20).unwrap();
    Bridge::attach(memory(region)).unwrap()
}

fn path_of(bridge: &Bridge<Memory>) -> PathBuf {
    bridge.memory().owner().path().to_path_buf()
}

/// The child process, SIGKILLed and reaped when dropped (a test that fails leaves none behind).
struct ChildSide(Child);

impl ChildSide {
    fn spawn(role: &str, down: &Bridge<Memory>, up: &Bridge<Memory>) -> Self {
        let spec = format!("{role}:{}:{}", path_of(down).display(), path_of(up).display());
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_side", "--ignored", "--nocapture", "--test-threads=1"])
            .env(ROLE, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    fn wait(&mut self) -> ExitStatus {
        self.0.wait().unwrap()
    }
}

impl Drop for ChildSide {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The other process's side, selected by `KAIROS_BRIDGE_CHILD` (`role:down-path:up-path`).
#[test]
#[ignore = "the child side of the two-process tests, which run it"]
fn child_side() {
    let spec = std::env::var(ROLE).expect("run by the two-process tests");
    let mut parts = spec.splitn(3, ':');
    let (role, down, up) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let down = attach(Path::new(down)).into_consumer();
    let up = attach(Path::new(up)).into_producer();
    match role {
        "echo" => echo(down, up),
        "stream" => stream(down, up),
        other => panic!("unknown role {other}"),
    }
}

/// Sends back every message received, checking each, until the parent closes its side.
fn echo(mut down: kairos_ring::bridge::Consumer<Memory>, mut up: kairos_ring::bridge::Producer<Memory>) {
    let start = Instant::now();
    let mut buf = [0u8; MAX];
    let mut scratch = Vec::new();
    let mut seq = 0;
    loop {
        assert!(start.elapsed() < DEADLINE, "echo: stuck after {seq} messages");
        let closed = down.producer_closed();
        let Some(r) = down.try_recv(&mut buf).unwrap() else {
            if closed {
                break;
            }
            thread::yield_now();
            continue;
        };
        bridge_messages::check(seq, &buf[..r.len], MAX, &mut scratch);
        loop {
            match up.try_send(&buf[..r.len], r.stamp_ns) {
                Ok(()) => break,
                Err(SendError::Full) => thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
            assert!(start.elapsed() < DEADLINE, "echo: the parent stopped reading");
        }
        seq += 1;
    }
    up.close();
}

/// Sends numbered messages without end (until killed), beating as it goes, and reads what the
/// parent sends down.
fn stream(mut down: kairos_ring::bridge::Consumer<Memory>, mut up: kairos_ring::bridge::Producer<Memory>) {
    let start = Instant::now();
    let mut buf = [0u8; MAX];
    let mut msg = Vec::new();
    let mut scratch = Vec::new();
    let (mut seq, mut down_seq) = (0, 0);
    while start.elapsed() < DEADLINE {
        up.beat(monotonic_ns());
        bridge_messages::message(seq, MAX, &mut msg);
        match up.try_send(&msg, seq) {
            Ok(()) => seq += 1,
            Err(SendError::Full) => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
        while let Some(r) = down.try_recv(&mut buf).unwrap() {
            bridge_messages::check(down_seq, &buf[..r.len], MAX, &mut scratch);
            down_seq += 1;
        }
    }
    panic!("stream: not killed within {DEADLINE:?}");
}

/// The parent sends `N` messages down, the child echoes each back up: every message arrives
/// whole and in order both ways, and the child, having checked them too, exits cleanly.
#[test]
fn messages_cross_two_processes_intact_and_in_order() {
    const N: u64 = 200_000;
    let (down, up) = (create("echo-down"), create("echo-up"));
    let mut child = ChildSide::spawn("echo", &down, &up);
    let (mut tx, mut rx) = (down.into_producer(), up.into_consumer());
    let start = Instant::now();
    let mut buf = [0u8; MAX];
    let (mut msg, mut scratch) = (Vec::new(), Vec::new());
    let (mut sent, mut received) = (0, 0);
    while received < N {
        assert!(start.elapsed() < DEADLINE, "stuck: sent {sent}, received {received}");
        if sent < N {
            bridge_messages::message(sent, MAX, &mut msg);
            match tx.try_send(&msg, !sent) {
                Ok(()) => sent += 1,
                Err(SendError::Full) => {}
                Err(e) => panic!("{e}"),
            }
        }
        match rx.try_recv(&mut buf).unwrap() {
            Some(r) => {
                bridge_messages::check(received, &buf[..r.len], MAX, &mut scratch);
                assert_eq!(r.stamp_ns, !received, "stamp of message {received}");
                received += 1;
            }
            None => thread::yield_now(),
        }
    }
    let up_stats = rx.stats();
    tx.close();
    let status = child.wait();
    assert!(status.success(), "the child failed: {status}");
    assert!(rx.producer_closed(), "the child exited without closing its side");
    assert_eq!(rx.try_recv(&mut buf).unwrap(), None);
    assert_eq!((up_stats.sent, up_stats.received), (N, N));
}

/// The child streams messages up and is SIGKILLed mid-way, while it tries to send into a full
/// bridge: the parent's side goes on. What the child published before it died arrives whole
/// and in order, then the bridge is empty (no hang, no garbage), not closed, and its last
/// heartbeat precedes the child's end and stays; sends down to the dead child fill that bridge, then are
/// refused and counted.
#[test]
fn a_killed_peer_leaves_the_other_side_working() {
    const BEFORE_KILL: u64 = 20_000;
    let (down, up) = (create("kill-down"), create("kill-up"));
    let mut child = ChildSide::spawn("stream", &down, &up);
    let (mut tx, mut rx) = (down.into_producer(), up.into_consumer());
    let start = Instant::now();
    let start_ns = monotonic_ns();
    let mut buf = [0u8; MAX];
    let (mut msg, mut scratch) = (Vec::new(), Vec::new());
    let (mut received, mut sent_down) = (0, 0);
    while received < BEFORE_KILL {
        assert!(start.elapsed() < DEADLINE, "stuck: received {received}");
        if let Some(r) = rx.try_recv(&mut buf).unwrap() {
            bridge_messages::check(received, &buf[..r.len], MAX, &mut scratch);
            received += 1;
        } else {
            thread::yield_now();
        }
        bridge_messages::message(sent_down, MAX, &mut msg);
        if tx.try_send(&msg, 0).is_ok() {
            sent_down += 1;
        }
    }
    // Stop reading until the child has filled the bridge up (it goes on beating and trying),
    // and let it empty the bridge down, so both edges are there when it dies.
    let slots = layout().slots() as u64;
    while rx.stats().queued() < slots || tx.stats().queued() > 0 {
        assert!(start.elapsed() < DEADLINE, "the child stopped: {:?}", rx.stats());
        thread::yield_now();
    }
    thread::sleep(Duration::from_millis(20));
    child.0.kill().unwrap();
    let status = child.wait();
    let reaped_ns = monotonic_ns();
    const SIGKILL: i32 = 9;
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(SIGKILL), "{status}");

    while let Some(r) = rx.try_recv(&mut buf).unwrap() {
        bridge_messages::check(received, &buf[..r.len], MAX, &mut scratch);
        received += 1;
    }
    let drained = received - BEFORE_KILL;
    assert_eq!(drained, slots, "the full bridge's messages");
    for _ in 0..1000 {
        assert_eq!(rx.try_recv(&mut buf).unwrap(), None);
    }
    let after = rx.stats();
    assert!(!rx.producer_closed(), "a killed child closed its side");
    assert_eq!(after.sent, received, "the dead child's position moved");
    let beat = after.producer_beat_ns;
    assert!(
        beat >= start_ns && beat <= reaped_ns,
        "last beat {beat}, test from {start_ns}, reaped at {reaped_ns}"
    );

    let dropped_before = tx.stats().dropped_full;
    let mut refused = 0;
    for seq in sent_down..sent_down + 100 {
        bridge_messages::message(seq, MAX, &mut msg);
        match tx.try_send(&msg, 0) {
            Ok(()) => {}
            Err(SendError::Full) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(refused, 100 - slots, "the dead child's empty bridge takes {slots} messages");
    assert_eq!(tx.stats().dropped_full - dropped_before, refused);
    assert_eq!(rx.stats().producer_beat_ns, beat, "a dead child's heartbeat moved");
    eprintln!(
        "child killed after {BEFORE_KILL} messages up and {sent_down} down; {drained} drained after the \
         kill; {refused} of 100 later sends down refused; its last beat {} us before it was reaped",
        (reaped_ns - beat) / 1000
    );
}
