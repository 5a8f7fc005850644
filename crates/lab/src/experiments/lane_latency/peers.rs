//! The rows of `kairos lane latency` that are not the lane: what a host gets from the testbed
//! without Kairos, measured the way the lane's row is (64-byte messages every period from host
//! `from` to host `to` across the bridge, one-way latency per message), so each row says what
//! the lane adds over it.
//!
//! - [`Peer::UdpBlocking`]: a plain UDP sender and a receiver blocked in `recvmsg`, unmarked, so
//!   the messages take the bulk class at every egress (behind a flood when there is one).
//! - [`Peer::UdpBusyPoll`]: the same with the receiver spinning on a non-blocking socket: the
//!   receiving host's wake-up taken out, the network left as it is.
//! - [`Peer::PriorityOnly`]: the sender marks its socket as lane traffic (QJump's idea on this
//!   kernel: DSCP EF, which the testbed's filters put in the lane class at every egress, and
//!   `SO_PRIORITY` naming the lane class, which counts at the sender's own egress only; see
//!   [`kairos_io::lane_testbed`]); the receiver is the plain blocking one. No host does anything
//!   else: priority in the network without a schedule or admission.
//! - [`Peer::Sockperf`]: `sockperf ping-pong` against `sockperf server` at the same size and
//!   rate, a tool others know; its one-way latency is half a round trip ([`super::sockperf`]).
//!   Two ways it is not the others' kind of row. It is a closed loop: the client sends its
//!   next request only once the last reply is in, so `--mps` is a ceiling, and when a round
//!   trip takes longer than the period (under a flood, milliseconds) it sends fewer messages
//!   (measured here: 5,503 in its window idle, 321 flooded) and never queues behind its own.
//!   And it runs whole seconds and keeps only its valid window (after 400 ms, before the last
//!   50 ms), so it runs for enough seconds to hold `packets` messages there, and `sent` is the
//!   requests of that window, usually more than `packets`.
//!
//! # The UDP rows
//!
//! The sockets are made in their hosts' namespaces ([`LaneTestbed::socket`] and
//! [`LaneTestbed::lane_socket`]) and each is used by a thread that runs inside its host
//! ([`LaneTestbed::in_host`]), the sender in `from`, the receiver in `to`, both of this process
//! and both joined before [`run`] returns, on every path. The sender sleeps to absolute times
//! (`CLOCK_MONOTONIC`, one period apart, so a late wake-up does not shift the ones after) and
//! reads `CLOCK_REALTIME` just before each send; the payload carries the sequence number and
//! that stamp. The receiver reads `CLOCK_REALTIME` right after each receive returns and asks
//! the kernel for its software receive stamp (`SO_TIMESTAMPING`), so a sample splits into the
//! network's part (sent to kernel stamp) and the receiving host's (kernel stamp to the program).
//! All three stamps are one clock of one machine, read in different namespaces.
//!
//! Warm-up messages go first, a millisecond apart, and are not counted: the first datagram to
//! a host waits for ARP, and the kernel turns receive stamping on only some time after a socket
//! asks (a static key flipped by a work item, which a loaded machine runs late: measured here,
//! a flooded run whose first 300 messages all came without a stamp). So the sender sends at
//! least [`WARMUP_MESSAGES`] and goes on until the receiver has had a stamped one, for at most
//! [`WARMUP_LIMIT`] (then the run goes ahead, its samples without `kernel_ns`).
//! A caller that runs rows one after another holds
//! [`kairos_sys::net::options::RxTimestampsHeld`] across them, as the experiment does, so
//! that only the first row waits.
//!
//! The receiver stops when every message has come, or [`RECEIVE_GRACE`] after the sender ended
//! (however it ended); a message still in flight then is lost. A sequence number seen twice, or
//! not one of this run's, is passed over, so lost = sent - samples.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kairos_io::lane_testbed::{LANE_CLASS, LaneTestbed};
use kairos_sys::child::OwnedChild;
use kairos_sys::clock::{monotonic_ns, realtime_ns, sleep_until_ns};
use kairos_sys::net::{MmsgBatch, options};

