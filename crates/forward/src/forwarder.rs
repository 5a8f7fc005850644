//! The forwarder under test, as in the source's Fig. 2: an RX thread that splits control from
//! data into two rings, a control thread that writes the FIB, and a data thread that reads it,
//! stamps each data packet with the address tuple's time stamp and sends it back. With
//! [`Threading::RunToCompletion`], [`run`] hands both ports to [`crate::rtc`] instead: one
//! thread, no rings.
//!
//! Buffers are pool indices; every ring counts its drops per reason. The TX stage runs on the
//! data thread (the source had a separate TX thread; on a 2-core machine one less spinning
//! thread matters more than the hand-off it saves), with the flush policy of [`Flush`].
//!
//! Idle threads spin a little, then sleep on a doorbell (the port's, or their ring's, rung by
//! the producer): with more threads than cores, a thread that spins on an empty ring steals the
//! core from the thread that would fill it. The data thread sleeps with its FIB reader offline,
//! so an RCU writer never waits for a sleeping reader.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::packet::{Kind, Packet};
use kairos_fib::{AddrTuple, Fib, FibReader};
use kairos_io::Port;
use kairos_io::pool::{
    Allocator, Buf, BufConsumer, BufProducer, Freer, KeyedBufConsumer, KeyedBufProducer, Pool, PoolError,
    buf_ring, keyed_buf_ring, pool,
};
use kairos_metrics::AgeTable;
use kairos_ring::{Doorbell, Overflow, RingStats};
use kairos_sys::clock::monotonic_ns;
use kairos_sys::stoppable_thread::panic_message;
use kairos_sys::thread::thread_cpu_time_ns;
use serde::Serialize;

use crate::config::{ConfigError, ControlMode, Flush, ForwarderConfig, RingPolicy, Threading};

/// The next-hop MAC every user is reached through (one next hop, as in the source's testbed:
/// the address tuple's time stamp is what tells addresses apart).
pub const NEXT_HOP: [u8; 6] = [0x02, 0x4b, 0x52, 0, 0, 1];

/// What the forwarder counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ForwarderStats {
    /// Packets received from the RX port, control and data.
    pub rx_packets: u64,
    /// What the control ring was offered and dropped (zero with inline control; run to
    /// completion counts the control packets it applied as offered).
    pub ctrl_ring: RingCounts,
    /// What the data ring (or, run to completion, the data policy) admitted and dropped.
    pub data_ring: RingCounts,
    /// Packets the TX port refused (dropped).
    pub tx_drops: u64,
    /// Packets dropped because the pool was empty.
    pub pool_drops: u64,
    /// Location updates written to the FIB.
    pub fib_updates: u64,
    /// Location updates the FIB refused (a user outside its table).
    pub fib_errors: u64,
    /// Packets sent per TX call (mean over calls that sent).
    pub tx_avg_batch: f64,
    /// Location-update age at the FIB: mean over users of the time-average of
    /// `now - stamp of the published entry`, ns.
    pub fib_age_ns: f64,
    /// Forwarder threads that asked for `SCHED_FIFO` and were refused (they ran at normal
    /// priority).
    pub fifo_refused: u64,
    /// CPU time its threads used over the run, ns (their CPU clocks).
    pub cpu_ns: u64,
    /// Times the run-to-completion thread went to sleep on its empty port between its first
    /// burst and its last (0 for the pipeline): with a spin window longer than every gap
    /// between bursts, 0.
    pub naps: u64,
    /// The run-to-completion thread's mean time from a packet's receive stamp (the port's:
    /// the kernel's on a socket) to the send call that carries it on, ns (0 for the pipeline):
    /// the part of the packet's age spent in this forwarder and its port's receive ring.
    pub held_ns: f64,
}

/// A ring's drops, as the summary prints them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RingCounts {
    /// Entries offered to the ring.
    pub offered: u64,
    /// Offered entries refused because the ring was full (tail drop).
    pub dropped_newest: u64,
    /// Queued entries discarded to admit newer ones (drop-oldest).
    pub dropped_oldest: u64,
    /// Queued entries replaced by a newer one of the same user (keep-latest).
    pub replaced: u64,
}

impl RingCounts {
    pub(crate) fn from(s: RingStats) -> Self {
        Self {
            offered: s.offered,
            dropped_newest: s.dropped_newest,
            dropped_oldest: s.dropped_oldest,
            replaced: s.replaced,
        }
    }

