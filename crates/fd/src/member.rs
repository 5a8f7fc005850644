//! A member as a process: the node loop around the [`Detector`], its transport (a UDP socket,
//! or its host's lane node: [`super::transport`]), the peers, the alive table in shared memory,
//! and a demonstration application that bumps the liveness counter.
//!
//! # The loop
//!
//! One thread, pinned and `SCHED_FIFO` where permitted (as the lane's node loop). It sleeps to
//! an absolute deadline, the earliest of: its next period (when it sends its heartbeat, with the
//! counter the application last wrote, to every other member) and the table's detector's next
//! suspicion deadline; SWIM's timers, and the deadlines of the detectors of other thresholds
//! (the accuracy sweep, whose suspicions are stamped by their deadlines whenever noticed), are
//! seen at the first wake-up after them, at most a period late. At each wake-up it sends its
//! heartbeat when its period has come (each copy stamped as it leaves), then drains its socket
//! or inbox (datagrams stamped by the kernel as they arrived, so a heartbeat read late keeps
//! its arrival time), then asks every detector, then publishes the table. It
//! does not wake when a datagram arrives: on two virtual cores a wake-up per heartbeat would
//! cost more than the detector; heartbeats wait for the next deadline, at most a period, with
//! their time stamps. (A SWIM round trip is therefore up to two periods longer than the
//! network's.)
//!
//! # The demonstration application
//!
//! A second thread, on the same core, that bumps the counter every `app_bump_ns` (`T/3` by
//! default) unless the table's pause word says to stop (how the experiments make an
//! application hang while its host and node live). It runs one `SCHED_FIFO` priority above the
//! loop: its work is one atomic add, and below the loops of other members sharing its core
//! (two virtual cores carry three members in the experiments) it was starved while their
//! sends ran, which made a healthy member look hung.
//!
//! # What it records
//!
//! Every suspicion of every detector: the window without a fresh heartbeat it ended, when the
//! rule (or the peer) suspected, when the loop noticed, and when the member was trusted
//! again. With a measurement window (`measure_from_ns` to `measure_until_ns`, one for the
//! whole group), counts and suspected time are kept exactly inside it and the first
//! [`MAX_STORED`] suspicions of each detector are kept whole (for the accuracy experiment,
//! which sets each against the stall watch). And the member's own stalls ([`super::held`]):
//! the stretches its loop and application were kept from their work, the first [`MAX_HELD`]
//! of each thread's from the window's start.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use kairos_ring::bridge::BridgeMemory;
use kairos_sys::clock::{monotonic_ns, sleep_until_ns};
use kairos_sys::irq_time::IrqClock;
use kairos_sys::thread::{pin_current_thread, set_fifo, set_timer_slack_ns, thread_cpu_time_ns, thread_id};
use serde::{Deserialize, Serialize};

use super::detector::{Detector, DetectorConfig, Event, Heard};
use super::held::{HeldRecord, HeldThread, HeldWatch};
use super::phi::{PhiEvent, PhiSettings, PhiWatch};
use super::swim::{SwimEvent, SwimId, SwimPeer, SwimSettings};
use super::table::{AliveTable, PEER_SLOTS, Row};
use super::transport::{Transport, TransportError};
use super::wire::{Datagram, Heartbeat, decode};
use kairos_services::lane_link::{LaneLinkConfig, LaneLinkStats};
use kairos_services::peer::PeerAddr;

/// The detectors a member runs, by name, in the order of the table's peer slots after the
/// first (Kairos's own).
pub const KAIROS: &str = "kairos";
/// Phi accrual with Akka's defaults (peer slot 0).
pub const PHI_AKKA: &str = "phi-akka";
/// Phi accrual tuned to the period (peer slot 1).
pub const PHI_TUNED: &str = "phi-tuned";
/// SWIM with `foca`'s LAN defaults (peer slot 2).
pub const SWIM_LAN: &str = "swim-lan";
/// SWIM with every duration a thousandth of the LAN defaults, scaled with a period above
/// 100 us ([`SwimSettings::aggressive`]; peer slot 3).
pub const SWIM_AGGRESSIVE: &str = "swim-aggressive";
/// The peers, in peer-slot order.
pub const PEERS: [&str; PEER_SLOTS] = [PHI_AKKA, PHI_TUNED, SWIM_LAN, SWIM_AGGRESSIVE];