use super::load::require_tool;
use super::sockperf;
use crate::harness::InvalidConfig;

pub use super::samples::{PeerRun, Sample};

/// A row of the experiment that is not the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Plain UDP, unmarked; the receiver blocks in `recvmsg`.
    UdpBlocking,
    /// Plain UDP, unmarked; the receiver spins on a non-blocking socket.
    UdpBusyPoll,
    /// The sender's socket marked as lane traffic; the receiver blocks.
    PriorityOnly,
    /// `sockperf ping-pong` against `sockperf server`; half the round trip.
    Sockperf,
}

impl Peer {
    /// Every peer, in the order the experiment shows them.
    pub const ALL: [Peer; 4] = [Peer::UdpBlocking, Peer::UdpBusyPoll, Peer::PriorityOnly, Peer::Sockperf];

    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            Peer::UdpBlocking => "udp blocking",
            Peer::UdpBusyPoll => "udp busy-poll",
            Peer::PriorityOnly => "priority only",
            Peer::Sockperf => "sockperf",
        }
    }
}

/// What a peer's run sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSettings {
    /// The sending host.
    pub from: usize,
    /// The receiving host.
    pub to: usize,
    /// Between two messages, [`MIN_PERIOD`] to [`MAX_PERIOD`].
    pub period: Duration,
    /// Messages, 1 to [`MAX_PACKETS`].
    pub packets: u64,
    /// Each message's UDP payload, [`MIN_MESSAGE_BYTES`] to [`MAX_MESSAGE_BYTES`].
    pub message_bytes: usize,
}

/// The shortest period: below it the sender's wake-ups, not the network, set the spacing.
pub const MIN_PERIOD: Duration = Duration::from_micros(10);
/// The longest period.
pub const MAX_PERIOD: Duration = Duration::from_secs(1);
/// The most messages a run sends (the samples are kept in memory).
pub const MAX_PACKETS: u64 = 10_000_000;
/// The smallest message: the sequence number and the send stamp.
pub const MIN_MESSAGE_BYTES: usize = 16;
/// The largest message: one datagram in one Ethernet frame of the veths' MTU.
pub const MAX_MESSAGE_BYTES: usize = 1400;
/// How long a receiver waits for stragglers after the sender's last message: well past a full
/// bulk queue's delay at the testbed's rate (1000 frames at 1 Gbit/s, 12 ms).
pub const RECEIVE_GRACE: Duration = Duration::from_millis(250);

/// The fewest warm-up messages before the measured ones.
pub const WARMUP_MESSAGES: u64 = 8;
/// The longest warm-up: the wait for the kernel's receive stamps ends there.
pub const WARMUP_LIMIT: Duration = Duration::from_secs(2);
/// Between two warm-up messages.
const WARMUP_SPACING_NS: u64 = 1_000_000;
/// The sequence number warm-up messages carry (never a measured one's).
const WARMUP_SEQ: u64 = u64::MAX;
/// How long a blocked receiver sleeps before looking whether the sender has ended.
const RECEIVE_POLL: Duration = Duration::from_millis(10);
/// The receiver's socket buffer: a flood's delay never makes it overflow.
const RECEIVE_BUFFER_BYTES: usize = 4 << 20;

impl PeerSettings {
    /// Checks every field against its limit; the error is one line naming the field.
    pub fn check(&self) -> Result<(), InvalidConfig> {
        if self.from == self.to {
            return Err(InvalidConfig::new(format!(
                "the sending and receiving hosts must differ, both are h{}",
                self.from
            )));
        }
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&self.period) {
            return Err(InvalidConfig::new(format!(
                "the period must be from 10 us to 1 s, got {:?}",
                self.period
            )));
        }
        if !(1..=MAX_PACKETS).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "packets must be from 1 to {MAX_PACKETS}, got {}",
                self.packets
            )));
        }
        if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&self.message_bytes) {
            return Err(InvalidConfig::new(format!(
                "the message size must be from {MIN_MESSAGE_BYTES} to {MAX_MESSAGE_BYTES} bytes, got {}",
                self.message_bytes
            )));
        }
        Ok(())
    }

    fn period_ns(&self) -> u64 {
        self.period.as_nanos() as u64
    }
}