    /// All entries the ring discarded.
    pub fn drops(&self) -> u64 {
        self.dropped_newest + self.dropped_oldest + self.replaced
    }
}

/// How long an idle thread sleeps at most before looking again (and at the stop flag).
pub(crate) const NAP: Duration = Duration::from_millis(1);

/// Counts empty polls: spin `SPINS` of them, then sleep.
pub(crate) struct Idle(pub(crate) u32);

impl Idle {
    const SPINS: u32 = 64;

    /// Records an empty poll; true when the caller should sleep now.
    #[inline]
    pub(crate) fn empty(&mut self) -> bool {
        self.0 += 1;
        if self.0 < Self::SPINS {
            std::hint::spin_loop();
            false
        } else {
            true
        }
    }

    /// Records an empty poll in a spin window; true when more than `window_ns` has passed
    /// since `last_burst_ns`. The clock is read every [`Self::CLOCK_EVERY`] polls only: on a
    /// guest a read costs more than a poll of an empty ring (a profile of the polling forwarder
    /// found 18% of its core at one address, most likely the clock's read per empty poll).
    #[inline]
    pub(crate) fn window_over(&mut self, last_burst_ns: u64, window_ns: u64) -> bool {
        self.0 = self.0.wrapping_add(1);
        std::hint::spin_loop();
        let over = self.0.is_multiple_of(Self::CLOCK_EVERY)
            && monotonic_ns().saturating_sub(last_burst_ns) > window_ns;
        if over {
            // The next poll reads the clock too: a wake-up with nothing to take, past the
            // window, sleeps again after one poll.
            self.0 = Self::CLOCK_EVERY - 1;
        }
        over
    }

    const CLOCK_EVERY: u32 = 32;

    #[inline]
    pub(crate) fn busy(&mut self) {
        self.0 = 0;
    }
}

/// Makes the calling forwarder thread `SCHED_FIFO` when asked (and permitted): a woken
/// forwarder thread then preempts the spinning source at once instead of waiting for the end of
/// its time slice. The threads sleep when idle, so they cannot starve the machine unless
/// overloaded, and the kernel's real-time throttling bounds even that.
/// A refusal is counted in `refused`, so the run reports it instead of claiming a priority it
/// did not have.
pub(crate) fn realtime(config: &ForwarderConfig, refused: &AtomicU64) {
    if config.fifo_priority > 0 && kairos_sys::thread::set_fifo(config.fifo_priority).is_err() {
        refused.fetch_add(1, Ordering::Relaxed);
    }
}

enum DataIn {
    Fifo(BufProducer),
    Keyed(KeyedBufProducer),
}

enum DataOut {
    Fifo(BufConsumer),
    Keyed(KeyedBufConsumer),
}

impl DataOut {
    fn is_empty(&self) -> bool {
        match self {
            DataOut::Fifo(rx) => rx.is_empty(),
            DataOut::Keyed(rx) => rx.is_empty(),
        }
    }
}

/// Why the forwarder could not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ForwarderError {
    /// The configuration is not one the forwarder can run ([`ForwarderConfig::check`] says why).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The run-to-completion thread could not be pinned to its core.
    #[error("pinning the forwarder to core {core}: {error}")]
    Pin {
        /// The core asked for ([`ForwarderConfig::pin_core`]).
        core: usize,
        /// The system's refusal.
        error: std::io::Error,
    },
    /// The pool or a ring could not be made.
    #[error("{0}")]
    Pool(#[from] PoolError),
    /// A forwarder thread panicked; its message.
    #[error("the forwarder's {thread} thread panicked: {message}")]
    Panicked {
        /// Which thread: `control` or `data`.
        thread: &'static str,
        /// The panic's message.
        message: String,
    },
}