/// The most suspicions kept whole per detector.
pub const MAX_STORED: usize = 50_000;
/// The most held stretches ([`super::held`]) kept whole per thread: a loaded core gives a
/// member's loop 2,000 a second.
pub const MAX_HELD: usize = 200_000;
/// On the lane, how long before the node's release a heartbeat is handed over, as a fraction
/// of the period: enough for the loop's wake-up to be late, short enough that the heartbeat
/// is still fresh when it leaves.
const LEAD_PERIODS: (u64, u64) = (1, 2);
/// A wake-up later than this after its deadline is counted as late, ns.
const LATE_NS: u64 = 50_000;

/// What a member runs with.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// This member's id.
    pub id: u64,
    /// Every member's address, this one's included: all UDP addresses, or all lane hosts (then
    /// `lane` says how to reach this host's node).
    pub members: BTreeMap<u64, PeerAddr>,
    /// The lane node and tunnel, when the members are lane hosts.
    pub lane: Option<LaneLinkConfig>,
    /// The heartbeat period `T`, ns.
    pub period_ns: u64,
    /// The threshold Lambda of the table's detector, ns.
    pub threshold_ns: u64,
    /// More thresholds to run detectors with, recorded but not published, ns.
    pub sweep_thresholds_ns: Vec<u64>,
    /// Whether to run the peers (phi accrual, SWIM).
    pub peers: bool,
    /// The type-of-service byte of the socket (the lane's class on the testbed).
    pub type_of_service: Option<u8>,
    /// The core of the loop and the application.
    pub core: Option<usize>,
    /// The loop's `SCHED_FIFO` priority (0: none); the application runs one above.
    pub fifo_priority: i32,
    /// The demonstration application's bump period, ns (`None`: no application thread).
    pub app_bump_ns: Option<u64>,
    /// This start's incarnation (larger than any earlier start's).
    pub incarnation: u64,
    /// How long to run, ns (`None`: until stopped).
    pub run_for_ns: Option<u64>,
    /// Suspicions are counted from this time (`CLOCK_MONOTONIC` ns; 0: from the start).
    pub measure_from_ns: u64,
    /// ... until this time (`None`: to the end). A group's members share it, so none counts
    /// the silence of another that ended its run first.
    pub measure_until_ns: Option<u64>,
    /// Seeds SWIM's random choices.
    pub seed: u64,
    /// The loop times the interrupt handlers run in it ([`kairos_sys::irq_time`]; each costs
    /// about half a microsecond more traced), so its held stretches can name them.
    pub time_interrupts: bool,
}

impl MemberConfig {
    /// The other members, in id order: the rows of the table.
    pub fn others(&self) -> Vec<u64> {
        self.members.keys().copied().filter(|&m| m != self.id).collect()
    }
}

/// Why a member could not run.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// This member's id has no address.
    #[error("member {0} is not among the members")]
    NotAMember(u64),
    /// The socket or the lane link could not be made, or failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A setting the phi crate refused.
    #[error("phi settings: {0}")]
    Phi(#[from] phi_accrual_failure_detector::Error),
    /// The table has fewer rows than there are other members.
    #[error("the alive table has {rows} rows for {members} other members")]
    Table {
        /// Rows.
        rows: usize,
        /// Other members.
        members: usize,
    },
    /// The application thread could not start.
    #[error("the application thread: {0}")]
    App(io::Error),
}

/// One suspicion, whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspicion {
    /// The member suspected.
    pub subject: u64,
    /// The receive time of its last fresh heartbeat (the start of the silence), ns.
    pub window_from_ns: u64,
    /// When the detector's rule suspected it, ns.
    pub since_ns: u64,
    /// When the loop noticed, ns.
    pub noticed_ns: u64,
    /// When it was trusted again, ns (`None`: still suspected at the end).
    pub until_ns: Option<u64>,
    /// Kairos's detectors: the heartbeat that ended the suspicion (when one did).
    pub ended_by: Option<Ending>,
}