/// Runs `peer` once on `testbed` with `settings`: everything it started (threads, sockperf)
/// has ended when it returns, whatever it returns.
pub fn run(testbed: &LaneTestbed, peer: Peer, settings: &PeerSettings) -> Result<PeerRun> {
    settings.check().map_err(|e| anyhow!("{}: {e}", peer.name()))?;
    for host in [settings.from, settings.to] {
        testbed.host(host)?;
    }
    let result = match peer {
        Peer::UdpBlocking => udp(testbed, settings, Mark::None, Receive::Blocking),
        Peer::UdpBusyPoll => udp(testbed, settings, Mark::None, Receive::BusyPoll),
        Peer::PriorityOnly => udp(testbed, settings, Mark::Lane, Receive::Blocking),
        Peer::Sockperf => sockperf_run(testbed, settings),
    };
    result.with_context(|| format!("the {} row, h{} to h{}", peer.name(), settings.from, settings.to))
}

/// How the sender marks its socket.
#[derive(Clone, Copy)]
enum Mark {
    None,
    Lane,
}

/// How the receiver waits.
#[derive(Clone, Copy)]
enum Receive {
    Blocking,
    BusyPoll,
}

/// The socket priority that names the lane class to HTB (`1:10` as major:minor).
fn lane_priority() -> u32 {
    let (major, minor) = LANE_CLASS.split_once(':').unwrap_or(("1", "10"));
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap_or(0);
    (hex(major) << 16) | hex(minor)
}

fn udp(testbed: &LaneTestbed, settings: &PeerSettings, mark: Mark, receive: Receive) -> Result<PeerRun> {
    let receiver = testbed.socket(settings.to, 0)?;
    let sender = match mark {
        Mark::None => testbed.socket(settings.from, 0)?,
        Mark::Lane => {
            let socket = testbed.lane_socket(settings.from, 0)?;
            // After IP_TOS, which sets the priority from the type-of-service byte.
            options::set_priority(&socket, lane_priority()).context("setsockopt SO_PRIORITY")?;
            socket
        }
    };
    sender.connect(receiver.local_addr()?).context("connect the sender")?;
    // Connected both ways: the receiver takes this sender's datagrams only.
    receiver.connect(sender.local_addr()?).context("connect the receiver")?;
    options::enable_rx_timestamps(&receiver).context("setsockopt SO_TIMESTAMPING")?;
    options::set_receive_buffer(&receiver, RECEIVE_BUFFER_BYTES).context("setsockopt SO_RCVBUF")?;
    match receive {
        Receive::Blocking => receiver.set_read_timeout(Some(RECEIVE_POLL))?,
        Receive::BusyPoll => receiver.set_nonblocking(true)?,
    }
    let flags = Flags::default();
    let (sent, samples) = std::thread::scope(|s| {
        let receiving = s.spawn(|| {
            testbed.in_host(settings.to, || receive_messages(&receiver, settings, receive, &flags))
        });
        let sent = testbed.in_host(settings.from, || send_messages(&sender, settings, &flags));
        let samples = match receiving.join() {
            Ok(samples) => samples,
            Err(_) => Ok(Err(anyhow!("the receiver thread panicked"))),
        };
        (sent, samples)
    });
    // The sender's error first: a receiver that stopped early stopped because of it.
    let sent = sent??;
    let samples = samples??;
    Ok(PeerRun { samples, sent })
}

/// What the two threads tell each other.
#[derive(Default)]
struct Flags {
    /// Set when the sender has ended, however it ended.
    sender_done: AtomicBool,
    /// Set when the receiver has ended early (an error), so the sender stops.
    receiver_gone: AtomicBool,
    /// Set when the receiver has had a datagram with the kernel's receive stamp.
    stamped: AtomicBool,
}

