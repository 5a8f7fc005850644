//! The source host: a token-bucket sender replaying the trace, and the receiver that measures
//! the app-update age of every user, on one thread (sender and receiver share one clock, as the
//! source's did by living on one machine).
//!
//! The sender is the source's: with `cycles` the time per token (`1/R`), the bucket starts with
//! one token and no cap; each round offers `K = min(B, tokens, left)` packets stamped with one
//! time, and the port's answer `L` is what leaves the bucket. Between rounds the thread drains
//! the receive port.
//!
//! The receiver keeps the source's semantics (its `calculator.cpp`): a data packet is
//! *misaddressed* when the FIB stamp it carries is older than the send time of the last control
//! packet for its user that preceded it in the trace; misaddressed and dropped packets do not
//! lower the age.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::packet::{Kind, Packet};
use kairos_io::Port;
use kairos_metrics::{AgeTable, AgeTableSummary, LatencyRecorder};
use kairos_sys::clock::monotonic_ns;

use crate::trace::Trace;

/// How the sender paces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Token bucket at this many packets per second.
    Rate(f64),
    /// As fast as the port takes packets (measures the maximum rate).
    Unlimited,
    /// Token bucket whose rate follows the measured age (see [`AgeControl`]).
    AgeControlled(AgeControl),
}

/// An age-controlled sender, in the spirit of the age control protocol (Shreedhar, Kaul, Yates,
/// 2019): every `window_ns` it measures the mean age over users in that window (exactly, from
/// the receiver's age processes), smooths it (half the new window, half the old estimate), and
/// moves the rate by `step` (multiplicatively) in the direction that last lowered the age,
/// reversing when the age rose. Updating should be fast, but not too fast: the climb settles
/// where a higher rate starts to queue.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AgeControl {
    /// The rate of the first window, packets per second.
    pub initial_pps: f64,
    /// The lowest rate a step may choose, packets per second.
    pub min_pps: f64,
    /// The highest rate a step may choose, packets per second.
    pub max_pps: f64,
    /// How long each measurement window lasts, ns.
    pub window_ns: u64,
    /// The relative change of the rate per window (0.1: 10% up or down).
    pub step: f64,
}

/// One control step of the age-controlled sender.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RateStep {
    /// Since the start of sending, ns.
    pub t_ns: u64,
    /// Rate chosen for the next window.
    pub rate_pps: f64,
    /// Mean age over users measured in the window that ended, ns.
    pub window_age_ns: f64,
}

/// What the source measured.
#[derive(Debug, Clone)]
pub struct SourceResult {
    /// Packets sent, control and data (rows of the trace taken by the port).
    pub sent: u64,
    /// Distinct data packets received back.
    pub received: u64,
    /// Received data packets addressed with a FIB entry older than their user's last control
    /// packet sent before them: counted as received, but they do not lower the age.
    pub misaddressed: u64,
    /// Data packets received more than once (fault injection only).
    pub duplicates: u64,
    /// The app-update age of every user, from the first send to the last.
    pub ages: AgeTableSummary,
    /// Mean packets per sender `tx_burst` that took any.
    pub avg_batch: f64,
    /// Mean packets offered per call that offered any (K).
    pub avg_offered: f64,
    /// When sending started, `CLOCK_MONOTONIC` ns.
    pub send_start_ns: u64,
    /// The time stamp of the last send that took packets, `CLOCK_MONOTONIC` ns.
    pub send_end_ns: u64,
    /// Mean one-way-and-back latency of correctly received data packets, ns.
    pub mean_latency_ns: f64,
    /// Its median and 99th percentile, ns: the median is the whole path's floor (sender,
    /// forwarder and receiver), apart from the stalls that make the mean.
    pub p50_latency_ns: u64,
    /// The 99th percentile of the same latencies, ns.
    pub p99_latency_ns: u64,
    /// The age-controlled sender's steps (empty for other paces).
    pub rate_steps: Vec<RateStep>,
}

