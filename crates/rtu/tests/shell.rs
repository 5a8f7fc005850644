//! The real-time shell on real threads and clocks. The assertions allow for a noisy, shared
//! machine: they check mechanisms (counts, shutdown, overrun detection, refusals), not timing.

use std::time::Duration;

use kairos_rtu::analysis::HandlerSpec;
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};

fn spec(name: &str, period_us: u64, batch: u64, iteration: u64, unit_cost_us: u64) -> HandlerSpec {
    HandlerSpec {
        name: name.into(),
        period_ns: period_us * 1_000,
        batch,
        iteration,
        unit_cost_ns: unit_cost_us * 1_000,
    }
}

fn spin_us(us: u64) {
    let until = std::time::Instant::now() + Duration::from_micros(us);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[derive(Default)]
struct Log {
    entries: Vec<&'static str>,
}

#[test]
fn handlers_share_state_without_locks_and_shut_down_on_abort() {
    let mut s = Scheduler::new(Log::default());
    let a = s
        .register(spec("a", 5_000, 4, 2, 20), |log: &mut Log, units: u64, _: &Context<'_>| {
            for _ in 0..units {
                log.entries.push("a");
            }
            units
        })
        .unwrap();
    struct B;
    impl kairos_rtu::Handler<Log> for B {
        fn run(&mut self, log: &mut Log, units: u64, _: &Context<'_>) -> u64 {
            log.entries.extend(std::iter::repeat_n("b", units as usize));
            units
        }
        fn shutdown(&mut self, log: &mut Log) {
            log.entries.push("b: closed");
        }
    }
    let b = s.register(spec("b", 10_000, 2, 1, 20), B).unwrap();
    let running = s.spawn(ShellConfig { spin_ns: 5_000, ..ShellConfig::default() }).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let report = running.stop().unwrap();
    let (ca, cb) = (report.counts[a], report.counts[b]);
    // About 40 and 20 periods in 200 ms; at least half of them on a busy machine.
    assert!(ca.completed >= 20 && cb.completed >= 10, "{ca:?} {cb:?}");
    let n = |tag: &str| report.shared.entries.iter().filter(|e| **e == tag).count() as u64;
    // Every completed job did its 4 units; a job under way at the stop may have done 2 more.
    assert!(n("a") >= 4 * ca.completed && n("a") <= 4 * ca.released, "{} entries, {ca:?}", n("a"));
    assert_eq!(report.shared.entries.last(), Some(&"b: closed"), "shutdown runs after the last iteration");
    assert!(n("b") >= 2 * cb.completed);
    if !report.realtime {
        eprintln!("SCHED_FIFO not granted: {:?}", report.realtime_error);
    }
}

#[test]
fn an_unschedulable_registration_is_refused_with_the_reason() {
    let mut s = Scheduler::new(());
    s.register(spec("a", 1_000, 6, 1, 100), |_: &mut (), u: u64, _: &Context<'_>| u).unwrap();
    let e = s
        .register(spec("b", 2_000, 10, 1, 100), |_: &mut (), u: u64, _: &Context<'_>| u)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unschedulable") && e.contains("'b'"), "{e}");
    assert_eq!(s.specs().len(), 1, "a refused handler is not registered");
}

#[test]
fn an_overrunning_handler_is_reported_and_demoted_and_can_be_stopped() {
    let mut s = Scheduler::new(0u64);
    let good = s
        .register(spec("good", 2_000, 2, 1, 50), |n: &mut u64, u: u64, _: &Context<'_>| {
            *n += u;
            u
        })
        .unwrap();
    // Declares 10 us per unit, takes 300 us.
    let bad = s
        .register(spec("bad", 4_000, 2, 2, 10), |_: &mut u64, u: u64, _: &Context<'_>| {
            spin_us(300 * u);
            u
        })
        .unwrap();
    let running = s.spawn(ShellConfig::default()).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    running.set_enabled(bad, false).unwrap();
    assert!(running.set_enabled(9, false).is_err());
    std::thread::sleep(Duration::from_millis(20));
    let report = running.stop().unwrap();
    let b = report.counts[bad];
    assert!(b.overruns >= 3 && b.demoted, "{b:?}");
    assert!(b.worst_excess_ns >= 250_000, "{b:?}");
    // The innocent handler is not blamed for the other's time: charged with it, every one of
    // its jobs would overrun and it would be demoted. A lone overrun is allowed: an interrupt or
    // a first-touch page fault inside its iteration is charged to it (see `policy`).
    let g = report.counts[good];
    assert!(!g.demoted && g.job_overruns < kairos_rtu::policy::Policy::DEMOTE_AFTER, "{g:?}");
    assert!(g.completed >= 10 && g.overruns * 4 <= g.completed, "{g:?}");
    assert!(report.shared > 0);
}

