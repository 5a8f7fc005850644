//! Each false suspicion set against the evidence of a stall: the watch's stalls, widened by its
//! period, and the suspected member's own threads kept from their work, where nothing of the
//! experiment outranks them. From these, the rows per detector and threshold, and Kairos's
//! mistakes at the recommended threshold for `mistakes_<load>.csv`.

use std::collections::BTreeMap;

use kairos_fd::held::{Held, HeldKind};
use kairos_fd::member::{DetectorRecord, KAIROS, MemberReport, Suspicion};
use kairos_launch::fd_group::Network;
use kairos_metrics::Stall;
use serde::Serialize;

use super::{AccuracyRow, Causes, Load};

impl Causes {
    pub(super) fn of(mistakes: &[MistakeRecord]) -> Self {
        let mut c = Self::default();
        for m in mistakes.iter().filter(|m| !m.explained) {
            match (m.end_seq_gap, m.stale_between, m.end_sent_after_deadline_us) {
                (None, _, _) | (_, None, _) | (_, _, None) => c.open += 1,
                (_, Some(stale), _) if stale > 0 => c.stale_counter += 1,
                (Some(gap), _, _) if gap > 1 => c.lost += 1,
                (_, _, Some(after)) if after > 0.0 => c.sender_late += 1,
                _ => c.late_on_the_way += 1,
            }
        }
        c
    }
}

/// What explains a silence `[from_ns, to_ns]`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Explanation {
    /// A stall the watch saw overlaps it.
    Watch,
    /// Only the silent member's own threads saw one: a thread was kept from its work that
    /// long in the silence.
    Held(HeldBy),
    /// Nothing.
    Unexplained,
}

/// The silent member's thread kept from its work longest in its silence.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HeldBy {
    /// The time its stretches lost inside the silence, summed, ns.
    lost_ns: u64,
    /// Its longest stretch's kind.
    kind: HeldKind,
}

/// What a load's mistakes are set against: the watch's stalls and the members' own.
pub(super) struct Evidence<'a> {
    /// The watch's stalls, widened by its period ([`widened`]), by `due_ns`.
    stalls: Vec<Stall>,
    /// Each member's held stretches, in time order, as stalls of the machine: a thread due and
    /// kept from its work had its core taken, as a late wake-up of the watch does (the watch
    /// samples its core each watch period; these are the heartbeat loops' own instants). Only
    /// where nothing of the experiment outranks the members' threads ([`held_explains`]).
    held: BTreeMap<u64, &'a [Held]>,
    /// The heartbeat period, ns: a silence is taken from a period before its last fresh
    /// heartbeat.
    period_ns: u64,
    /// The threshold the peers are held to, ns (they have none of Kairos's kind).
    recommended_ns: u64,
    /// The longest of `stalls`, ns: how far back a search for one overlapping a silence walks.
    longest_stall_ns: u64,
    /// Whether the members' held stretches count ([`held_explains`]).
    pub(super) held_counts: bool,
}

impl<'a> Evidence<'a> {
    pub(super) fn new(
        stalls: Vec<Stall>,
        reports: &'a [MemberReport],
        (network, cores): (Network, usize),
        period_ns: u64,
        recommended_ns: u64,
    ) -> Self {
        let held_counts = held_explains(reports, network, cores);
        // A member's stretches are in time order (`HeldRecord::merged`).
        let held = if held_counts {
            reports.iter().map(|r| (r.member, r.held.stretches.as_slice())).collect()
        } else {
            BTreeMap::new()
        };
        let longest_stall_ns = stalls.iter().map(Stall::length_ns).max().unwrap_or(0);
        Self { stalls, held, period_ns, recommended_ns, longest_stall_ns, held_counts }
    }

    /// The silence a suspicion ended: from a period before its last fresh heartbeat.
    fn silence(&self, s: &Suspicion) -> (u64, u64) {
        (s.window_from_ns.saturating_sub(self.period_ns), s.since_ns)
    }