impl SourceResult {
    /// Packets per second the sender achieved.
    pub fn sent_pps(&self) -> f64 {
        self.sent as f64 / ((self.send_end_ns - self.send_start_ns).max(1) as f64 / 1e9)
    }
}

struct Receiver {
    expected_ctrl: Vec<u64>,
    seen: Vec<bool>,
    ages: AgeTable,
    received: u64,
    misaddressed: u64,
    duplicates: u64,
    latency_sum: u128,
    latencies: LatencyRecorder,
    last_rx_ns: u64,
}

impl Receiver {
    fn take(&mut self, packets: &[Packet]) {
        for p in packets {
            if p.kind != Kind::Data {
                continue;
            }
            let seq = p.seq as usize;
            if seq >= self.seen.len() || self.seen[seq] {
                self.duplicates += 1;
                continue;
            }
            self.seen[seq] = true;
            self.received += 1;
            self.last_rx_ns = self.last_rx_ns.max(p.rx_ns);
            if p.addr_stamp_ns < self.expected_ctrl[seq] {
                self.misaddressed += 1;
                continue;
            }
            let latency = p.rx_ns.saturating_sub(p.sent_ns);
            self.latency_sum += u128::from(latency);
            self.latencies.record(latency);
            self.ages.deliver(p.user as usize, p.sent_ns, p.rx_ns);
        }
    }
}

/// The longest latency the receiver's histogram tells apart, ns (10 s, the longest drain).
const MAX_RECORDED_LATENCY_NS: u64 = 10_000_000_000;

/// What the sender shares with the thread supervising it: how far it got (for a progress bar)
/// and a flag that ends it early (when the forwarder it feeds is gone, nothing would ever take
/// its packets again).
#[derive(Debug, Default)]
pub struct Progress {
    /// Rows of the trace sent so far.
    pub sent: AtomicUsize,
    /// Set to end the run now; the result then covers what was sent.
    pub abort: AtomicBool,
}

