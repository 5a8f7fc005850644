//! The run-to-completion forwarder: one thread takes each burst from receive to transmit.
//!
//! The pipeline ([`crate::forwarder`]) hands every packet from the RX thread to the data thread
//! through a ring, and a sleeping data thread must be woken for it: on a small machine each
//! wake-up costs tens of microseconds of age. Here one thread does, per burst:
//!
//! 1. receive up to `burst` packets from the RX port (no system call on a packet ring);
//! 2. apply the burst's control packets (FIB writes), all before any of its data, as the
//!    all-Kairos pipeline's inline control does;
//! 3. admit the burst's data by the data policy: `keep-latest` keeps only the newest packet of
//!    each user (the others are counted as replaced), as the keyed ring does for what waits in
//!    it, and over all that waits in the port's receive ring (`DRAIN_BURSTS`); the FIFO
//!    policies have nothing to drop, as nothing waits here but the port's own receive ring;
//! 4. look up each admitted packet's address, stamp it, and send the batch (in one call, or in
//!    as many as a drained keep-latest batch larger than a port call needs).
//!
//! The FIB reader is offline while the burst's control is applied (this thread is then a
//! writer, and a writer waiting for a grace period must not wait for its own reader), and
//! reports a quiescent state after every burst. When the port is empty the
//! thread polls it a few more times (spinning, in case the next burst is close), or for
//! `idle_spin_ns` after its last burst, then sleeps on the port ([`kairos_io::PortBase::wait`], at most
//! `NAP`) with its FIB reader offline, so it never spins on an idle port and never holds back
//! an RCU writer while asleep: the RT shell's discipline, and a `SCHED_FIFO` forwarder
//! (`fifo_priority`) cannot starve the machine unless overloaded. A window longer than the gap
//! between the sender's bursts keeps the thread polling while traffic flows (no wake-up on a
//! packet's path); it is for a thread at normal priority only ([`ForwarderConfig::check`]),
//! whose core's kernel work keeps its share.
//!
//! The configuration's flush policy and ring sizes do not apply: a batch is sent at the end of
//! the burst (or keep-latest's drain) that made it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::packet::{Kind, Packet};
use kairos_fib::{Fib, FibReader};
use kairos_io::Port;
use kairos_metrics::AgeTable;
use kairos_sys::clock::monotonic_ns;

use crate::config::{ForwarderConfig, RingPolicy};
use crate::forwarder::{ForwarderStats, Idle, NAP, RingCounts, apply_control};

/// Keep-latest's receives before it sends, at most (the first included): while receives come
/// back full it receives again, so after a stall each user's newest packet leaves at once
/// instead of behind the backlog it replaces. 16 of 64 packets hold a stall of about 5 ms at
/// 200 kpps, and bound the wait of a packet that came first (decoding a burst costs a few
/// microseconds).
const DRAIN_BURSTS: usize = 16;

