//! The plain UDP rows beside the lane ([`super::Peer::UdpBlocking`],
//! [`super::Peer::UdpBusyPoll`] and [`super::Peer::PriorityOnly`]): no program of their own, but
//! what a user's program does with plain sockets, done by two threads of this process.
//!
//! The sockets are made in their hosts' namespaces ([`LaneTestbed::socket`] and
//! [`LaneTestbed::lane_socket`]) and each is used by a thread that runs inside its host
//! ([`LaneTestbed::in_host`]), the sender in `from`, the receiver in `to`, both of this process
//! and both joined before [`super::run`] returns, on every path. The sender sleeps to absolute times
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
//! not one of this run's, is passed over, so lost = sent - samples. A send that finds the
//! socket's buffer full for [`SEND_LIMIT`] (an egress that stopped moving) fails the row.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kairos_io::lane_testbed::{LANE_CLASS, LaneTestbed};
use kairos_sys::clock::{monotonic_ns, realtime_ns, sleep_until_ns};
use kairos_sys::net::{MmsgBatch, options};

use super::{MIN_MESSAGE_BYTES, PeerRun, PeerSettings, Sample};

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
/// The longest a send may block on a full socket buffer (an egress that stopped moving) before
/// the row fails, instead of waiting on it for ever.
const SEND_LIMIT: Duration = Duration::from_secs(1);
/// The receiver's socket buffer: a flood's delay never makes it overflow.
const RECEIVE_BUFFER_BYTES: usize = 4 << 20;

/// How the sender marks its socket.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    /// Unmarked: the bulk class.
    None,
    /// Marked as lane traffic (DSCP EF and the lane class's priority).
    Lane,
}

/// How the receiver waits.
#[derive(Clone, Copy)]
pub(super) enum Receive {
    /// Blocked in the receive call.
    Blocking,
    /// Spinning on a non-blocking socket.
    BusyPoll,
}

/// The socket priority that names the lane class to HTB (`1:10` as major:minor).
fn lane_priority() -> u32 {
    let (major, minor) = LANE_CLASS.split_once(':').unwrap_or(("1", "10"));
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap_or(0);
    (hex(major) << 16) | hex(minor)
}

/// Runs one UDP row: the receiver in host `to`, the sender in `from`, both threads joined
/// before it returns.
pub(super) fn run(
    testbed: &LaneTestbed,
    settings: &PeerSettings,
    mark: Mark,
    receive: Receive,
) -> Result<PeerRun> {
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
    sender.set_write_timeout(Some(SEND_LIMIT)).context("setsockopt SO_SNDTIMEO")?;
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
        // Each side's flag is set however that side ends, entering its namespace included: a
        // side that never ran must still end the other's wait.
        let receiving = s.spawn(|| {
            let _gone = SetOnDrop(&flags.receiver_gone);
            testbed.in_host(settings.to, || receive_messages(&receiver, settings, receive, &flags))
        });
        let sent = {
            let _done = SetOnDrop(&flags.sender_done);
            testbed.in_host(settings.from, || send_messages(&sender, settings, &flags))
        };
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
    /// Set when the receiver has ended, however it ended (all messages in, an error, a namespace
    /// it could not enter), so the sender stops.
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
    let mut payload = vec![0u8; settings.message_bytes];
    let mut send = |seq: u64| -> Result<()> {
        payload[..8].copy_from_slice(&seq.to_le_bytes());
        let sent_ns = realtime_ns();
        payload[8..16].copy_from_slice(&sent_ns.to_le_bytes());
        match socket.send(&payload) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                bail!("send message {seq}: the socket's buffer stayed full for {SEND_LIMIT:?}")
            }
            Err(e) => Err(e).with_context(|| format!("send message {seq}")),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_priority_names_the_lane_class() {
        assert_eq!(LANE_CLASS, "1:10");
        assert_eq!(lane_priority(), 0x1_0010);
    }
}
