//! The run: for each load, a stall watch on every core, the group started with the load beside
//! it, and the members' reports set against the stalls; then the goal over every load. A load
//! that cannot start is skipped with its reason, and the others still run.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use kairos_fd::member::KAIROS;
use kairos_launch::fd_group::{Cluster, ClusterSettings};
use kairos_metrics::{Stall, StallReport, StallWatch, StallWatchConfig};
use kairos_sys::child::OwnedChild;

use super::mistakes::{Evidence, mistakes_at, rows, widened};
use super::{AccuracyConfig, AccuracySummary, Causes, Goal, Load, LoadFigures, MemberFigures, SkippedLoad};
use crate::harness::Run;

/// Why a load could not be started: its rows are skipped with this as the reason.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    /// stress-ng did not start.
    #[error(transparent)]
    StressNg(#[from] crate::harness::background::StressNgError),
    /// The flood needs the testbed's hosts, which the group does not run on.
    #[error("the flood runs between testbed hosts (root)")]
    NoTestbed,
    /// The iperf3 server did not start.
    #[error("iperf3 could not start ({0}); install it (Debian: iperf3) for the flood")]
    Iperf3Server(std::io::Error),
    /// The iperf3 client did not start.
    #[error("{0}")]
    Iperf3Client(std::io::Error),
}