    /// What explains the silence behind `s`, a detector with threshold `threshold_ns` (`None`:
    /// a peer) took for a failure: a stall the watch saw on any core, or one of the subject's
    /// own threads kept from its work inside the silence for at least half the threshold in
    /// all. (Its next heartbeat had to be about a threshold late; a member that lost less than
    /// half of that has not explained the rest, and the many short stretches of a loaded core
    /// do not add up to an explanation by overlapping every silence.) A stretch counts only
    /// for its part inside the silence, and the loop's and the application's are not added:
    /// they share a core, and one stall delays both.
    fn explain(&self, s: &Suspicion, threshold_ns: Option<u64>) -> Explanation {
        let (from_ns, to_ns) = self.silence(s);
        if explained(&self.stalls, self.longest_stall_ns, from_ns, to_ns) {
            return Explanation::Watch;
        }
        let Some(held) = self.held.get(&s.subject) else { return Explanation::Unexplained };
        // Stretches are short (a wake-up or a pass): none that began a second before matters.
        let first = held.partition_point(|h| h.from_ns.saturating_add(1_000_000_000) < from_ns);
        // Per thread: the time lost inside the silence, its longest stretch's there, and that
        // stretch's kind.
        let mut threads = [(0u64, 0u64, HeldKind::OffCpu); 2];
        for h in held[first..].iter().take_while(|h| h.from_ns <= to_ns).filter(|h| h.to_ns >= from_ns) {
            let lost = h.lost_ns.min(h.to_ns.min(to_ns) - h.from_ns.max(from_ns));
            let t = &mut threads[h.thread as usize];
            t.0 += lost;
            if lost > t.1 {
                (t.1, t.2) = (lost, h.kind);
            }
        }
        let (lost_ns, _, kind) = if threads[1].0 > threads[0].0 { threads[1] } else { threads[0] };
        if lost_ns > 0 && lost_ns * 2 >= threshold_ns.unwrap_or(self.recommended_ns) {
            Explanation::Held(HeldBy { lost_ns, kind })
        } else {
            Explanation::Unexplained
        }
    }
}

/// Whether the members' held stretches are stalls of the machine: nothing of the experiment
/// outranks a member's threads on its core. Every loop `SCHED_FIFO` and pinned, a core each
/// (members sharing a core delay each other: a neighbour's long pass would pass for a stall),
/// and no lane nodes (which run above the members).
fn held_explains(reports: &[MemberReport], network: Network, cores: usize) -> bool {
    network != Network::Lane && reports.len() <= cores && reports.iter().all(|r| r.realtime && r.pinned)
}

/// Whether a stall overlaps `[from_ns, to_ns]`. `stalls` are sorted by `due_ns` (those of
/// several cores, so their ends are not in order): the search takes those due by `to_ns` and
/// walks back no further than the longest stall, `longest`.
fn explained(stalls: &[Stall], longest: u64, from_ns: u64, to_ns: u64) -> bool {
    let end = stalls.partition_point(|s| s.due_ns <= to_ns);
    stalls[..end]
        .iter()
        .rev()
        .take_while(|s| s.due_ns.saturating_add(longest) >= from_ns)
        .any(|s| s.woke_ns >= from_ns)
}

/// The watch's stalls widened by its period: it sees a stall when a wake-up falls in it, and
/// its previous wake-up was on time, so the core was taken somewhere in `[due - period, woke]`
/// (certainly in `[due, woke]`). A mistake "coincides with a stall" when that widened stretch
/// overlaps its silence.
pub(super) fn widened(stalls: &[Stall], watch_period_ns: u64) -> Vec<Stall> {
    stalls
        .iter()
        .map(|s| Stall { due_ns: s.due_ns.saturating_sub(watch_period_ns), woke_ns: s.woke_ns })
        .collect()
}

/// One mistake of Kairos's detector at the recommended threshold, for `mistakes_<load>.csv`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct MistakeRecord {
    observer: u64,
    subject: u64,
    /// The silence: from the last fresh heartbeat to the suspicion, us.
    silence_us: f64,
    /// How long the member stayed suspected, us (none: to the end).
    duration_us: Option<f64>,
    /// When the suspicion began, `CLOCK_MONOTONIC` ns.
    since_ns: u64,
    /// A stall explains the silence (the watch's, or the suspected member's own).
    explained: bool,
    /// When only the subject's own threads saw it: how the longest stretch kept them from
    /// their work (off the CPU, or in the kernel's calls) ...
    held_kind: Option<HeldKind>,
    /// ... and their time lost in the silence, us.
    held_lost_us: Option<f64>,
    /// The nearest stall's distance from the silence, us (0: it overlaps).
    nearest_stall_us: Option<f64>,
    /// The heartbeat that ended it: sent this long after the deadline, us (negative: before,
    /// and late on the way).
    end_sent_after_deadline_us: Option<f64>,
    /// ... and on the way this long (its receive stamp less its send time), us.
    end_one_way_us: Option<f64>,
    /// ... its sequence number less the last fresh one's (1: nothing missing).
    end_seq_gap: Option<u64>,
    /// Stale heartbeats (the application's counter unchanged) during the silence.
    stale_between: Option<u64>,
}