/// The fresh heartbeat that ended a suspicion, to tell where a silence came from: a sender
/// that sent late (`sent_ns` after the deadline), a heartbeat late on the way (sent before the
/// deadline, received after), stale counters (the application), or heartbeats lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// When it was sent, by the sender's clock (`CLOCK_MONOTONIC`, the same on one machine), ns.
    pub sent_ns: u64,
    /// Its sequence number less the last fresh heartbeat's (1: none missing between them).
    pub seq_gap: u64,
    /// Heartbeats with a stale counter received in between.
    pub stale: u64,
}

/// What one detector did over a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DetectorRecord {
    /// Its name ([`KAIROS`] or a peer's).
    pub detector: String,
    /// Its threshold, for Kairos's detectors, ns.
    pub threshold_ns: Option<u64>,
    /// Suspicions that began inside the measurement window.
    pub suspicions: u64,
    /// Time members spent suspected inside the window, summed over members, ns.
    pub suspected_ns: u64,
    /// The first [`MAX_STORED`] suspicions of the window.
    pub stored: Vec<Suspicion>,
}

/// What a member did over its run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemberReport {
    /// The member.
    pub member: u64,
    /// Its incarnation.
    pub incarnation: u64,
    /// When its loop started and ended, ns.
    pub started_ns: u64,
    /// When its loop ended, ns.
    pub ended_ns: u64,
    /// When suspicions began to count, ns.
    pub measure_from_ns: u64,
    /// Whether the loop ran at `SCHED_FIFO`.
    pub realtime: bool,
    /// Whether the loop was pinned.
    pub pinned: bool,
    /// Whether datagrams carried the kernel's receive stamps.
    pub kernel_stamps: bool,
    /// Heartbeats sent (to each member counted once).
    pub heartbeats_sent: u64,
    /// Heartbeats received.
    pub heartbeats_received: u64,
    /// Heartbeats with a counter not newer than the last (a hung application, or reordering).
    pub stale_heartbeats: u64,
    /// Datagrams that were not a heartbeat or a SWIM packet.
    pub undecodable: u64,
    /// Sends the kernel refused (a link down, a full buffer).
    pub send_errors: u64,
    /// SWIM packets and timers `foca` refused.
    pub swim_errors: u64,
    /// Loop wake-ups.
    pub wakeups: u64,
    /// On the lane: the link's counts.
    pub lane: Option<LaneLinkStats>,
    /// Wake-ups more than 50 us after their deadline.
    pub late_wakeups: u64,
    /// The latest wake-up after its deadline, ns.
    pub worst_wake_late_ns: u64,
    /// When suspicions stopped counting, ns (the end of the window, or of the run).
    #[serde(default)]
    pub measure_until_ns: u64,
    /// The stretches its loop and application were kept from their work for more than 50 us
    /// ([`super::held`]: off the CPU while due, or in the socket's system calls).
    #[serde(default)]
    pub held: HeldRecord,
    /// Every detector's record.
    pub detectors: Vec<DetectorRecord>,
}

#[derive(Debug)]
struct Open {
    window_from_ns: u64,
    since_ns: u64,
    stored: Option<usize>,
}

/// Keeps one detector's suspicions.
#[derive(Debug)]
struct Recorder {
    record: DetectorRecord,
    measure_from_ns: u64,
    measure_until_ns: u64,
    open: BTreeMap<u64, Open>,
}

impl Recorder {
    /// Records `detector`'s suspicions that begin in `[from, until)`, and time suspected in it.
    fn new(detector: &str, threshold_ns: Option<u64>, (from, until): (u64, u64)) -> Self {
        // Room for every suspicion kept, reserved now: a vector that grew in the loop copied
        // megabytes at a doubling, a pass of hundreds of microseconds that held back this
        // member's heartbeats (pages are touched only as suspicions come).
        let record = DetectorRecord {
            detector: detector.into(),
            threshold_ns,
            stored: Vec::with_capacity(MAX_STORED),
            ..DetectorRecord::default()
        };
        Self { record, measure_from_ns: from, measure_until_ns: until, open: BTreeMap::new() }
    }