/// Runs the forwarder until `stop`; `fib` is `None` for the baseline (no addressing). `started`
/// is set once its threads run; a configuration [`ForwarderConfig::check`] refuses is an error
/// before any thread starts.
pub fn run<F: Fib, P: Port<Packet>>(
    config: &ForwarderConfig,
    users: u32,
    fib: Option<&F>,
    mut rx_port: P,
    mut tx_port: P,
    stop: &AtomicBool,
    started: &AtomicBool,
) -> Result<ForwarderStats, ForwarderError> {
    config.check(users)?;
    if config.threading == Threading::RunToCompletion {
        if let Some(core) = config.pin_core {
            kairos_sys::thread::pin_current_thread(core)
                .map_err(|error| ForwarderError::Pin { core, error })?;
        }
        let refused = AtomicU64::new(0);
        realtime(config, &refused);
        started.store(true, Ordering::Release);
        let cpu_before = thread_cpu_time_ns();
        let mut stats = crate::rtc::run(config, users, fib, &mut rx_port, &mut tx_port, stop);
        stats.fifo_refused = refused.load(Ordering::Relaxed);
        stats.cpu_ns = thread_cpu_time_ns().saturating_sub(cpu_before);
        return Ok(stats);
    }
    let pool_size = config.ctrl_ring + config.data_ring.max(users as usize) + 4 * config.burst + 1024;
    let (pool, mut alloc, freer) = pool(pool_size)?;
    let (ctrl_tx, ctrl_rx) = buf_ring(&pool, config.ctrl_ring, Overflow::DropNewest)?;
    let (data_tx, data_rx) = match config.data_policy {
        RingPolicy::DropNewest | RingPolicy::DropOldest => {
            let overflow = if config.data_policy == RingPolicy::DropOldest {
                Overflow::DropOldest
            } else {
                Overflow::DropNewest
            };
            let (tx, rx) = buf_ring(&pool, config.data_ring, overflow)?;
            (DataIn::Fifo(tx), DataOut::Fifo(rx))
        }
        RingPolicy::KeepLatest => {
            let (tx, rx) = keyed_buf_ring(&pool, config.data_ring, users as usize)?;
            (DataIn::Keyed(tx), DataOut::Keyed(rx))
        }
    };
    let (ctrl_bell, data_bell) = (Doorbell::new(), Doorbell::new());
    let bells = (&ctrl_bell, &data_bell);
    let pool = &*pool;
    let refused = &AtomicU64::new(0);
    // Each thread's CPU clock at its end (the spawned ones are new: their clock is their run).
    let cpu = &AtomicU64::new(0);
    std::thread::scope(|s| {
        let control = (config.control == ControlMode::Thread).then(|| {
            let freer = freer.clone();
            s.spawn(move || {
                realtime(config, refused);
                let out = control_thread(fib, ctrl_rx, pool, freer, users, config.burst, bells.0, stop);
                cpu.fetch_add(thread_cpu_time_ns(), Ordering::Relaxed);
                out
            })
        });
        let data = {
            let freer = freer.clone();
            let tx_port = &mut tx_port;
            s.spawn(move || {
                realtime(config, refused);
                let out = data_thread(config, fib, data_rx, pool, freer, tx_port, bells.1, stop);
                cpu.fetch_add(thread_cpu_time_ns(), Ordering::Relaxed);
                out
            })
        };
        started.store(true, Ordering::Release);
        realtime(config, refused);
        let rx_cpu_before = thread_cpu_time_ns();
        let rx = rx_thread(
            config,
            fib,
            &mut rx_port,
            pool,
            &mut alloc,
            freer,
            ctrl_tx,
            data_tx,
            users,
            bells,
            stop,
        );
        let rx_cpu = thread_cpu_time_ns().saturating_sub(rx_cpu_before);
        let (tx_drops, tx_avg_batch) = data.join().map_err(|p| panicked("data", p))?;
        let (fib_updates, fib_errors, fib_age_ns) = match control {
            Some(c) => c.join().map_err(|p| panicked("control", p))?,
            None => (rx.fib_updates, rx.fib_errors, rx.fib_age),
        };
        Ok(ForwarderStats {
            rx_packets: rx.rx_packets,
            pool_drops: rx.pool_drops,
            ctrl_ring: rx.ctrl,
            data_ring: rx.data,
            tx_drops,
            tx_avg_batch,
            fib_updates,
            fib_errors,
            fib_age_ns,
            fifo_refused: refused.load(Ordering::Relaxed),
            cpu_ns: rx_cpu + cpu.load(Ordering::Relaxed),
            ..ForwarderStats::default()
        })
    })
}

fn panicked(thread: &'static str, payload: Box<dyn std::any::Any + Send>) -> ForwarderError {
    ForwarderError::Panicked { thread, message: panic_message(&*payload) }
}