/// Kairos's mistakes at `threshold_ns`, each with the stall nearest its silence.
pub(super) fn mistakes_at(
    reports: &[MemberReport],
    threshold_ns: u64,
    evidence: &Evidence<'_>,
) -> Vec<MistakeRecord> {
    let mut out = Vec::new();
    for r in reports {
        let Some(d) =
            r.detectors.iter().find(|d| d.detector == KAIROS && d.threshold_ns == Some(threshold_ns))
        else {
            continue;
        };
        for s in &d.stored {
            let (from, _) = evidence.silence(s);
            let gap = |st: &Stall| {
                if st.woke_ns < from { from - st.woke_ns } else { st.due_ns.saturating_sub(s.since_ns) }
            };
            let how = evidence.explain(s, Some(threshold_ns));
            let held_by = match how {
                Explanation::Held(by) => Some(by),
                _ => None,
            };
            out.push(MistakeRecord {
                observer: r.member,
                subject: s.subject,
                silence_us: (s.since_ns - s.window_from_ns) as f64 / 1e3,
                duration_us: s.until_ns.map(|u| u.saturating_sub(s.since_ns) as f64 / 1e3),
                since_ns: s.since_ns,
                explained: how != Explanation::Unexplained,
                held_kind: held_by.map(|b| b.kind),
                held_lost_us: held_by.map(|b| b.lost_ns as f64 / 1e3),
                nearest_stall_us: evidence.stalls.iter().map(gap).min().map(|g| g as f64 / 1e3),
                end_sent_after_deadline_us: s.ended_by.map(|e| (e.sent_ns as f64 - s.since_ns as f64) / 1e3),
                end_one_way_us: s
                    .ended_by
                    .zip(s.until_ns)
                    .map(|(e, until)| (until as f64 - e.sent_ns as f64) / 1e3),
                end_seq_gap: s.ended_by.map(|e| e.seq_gap),
                stale_between: s.ended_by.map(|e| e.stale),
            });
        }
    }
    out
}

