//! The configurations the grid runs: the source's, for routing and for the one-user baseline,
//! and the named changes to them that are Kairos's variants. The plan counts its runs from the
//! same lists of variants that the grid runs.

use kairos_fib::FibKind;

use crate::experiments::forward::{Backend, ControlMode, Flush, ForwardConfig, RingPolicy, Threading};

/// The source's configuration at a rate.
pub(super) fn source_config(
    backend: Backend,
    fib: Option<FibKind>,
    rate: Option<f64>,
    label: &str,
) -> ForwardConfig {
    let mut c =
        ForwardConfig { backend, fib, rate_pps: rate, label: label.to_string(), ..ForwardConfig::default() };
    c.forwarder.fifo_priority = PRIORITY.load(std::sync::atomic::Ordering::Relaxed);
    // On packet rings Kairos runs its run-to-completion forwarder (the fast path); elsewhere
    // the source's pipeline.
    if backend == Backend::Packet {
        c.forwarder.threading = Threading::RunToCompletion;
        // On the last core, where testpmd's forwarding lcore is; the sender and receiver on the
        // first, for Kairos's rows and testpmd's alike. Left to the scheduler, the sender most
        // often joined the polling forwarder in its own process on its core, and the two took
        // turns there: at 62.5 kpps the age was 88-146 us against testpmd's 41-51 (a separate
        // process), 36 against 34-49 with the sender pinned (docs/forwarding.md).
        let last = kairos_sys::proc::last_core();
        c.forwarder.pin_core = Some(last);
        c.source_core = c.default_source_core();
        // Polling while traffic flows, at normal priority, as testpmd's lcore (the sweep's
        // priority is for the pipeline's threads): a forwarder that slept between the sender's
        // bursts paid a wake-up on a packet's path whenever it lost the race, and one at
        // SCHED_FIFO took its core's turn from the kernel's packet work and the sender's (at
        // 200 kpps offered the sender reached 116 kpps beside it, 170 kpps beside the polling
        // one at normal priority; docs/forwarding.md).
        c.forwarder.fifo_priority = 0;
        c.forwarder.idle_spin_ns = PACKET_IDLE_SPIN_NS;
    }
    c
}

/// The packet backend's idle spin window: longer than the gap between packets at the rates the
/// grids offer (down to 25 kpps, 40 us apart), so the forwarder polls while traffic flows and
/// sleeps once it stops; below 5 kpps (the age-controlled sender's lowest steps) it sleeps
/// between packets.
pub const PACKET_IDLE_SPIN_NS: u64 = 200_000;

/// The source's baseline configuration: no FIB, and the forwarder's RX ring of Table I (4096).
/// The data thread does [`BASELINE_WORK_NS`] of work per packet, so that it (not the sender or
/// the RX thread) is the bottleneck and overload queues in its ring, as in the source's testbed
/// (not on the packet backend, whose run-to-completion forwarder has no ring).
pub(super) fn baseline_config(backend: Backend, rate: Option<f64>, label: &str) -> ForwardConfig {
    let mut c = source_config(backend, None, rate, label);
    c.forwarder.data_ring = 4096;
    // On packet rings the forwarder runs to completion (no ring to fill) beside testpmd, which
    // does no such work: the spun microsecond would only handicap it (a profile found 20% of
    // its core in the clock reads of that spin).
    if backend != Backend::Packet {
        c.forwarder.data_work_ns = BASELINE_WORK_NS;
    }
    c
}

/// The peer forwarder's rows.
pub(super) const PEER_LABEL: &str = "peer: dpdk-testpmd";

/// Per-packet work of the baseline's data thread: a capacity of at most 1 Mpps.
pub const BASELINE_WORK_NS: u64 = 1_000;

/// `SCHED_FIFO` priority of the pipeline's forwarder threads in this sweep (0 when not
/// permitted); the packet backend's run-to-completion forwarder runs at normal priority
/// ([`source_config`]).
pub(super) static PRIORITY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A named change to the source's configuration.
pub(super) type Variant = (&'static str, fn(&mut ForwardConfig));

/// The variants of the one-user baseline that do not need a FIB: (name, config change).
pub(super) fn baseline_variants() -> Vec<Variant> {
    vec![
        ("source: tail-drop 4096", |_| {}),
        ("drop-oldest 8", drop_oldest_8),
        ("latest-only slot per user", |c| latest_only_per_user(c, 1)),
        ("age flush 5 us", age_flush_5us),
    ]
}

/// The variants of the "beyond the source" grid: (name, config change).
pub(super) fn variants() -> Vec<Variant> {
    vec![
        ("source: rcu, tail-drop 64", |_| {}),
        ("small ring 8", |c| c.forwarder.data_ring = 8),
        ("drop-oldest 8", drop_oldest_8),
        ("latest-only slot per user", |c| latest_only_per_user(c, 1000)),
        ("control first", |c| c.forwarder.control = ControlMode::Inline),
        ("seqlock FIB", |c| c.fib = Some(FibKind::Seqlock)),
        ("age flush 5 us", age_flush_5us),
        ("kairos: all of the above", |c| {
            c.fib = Some(FibKind::Seqlock);
            latest_only_per_user(c, 1000);
            c.forwarder.control = ControlMode::Inline;
        }),
    ]
}

/// A data ring of 8 that evicts its oldest entry for a new one.
fn drop_oldest_8(c: &mut ForwardConfig) {
    c.forwarder.data_ring = 8;
    c.forwarder.data_policy = RingPolicy::DropOldest;
}

/// The data thread sends its batch once the oldest packet in it has waited 5 us (or nothing more
/// is queued), not once the batch is full.
fn age_flush_5us(c: &mut ForwardConfig) {
    c.forwarder.flush = Flush::Age { max_wait_ns: 5_000 };
}

/// A data ring holding the latest packet of each of `users` users. It hands the data thread one
/// packet per user at a time, so it is paired with flushing by age: a count flush would hold
/// each packet until 63 more came.
fn latest_only_per_user(c: &mut ForwardConfig, users: usize) {
    c.forwarder.data_ring = users;
    c.forwarder.data_policy = RingPolicy::KeepLatest;
    age_flush_5us(c);
}
