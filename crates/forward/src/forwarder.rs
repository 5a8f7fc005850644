//! The forwarder under test, as in the source's Fig. 2: an RX thread that splits control from
//! data into two rings, a control thread that writes the FIB, and a data thread that reads it,
//! stamps each data packet with the address tuple's time stamp and sends it back.
//!
//! Buffers are pool indices; every ring counts its drops per reason. The TX stage runs on the
//! data thread (the source had a separate TX thread; on a 2-core machine one less spinning
//! thread matters more than the hand-off it saves), with the flush policy of [`Flush`].
//!
//! Idle threads spin a little, then sleep on a doorbell (the port's, or their ring's, rung by
//! the producer): with more threads than cores, a thread that spins on an empty ring steals the
//! core from the thread that would fill it. The data thread sleeps with its FIB reader offline,
//! so an RCU writer never waits for a sleeping reader.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kairos_fib::{AddrTuple, Fib, FibReader};
use kairos_io::pool::{Allocator, Freer, PoolSlots, pool};
use kairos_io::{Kind, Packet, Port};
use kairos_metrics::AgeTable;
use kairos_ring::{
    Consumer, Doorbell, KeyedConsumer, KeyedProducer, Overflow, Producer, RingStats, keyed, spsc,
};
use kairos_sys::clock::monotonic_ns;
use serde::Serialize;

use crate::config::{ControlMode, Flush, ForwarderConfig, RingPolicy};

/// The next-hop MAC every user is reached through (one next hop, as in the source's testbed:
/// the address tuple's time stamp is what tells addresses apart).
pub const NEXT_HOP: [u8; 6] = [0x02, 0x4b, 0x52, 0, 0, 1];

/// What the forwarder counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ForwarderStats {
    pub rx_packets: u64,
    pub ctrl_ring: RingCounts,
    pub data_ring: RingCounts,
    /// Packets the TX port refused (dropped).
    pub tx_drops: u64,
    /// Packets dropped because the pool was empty.
    pub pool_drops: u64,
    pub fib_updates: u64,
    pub fib_errors: u64,
    /// Packets sent per TX call (mean over calls that sent).
    pub tx_avg_batch: f64,
    /// Location-update age at the FIB: mean over users of the time-average of
    /// `now - stamp of the published entry`, ns.
    pub fib_age_ns: f64,
}

/// A ring's drops, as the summary prints them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RingCounts {
    pub offered: u64,
    pub dropped_newest: u64,
    pub dropped_oldest: u64,
    pub replaced: u64,
}