#[test]
fn changes_are_admitted_or_refused() {
    let mut s = Scheduler::new(());
    let a = s.register(spec("a", 1_000, 2, 1, 100), |_: &mut (), u: u64, _: &Context<'_>| u).unwrap();
    let running = s.spawn(ShellConfig { fifo_priority: 0, ..ShellConfig::default() }).unwrap();
    assert!(running.change(a, spec("a", 2_000, 4, 1, 100)).is_ok());
    let e = running.change(a, spec("a", 1_000, 20, 1, 100)).unwrap_err().to_string();
    assert!(e.contains("unschedulable"), "{e}");
    std::thread::sleep(Duration::from_millis(20));
    let report = running.stop().unwrap();
    assert!(report.counts[a].completed >= 1);
}

#[test]
fn calibration_measures_the_unit_cost() {
    let mut s = Scheduler::new(());
    let work = |_: &mut (), u: u64, _: &Context<'_>| {
        spin_us(20 * u);
        u
    };
    s.register_calibrated(spec("w", 10_000, 4, 1, 1), work, 5, 1.5).unwrap();
    let cost = s.specs()[0].unit_cost_ns;
    assert!(cost >= 30_000, "20 us per unit x 1.5 at least, got {cost} ns");
}

#[test]
fn an_io_thread_feeds_two_handlers_through_their_inboxes() {
    use kairos_rtu::inbox;
    use kairos_rtu::io::{IoConfig, spawn_udp};
    use std::net::UdpSocket;

    let receivers: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let addresses: Vec<_> = receivers.iter().map(|r| r.local_addr().unwrap()).collect();
    let mut sources = Vec::new();
    let mut inboxes = Vec::new();
    for r in receivers {
        let (ingress, inbox) = inbox(256, 2_048).unwrap();
        sources.push((r, ingress));
        inboxes.push(inbox);
    }
    // Each handler records what it read: (stream, sequence number, length).
    let mut s = Scheduler::new((inboxes, Vec::<(usize, u32, usize)>::new()));
    for stream in 0..2 {
        s.register(
            spec(&format!("rx{stream}"), 2_000, 64, 8, 5),
            move |st: &mut (Vec<kairos_rtu::Inbox>, Vec<(usize, u32, usize)>),
                  units: u64,
                  _: &Context<'_>| {
                let (inboxes, log) = st;
                inboxes[stream].drain(units, |d| {
                    log.push((stream, u32::from_le_bytes(d[..4].try_into().unwrap()), d.len()))
                })
            },
        )
        .unwrap();
    }
    let io = spawn_udp(sources, IoConfig { fifo_priority: 0, ..IoConfig::default() }).unwrap();
    let running = s.spawn(ShellConfig { fifo_priority: 0, ..ShellConfig::default() }).unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..400u32 {
        for (stream, to) in addresses.iter().enumerate() {
            let mut datagram = seq.to_le_bytes().to_vec();
            datagram.resize(100 + stream * 100, 7);
            sender.send_to(&datagram, to).unwrap();
        }
        if seq % 50 == 49 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let io_report = io.stop().unwrap();
    let report = running.stop().unwrap();
    for stream in 0..2 {
        let mine: Vec<_> = report.shared.1.iter().filter(|e| e.0 == stream).collect();
        // Loopback loses nothing here: every datagram the I/O thread delivered was read, in
        // order, with its length.
        assert_eq!(io_report.sources[stream].dropped, 0, "the pool of 256 never ran dry");
        assert_eq!(mine.len() as u64, io_report.sources[stream].delivered);
        assert_eq!(mine.len(), 400, "stream {stream} lost datagrams");
        assert!(mine.iter().enumerate().all(|(i, e)| e.1 == i as u32 && e.2 == 100 + stream * 100));
    }
}

#[test]
fn a_handler_that_panics_ends_the_run_with_its_message_instead_of_a_panic_in_the_caller() {
    let mut s = Scheduler::new(0u64);
    s.register(spec("bad", 1_000, 1, 1, 10), |n: &mut u64, units: u64, _: &Context<'_>| {
        *n += 1;
        if *n == 3 {
            panic!("sensor 7 unplugged");
        }
        units
    })
    .unwrap();
    let running = s.spawn(ShellConfig { fifo_priority: 0, ..ShellConfig::default() }).unwrap();
    // Wait (up to a minute on a loaded machine) for the third invocation's panic to end the thread.
    let started = std::time::Instant::now();
    while !running.has_ended() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let err = running.stop().unwrap_err();
    assert_eq!(err.to_string(), "a handler of the real-time shell panicked: sensor 7 unplugged");
}

#[test]
fn dropping_a_running_shell_stops_and_joins_its_thread() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let runs = Arc::new(AtomicU64::new(0));
    let mut s = Scheduler::new(Arc::clone(&runs));
    s.register(spec("tick", 1_000, 1, 1, 10), |runs: &mut Arc<AtomicU64>, units: u64, _: &Context<'_>| {
        runs.fetch_add(1, Ordering::Relaxed);
        units
    })
    .unwrap();
    let running = s.spawn(ShellConfig { fifo_priority: 0, ..ShellConfig::default() }).unwrap();
    let started = std::time::Instant::now();
    while runs.load(Ordering::Relaxed) == 0 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(running);
    let after_drop = runs.load(Ordering::Relaxed);
    assert!(after_drop > 0, "the handler never ran in a minute");
    std::thread::sleep(Duration::from_millis(30));
    // Joined in drop: nothing runs any more (before, the thread ran on, unowned, forever).
    assert_eq!(runs.load(Ordering::Relaxed), after_drop);
    assert_eq!(Arc::strong_count(&runs), 1, "the shell's thread still holds the state");
}