    fn suspect(&mut self, subject: u64, window_from_ns: u64, since_ns: u64, noticed_ns: u64) {
        if self.open.contains_key(&subject) {
            return;
        }
        let mut stored = None;
        if (self.measure_from_ns..self.measure_until_ns).contains(&since_ns) {
            self.record.suspicions += 1;
            if self.record.stored.len() < MAX_STORED {
                stored = Some(self.record.stored.len());
                self.record.stored.push(Suspicion {
                    subject,
                    window_from_ns,
                    since_ns,
                    noticed_ns,
                    until_ns: None,
                    ended_by: None,
                });
            }
        }
        self.open.insert(subject, Open { window_from_ns, since_ns, stored });
    }

    fn trust(&mut self, subject: u64, at_ns: u64, ended_by: Option<Ending>) {
        let Some(open) = self.open.remove(&subject) else { return };
        self.count_time(open.since_ns, at_ns);
        if let Some(i) = open.stored {
            self.record.stored[i].until_ns = Some(at_ns);
            self.record.stored[i].ended_by = ended_by;
        }
        let _ = open.window_from_ns;
    }

    fn count_time(&mut self, since_ns: u64, until_ns: u64) {
        let from = since_ns.max(self.measure_from_ns);
        self.record.suspected_ns += until_ns.min(self.measure_until_ns).saturating_sub(from);
    }

    fn finish(mut self, end_ns: u64) -> DetectorRecord {
        let open: Vec<u64> = self.open.values().map(|o| o.since_ns).collect();
        for since in open {
            self.count_time(since, end_ns);
        }
        self.record
    }
}

/// The loop's state; see the module doc.
struct Loop<'a, M> {
    config: &'a MemberConfig,
    table: &'a AliveTable<M>,
    primary: Detector,
    sweeps: Vec<Detector>,
    phis: Vec<PhiWatch>,
    swims: Vec<SwimPeer>,
    recorders: Vec<Recorder>,
    report: MemberReport,
    events: Vec<Event>,
    phi_events: Vec<PhiEvent>,
    out: Vec<u8>,
    seq: u64,
    /// Per member: the last fresh heartbeat's incarnation and sequence number, and the stale
    /// heartbeats since.
    freshness: BTreeMap<u64, (u64, u64, u64)>,
}

/// Runs member `config.id` until `stop` is set or `config.run_for_ns` has passed, with the
/// alive table `table` (initialised by the caller with [`MemberConfig::others`] as its rows).
pub fn run<M: BridgeMemory + Sync>(
    config: &MemberConfig,
    table: &AliveTable<M>,
    stop: &AtomicBool,
) -> Result<MemberReport, MemberError> {
    if !config.members.contains_key(&config.id) {
        return Err(MemberError::NotAMember(config.id));
    }
    let others = config.others();
    if table.rows() < others.len() {
        return Err(MemberError::Table { rows: table.rows(), members: others.len() });
    }
    let timeout_ns = config.period_ns.saturating_add(config.threshold_ns);
    let transport = Transport::open(
        config.id,
        &config.members,
        config.lane.as_ref(),
        config.type_of_service,
        timeout_ns,
    )?;
    let app_stop = AtomicBool::new(false);
    // The loop's heartbeat rounds: one a period from this instant, offset by the member's rank
    // so the members do not all wake at once; on the lane, a little before each of the node's
    // releases of the tunnel, so a heartbeat waits for its release no longer than that.
    let n = config.members.len().max(1) as u64;
    let rank = config.members.keys().position(|&m| m == config.id).unwrap_or(0) as u64;
    let now = monotonic_ns();
    let lead = config.period_ns * LEAD_PERIODS.0 / LEAD_PERIODS.1;
    let first_round = lane_round(&transport, now, lead).unwrap_or(now + config.period_ns * rank / n);
    std::thread::scope(|scope| {
        if let Some(bump_ns) = config.app_bump_ns {
            let app_stop = &app_stop;
            // The application's bumps fall halfway between the rounds' instants, never on one:
            // a bump due at a round's instant and a little late would leave that round's
            // heartbeat with the last counter (a stale counter, half the time, from jitter alone).
            let bump_ns = bump_ns.max(1_000);
            let first_bump = first_round + bump_ns / 2;
            let app = std::thread::Builder::new()
                .name(format!("fd-app-{}", config.id))
                .spawn_scoped(scope, move || application(config, table, bump_ns, first_bump, app_stop))
                .map_err(MemberError::App)?;
            let result = run_loop(config, table, transport, first_round, lead, stop);
            app_stop.store(true, Ordering::Relaxed);
            // The application cannot panic (its loop is an atomic add and sleeps); a panic
            // would still be the member's, so it is passed on.
            let app_held = app.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            return result.map(|mut r| {
                r.held = std::mem::take(&mut r.held).merged(app_held);
                r
            });
        }
        run_loop(config, table, transport, first_round, lead, stop)
    })
}