impl RingCounts {
    fn from(s: RingStats) -> Self {
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
const NAP: Duration = Duration::from_millis(1);

/// Counts empty polls: spin `SPINS` of them, then sleep.
struct Idle(u32);

impl Idle {
    const SPINS: u32 = 64;

    /// Records an empty poll; true when the caller should sleep now.
    #[inline]
    fn empty(&mut self) -> bool {
        self.0 += 1;
        if self.0 < Self::SPINS {
            std::hint::spin_loop();
            false
        } else {
            true
        }
    }

    #[inline]
    fn busy(&mut self) {
        self.0 = 0;
    }
}

/// Makes the calling forwarder thread `SCHED_FIFO` when asked (and permitted): a woken
/// forwarder thread then preempts the spinning source at once instead of waiting for the end of
/// its time slice. The threads sleep when idle, so they cannot starve the machine unless
/// overloaded, and the kernel's real-time throttling bounds even that.
fn realtime(config: &ForwarderConfig) {
    if config.fifo_priority > 0 {
        let _ = kairos_sys::thread::set_fifo(config.fifo_priority);
    }
}

enum DataIn {
    Fifo(Producer<u32>),
    Keyed(KeyedProducer),
}

enum DataOut {
    Fifo(Consumer<u32>),
    Keyed(KeyedConsumer, Vec<(u32, u32)>),
}

impl DataOut {
    fn is_empty(&self) -> bool {
        match self {
            DataOut::Fifo(rx) => rx.is_empty(),
            DataOut::Keyed(rx, _) => rx.is_empty(),
        }
    }
}

/// Runs the forwarder until `stop`; `fib` is `None` for the baseline (no addressing).
pub fn run<F: Fib, P: Port>(
    config: &ForwarderConfig,
    users: u32,
    fib: Option<&F>,
    mut rx_port: P,
    mut tx_port: P,
    stop: &AtomicBool,
    started: &AtomicBool,
) -> ForwarderStats {
    let pool_size = config.ctrl_ring + config.data_ring.max(users as usize) + 4 * config.burst + 1024;
    let (slots, mut alloc, freer) = pool(pool_size);
    let (ctrl_tx, ctrl_rx) =
        spsc::<u32>(config.ctrl_ring, Overflow::DropNewest).expect("ring sizes are validated");
    let (data_tx, data_rx) = match config.data_policy {
        RingPolicy::DropNewest | RingPolicy::DropOldest => {
            let overflow = if config.data_policy == RingPolicy::DropOldest {
                Overflow::DropOldest
            } else {
                Overflow::DropNewest
            };
            let (tx, rx) = spsc::<u32>(config.data_ring, overflow).expect("ring sizes are validated");
            (DataIn::Fifo(tx), DataOut::Fifo(rx))
        }
        RingPolicy::KeepLatest => {
            let (tx, rx) = keyed(config.data_ring, users as usize).expect("ring sizes are validated");
            (DataIn::Keyed(tx), DataOut::Keyed(rx, vec![(0, 0); config.burst]))
        }
    };
    let (ctrl_bell, data_bell) = (Doorbell::new(), Doorbell::new());
    let bells = (&ctrl_bell, &data_bell);
    let mut stats = ForwarderStats::default();
    std::thread::scope(|s| {
        let control = (config.control == ControlMode::Thread).then(|| {
            let slots = Arc::clone(&slots);
            let freer = freer.clone();
            s.spawn(move || {
                realtime(config);
                control_thread(fib, ctrl_rx, &slots, freer, users, config.burst, bells.0, stop)
            })
        });
        let data = {
            let slots = Arc::clone(&slots);
            let freer = freer.clone();
            let tx_port = &mut tx_port;
            s.spawn(move || {
                realtime(config);
                data_thread(config, fib, data_rx, &slots, freer, tx_port, bells.1, stop)
            })
        };
        started.store(true, Ordering::Release);
        realtime(config);
        let rx = rx_thread(
            config,
            fib,
            &mut rx_port,
            &slots,
            &mut alloc,
            freer,
            ctrl_tx,
            data_tx,
            users,
            bells,
            stop,
        );
        let (tx_drops, tx_avg_batch) = data.join().expect("data thread panicked");
        stats.rx_packets = rx.rx_packets;
        stats.pool_drops = rx.pool_drops;
        stats.ctrl_ring = rx.ctrl;
        stats.data_ring = rx.data;
        stats.tx_drops = tx_drops;
        stats.tx_avg_batch = tx_avg_batch;
        let (updates, errors, fib_age) = match control {
            Some(c) => c.join().expect("control thread panicked"),
            None => (rx.fib_updates, rx.fib_errors, rx.fib_age),
        };
        stats.fib_updates = updates;
        stats.fib_errors = errors;
        stats.fib_age_ns = fib_age;
    });
    stats
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
fn apply_control<F: Fib>(
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
fn rx_thread<F: Fib, P: Port>(
    config: &ForwarderConfig,
    fib: Option<&F>,
    port: &mut P,
    slots: &PoolSlots,
    alloc: &mut Allocator,
    mut freer: Freer,
    mut ctrl_tx: Producer<u32>,
    mut data_tx: DataIn,
    users: u32,
    bells: (&Doorbell, &Doorbell),
    stop: &AtomicBool,
) -> RxResult {
    let mut packets = vec![Packet::default(); config.burst];
    let mut indices = vec![0u32; config.burst];
    let mut ctrl = Vec::with_capacity(config.burst);
    let mut data = Vec::with_capacity(config.burst);
    let mut keyed_data = Vec::with_capacity(config.burst);
    let mut evicted = Vec::with_capacity(2 * config.burst);
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
        let got = alloc.alloc_burst(&mut indices[..n]);
        pool_drops += (n - got) as u64;
        ctrl.clear();
        data.clear();
        keyed_data.clear();
        for (p, &index) in packets[..got].iter().zip(&indices[..got]) {
            match p.kind {
                Kind::Control if config.control == ControlMode::Inline => {
                    // Control first: applied before any data of this burst is queued.
                    apply_control(fib, p, &mut fib_ages, &mut updates, &mut errors);
                    freer.free_burst(&[index]);
                }
                Kind::Control => {
                    // SAFETY: `index` was just allocated by this thread and not passed on.
                    unsafe { slots.set(index, *p) };
                    ctrl.push(index);
                }
                Kind::Data if p.user < users => {
                    // SAFETY: as above.
                    unsafe { slots.set(index, *p) };
                    data.push(index);
                    keyed_data.push((p.user, index));
                }
                _ => freer.free_burst(&[index]),
            }
        }
        if !ctrl.is_empty() {
            evicted.clear();
            let taken = ctrl_tx.enqueue_burst(&ctrl, &mut evicted).taken;
            freer.free_burst(&ctrl[taken..]);
            bells.0.ring();
        }
        if !data.is_empty() {
            evicted.clear();
            match &mut data_tx {
                DataIn::Fifo(tx) => {
                    let taken = tx.enqueue_burst(&data, &mut evicted).taken;
                    freer.free_burst(&data[taken..]);
                }
                DataIn::Keyed(tx) => {
                    tx.enqueue_burst(&keyed_data, &mut evicted);
                }
            }
            freer.free_burst(&evicted);
            bells.1.ring();
        }
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
    mut ring: Consumer<u32>,
    slots: &PoolSlots,
    mut freer: Freer,
    users: u32,
    burst: usize,
    bell: &Doorbell,
    stop: &AtomicBool,
) -> (u64, u64, f64) {
    let mut indices = vec![0u32; burst];
    let (mut updates, mut errors) = (0, 0);
    let mut ages = AgeTable::new(users as usize, monotonic_ns());
    let mut idle = Idle(0);
    while !stop.load(Ordering::Relaxed) {
        let n = ring.dequeue_burst(&mut indices);
        if n == 0 {
            if idle.empty() {
                bell.wait(NAP, || !ring.is_empty());
            }
            continue;
        }
        idle.busy();
        for &index in &indices[..n] {
            // SAFETY: the index came out of the control ring: this thread owns it until freed.
            let p = unsafe { *slots.get(index) };
            apply_control(fib, &p, &mut ages, &mut updates, &mut errors);
        }
        freer.free_burst(&indices[..n]);
    }
    (updates, errors, ages.summary(monotonic_ns()).avg_age_ns)
}

/// Returns (TX drops, mean TX batch).
#[allow(clippy::too_many_arguments)]
fn data_thread<F: Fib, P: Port>(
    config: &ForwarderConfig,
    fib: Option<&F>,
    mut ring: DataOut,
    slots: &PoolSlots,
    mut freer: Freer,
    port: &mut P,
    bell: &Doorbell,
    stop: &AtomicBool,
) -> (u64, f64) {
    let mut reader = fib.map(|f| f.reader().expect("a FIB reader"));
    let mut indices = vec![0u32; config.burst];
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
            DataOut::Fifo(rx) => rx.dequeue_burst(&mut indices[..room]),
            DataOut::Keyed(rx, pairs) => {
                let n = rx.dequeue_burst(&mut pairs[..room]);
                for (slot, &(_, index)) in indices.iter_mut().zip(&pairs[..n]) {
                    *slot = index;
                }
                n
            }
        };
        let now = monotonic_ns();
        if n > 0 {
            idle.busy();
            if batch.is_empty() {
                batch_since = now;
            }
            last_arrival = now;
            for &index in &indices[..n] {
                // SAFETY: the index came out of the data ring: this thread owns it until freed.
                let mut p = unsafe { *slots.get(index) };
                if let Some(reader) = reader.as_mut() {
                    if let Some(addr) = reader.lookup(p.user) {
                        p.addr_stamp_ns = addr.stamp_ns;
                        p.mac = addr.mac;
                    }
                }
                if config.data_work_ns > 0 {
                    kairos_sys::clock::spin_until_ns(monotonic_ns() + config.data_work_ns);
                }
                batch.push(p);
            }
            freer.free_burst(&indices[..n]);
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