struct RxResult {
    rx_packets: u64,
    pool_drops: u64,
    ctrl: RingCounts,
    data: RingCounts,
    fib_updates: u64,
    fib_errors: u64,
    fib_age: f64,
}

/// Applies one location update and records the location age at the FIB.
#[inline]
pub(crate) fn apply_control<F: Fib>(
    fib: Option<&F>,
    p: &Packet,
    ages: &mut AgeTable,
    updates: &mut u64,
    errors: &mut u64,
) {
    let Some(fib) = fib else { return };
    match fib.update(p.user, AddrTuple::new(NEXT_HOP, p.sent_ns)) {
        Ok(()) => {
            *updates += 1;
            ages.deliver(p.user as usize, p.sent_ns, monotonic_ns());
        }
        Err(_) => *errors += 1,
    }
}

#[allow(clippy::too_many_arguments)]
fn rx_thread<F: Fib, P: Port<Packet>>(
    config: &ForwarderConfig,
    fib: Option<&F>,
    port: &mut P,
    pool: &Pool<Packet>,
    alloc: &mut Allocator,
    mut freer: Freer,
    mut ctrl_tx: BufProducer,
    mut data_tx: DataIn,
    users: u32,
    bells: (&Doorbell, &Doorbell),
    stop: &AtomicBool,
) -> RxResult {
    let mut packets = vec![Packet::default(); config.burst];
    let mut bufs = Vec::with_capacity(config.burst);
    let mut ctrl = Vec::with_capacity(config.burst);
    let mut data = Vec::with_capacity(config.burst);
    let mut keyed_data = Vec::with_capacity(config.burst);
    let mut dropped = Vec::with_capacity(2 * config.burst);
    let (mut rx_packets, mut pool_drops, mut updates, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut fib_ages = AgeTable::new(users as usize, monotonic_ns());
    let mut idle = Idle(0);
    while !stop.load(Ordering::Relaxed) {
        let n = port.rx_burst(&mut packets).unwrap_or(0);
        if n == 0 {
            if idle.empty() {
                port.wait(NAP);
            }
            continue;
        }
        idle.busy();
        rx_packets += n as u64;
        let got = alloc.alloc_burst(n, &mut bufs);
        pool_drops += (n - got) as u64;
        for (p, mut buf) in packets[..got].iter().zip(bufs.drain(..)) {
            match p.kind {
                Kind::Control if config.control == ControlMode::Inline => {
                    // Control first: applied before any data of this burst is queued.
                    apply_control(fib, p, &mut fib_ages, &mut updates, &mut errors);
                    dropped.push(buf);
                }
                Kind::Control => {
                    *pool.packet_mut(&mut buf) = *p;
                    ctrl.push(buf);
                }
                Kind::Data if p.user < users => {
                    *pool.packet_mut(&mut buf) = *p;
                    match data_tx {
                        DataIn::Fifo(_) => data.push(buf),
                        DataIn::Keyed(_) => keyed_data.push((p.user, buf)),
                    }
                }
                _ => dropped.push(buf),
            }
        }
        if !ctrl.is_empty() {
            ctrl_tx.send(&mut ctrl, &mut dropped);
            bells.0.ring();
        }
        if !data.is_empty() || !keyed_data.is_empty() {
            match &mut data_tx {
                DataIn::Fifo(tx) => _ = tx.send(&mut data, &mut dropped),
                DataIn::Keyed(tx) => tx.send(&mut keyed_data, &mut dropped),
            }
            bells.1.ring();
        }
        freer.free_all(dropped.drain(..));
    }
    let data = match &data_tx {
        DataIn::Fifo(tx) => tx.stats(),
        DataIn::Keyed(tx) => tx.stats(),
    };
    RxResult {
        rx_packets,
        pool_drops,
        ctrl: RingCounts::from(ctrl_tx.stats()),
        data: RingCounts::from(data),
        fib_updates: updates,
        fib_errors: errors,
        fib_age: fib_ages.summary(monotonic_ns()).avg_age_ns,
    }
}

#[allow(clippy::too_many_arguments)]
fn control_thread<F: Fib>(
    fib: Option<&F>,
    mut ring: BufConsumer,
    pool: &Pool<Packet>,
    mut freer: Freer,
    users: u32,
    burst: usize,
    bell: &Doorbell,
    stop: &AtomicBool,
) -> (u64, u64, f64) {
    let mut bufs: Vec<Buf> = Vec::with_capacity(burst);
    let (mut updates, mut errors) = (0, 0);
    let mut ages = AgeTable::new(users as usize, monotonic_ns());
    let mut idle = Idle(0);
    while !stop.load(Ordering::Relaxed) {
        if ring.recv(burst, &mut bufs) == 0 {
            if idle.empty() {
                bell.wait(NAP, || !ring.is_empty());
            }
            continue;
        }
        idle.busy();
        for buf in &bufs {
            apply_control(fib, pool.packet(buf), &mut ages, &mut updates, &mut errors);
        }
        freer.free_all(bufs.drain(..));
    }
    (updates, errors, ages.summary(monotonic_ns()).avg_age_ns)
}

/// Returns (TX drops, mean TX batch).
#[allow(clippy::too_many_arguments)]
fn data_thread<F: Fib, P: Port<Packet>>(
    config: &ForwarderConfig,
    fib: Option<&F>,
    mut ring: DataOut,
    pool: &Pool<Packet>,
    mut freer: Freer,
    port: &mut P,
    bell: &Doorbell,
    stop: &AtomicBool,
) -> (u64, f64) {
    let mut reader = fib.map(|f| f.reader().expect("a FIB reader"));
    let mut bufs: Vec<Buf> = Vec::with_capacity(config.burst);
    let mut batch: Vec<Packet> = Vec::with_capacity(config.burst);
    let mut batch_since = 0u64;
    let mut last_arrival = 0u64;
    let (mut tx_drops, mut tx_calls, mut tx_sent) = (0u64, 0u64, 0u64);
    let mut idle = Idle(0);
    let mut flush = |batch: &mut Vec<Packet>, port: &mut P| {
        if batch.is_empty() {
            return;
        }
        let sent = port.tx_burst(batch).unwrap_or(0);
        tx_drops += (batch.len() - sent) as u64;
        if sent > 0 {
            tx_calls += 1;
            tx_sent += sent as u64;
        }
        batch.clear();
    };
    while !stop.load(Ordering::Relaxed) {
        let room = config.burst - batch.len();
        let n = match &mut ring {
            DataOut::Fifo(rx) => rx.recv(room, &mut bufs),
            DataOut::Keyed(rx) => rx.recv(room, &mut bufs),
        };
        let now = monotonic_ns();
        if n > 0 {
            idle.busy();
            if batch.is_empty() {
                batch_since = now;
            }
            last_arrival = now;
            for buf in &bufs {
                let mut p = *pool.packet(buf);
                if let Some(reader) = reader.as_mut()
                    && let Some(addr) = reader.lookup(p.user)
                {
                    p.addr_stamp_ns = addr.stamp_ns;
                    p.mac = addr.mac;
                }
                if config.data_work_ns > 0 {
                    kairos_sys::clock::spin_until_ns(monotonic_ns() + config.data_work_ns);
                }
                batch.push(p);
            }
            freer.free_all(bufs.drain(..));
            if let Some(reader) = reader.as_mut() {
                reader.quiescent();
            }
        }
        let full = batch.len() == config.burst;
        let due = match config.flush {
            // The source's TX: a full burst, or whatever is there once nothing came for a while.
            Flush::Count { drain_ns } => full || (n == 0 && now.saturating_sub(last_arrival) >= drain_ns),
            // Age: as soon as the oldest packet has waited `max_wait_ns`, or nothing is queued.
            Flush::Age { max_wait_ns } => full || n == 0 || now.saturating_sub(batch_since) >= max_wait_ns,
        };
        if due {
            flush(&mut batch, port);
        }
        if n == 0 {
            if let Some(reader) = reader.as_mut() {
                reader.quiescent();
            }
            if idle.empty() && batch.is_empty() {
                let ring = &ring;
                let mut nap = || bell.wait(NAP, || !ring.is_empty());
                match reader.as_mut() {
                    Some(reader) => reader.offline_while(&mut nap),
                    None => nap(),
                }
            }
        }
    }
    flush(&mut batch, port);
    (tx_drops, if tx_calls == 0 { 0.0 } else { tx_sent as f64 / tx_calls as f64 })
}