/// The rows of one load from the members' reports.
pub(super) fn rows(load: Load, reports: &[MemberReport], evidence: &Evidence<'_>) -> Vec<AccuracyRow> {
    let members = reports.len() as u64;
    let observed_ns: u64 = reports
        .iter()
        .map(|r| {
            // A report without the window's end (older builds) ends it at the run's end.
            let until = if r.measure_until_ns == 0 { r.ended_ns } else { r.measure_until_ns };
            until.saturating_sub(r.measure_from_ns) * members.saturating_sub(1)
        })
        .sum();
    let observed_s = observed_ns as f64 / 1e9;
    // Every member runs the same detectors in the same order.
    let Some(first) = reports.first() else { return Vec::new() };
    first
        .detectors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let records: Vec<&DetectorRecord> = reports.iter().filter_map(|r| r.detectors.get(i)).collect();
            let mistakes: u64 = records.iter().map(|r| r.suspicions).sum();
            let suspected_ns: u64 = records.iter().map(|r| r.suspected_ns).sum();
            let stored = records.iter().flat_map(|r| r.stored.iter());
            let (mut with_stall, mut with_held, mut checked) = (0, 0, 0);
            for s in stored {
                checked += 1;
                match evidence.explain(s, d.threshold_ns) {
                    Explanation::Watch => with_stall += 1,
                    Explanation::Held(_) => {
                        with_stall += 1;
                        with_held += 1;
                    }
                    Explanation::Unexplained => {}
                }
            }
            AccuracyRow {
                detector: d.detector.clone(),
                threshold_us: (d.detector == KAIROS).then(|| d.threshold_ns.unwrap_or(0) / 1_000),
                load,
                query_accuracy: if observed_ns == 0 {
                    1.0
                } else {
                    1.0 - suspected_ns as f64 / observed_ns as f64
                },
                mistake_rate_per_s: if observed_s > 0.0 { mistakes as f64 / observed_s } else { 0.0 },
                mistake_duration_us: (mistakes > 0).then(|| suspected_ns as f64 / mistakes as f64 / 1e3),
                mistakes,
                mistakes_with_stall: with_stall,
                mistakes_with_held: with_held,
                unexplained: checked - with_stall,
                observed_s,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_fd::held::HeldThread;

    #[test]
    fn stalls_of_two_cores_out_of_order_are_found_and_widened_by_the_watch_period() {
        // Core 0's long stall, then core 1's short one inside it: ends not in order.
        let stalls = [Stall { due_ns: 100, woke_ns: 900 }, Stall { due_ns: 200, woke_ns: 300 }];
        let explained = |stalls: &[Stall], from, to| {
            let longest = stalls.iter().map(Stall::length_ns).max().unwrap_or(0);
            explained(stalls, longest, from, to)
        };
        assert!(explained(&stalls, 500, 600), "inside the long stall");
        assert!(explained(&stalls, 250, 260));
        assert!(!explained(&stalls, 950, 2_000));
        assert!(!explained(&stalls, 0, 99));
        let wide = widened(&stalls, 50);
        assert!(explained(&wide, 0, 60), "seen at 100, so it may have begun at 50");
        assert!(!explained(&wide, 0, 40));
    }

    #[test]
    fn rows_count_mistakes_per_pair_and_set_them_against_stalls() {
        let record = |suspicions, suspected_ns, stored: Vec<Suspicion>| DetectorRecord {
            detector: KAIROS.into(),
            threshold_ns: Some(200_000),
            suspicions,
            suspected_ns,
            stored,
        };
        let s = |from, since| Suspicion {
            subject: 2,
            window_from_ns: from,
            since_ns: since,
            noticed_ns: since,
            until_ns: None,
            ended_by: None,
        };
        let report = |member, detectors| MemberReport {
            member,
            measure_from_ns: 1_000_000_000,
            measure_until_ns: 11_000_000_000,
            ended_ns: 11_500_000_000,
            realtime: true,
            pinned: true,
            detectors,
            ..MemberReport::default()
        };
        let reports = vec![
            report(
                1,
                vec![record(
                    2,
                    400_000,
                    vec![s(2_000_000_000, 2_000_300_000), s(5_000_000_000, 5_000_300_000)],
                )],
            ),
            report(2, vec![record(0, 0, vec![])]),
        ];
        let stalls = [Stall { due_ns: 1_999_950_000, woke_ns: 2_000_200_000 }];
        fn evidence<'a>(stalls: &[Stall], reports: &'a [MemberReport], network: Network) -> Evidence<'a> {
            Evidence::new(stalls.to_vec(), reports, (network, 2), 100_000, 200_000)
        }
        let all = rows(Load::Idle, &reports, &evidence(&stalls, &reports, Network::Namespaces));
        assert_eq!(all.len(), 1);
        let r = &all[0];
        assert_eq!(
            (r.threshold_us, r.mistakes, r.mistakes_with_stall, r.mistakes_with_held, r.unexplained),
            (Some(200), 2, 1, 0, 1)
        );
        assert!((r.observed_s - 20.0).abs() < 1e-9);
        assert!((r.mistake_rate_per_s - 0.1).abs() < 1e-9);
        assert!((r.query_accuracy - (1.0 - 400_000.0 / 20e9)).abs() < 1e-12);
        assert_eq!(r.mistake_duration_us, Some(200.0));

        // The second silence, [4.9999 s, 5.0003 s]: a thread of the subject kept from its work
        // inside it explains it once it lost half the threshold (100 us) there, where nothing
        // of the experiment outranks the loops; not on the lane (its nodes do), not with a loop
        // that was not real-time or pinned or that shared a core, and never by the observer.
        let stretch = |thread, from_ns, lost_ns, kind| Held {
            from_ns,
            to_ns: from_ns + lost_ns,
            lost_ns,
            thread,
            kind,
            cpu_ns: 0,
            syscall_ns: 0,
            irq_ns: 0,
        };
        let mut reports = reports;
        reports[0].held.stretches.push(stretch(HeldThread::Loop, 5_000_000_000, 250_000, HeldKind::OffCpu));
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 5_000_100_000, 60_000, HeldKind::OffCpu));
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 4_999_950_000, 30_000, HeldKind::InKernel));
        // The application, on the same core, met the same stall: not added to the loop's.
        reports[1].held.stretches.push(stretch(
            HeldThread::Application,
            5_000_100_000,
            80_000,
            HeldKind::OffCpu,
        ));
        let held = |reports: &[MemberReport], network| {
            let r = &rows(Load::Idle, reports, &evidence(&stalls, reports, network))[0];
            (r.mistakes_with_stall, r.mistakes_with_held, r.unexplained)
        };
        // In time order, as a member's report keeps them.
        reports[1].held.stretches.sort_by_key(|h| h.from_ns);
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1), "90 us lost is not half of 200");
        // 40 us more, of which 10 inside the silence: 100 us.
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 5_000_290_000, 40_000, HeldKind::OffCpu));
        assert_eq!(held(&reports, Network::Namespaces), (2, 1, 0));
        let mistakes = mistakes_at(&reports, 200_000, &evidence(&stalls, &reports, Network::Namespaces));
        let second = mistakes.iter().find(|m| m.since_ns == 5_000_300_000).expect("the second mistake");
        assert_eq!(
            (second.explained, second.held_kind, second.held_lost_us),
            (true, Some(HeldKind::OffCpu), Some(100.0))
        );
        assert_eq!(held(&reports, Network::Lane), (1, 0, 1));
        let mut three = reports.clone();
        three.push(report(3, vec![record(0, 0, vec![])]));
        assert_eq!(held(&three, Network::Namespaces).1, 0, "three members on two cores");
        reports[1].pinned = false;
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1));
        reports[1].pinned = true;
        reports[0].realtime = false;
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1));
    }
}