/// Sets its flag when dropped: on a return, an error and a panic alike.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn send_messages(socket: &UdpSocket, settings: &PeerSettings, flags: &Flags) -> Result<u64> {
    let _done = SetOnDrop(&flags.sender_done);
    let mut payload = vec![0u8; settings.message_bytes];
    let mut send = |seq: u64| -> Result<()> {
        payload[..8].copy_from_slice(&seq.to_le_bytes());
        let sent_ns = realtime_ns();
        payload[8..16].copy_from_slice(&sent_ns.to_le_bytes());
        socket.send(&payload).with_context(|| format!("send message {seq}"))?;
        Ok(())
    };
    let warmup_end_ns = monotonic_ns() + WARMUP_LIMIT.as_nanos() as u64;
    let mut warmups = 0;
    while warmups < WARMUP_MESSAGES || !flags.stamped.load(Ordering::Acquire) {
        if monotonic_ns() > warmup_end_ns || flags.receiver_gone.load(Ordering::Acquire) {
            break;
        }
        send(WARMUP_SEQ)?;
        warmups += 1;
        sleep_until_ns(monotonic_ns() + WARMUP_SPACING_NS);
    }
    let period_ns = settings.period_ns();
    let start_ns = monotonic_ns() + period_ns;
    let mut sent = 0;
    for seq in 0..settings.packets {
        if flags.receiver_gone.load(Ordering::Acquire) {
            break;
        }
        sleep_until_ns(start_ns + seq * period_ns);
        send(seq)?;
        sent += 1;
    }
    Ok(sent)
}

fn receive_messages(
    socket: &UdpSocket,
    settings: &PeerSettings,
    receive: Receive,
    flags: &Flags,
) -> Result<Vec<Sample>> {
    let _gone = SetOnDrop(&flags.receiver_gone);
    let packets = settings.packets as usize;
    let mut seen = vec![false; packets];
    let mut samples = Vec::with_capacity(packets);
    let mut batch = MmsgBatch::new();
    let mut buffer = [0u8; 2048];
    let mut sender_done_at: Option<u64> = None;
    let grace_ns = RECEIVE_GRACE.as_nanos() as u64;
    while samples.len() < packets {
        if flags.sender_done.load(Ordering::Acquire) {
            let since = *sender_done_at.get_or_insert_with(monotonic_ns);
            if monotonic_ns() > since + grace_ns {
                break;
            }
        }
        let got = match receive {
            Receive::Blocking => batch.recv_waiting(socket, &mut [&mut buffer[..]], true),
            Receive::BusyPoll => batch.recv_into(socket, &mut [&mut buffer[..]], true),
        };
        // Read first, before anything else is done with the datagram.
        let received_ns = realtime_ns();
        match got {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) =>
            {
                if matches!(receive, Receive::BusyPoll) {
                    std::hint::spin_loop();
                }
                continue;
            }
            Err(e) => return Err(e).context("receive"),
        }
        let length = batch.lengths()[0];
        if length < MIN_MESSAGE_BYTES {
            continue;
        }
        let word = |at: usize| u64::from_le_bytes(buffer[at..at + 8].try_into().unwrap_or([0; 8]));
        let (seq, sent_ns) = (word(0), word(8));
        let kernel_ns = batch.rx_timestamps_ns()[0];
        if kernel_ns.is_some() {
            flags.stamped.store(true, Ordering::Release);
        }
        let Some(first) = seen.get_mut(seq as usize).filter(|s| !**s) else { continue };
        *first = true;
        samples.push(Sample { seq, sent_ns, received_ns, kernel_ns });
    }
    Ok(samples)
}