/// The demonstration application: bumps the counter every `bump_ns` from `first_ns` unless
/// paused.
fn application<M: BridgeMemory>(
    config: &MemberConfig,
    table: &AliveTable<M>,
    bump_ns: u64,
    first_ns: u64,
    stop: &AtomicBool,
) -> HeldRecord {
    if let Some(core) = config.core {
        let _ = pin_current_thread(core);
    }
    if config.fifo_priority > 0 {
        let _ = set_fifo((config.fifo_priority + 1).min(98));
    }
    let _ = set_timer_slack_ns(1);
    // The first bump at once (the counter starts moving before the first round), then on the
    // schedule; a late bump is followed by the next one on the schedule, not a period after it.
    table.bump();
    let mut held = HeldWatch::new(HeldThread::Application, LATE_NS, config.measure_from_ns, MAX_HELD);
    let mut next = first_ns;
    while !stop.load(Ordering::Relaxed) {
        sleep_until_ns(next);
        if !table.app_paused() {
            table.bump();
        }
        let now = monotonic_ns();
        held.woke_late(next, now);
        next += bump_ns;
        if next <= now {
            next += (now - next) / bump_ns * bump_ns + bump_ns;
        }
    }
    held.finish()
}

fn run_loop<M: BridgeMemory>(
    config: &MemberConfig,
    table: &AliveTable<M>,
    mut transport: Transport,
    first_round: u64,
    lead: u64,
    stop: &AtomicBool,
) -> Result<MemberReport, MemberError> {
    let pinned = config.core.is_some_and(|c| pin_current_thread(c).is_ok());
    let realtime = config.fifo_priority > 0 && set_fifo(config.fifo_priority).is_ok();
    let _ = set_timer_slack_ns(1);
    let start = monotonic_ns();
    let ids = config.others();
    let detector = |threshold_ns| {
        Detector::new(DetectorConfig { period_ns: config.period_ns, threshold_ns }, ids.clone(), start)
    };
    let measure_from = config.measure_from_ns;
    let window = (measure_from, config.measure_until_ns.unwrap_or(u64::MAX));
    let mut recorders = vec![Recorder::new(KAIROS, Some(config.threshold_ns), window)];
    recorders.extend(config.sweep_thresholds_ns.iter().map(|&t| Recorder::new(KAIROS, Some(t), window)));
    let (mut phis, mut swims) = (Vec::new(), Vec::new());
    if config.peers {
        phis.push(PhiWatch::new(PhiSettings::akka(), ids.clone())?);
        phis.push(PhiWatch::new(PhiSettings::tuned(config.period_ns, config.threshold_ns), ids.clone())?);
        let me = SwimId { member: config.id, generation: config.incarnation };
        let n = config.members.len();
        for (i, settings) in
            [SwimSettings::lan(n), SwimSettings::aggressive(n, config.period_ns)].iter().enumerate()
        {
            let mut peer =
                SwimPeer::new(me, settings, config.seed ^ config.id.rotate_left(17) ^ i as u64, start);
            peer.announce(&ids, start);
            swims.push(peer);
        }
        recorders.extend(PEERS.iter().map(|p| Recorder::new(p, None, window)));
    }
    let mut l = Loop {
        config,
        table,
        primary: detector(config.threshold_ns),
        sweeps: config.sweep_thresholds_ns.iter().map(|&t| detector(t)).collect(),
        phis,
        swims,
        recorders,
        report: MemberReport {
            member: config.id,
            incarnation: config.incarnation,
            started_ns: start,
            measure_from_ns: measure_from,
            realtime,
            pinned,
            kernel_stamps: transport.kernel_stamps(),
            ..MemberReport::default()
        },
        events: Vec::new(),
        phi_events: Vec::new(),
        out: Vec::with_capacity(64),
        seq: 0,
        freshness: BTreeMap::new(),
    };
    let mut next_tick = first_round;
    let end = config.run_for_ns.map(|d| start.saturating_add(d));
    l.send_swim(&mut transport);
    l.publish(start);
    let mut deadline = start;
    // When the loop last gave up its core, and until when: a sleep to `deadline`, or, behind
    // it, a yield from the pass's end (`None` before the first pass).
    let mut gave_up: Option<u64> = None;
    let mut held = HeldWatch::new(HeldThread::Loop, LATE_NS, config.measure_from_ns, MAX_HELD);
    // Interrupt handlers are charged to the thread they interrupt: a clock on the loop's core,
    // counting the handlers that interrupted the loop, tells them from its own work.
    let mut irq = match (config.time_interrupts, config.core) {
        (false, _) => None,
        (true, None) => {
            held.interrupts_untimed("the loop is not pinned to a core (give --core)".into());
            None
        }
        (true, Some(core)) if !pinned => {
            held.interrupts_untimed(format!("the loop could not be pinned to core {core}"));
            None
        }
        (true, Some(core)) => IrqClock::on_cpu(core, thread_id() as u32)
            .map_err(|e| held.interrupts_untimed(e.to_string()))
            .ok(),
    };
    loop {
        let now = monotonic_ns();
        held.woke(gave_up.unwrap_or(now), now, thread_cpu_time_ns(), gave_up.is_some(), |from, to| {
            irq.as_mut().map_or(0, |c| c.handler_ns_between(from, to))
        });
        l.report.wakeups += 1;
        let late = now.saturating_sub(deadline);
        l.report.worst_wake_late_ns = l.report.worst_wake_late_ns.max(late);
        if late > LATE_NS {
            l.report.late_wakeups += 1;
        }
        // The heartbeat first, so its departure does not wait for what the socket holds.
        if now >= next_tick {
            l.send_heartbeat(&mut transport);
            // On the lane the next round is taken from the node's releases each time, so a
            // changed grant or a tunnel asked for again keeps its rounds before its releases.
            next_tick = lane_round(&transport, now, lead).unwrap_or_else(|| {
                while next_tick <= now {
                    next_tick += config.period_ns;
                }
                next_tick
            });
        }
        l.receive(&mut transport, now)?;
        l.decide(now);
        l.send_swim(&mut transport);
        l.publish(now);
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e) {
            break;
        }
        // SWIM's timers fire at the next wake-up after they are due (at most a period late):
        // a wake-up of their own each would cost more than SWIM's millisecond probes need.
        // The sweep's detectors do not wake the loop either: their suspicions are stamped with
        // their deadlines and ended by the receive stamps of the heartbeats that end them (the
        // core's output is a function of time), so only when they are noticed would change.
        deadline = [Some(next_tick), l.primary.next_deadline_ns(), end]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next_tick)
            .max(now);
        let pass_end = monotonic_ns();
        // The pass's time in the socket's system calls: kernel work in this thread's context.
        held.pass_ended(pass_end, transport.take_syscall_ns());
        if deadline > pass_end {
            sleep_until_ns(deadline);
            gave_up = Some(deadline);
        } else {
            // Behind (the pass outlasted the next deadline): the next pass at once, but after
            // the threads of the loop's priority waiting for its core. A `SCHED_FIFO` loop that
            // never sleeps keeps its core from another member's loop at the same priority on
            // it (two virtual cores carry three members): on a machine where a pass costs more
            // than a period, one such loop held its neighbour off for 658 ms, a silence every
            // detector of the group took for a failure. Yielding costs one system call, and
            // only when behind. The time off the core is then a stall like a late wake-up.
            std::thread::yield_now();
            gave_up = Some(pass_end);
        }
    }
    l.report.lane = transport.lane_stats();
    if let Some(lost) = irq.as_ref().map(IrqClock::lost_records).filter(|&n| n > 0) {
        held.interrupts_untimed(format!("in part: the interrupt clock's ring dropped {lost} records"));
    }
    l.report.held = held.finish();
    Ok(l.finish(monotonic_ns()))
}