/// Runs until `stop`; the caller has checked `config`.
pub(crate) fn run<F: Fib, P: Port<Packet>>(
    config: &ForwarderConfig,
    users: u32,
    fib: Option<&F>,
    rx_port: &mut P,
    tx_port: &mut P,
    stop: &AtomicBool,
) -> ForwarderStats {
    let mut reader = fib.map(|f| f.reader().expect("a FIB reader"));
    let mut burst = vec![Packet::default(); config.burst];
    // Room for a drained keep-latest batch, so that the hot path does not allocate.
    let keep_latest = config.data_policy == RingPolicy::KeepLatest;
    let room = if keep_latest { (users as usize).min(config.burst * DRAIN_BURSTS) } else { config.burst };
    let mut batch: Vec<Packet> = Vec::with_capacity(room.max(config.burst));
    // Keep-latest: the batch index of each user's packet in this batch, valid while its stamp
    // is the batch's number (so nothing is cleared per batch).
    let mut slot: Vec<(u64, u32)> = if keep_latest { vec![(0, 0); users as usize] } else { Vec::new() };
    let mut fib_ages = AgeTable::new(users as usize, monotonic_ns());
    let (mut updates, mut errors) = (0u64, 0u64);
    let mut stats = ForwarderStats::default();
    let (mut ctrl, mut data) = (RingCounts::default(), RingCounts::default());
    let (mut tx_calls, mut tx_sent) = (0u64, 0u64);
    let mut batches = 0u64;
    let tx_max = tx_port.capabilities().max_burst.max(1);
    let mut idle = Idle(0);
    let (mut naps, mut held_sum_ns, mut held_packets) = (0u64, 0u64, 0u64);
    // Naps since the last burst: counted only once another burst comes, so the idle time before
    // the first packet and after the last is not counted as sleeping while traffic flowed.
    let mut naps_since_burst = 0u64;
    let mut last_burst_ns = monotonic_ns();
    while !stop.load(Ordering::Relaxed) {
        let n = rx_port.rx_burst(&mut burst).unwrap_or(0);
        if n == 0 {
            if let Some(reader) = reader.as_mut() {
                reader.quiescent();
            }
            let sleep = if config.idle_spin_ns > 0 {
                idle.window_over(last_burst_ns, config.idle_spin_ns)
            } else {
                idle.empty()
            };
            if sleep {
                naps_since_burst += 1;
                let mut nap = || rx_port.wait(NAP);
                match reader.as_mut() {
                    Some(reader) => reader.offline_while(&mut nap),
                    None => nap(),
                }
            }
            continue;
        }
        idle.busy();
        if batches > 0 {
            naps += naps_since_burst;
        }
        naps_since_burst = 0;
        // Keep-latest drains the port before it sends (DRAIN_BURSTS).
        let mut n = n;
        let mut received = 0;
        batches += 1;
        loop {
            received += 1;
            stats.rx_packets += n as u64;
            // Control first: every location update of the burst is in the FIB before its data
            // is looked up. The writer is this thread, so its reader is offline meanwhile: a
            // writer that waits for a grace period (the RCU FIB's direct reclamation) must not
            // wait for its own thread's reader.
            let mut apply = || {
                for p in burst[..n].iter().filter(|p| p.kind == Kind::Control) {
                    ctrl.offered += 1;
                    apply_control(fib, p, &mut fib_ages, &mut updates, &mut errors);
                }
            };
            match reader.as_mut() {
                Some(reader) if burst[..n].iter().any(|p| p.kind == Kind::Control) => {
                    reader.offline_while(&mut apply)
                }
                _ => apply(),
            }
            for p in burst[..n].iter().filter(|p| p.kind == Kind::Data && p.user < users) {
                data.offered += 1;
                if keep_latest {
                    let (stamp, at) = &mut slot[p.user as usize];
                    if *stamp == batches {
                        // A newer packet of the same user: it takes the older one's place.
                        batch[*at as usize] = *p;
                        data.replaced += 1;
                        continue;
                    }
                    *stamp = batches;
                    *at = batch.len() as u32;
                }
                batch.push(*p);
            }
            if !(keep_latest && n == burst.len() && received < DRAIN_BURSTS) {
                break;
            }
            n = rx_port.rx_burst(&mut burst).unwrap_or(0);
            if n == 0 {
                break;
            }
        }
        if let Some(reader) = reader.as_mut() {
            for p in &mut batch {
                if let Some(addr) = reader.lookup(p.user) {
                    p.addr_stamp_ns = addr.stamp_ns;
                    p.mac = addr.mac;
                }
                if config.data_work_ns > 0 {
                    kairos_sys::clock::spin_until_ns(monotonic_ns() + config.data_work_ns);
                }
            }
            reader.quiescent();
        }
        if !batch.is_empty() {
            // One clock read a batch: how long its packets have been here, from their receive
            // stamps (a port that stamps none leaves them 0, and they are not counted).
            let now = monotonic_ns();
            for p in batch.iter().filter(|p| p.rx_ns > 0) {
                held_sum_ns += now.saturating_sub(p.rx_ns);
                held_packets += 1;
            }
            // A drained keep-latest batch may hold more than a port call carries.
            for chunk in batch.chunks(tx_max) {
                let sent = tx_port.tx_burst(chunk).unwrap_or(0);
                stats.tx_drops += (chunk.len() - sent) as u64;
                if sent > 0 {
                    tx_calls += 1;
                    tx_sent += sent as u64;
                }
            }
            batch.clear();
        }
        // The window runs from the burst's end: a long burst (control waiting for a grace
        // period, or the spun work per packet) does not use it up.
        if config.idle_spin_ns > 0 {
            last_burst_ns = monotonic_ns();
        }
    }
    stats.ctrl_ring = ctrl;
    stats.data_ring = data;
    stats.fib_updates = updates;
    stats.fib_errors = errors;
    stats.fib_age_ns = fib_ages.summary(monotonic_ns()).avg_age_ns;
    stats.tx_avg_batch = if tx_calls == 0 { 0.0 } else { tx_sent as f64 / tx_calls as f64 };
    stats.naps = naps;
    stats.held_ns = if held_packets == 0 { 0.0 } else { held_sum_ns as f64 / held_packets as f64 };
    stats
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use kairos_fib::{AddrTuple, SeqlockFib};

    use super::*;
    use crate::config::Threading;

    fn packet(kind: Kind, user: u32, seq: u64, sent_ns: u64) -> Packet {
        Packet { kind, user, seq, sent_ns, ..Packet::default() }
    }

    /// Runs the run-to-completion forwarder over memory ports on a thread, sends `input` in one
    /// burst, and returns what came out and the forwarder's counts.
    fn forward(policy: RingPolicy, input: &[Packet]) -> (Vec<Packet>, ForwarderStats) {
        forward_with(ForwarderConfig { data_policy: policy, ..Default::default() }, input)
    }

    fn forward_with(config: ForwarderConfig, input: &[Packet]) -> (Vec<Packet>, ForwarderStats) {
        let (mut src_out, fwd_in) = kairos_io::memory::pair(1024, 64);
        let (fwd_out, mut src_in) = kairos_io::memory::pair(1024, 64);
        let fib = SeqlockFib::new(0..8, AddrTuple::new(crate::forwarder::NEXT_HOP, 0));
        let config = ForwarderConfig { threading: Threading::RunToCompletion, ..config };
        let stop = AtomicBool::new(false);
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            let fwd =
                s.spawn(|| crate::forwarder::run(&config, 8, Some(&fib), fwd_in, fwd_out, &stop, &started));
            assert_eq!(src_out.tx_burst(input).unwrap(), input.len());
            let mut out = Vec::new();
            let mut buf = vec![Packet::default(); 64];
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let n = src_in.rx_burst(&mut buf).unwrap();
                out.extend_from_slice(&buf[..n]);
                if n == 0 && !out.is_empty() {
                    std::thread::sleep(Duration::from_millis(20));
                    let n = src_in.rx_burst(&mut buf).unwrap();
                    out.extend_from_slice(&buf[..n]);
                    if n == 0 {
                        break;
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            (out, fwd.join().unwrap().unwrap())
        })
    }

    #[test]
    fn a_burst_is_forwarded_with_its_own_control_applied_first() {
        let input = [
            packet(Kind::Data, 1, 0, 10),
            packet(Kind::Control, 1, 1, 500),
            packet(Kind::Data, 2, 2, 20),
            packet(Kind::Data, 1, 3, 30),
        ];
        let (out, stats) = forward(RingPolicy::DropNewest, &input);
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [0, 2, 3]);
        // The update came after the first data packet but is applied before the burst's data.
        assert_eq!(out[0].addr_stamp_ns, 500);
        assert_eq!(out[2].addr_stamp_ns, 500);
        assert_eq!(out[1].addr_stamp_ns, 0, "user 2 has no address yet");
        assert_eq!((stats.rx_packets, stats.ctrl_ring.offered, stats.data_ring.offered), (4, 1, 3));
        assert_eq!((stats.fib_updates, stats.tx_drops, stats.data_ring.drops()), (1, 0, 0));
    }

    /// What the forwarder did with its receiving port, in order, at `CLOCK_MONOTONIC` ns.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Call {
        Rx(usize),
        Wait,
    }

    /// A memory port that logs the forwarder's receives and sleeps.
    struct Logged {
        port: kairos_io::memory::MemoryPort<Packet>,
        log: std::sync::Arc<std::sync::Mutex<Vec<(u64, Call)>>>,
    }

    impl Port<Packet> for Logged {
        fn rx_burst(&mut self, out: &mut [Packet]) -> Result<usize, kairos_io::PortError> {
            let n = self.port.rx_burst(out)?;
            self.log.lock().unwrap().push((monotonic_ns(), Call::Rx(n)));
            Ok(n)
        }
        fn tx_burst(&mut self, packets: &[Packet]) -> Result<usize, kairos_io::PortError> {
            self.port.tx_burst(packets)
        }
    }

    impl kairos_io::PortBase for Logged {
        fn capabilities(&self) -> kairos_io::Capabilities {
            self.port.capabilities()
        }
        fn stats(&self) -> kairos_io::PortStats {
            self.port.stats()
        }
        fn name(&self) -> &'static str {
            "logged"
        }
        fn wait(&mut self, timeout: Duration) {
            self.log.lock().unwrap().push((monotonic_ns(), Call::Wait));
            self.port.wait(timeout);
        }
    }

    #[test]
    fn with_a_spin_window_the_thread_polls_for_the_window_after_a_burst_then_sleeps_at_once() {
        const WINDOW_NS: u64 = 1_000_000;
        let (mut src_out, fwd_in) = kairos_io::memory::pair(1024, 64);
        let (fwd_out, _src_in) = kairos_io::memory::pair(1024, 64);
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let rx = Logged { port: fwd_in, log: log.clone() };
        let tx = Logged { port: fwd_out, log: std::sync::Arc::default() };
        let config = ForwarderConfig {
            threading: Threading::RunToCompletion,
            idle_spin_ns: WINDOW_NS,
            ..Default::default()
        };
        let (stop, started) = (AtomicBool::new(false), AtomicBool::new(false));
        let stats = std::thread::scope(|s| {
            let fwd =
                s.spawn(|| crate::forwarder::run::<SeqlockFib, _>(&config, 8, None, rx, tx, &stop, &started));
            // Let it fall asleep first, then hand it one burst and leave it idle for a while,
            // then one more packet, and idle again.
            std::thread::sleep(Duration::from_millis(20));
            src_out.tx_burst(&[packet(Kind::Data, 1, 0, 10), packet(Kind::Data, 2, 1, 20)]).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            src_out.tx_burst(&[packet(Kind::Data, 3, 2, 30)]).unwrap();
            std::thread::sleep(Duration::from_millis(10));
            stop.store(true, Ordering::Relaxed);
            fwd.join().unwrap().unwrap()
        });
        assert_eq!(stats.rx_packets, 3);
        let log = log.lock().unwrap().clone();
        let second = log.iter().position(|(_, c)| *c == Call::Rx(1)).expect("the second burst was taken");
        let log = &log[..second];
        // The sleeps between the two bursts are counted, not those before the first or after
        // the last. The time held runs from the memory port's stamp (when a burst was taken) to
        // the send: some time, and less than the test's (a preempted thread may take long).
        let burst = log.iter().position(|(_, c)| *c == Call::Rx(2)).expect("the burst was taken");
        assert_eq!(stats.naps, log[burst..].iter().filter(|(_, c)| *c == Call::Wait).count() as u64);
        assert!(stats.naps > 4, "it napped between the bursts: {stats:?}");
        assert!(stats.held_ns > 0.0 && stats.held_ns < 60_000_000.0, "{stats:?}");
        let burst_ns = log[burst].0;
        let first_wait = burst + log[burst..].iter().position(|(_, c)| *c == Call::Wait).expect("it slept");
        // After the burst it polled the idle port for the window before its first sleep.
        assert!(
            log[first_wait].0 - burst_ns >= WINDOW_NS,
            "slept {} ns after the burst",
            log[first_wait].0 - burst_ns
        );
        assert!(first_wait - burst > 2, "{} polls in the window", first_wait - burst - 1);
        // Past the window, a wake-up with nothing to take sleeps again after one poll.
        let after: Vec<Call> = log[first_wait..].iter().map(|(_, c)| *c).collect();
        assert!(after.len() > 4, "it woke from its 1 ms naps in the 30 ms");
        for pair in after.windows(2) {
            assert!(matches!(pair, [Call::Wait, Call::Rx(0)] | [Call::Rx(0), Call::Wait]), "{pair:?}");
        }
    }

    /// Keep-latest over `waiting` packets queued (users 1 to `users` in turn) before the
    /// forwarder starts, taken `burst` at a time: what it sent and its counts.
    fn drained(burst: usize, waiting: u64, users: u32) -> (Vec<Packet>, ForwarderStats) {
        let (mut src_out, fwd_in) = kairos_io::memory::pair(4096, 64);
        let (fwd_out, mut src_in) = kairos_io::memory::pair(4096, 64);
        let input: Vec<Packet> =
            (0..waiting).map(|seq| packet(Kind::Data, 1 + seq as u32 % users, seq, seq)).collect();
        for chunk in input.chunks(64) {
            assert_eq!(src_out.tx_burst(chunk).unwrap(), chunk.len());
        }
        let config = ForwarderConfig {
            threading: Threading::RunToCompletion,
            data_policy: RingPolicy::KeepLatest,
            burst,
            ..Default::default()
        };
        let (stop, started) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            let fwd = s.spawn(|| {
                crate::forwarder::run::<SeqlockFib, _>(
                    &config,
                    users + 1,
                    None,
                    fwd_in,
                    fwd_out,
                    &stop,
                    &started,
                )
            });
            let (mut out, mut buf) = (Vec::new(), vec![Packet::default(); 64]);
            let deadline = Instant::now() + Duration::from_secs(5);
            while out.len() < users as usize * waiting.div_ceil((burst * DRAIN_BURSTS) as u64) as usize
                && Instant::now() < deadline
            {
                let n = src_in.rx_burst(&mut buf).unwrap();
                out.extend_from_slice(&buf[..n]);
            }
            std::thread::sleep(Duration::from_millis(20));
            let n = src_in.rx_burst(&mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
            stop.store(true, Ordering::Relaxed);
            (out, fwd.join().unwrap().unwrap())
        })
    }

    #[test]
    fn keep_latest_drains_what_waits_and_sends_each_users_newest_first() {
        // 192 waiting, 16 a receive: all of it fits one drain (16 receives), so one packet of
        // each user leaves, the newest.
        let (out, stats) = drained(16, 192, 2);
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [190, 191]);
        assert_eq!((stats.rx_packets, stats.data_ring.replaced), (192, 190));
        // 4 a receive: a drain takes 64, so three batches leave, each with its newest two.
        let (out, stats) = drained(4, 192, 2);
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [62, 63, 126, 127, 190, 191]);
        assert_eq!((stats.rx_packets, stats.data_ring.replaced, stats.tx_drops), (192, 186, 0));
        // 150 users' newest: more than a port call carries (64), sent in three calls, none lost.
        let (out, stats) = drained(64, 600, 150);
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), (450..600).collect::<Vec<_>>());
        assert_eq!((stats.data_ring.replaced, stats.tx_drops), (450, 0));
        assert!((stats.tx_avg_batch - 50.0).abs() < 1e-9, "{}", stats.tx_avg_batch);
    }

    #[test]
    fn keep_latest_sends_only_each_users_newest_packet_of_a_burst() {
        let input = [
            packet(Kind::Data, 1, 0, 10),
            packet(Kind::Data, 2, 1, 20),
            packet(Kind::Data, 1, 2, 30),
            packet(Kind::Data, 1, 3, 40),
            packet(Kind::Data, 9, 4, 50),
        ];
        let (out, stats) = forward(RingPolicy::KeepLatest, &input);
        // User 1's newest takes its first packet's place; user 9 is past the users served.
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [3, 1]);
        assert_eq!((stats.data_ring.offered, stats.data_ring.replaced), (4, 2));
    }
}