/// The load's processes, ended when dropped.
fn start_load(load: Load, cluster: &Cluster) -> Result<Vec<OwnedChild>, LoadError> {
    match load {
        Load::Idle => Ok(Vec::new()),
        Load::Stress => {
            Ok(vec![crate::harness::background::stress_ng(kairos_sys::proc::online_cores(), None)?])
        }
        Load::Flood => {
            let (Some(mut server), Some(mut client)) =
                (cluster.host_command(0, "iperf3"), cluster.host_command(1, "iperf3"))
            else {
                return Err(LoadError::NoTestbed);
            };
            server
                .args(["-s", "-p", "5299"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let server =
                OwnedChild::spawn_named(&mut server, "iperf3 server").map_err(LoadError::Iperf3Server)?;
            std::thread::sleep(Duration::from_millis(200));
            let to = kairos_io::lane_testbed::host_address(0).to_string();
            client
                .args(["-c", &to, "-p", "5299", "-u", "-b", "2G", "-t", "86400"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let client =
                OwnedChild::spawn_named(&mut client, "iperf3 client").map_err(LoadError::Iperf3Client)?;
            Ok(vec![server, client])
        }
    }
}

/// Runs the group under each load of `config`, in turn, and sets its mistakes against the stalls.
pub(super) fn run_loads(config: &AccuracyConfig, run: &mut Run<'_>) -> Result<AccuracySummary> {
    let period_ns = config.period_us * 1_000;
    let mut sweep: Vec<u64> =
        config.thresholds_us.iter().copied().filter(|&t| t != config.recommended_us).collect();
    sweep.sort_unstable();
    sweep.dedup();
    let (mut all_rows, mut loads, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for (k, &load) in config.loads.iter().enumerate() {
        run.doing(&format!("{load:?}: {} s", config.seconds));
        let settings = ClusterSettings {
            exe: config.exe.clone(),
            members: config.members,
            period_us: config.period_us,
            threshold_us: config.recommended_us,
            sweep_us: sweep.clone(),
            network: config.network,
            base_port: config.base_port,
            fifo_priority: config.fifo_priority,
            pin: config.pin,
            app_bump_us: config.app_bump_us,
            run_for_ms: Some(((config.warmup_seconds + config.seconds) * 1e3) as u64),
            measure_after_ms: (config.warmup_seconds * 1e3) as u64,
            time_interrupts: config.time_interrupts,
        };
        let dir = run.dir().path().join(format!("{load:?}").to_lowercase());
        // The watch first, so it sees the whole run.
        let watches: Vec<StallWatch> = (0..kairos_sys::proc::online_cores())
            .filter_map(|core| {
                StallWatch::start(StallWatchConfig {
                    core,
                    period: Duration::from_micros(config.stall_period_us),
                    threshold_ns: config.stall_threshold_us * 1_000,
                    fifo_priority: 99,
                })
                .ok()
            })
            .collect();
        let mut cluster =
            Cluster::start(settings, &dir).with_context(|| format!("the group for {load:?}"))?;
        let background = match start_load(load, &cluster) {
            Ok(b) => b,
            Err(reason) => {
                skipped.push(SkippedLoad { load, reason: reason.to_string() });
                run.step("fd accuracy");
                continue;
            }
        };
        let timeout = Duration::from_secs_f64(config.warmup_seconds + config.seconds + 30.0);
        let reports = cluster.wait_reports(timeout)?;
        drop(background);
        drop(cluster);
        let watched: Vec<StallReport> = watches.into_iter().filter_map(|w| w.finish().ok()).collect();
        let mut stalls: Vec<Stall> = watched.iter().flat_map(|r| r.stalls.iter().copied()).collect();
        stalls.sort_by_key(|s| s.due_ns);
        let name = format!("{load:?}").to_lowercase();
        run.dir().write_csv(&format!("stalls_{name}.csv"), &stalls)?;
        let recommended_ns = config.recommended_us * 1_000;
        let evidence = Evidence::new(
            widened(&stalls, config.stall_period_us * 1_000),
            &reports,
            (config.network, kairos_sys::proc::online_cores()),
            period_ns,
            recommended_ns,
        );
        let mistakes = mistakes_at(&reports, recommended_ns, &evidence);
        run.dir().write_csv(&format!("mistakes_{name}.csv"), &mistakes)?;
        loads.push(LoadFigures {
            load,
            stall_watch_realtime: !watched.is_empty() && watched.iter().all(|r| r.realtime),
            held_explains: evidence.held_counts,
            stalls: stalls.len(),
            longest_stall_us: stalls.iter().map(Stall::length_ns).max().unwrap_or(0) as f64 / 1e3,
            members: reports
                .iter()
                .map(|r| MemberFigures {
                    member: r.member,
                    realtime: r.realtime,
                    heartbeats_sent: r.heartbeats_sent,
                    heartbeats_received: r.heartbeats_received,
                    stale_heartbeats: r.stale_heartbeats,
                    send_errors: r.send_errors,
                    late_wakeups: r.late_wakeups,
                    held_off: r.held.count,
                    held_in_interrupts: r.held.in_interrupts,
                    interrupt_ms: r.held.interrupt_ns as f64 / 1e6,
                    long_own_work_passes: r.held.long_own_work,
                    worst_own_work_us: r.held.worst_own_work_ns as f64 / 1e3,
                    interrupts_untimed: r.held.interrupts_untimed.clone(),
                    worst_wake_late_us: r.worst_wake_late_ns as f64 / 1e3,
                    lane_beats_replaced: r.lane.map(|l| l.beats_replaced),
                })
                .collect(),
            unexplained_causes: Causes::of(&mistakes),
        });
        let mut rows = rows(load, &reports, &evidence);
        rows.sort_by_key(|r| (r.detector != KAIROS, r.detector.clone(), r.threshold_us));
        all_rows.extend(rows);
        if k + 1 < config.loads.len() {
            run.step("fd accuracy");
        }
    }
    let unexplained: u64 = all_rows
        .iter()
        .filter(|r| r.detector == KAIROS && r.threshold_us == Some(config.recommended_us))
        .map(|r| r.unexplained)
        .sum();
    let goal = Goal { threshold_us: config.recommended_us, unexplained, met: unexplained == 0 };
    let info = run.finish();
    Ok(AccuracySummary {
        run: info,
        config: config.clone(),
        network: config.network,
        rows: all_rows,
        recommended_threshold_us: config.recommended_us,
        goal,
        loads,
        skipped,
    })
}