impl<M: BridgeMemory> Loop<'_, M> {
    /// Takes every datagram that arrived. The pass began at `now`; a datagram that arrived
    /// since is handled at its own arrival time.
    fn receive(&mut self, transport: &mut Transport, now: u64) -> Result<(), MemberError> {
        Ok(transport.receive(|bytes, at| match decode(bytes) {
            Ok(Datagram::Heartbeat(hb)) | Ok(Datagram::Replica { heartbeat: hb, .. }) => {
                self.heard(&hb, at, now.max(at))
            }
            Ok(Datagram::Swim { instance, payload }) => {
                if let Some(peer) = self.swims.get_mut(instance as usize) {
                    peer.handle_data(payload, now);
                }
            }
            Err(_) => self.report.undecodable += 1,
        })?)
    }

    fn heard(&mut self, hb: &Heartbeat, at: u64, now: u64) {
        self.report.heartbeats_received += 1;
        self.events.clear();
        let heard = self.primary.handle_heartbeat(hb, at, now, &mut self.events);
        let (incarnation, last_seq, stale) = self.freshness.get(&hb.member).copied().unwrap_or_default();
        let ending = Some(Ending {
            sent_ns: hb.sent_ns,
            seq_gap: if incarnation == hb.incarnation { hb.seq.saturating_sub(last_seq) } else { 0 },
            stale,
        });
        match heard {
            Heard::Fresh { .. } => {
                self.freshness.insert(hb.member, (hb.incarnation, hb.seq, 0));
            }
            Heard::Stale => {
                if let Some(f) = self.freshness.get_mut(&hb.member) {
                    f.2 += 1;
                }
            }
            Heard::Unknown => {}
        }
        record_kairos(&mut self.recorders[0], &self.events, ending);
        // A member back from a suspicion is introduced to SWIM again: after a cut link SWIM's
        // own way back is its periodic announce to down members (65 s in the LAN defaults).
        if self.events.iter().any(|e| matches!(e, Event::Trusted { .. })) {
            for swim in &mut self.swims {
                swim.announce(&[hb.member], now);
            }
        }
        for (i, d) in self.sweeps.iter_mut().enumerate() {
            self.events.clear();
            d.handle_heartbeat(hb, at, now, &mut self.events);
            record_kairos(&mut self.recorders[1 + i], &self.events, ending);
        }
        match heard {
            Heard::Fresh { restarted } => {
                for phi in &mut self.phis {
                    phi.heartbeat(hb.member, at, restarted);
                }
            }
            Heard::Stale => self.report.stale_heartbeats += 1,
            Heard::Unknown => {}
        }
    }

    /// Sends this period's heartbeat to every other member, each stamped as it leaves (so a
    /// receiver can tell a late sender from a heartbeat late on the way).
    fn send_heartbeat(&mut self, transport: &mut Transport) {
        let mut hb = Heartbeat {
            member: self.config.id,
            incarnation: self.config.incarnation,
            seq: self.seq,
            counter: self.table.liveness(),
            sent_ns: 0,
        };
        self.seq += 1;
        self.report.send_errors += transport.send_heartbeat(&mut hb, &mut self.out);
        self.report.heartbeats_sent += 1;
    }

    fn send_swim(&mut self, transport: &mut Transport) {
        for (instance, peer) in self.swims.iter_mut().enumerate() {
            for (member, bytes) in peer.take_outbox() {
                if !transport.send_swim(member, instance as u8, &bytes, &mut self.out) {
                    self.report.send_errors += 1;
                }
            }
        }
    }

    /// Asks every detector at `now`.
    fn decide(&mut self, now: u64) {
        self.events.clear();
        self.primary.poll(now, &mut self.events);
        record_kairos(&mut self.recorders[0], &self.events, None);
        for (i, d) in self.sweeps.iter_mut().enumerate() {
            self.events.clear();
            d.poll(now, &mut self.events);
            record_kairos(&mut self.recorders[1 + i], &self.events, None);
        }
        let first_peer = 1 + self.sweeps.len();
        for (i, phi) in self.phis.iter_mut().enumerate() {
            self.phi_events.clear();
            phi.poll(now, &mut self.phi_events);
            let recorder = &mut self.recorders[first_peer + i];
            for e in &self.phi_events {
                match *e {
                    PhiEvent::Suspected { member, at_ns, last_heartbeat_ns } => {
                        recorder.suspect(member, last_heartbeat_ns, at_ns, at_ns)
                    }
                    PhiEvent::Trusted { member, at_ns } => recorder.trust(member, at_ns, None),
                }
            }
        }
        for (i, swim) in self.swims.iter_mut().enumerate() {
            swim.poll(now);
            let recorder = &mut self.recorders[first_peer + 2 + i];
            for e in swim.take_events() {
                match e {
                    SwimEvent::Down { member, at_ns } => {
                        let last = self.primary.entry(member).map_or(at_ns, |e| e.last_heartbeat_ns);
                        recorder.suspect(member, last, at_ns, at_ns)
                    }
                    SwimEvent::Up { member, at_ns } => recorder.trust(member, at_ns, None),
                }
            }
        }
    }

    /// Writes every row of the table, and the loop's beat.
    fn publish(&mut self, now: u64) {
        for (i, entry) in self.primary.entries().iter().enumerate() {
            let mut row = Row::from_entry(entry);
            for (slot, phi) in self.phis.iter().enumerate() {
                row.peers_noticed_ns[slot] = phi.suspected_since_ns(entry.member).unwrap_or(0);
            }
            for (slot, swim) in self.swims.iter().enumerate() {
                row.peers_noticed_ns[2 + slot] = swim.down_since_ns(entry.member).unwrap_or(0);
            }
            self.table.publish(i, &row);
        }
        self.table.beat(now, self.report.heartbeats_sent);
    }

    fn finish(mut self, end: u64) -> MemberReport {
        self.report.ended_ns = end;
        self.report.measure_until_ns = self.config.measure_until_ns.unwrap_or(end).min(end);
        self.report.swim_errors = self.swims.iter().map(SwimPeer::errors).sum();
        self.report.detectors = self.recorders.into_iter().map(|r| r.finish(end)).collect();
        self.report
    }
}

/// On the lane, the first round after `now`: `lead` before one of the node's releases.
fn lane_round(transport: &Transport, now: u64, lead: u64) -> Option<u64> {
    transport.next_release_ns(now + lead + 1).map(|release| release - lead)
}

fn record_kairos(recorder: &mut Recorder, events: &[Event], ending: Option<Ending>) {
    for e in events {
        match *e {
            Event::Suspected { member, since_ns, noticed_ns, last_fresh_ns } => {
                recorder.suspect(member, last_fresh_ns, since_ns, noticed_ns)
            }
            Event::Trusted { member, at_ns, .. } => recorder.trust(member, at_ns, ending),
        }
    }
}

#[cfg(test)]
mod tests;
