//! Failover: how long after its leader dies a cluster takes a write again.
//!
//! One trial: find the leader (kairos: a member's `INFO replication`; etcd: the members'
//! `/v3/maintenance/status`), connect a client to another member and write once through it,
//! then SIGKILL the leader (its process id, which the bench owns) and write through that member
//! until a write is answered: the time from just before the kill to that answer is the trial's
//! figure. A write attempt with no answer within [`ATTEMPT_TIMEOUT`] is abandoned and sent
//! again on a new connection, as a client with a deadline would (a kairos member retries a lost
//! forward by itself; an etcd member does not, and a put forwarded to a dead leader waits for
//! etcd's own 7 s request timeout); an error answer is retried after 1 ms. Meanwhile a third
//! member is asked every millisecond which leader it knows, which splits the figure into the
//! election (until a new leader is known there) and the rest. The killed member is then
//! started again on its data and the trial ends once it answers a read.
//!
//! Beside the measured figures, Redis Sentinel's default: `down-after-milliseconds` 30000 in
//! Redis 7.0's `sentinel.conf`, the time before Sentinel even deems a primary down (a constant,
//! not measured).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;

use super::client::{Conn, Op, connect};
use super::systems::{Running, SystemKind};

/// How long one write attempt may wait for its answer during a failover.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a trial may take before the cluster counts as not recovering.
const RECOVER_WITHIN: Duration = Duration::from_secs(30);
/// How often the observer asks which leader it knows.
const OBSERVE_EVERY: Duration = Duration::from_millis(1);
/// Redis Sentinel's `down-after-milliseconds` in Redis 7.0's default `sentinel.conf`.
pub const SENTINEL_DOWN_AFTER_MS: f64 = 30_000.0;

/// One trial's figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Trial {
    /// From just before the kill to the first write answered through another member, ms.
    pub write_ms: f64,
    /// From just before the kill until a third member knew a new leader, ms (absent with
    /// fewer than three members left to ask, or when it was not seen within a second of the
    /// write).
    pub elected_ms: Option<f64>,
    /// Write attempts that failed or were abandoned before the one answered.
    pub failed_attempts: u64,
}

/// Runs one trial on `running`; the killed member is started again before it returns.
pub fn trial(running: &mut Running, value_bytes: usize) -> Result<Trial> {
    let system = running.setup().system;
    if !matches!(system, SystemKind::Kairos | SystemKind::Etcd) {
        bail!("{} has no failover of its own to measure", system.name());
    }
    let leader = running.wait_leader()?;
    let n = running.len();
    let through = (leader + 1) % n;
    let watch = (n >= 3).then(|| running.leader_watch((leader + 2) % n, leader));
    let addr = running.client_addr(through);
    let protocol = system.protocol();
    let value = vec![b'f'; value_bytes];
    // A write through that member first, so the connection and the member are known to work.
    let mut session = connect(protocol, addr, ATTEMPT_TIMEOUT)?;
    let ready_by = Instant::now() + Duration::from_secs(2);
    while let Err(e) = session.execute(Op::Write, b"failover", &value) {
        if Instant::now() > ready_by {
            bail!("a write through member {through} failed before the kill: {e}");
        }
        session = connect(protocol, addr, ATTEMPT_TIMEOUT)?;
    }

    let stop = AtomicBool::new(false);
    let killed_at = Instant::now();
    let (written, elected) = std::thread::scope(|scope| {
        let watcher = watch.map(|watch| {
            let stop = &stop;
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if watch.sees_new_leader() {
                        return Some(Instant::now());
                    }
                    std::thread::sleep(OBSERVE_EVERY);
                }
                None
            })
        });
        let written = kill_and_write(running, leader, &mut session, &value, killed_at, || {
            connect(protocol, addr, ATTEMPT_TIMEOUT)
        });
        // The watcher has a second past the write to see the new leader, then stops.
        let give_up = Instant::now() + Duration::from_secs(1);
        while watcher.as_ref().is_some_and(|w| !w.is_finished()) && Instant::now() < give_up {
            std::thread::sleep(OBSERVE_EVERY);
        }
        stop.store(true, Ordering::Relaxed);
        let elected = watcher.and_then(|w| w.join().ok().flatten());
        (written, elected)
    });
    let (write_at, failed_attempts) = written?;
    running.restart(leader)?;
    let ms = |t: Instant| (t - killed_at).as_secs_f64() * 1e3;
    Ok(Trial { write_ms: ms(write_at), elected_ms: elected.map(ms), failed_attempts })
}

/// Kills the leader, then writes through `session` until a write is answered; returns when
/// it was and how many attempts failed first.
fn kill_and_write(
    running: &mut Running,
    leader: usize,
    session: &mut Conn,
    value: &[u8],
    killed_at: Instant,
    reconnect: impl Fn() -> std::io::Result<Conn>,
) -> Result<(Instant, u64)> {
    running.kill(leader)?;
    let mut failed = 0;
    loop {
        match session.execute(Op::Write, b"failover", value) {
            Ok(()) => return Ok((Instant::now(), failed)),
            Err(e) => {
                failed += 1;
                if killed_at.elapsed() > RECOVER_WITHIN {
                    bail!("no write was answered within {} s of the kill: {e}", RECOVER_WITHIN.as_secs());
                }
                std::thread::sleep(Duration::from_millis(1));
                if let Ok(s) = reconnect() {
                    *session = s;
                }
            }
        }
    }
}

/// p50, p99 and the largest of some samples (nearest rank), ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    /// The median.
    pub p50: f64,
    /// The 99th percentile (with fewer than 100 samples, the largest but a few).
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

impl Quantiles {
    /// Of `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let rank = |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Some(Self { p50: rank(0.5), p99: rank(0.99), max: sorted[sorted.len() - 1] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        assert_eq!(Quantiles::of(&[]), None);
        assert_eq!(Quantiles::of(&[3.0]), Some(Quantiles { p50: 3.0, p99: 3.0, max: 3.0 }));
        let five = Quantiles::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((five.p50, five.p99, five.max), (3.0, 5.0, 5.0));
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        let q = Quantiles::of(&hundred).unwrap();
        assert_eq!((q.p50, q.p99, q.max), (50.0, 99.0, 100.0));
    }
}