/// sockperf's server port in the receiving host (its own namespace: nothing else binds there).
const SOCKPERF_PORT: u16 = 11111;
/// What sockperf leaves out of its valid window: the first 400 ms and the last 50 ms.
const SOCKPERF_SKIPPED_NS: u64 = 450_000_000;
/// How long a server has to bind its socket.
const SERVER_START: Duration = Duration::from_secs(5);
/// How long past its run the client has to write its log and exit.
const CLIENT_SLACK: Duration = Duration::from_secs(10);
/// The most of the client's log read: far more than ten million rows.
const LOG_LIMIT: u64 = 1 << 30;

/// `sockperf server` in host `to`, `sockperf ping-pong` in host `from` with a full log, read.
fn sockperf_run(testbed: &LaneTestbed, settings: &PeerSettings) -> Result<PeerRun> {
    require_tool("sockperf", "sockperf", "the sockperf row")?;
    let dir = ScratchDir::new("sockperf")?;
    let address = testbed.host(settings.to)?.address.to_string();
    let port = SOCKPERF_PORT.to_string();
    let mut server = testbed.host_command(settings.to, "sockperf")?;
    server.args(["server", "-i", &address, "-p", &port]);
    let mut server = spawn_logged(&mut server, &dir.path().join("server.out"), "sockperf server")?;
    wait_bound(testbed, settings.to, SOCKPERF_PORT, "udp", &mut server, &dir.path().join("server.out"))?;

    // sockperf runs whole seconds and keeps what it sent after its warm-up and before its
    // cool-down: enough seconds for `packets` messages in between. Its rate is whole messages a
    // second: the period's, rounded.
    let period_ns = settings.period_ns();
    let seconds = (settings.packets * period_ns + SOCKPERF_SKIPPED_NS).div_ceil(1_000_000_000).max(1);
    let mps = ((1_000_000_000 + period_ns / 2) / period_ns).max(1);
    let log = dir.path().join("full.csv");
    let mut client = testbed.host_command(settings.from, "sockperf")?;
    client.args(["ping-pong", "-i", &address, "-p", &port, "-m", &settings.message_bytes.to_string()]);
    client.args(["--mps", &mps.to_string(), "-t", &seconds.to_string()]);
    client.arg("--full-log").arg(&log);
    let origin_ns = realtime_ns();
    let client_out = dir.path().join("client.out");
    let mut client = spawn_logged(&mut client, &client_out, "sockperf ping-pong")?;
    let deadline = Instant::now() + Duration::from_secs(seconds) + CLIENT_SLACK;
    let status = loop {
        if let Some(status) = client.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("sockperf ping-pong ran past {} s (killed)", seconds + CLIENT_SLACK.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        bail!("sockperf ping-pong failed ({status}): {}", last_line(&client_out));
    }
    if server.try_wait()?.is_some() {
        bail!("sockperf server ended during the run: {}", last_line(&dir.path().join("server.out")));
    }
    let text = kairos_sys::fs::read_text(&log, LOG_LIMIT)?;
    Ok(sockperf::parse(&text, origin_ns)?)
}

/// Starts `command` as an owned child with its output and errors in `out` (a file, so a long
/// run never fills a pipe nobody reads).
pub(crate) fn spawn_logged(command: &mut Command, out: &Path, name: &str) -> Result<OwnedChild> {
    let file = std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    OwnedChild::spawn_named(command, name).with_context(|| format!("start {name}"))
}

/// The last non-empty line of a child's output file, for its error.
pub(crate) fn last_line(out: &Path) -> String {
    let text = kairos_sys::fs::read_text(out, 1 << 20).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string()
}

/// Waits until a socket of host `host` is bound to `port` (`protocol` `udp`) or listens on it
/// (`tcp`), while `child`, which is to make it, runs; `out` has the child's output.
pub(crate) fn wait_bound(
    testbed: &LaneTestbed,
    host: usize,
    port: u16,
    protocol: &str,
    child: &mut OwnedChild,
    out: &Path,
) -> Result<()> {
    let deadline = Instant::now() + SERVER_START;
    loop {
        if testbed.in_host(host, || bound(port, protocol))?? {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{} ended before it was ready ({status}): {}", child.name(), last_line(out));
        }
        if Instant::now() > deadline {
            bail!("{} did not bind port {port} within {} s", child.name(), SERVER_START.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a socket of the calling thread's network namespace is bound (UDP) or listening
/// (TCP) on `port`: `/proc/thread-self/net/{udp,tcp}`, which are the thread's namespace's (the
/// `/proc/net` link is the process's).
pub(crate) fn bound(port: u16, protocol: &str) -> Result<bool> {
    let path = format!("/proc/thread-self/net/{protocol}");
    let text = kairos_sys::fs::read_text(Path::new(&path), 16 << 20)?;
    let want = format!(":{port:04X}");
    Ok(text.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // local_address is `ADDR:PORT` in hex; TCP's state 0A is LISTEN.
        fields.get(1).is_some_and(|local| local.ends_with(&want))
            && (protocol != "tcp" || fields.get(3) == Some(&"0A"))
    }))
}

/// A directory of this process's for a child's files, removed with them on drop.
#[derive(Debug)]
pub(crate) struct ScratchDir {
    path: PathBuf,
    /// Removes the directory if a signal ends the process before this is dropped.
    _undo: kairos_sys::cleanup::Registration,
}

impl ScratchDir {
    pub(crate) fn new(what: &str) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("kairos-{what}-{}-{n}", std::process::id()));
        // Made and registered under one hold: a signal between the two would leave it behind.
        let _hold = kairos_sys::cleanup::hold_off();
        // Left by an earlier process of the same id: ours now.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).with_context(|| format!("create {}", path.display()))?;
        let doomed = path.clone();
        let undo =
            kairos_sys::cleanup::register(format!("scratch directory {}", path.display()), move || {
                let _ = std::fs::remove_dir_all(doomed);
            });
        Ok(Self { path, _undo: undo })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PeerSettings {
        PeerSettings { from: 0, to: 1, period: Duration::from_micros(100), packets: 300, message_bytes: 64 }
    }

    #[test]
    fn the_names_are_the_rows_names() {
        let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["udp blocking", "udp busy-poll", "priority only", "sockperf"]);
    }

    #[test]
    fn settings_are_checked_field_by_field_in_one_line() {
        assert_eq!(settings().check(), Ok(()));
        let with = |change: fn(&mut PeerSettings)| {
            let mut s = settings();
            change(&mut s);
            let error = s.check().unwrap_err().to_string();
            assert!(!error.contains('\n'), "{error}");
            error
        };
        assert!(with(|s| s.to = 0).contains("must differ, both are h0"));
        assert!(with(|s| s.period = Duration::from_micros(9)).contains("from 10 us to 1 s, got 9"));
        assert!(with(|s| s.period = Duration::from_millis(1001)).contains("from 10 us to 1 s"));
        assert!(with(|s| s.packets = 0).contains("packets must be from 1 to 10000000, got 0"));
        assert!(with(|s| s.packets = MAX_PACKETS + 1).contains("packets"));
        assert!(with(|s| s.message_bytes = 15).contains("from 16 to 1400 bytes, got 15"));
        assert!(with(|s| s.message_bytes = 1401).contains("got 1401"));
        for ok in [
            PeerSettings { period: MIN_PERIOD, packets: 1, message_bytes: 16, ..settings() },
            PeerSettings { period: MAX_PERIOD, packets: MAX_PACKETS, message_bytes: 1400, ..settings() },
        ] {
            assert_eq!(ok.check(), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn the_lane_priority_names_the_lane_class() {
        assert_eq!(LANE_CLASS, "1:10");
        assert_eq!(lane_priority(), 0x1_0010);
    }

    #[test]
    fn a_bound_udp_socket_is_seen_in_the_threads_namespace() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(bound(port, "udp").unwrap());
        drop(socket);
        assert!(!bound(port, "udp").unwrap());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(bound(port, "tcp").unwrap());
    }

    #[test]
    fn a_scratch_directory_goes_with_its_files() {
        let dir = ScratchDir::new("peers-test").unwrap();
        std::fs::write(dir.path().join("x"), b"y").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
