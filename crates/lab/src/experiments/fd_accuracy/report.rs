//! The table printed without `--json`: a row per detector, threshold and load, then each load's
//! stalls, its members' loops and the causes of its unexplained mistakes, the loads skipped, and
//! the goal.

use super::AccuracySummary;
use crate::harness::table::{TextTable, left, right};

/// The table printed without `--json`.
pub fn report(s: &AccuracySummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "{} members on {:?}, T = {} us, {} s per load; mistakes per pair of members\n",
        s.config.members, s.network, s.config.period_us, s.config.seconds
    ));
    let mut table = TextTable::new(&[
        left("detector"),
        right("Lambda us"),
        left("load"),
        right("P_A"),
        right("mistakes/s"),
        right("duration us"),
        right("mistakes"),
        right("with stall"),
        right("of them:"),
        right("unexplained"),
    ]);
    for r in &s.rows {
        table.row([
            r.detector.to_string(),
            r.threshold_us.map_or("-".into(), |t| t.to_string()),
            format!("{:?}", r.load).to_lowercase(),
            format!("{:.9}", r.query_accuracy),
            format!("{:.4}", r.mistake_rate_per_s),
            r.mistake_duration_us.map_or("-".into(), |d| format!("{d:.0}")),
            r.mistakes.to_string(),
            r.mistakes_with_stall.to_string(),
            format!("{} held", r.mistakes_with_held),
            r.unexplained.to_string(),
        ]);
    }
    out.push_str(&table.render());
    for l in &s.loads {
        let c = &l.unexplained_causes;
        out.push_str(&format!(
            "{:?}: stall watch{} saw {} stalls, longest {:.0} us; loops late > 50 us: {}; members' threads held off > 50 us: {}; loop passes > 50 us in their own work: {}; unexplained at {} us: sender late {}, late on the way {}, stale counter {}, lost {}, open {}\n",
            l.load,
            if l.stall_watch_realtime { "" } else { " (not real-time)" },
            l.stalls,
            l.longest_stall_us,
            l.members.iter().map(|m| m.late_wakeups.to_string()).collect::<Vec<_>>().join(", "),
            l.members.iter().map(|m| m.held_off.to_string()).collect::<Vec<_>>().join(", "),
            l.members.iter().map(|m| m.long_own_work_passes.to_string()).collect::<Vec<_>>().join(", "),
            s.recommended_threshold_us,
            c.sender_late,
            c.late_on_the_way,
            c.stale_counter,
            c.lost,
            c.open
        ));
        if let Some(why) = l.members.iter().find_map(|m| m.interrupts_untimed.as_ref()) {
            out.push_str(&format!("{:?}: the loops' time in interrupt handlers not timed: {why}\n", l.load));
        } else if s.config.time_interrupts {
            out.push_str(&format!(
                "{:?}: held off mostly in interrupt handlers (the interrupt clock): {}; the loops' time in handlers: {} ms\n",
                l.load,
                l.members.iter().map(|m| m.held_in_interrupts.to_string()).collect::<Vec<_>>().join(", "),
                l.members.iter().map(|m| format!("{:.1}", m.interrupt_ms)).collect::<Vec<_>>().join(", "),
            ));
        }
        if l.members.iter().any(|m| m.lane_beats_replaced.is_some()) {
            out.push_str(&format!(
                "{:?}: on the lane, heartbeats replaced before the node took them: {} (of {})\n",
                l.load,
                l.members
                    .iter()
                    .map(|m| m.lane_beats_replaced.unwrap_or(0).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                l.members.iter().map(|m| m.heartbeats_sent.to_string()).collect::<Vec<_>>().join(", "),
            ));
        }
    }
    for k in &s.skipped {
        out.push_str(&format!("skipped {:?}: {}\n", k.load, k.reason));
    }
    out.push_str(&format!(
        "goal: no unexplained mistake at Lambda = {} us: {} ({} unexplained)\n",
        s.goal.threshold_us,
        if s.goal.met { "met" } else { "missed" },
        s.goal.unexplained
    ));
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}