/// Sends `trace` through `out` and receives on `inp` until every packet came back or `drain_ns`
/// passed without any arriving after the last send, or until `progress.abort` is set.
pub fn run(
    trace: &Trace,
    pace: Pace,
    burst: usize,
    out: &mut dyn Port<Packet>,
    inp: &mut dyn Port<Packet>,
    drain_ns: u64,
    progress: &Progress,
) -> SourceResult {
    let rows = &trace.rows;
    let mut last_ctrl = vec![0u64; trace.users as usize];
    let mut recv = Receiver {
        expected_ctrl: vec![0; rows.len()],
        seen: vec![false; rows.len()],
        ages: AgeTable::new(trace.users as usize, 0),
        received: 0,
        misaddressed: 0,
        duplicates: 0,
        latency_sum: 0,
        // Sized up front, so the paced loop never allocates; a latency over it counts as it.
        latencies: LatencyRecorder::preallocated(MAX_RECORDED_LATENCY_NS),
        last_rx_ns: 0,
    };
    let data_total = rows.iter().filter(|r| !r.control).count() as u64;
    let mut rx_buf = vec![Packet::default(); 64];
    let mut batch: Vec<Packet> = Vec::with_capacity(burst);
    let mut per_packet_ns = match pace {
        Pace::Rate(r) => 1e9 / r,
        Pace::Unlimited => 0.0,
        Pace::AgeControlled(c) => 1e9 / c.initial_pps,
    };
    let control = match pace {
        Pace::AgeControlled(c) => Some(c),
        _ => None,
    };
    let mut rate_steps = Vec::new();
    let (mut direction, mut smoothed, mut last_smoothed) = (1.0f64, None::<f64>, None::<f64>);
    let start = monotonic_ns();
    recv.ages = AgeTable::new(trace.users as usize, start);
    // One token at the start, as the source's `time_last_sent = start - cycles_per_packet`.
    let mut time_last_sent = start as f64 - per_packet_ns;
    let (mut next, mut calls, mut offered_calls, mut offered_sum) = (0usize, 0u64, 0u64, 0u64);
    let mut end = start;
    let (mut window_start, mut window_area) = (start, 0u128);
    while next < rows.len() && !progress.abort.load(Ordering::Relaxed) {
        let now = monotonic_ns();
        if let Some(c) = control
            && now - window_start >= c.window_ns
        {
            let area = recv.ages.doubled_area_sum(now);
            let users = recv.ages.len().max(1) as f64;
            let age = (area - window_area) as f64 / 2.0 / (now - window_start) as f64 / users;
            let s = smoothed.map_or(age, |old| 0.5 * old + 0.5 * age);
            if let Some(last) = last_smoothed
                && s > last
            {
                direction = -direction;
            }
            last_smoothed = Some(s);
            smoothed = Some(s);
            let old_pp = per_packet_ns;
            let rate = (1e9 / old_pp * (1.0 + c.step * direction)).clamp(c.min_pps, c.max_pps);
            per_packet_ns = 1e9 / rate;
            // Keep the tokens already earned (at most a burst) across the change.
            let tokens = ((now as f64 - time_last_sent) / old_pp).clamp(0.0, burst as f64);
            time_last_sent = now as f64 - tokens * per_packet_ns;
            rate_steps.push(RateStep { t_ns: now - start, rate_pps: rate, window_age_ns: age });
            window_start = now;
            window_area = area;
        }
        let tokens = if per_packet_ns == 0.0 {
            burst
        } else {
            ((now as f64 - time_last_sent) / per_packet_ns).floor().max(0.0) as usize
        };
        let k = tokens.min(burst).min(rows.len() - next);
        if k > 0 {
            batch.clear();
            for (i, row) in rows[next..next + k].iter().enumerate() {
                batch.push(Packet {
                    kind: if row.control { Kind::Control } else { Kind::Data },
                    user: row.user,
                    seq: (next + i) as u64,
                    sent_ns: now,
                    ..Packet::default()
                });
            }
            let sent = out.tx_burst(&batch).unwrap_or(0);
            offered_calls += 1;
            offered_sum += k as u64;
            for (i, row) in rows[next..next + sent].iter().enumerate() {
                if row.control {
                    last_ctrl[row.user as usize] = now;
                } else {
                    recv.expected_ctrl[next + i] = last_ctrl[row.user as usize];
                }
            }
            if sent > 0 {
                calls += 1;
                end = now;
            }
            next += sent;
            time_last_sent += sent as f64 * per_packet_ns;
            progress.sent.store(next, Ordering::Relaxed);
        }
        let n = inp.rx_burst(&mut rx_buf).unwrap_or(0);
        recv.take(&rx_buf[..n]);
    }
    // Drain what is still in flight.
    let mut quiet_since = monotonic_ns();
    while recv.received < data_total
        && monotonic_ns() - quiet_since < drain_ns
        && !progress.abort.load(Ordering::Relaxed)
    {
        let n = inp.rx_burst(&mut rx_buf).unwrap_or(0);
        if n > 0 {
            recv.take(&rx_buf[..n]);
            quiet_since = monotonic_ns();
        } else {
            std::thread::yield_now();
        }
    }
    let correct = recv.received - recv.misaddressed;
    SourceResult {
        sent: next as u64,
        received: recv.received,
        misaddressed: recv.misaddressed,
        duplicates: recv.duplicates,
        // The source's window: from the first to the last send time stamp.
        ages: recv.ages.summary(end),
        avg_batch: if calls == 0 { 0.0 } else { next as f64 / calls as f64 },
        avg_offered: if offered_calls == 0 { 0.0 } else { offered_sum as f64 / offered_calls as f64 },
        send_start_ns: start,
        send_end_ns: end,
        mean_latency_ns: if correct == 0 { 0.0 } else { recv.latency_sum as f64 / correct as f64 },
        p50_latency_ns: recv.latencies.value_at_quantile(0.5),
        p99_latency_ns: recv.latencies.value_at_quantile(0.99),
        rate_steps,
    }
}
