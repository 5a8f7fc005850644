//! The checks and the run-time fixes against fake `/proc` and `/sys` trees: a tuned host, a
//! host like the virtual machine this was built on, an empty tree (every file absent), and
//! apply/revert round trips.

use std::collections::BTreeMap;
use std::path::Path;

use super::apply::{self, Change};
use super::interrupts::ranges;
use super::sharing::kernel_version;
use super::*;
use kairos_sys::host::{InterfaceName, Tunable};

/// A fake root holding `files` (paths as the kernel names them).
fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, HostFs) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        write(dir.path(), path, content);
    }
    let host = HostFs::at(dir.path());
    (dir, host)
}

fn write(root: &Path, path: &str, content: &str) {
    let full = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, content).unwrap();
}

/// Every regular file under `root`, by path, with its content.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(&path, root, out);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.insert(path.strip_prefix(root).unwrap().display().to_string(), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

const INTERRUPTS: &str = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 36:          0    1449629 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\nNMI:          0          0   Non-maskable interrupts\nLOC:    4211745    4517122   Local timer interrupts\n";
const SOFTIRQS: &str = "                    CPU0       CPU1       \n       TIMER:     232845     288696\n         RCU:    1083062     702880\n";

/// A two-core virtual machine like the one this was written on: nothing isolated, no
/// NO_HZ_FULL, haltpoll idle, the soft-lockup watchdog on, IRQs on both cores, RT throttling at
/// 95%, no cpufreq.
fn like_this_machine() -> Vec<(&'static str, &'static str)> {
    vec![
        ("/proc/cmdline", "console=ttyS0 quiet cpuidle_haltpoll.force=1 -- --init-flag\n"),
        ("/proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC @0\n"),
        ("/proc/sys/kernel/osrelease", "6.18.44-fc\n"),
        ("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme hypervisor\n"),
        ("/proc/stat", "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 3 0 0\n"),
        ("/proc/interrupts", INTERRUPTS),
        ("/proc/softirqs", SOFTIRQS),
        ("/sys/devices/system/cpu/online", "0-1\n"),
        ("/sys/devices/system/cpu/isolated", "\n"),
        ("/sys/devices/system/cpu/cpuidle/current_driver", "haltpoll\n"),
        ("/sys/devices/system/cpu/cpuidle/current_governor", "haltpoll\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/name", "POLL\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/latency", "0\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/disable", "0\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/name", "haltpoll idle\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/latency", "1\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable", "0\n"),
        ("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1\n"),
        ("/proc/sys/kernel/watchdog", "1\n"),
        ("/proc/sys/kernel/nmi_watchdog", "0\n"),
        ("/proc/sys/kernel/soft_watchdog", "1\n"),
        ("/proc/sys/kernel/watchdog_cpumask", "0-1\n"),
        ("/proc/sys/kernel/watchdog_thresh", "10\n"),
        ("/proc/sys/kernel/sched_rt_runtime_us", "950000\n"),
        ("/proc/sys/kernel/sched_rt_period_us", "1000000\n"),
        ("/proc/irq/default_smp_affinity", "3\n"),
        ("/proc/irq/24/smp_affinity_list", "0-1\n"),
        ("/proc/irq/24/effective_affinity_list", "0\n"),
        ("/proc/irq/36/smp_affinity_list", "0-1\n"),
        ("/proc/irq/36/effective_affinity_list", "1\n"),
        ("/proc/irq/40/smp_affinity_list", "1\n"),
        ("/proc/irq/40/effective_affinity_list", "1\n"),
        ("/proc/irq/41/smp_affinity_list", "0\n"),
    ]
}

/// The same host set up as the source asks: isolated, adaptive tick, callbacks offloaded,
/// polling idle, no watchdog on the core, IRQs elsewhere, no throttling, the performance
/// governor.
fn tuned() -> Vec<(&'static str, &'static str)> {
    let mut files: BTreeMap<&str, &str> = like_this_machine().into_iter().collect();
    for (path, content) in [
        ("/proc/cmdline", "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 idle=poll preempt=full\n"),
        ("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme\n"),
        ("/proc/stat", "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n"),
        ("/sys/devices/system/cpu/isolated", "1\n"),
        ("/sys/devices/system/cpu/nohz_full", "1\n"),
        ("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n"),
        ("/proc/sys/kernel/watchdog_cpumask", "0\n"),
        ("/proc/sys/kernel/sched_rt_runtime_us", "-1\n"),
        ("/proc/irq/default_smp_affinity", "1\n"),
        ("/proc/irq/24/smp_affinity_list", "0\n"),
        ("/proc/irq/36/smp_affinity_list", "0\n"),
        ("/proc/irq/40/smp_affinity_list", "0\n"),
    ] {
        files.insert(path, content);
    }
    files.into_iter().collect()
}

fn measured() -> Measured {
    let counted = |source: &str, description: &str, count| Counted {
        source: source.into(),
        description: description.into(),
        count,
    };
    Measured {
        spin_ns: 1_500_000_000,
        fifo_priority: Some(98),
        gap_floor_ns: 1_000,
        gaps: 400,
        gaps_over_10us: 30,
        gaps_over_100us: 2,
        median_gap_ns: 2_500,
        max_gap_ns: 45_000_000,
        lost_ns: 46_000_000,
        preemptions: 3,
        run_delay_ns: Some(45_500_000),
        steal_ns: Some(2_000_000),
        interrupts: Some(vec![
            counted("LOC", "Local timer interrupts", 375),
            counted("36", "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0", 20),
            counted("CAL", "Function call interrupts", 4),
        ]),
        softirqs: Some(vec![counted("RCU", "", 300)]),
        wake_idle: Some(Wake { count: 250, p50_ns: 40_000, p99_ns: 90_000, max_ns: 150_000 }),
        wake_held: Some(Wake { count: 250, p50_ns: 15_000, p99_ns: 30_000, max_ns: 60_000 }),
        wake_held_refused: None,
    }
}

fn by_name(diagnosis: &Diagnosis) -> BTreeMap<&'static str, &Check> {
    diagnosis.checks.iter().map(|c| (c.name, c)).collect()
}

#[test]
fn every_check_is_reported_in_order_with_the_five_fields() {
    let (_dir, host) = tree(&like_this_machine());
    let diagnosis = examine(&host, 1, Some(&measured()));
    let names: Vec<&str> = diagnosis.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, CHECK_NAMES);
    let json = serde_json::to_value(&diagnosis).unwrap();
    assert_eq!(json["core"], 1);
    for check in json["checks"].as_array().unwrap() {
        let keys: Vec<&String> = check.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["cost", "fix", "found", "name", "ok"], "{check}");
        assert!(check["ok"].is_boolean());
        for field in ["name", "found", "fix", "cost"] {
            assert!(check[field].as_str().is_some_and(|s| !s.is_empty()), "{field} of {check}");
        }
    }
}

#[test]
fn a_tuned_host_passes_every_check() {
    let (_dir, host) = tree(&tuned());
    let mut quiet = measured();
    quiet.steal_ns = Some(0);
    let diagnosis = examine(&host, 1, Some(&quiet));
    for check in &diagnosis.checks {
        assert!(check.ok, "{check:?}");
        assert_eq!(check.fix, "none needed", "{check:?}");
    }
    assert!(diagnosis.boot_parameters.is_empty());
    let checks = by_name(&diagnosis);
    assert!(checks["isolcpus"].found.contains("cpu1 isolated"));
    assert!(checks["rcu_nocbs"].found.contains("rcu_nocbs=1"));
    assert!(checks["cpuidle"].found.contains("idle=poll"));
    assert!(checks["nmi_watchdog"].found.contains("is on but not for cpu1"));
    assert!(checks["irq_affinity"].found.starts_with("none of 4 IRQs"));
    assert!(checks["cpufreq_governor"].found.starts_with("performance"));
    assert!(
        checks["nohz_full"].cost.starts_with("none: 375 timer interrupts"),
        "{}",
        checks["nohz_full"].cost
    );
}

#[test]
fn a_host_like_this_one_fails_where_isolation_is_missing_and_says_what_it_costs() {
    let (_dir, host) = tree(&like_this_machine());
    let diagnosis = examine(&host, 1, Some(&measured()));
    let checks = by_name(&diagnosis);
    let failed: Vec<&str> = diagnosis.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
    assert_eq!(
        failed,
        [
            "isolcpus",
            "nohz_full",
            "rcu_nocbs",
            "cpuidle",
            "nmi_watchdog",
            "irq_affinity",
            "rt_throttling",
            "steal_time",
            "preemption",
        ]
    );
    assert_eq!(
        diagnosis.boot_parameters,
        [
            "isolcpus=managed_irq,domain,1",
            "nohz_full=1",
            "rcu_nocbs=1",
            "nowatchdog",
            "irqaffinity=0",
            "preempt=full"
        ]
    );
    assert!(checks["preemption"].found.starts_with("not known here: a PREEMPT_DYNAMIC kernel"));
    assert!(
        checks["preemption"].cost.contains("the probe's longest gap was"),
        "{}",
        checks["preemption"].cost
    );

    assert!(checks["nohz_full"].found.contains("CONFIG_NO_HZ_FULL"), "{}", checks["nohz_full"].found);
    assert!(checks["nohz_full"].cost.contains("375 timer interrupts hit cpu1 in the 1.5 s spin (250/s)"));
    assert!(checks["rcu_nocbs"].cost.contains("300 RCU softirqs"));
    assert!(checks["cpuidle"].found.contains("haltpoll idle (exit latency 1 us)"));
    assert!(checks["cpuidle"].fix.starts_with("applied by the node while it runs"));
    assert!(checks["cpuidle"].fix.contains("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable"));
    assert!(checks["cpuidle"].cost.contains("idle states cost 25.0 us a wake-up at the median"));
    assert!(checks["nmi_watchdog"].found.contains("the soft-lockup watchdog runs on cpu1"));
    assert!(checks["nmi_watchdog"].cost.contains("every 4 s"));
    let irqs = checks["irq_affinity"];
    assert!(
        irqs.found
            .starts_with("3 of 4 IRQs may be delivered to cpu1 (24,36,40), 2 delivered there now (36,40);"),
        "{}",
        irqs.found
    );
    assert!(irqs.found.contains("default_smp_affinity 3"));
    assert!(irqs.found.contains("1449629 device interrupts on cpu1 since boot"));
    assert!(
        irqs.cost.starts_with("20 device interrupts hit cpu1 in the 1.5 s spin (13/s: virtio1-req.0 20)"),
        "{}",
        irqs.cost
    );
    assert!(irqs.cost.contains("4 inter-processor interrupts (CAL 4)"));
    let throttling = checks["rt_throttling"];
    assert!(throttling.found.contains("95% of each 1.00 s"));
    assert!(throttling.found.contains("fair server"), "6.18 has one: {}", throttling.found);
    assert!(throttling.cost.contains("loses 50.0 ms of every 1.00 s"));
    assert!(throttling.cost.contains("waited 45.5 ms on the run queue in 3 preemptions"));
    assert!(checks["cpufreq_governor"].ok, "absent in a virtual machine: nothing to fix in the guest");
    assert!(checks["cpufreq_governor"].found.contains("a virtual machine"));
    assert!(checks["steal_time"].found.starts_with("2.0 ms stolen from cpu1 in the 1.5 s spin"));
    assert!(
        checks["smt_sibling"].ok
            && checks["smt_sibling"].found.contains("a virtual machine sees only its vCPUs")
    );
    let combined = diagnosis.combined_cost.as_deref().unwrap();
    assert!(
        combined.starts_with("1.5 s spinning at SCHED_FIFO 98: 400 gaps over 1.0 us (267/s)"),
        "{combined}"
    );
}

#[test]
fn without_a_probe_costs_say_they_were_not_measured() {
    let (_dir, host) = tree(&like_this_machine());
    let diagnosis = examine(&host, 1, None);
    assert_eq!(diagnosis.combined_cost, None);
    let checks = by_name(&diagnosis);
    for name in ["isolcpus", "nohz_full", "rcu_nocbs", "cpuidle", "irq_affinity", "rt_throttling"] {
        assert!(checks[name].cost.contains("not measured"), "{name}: {}", checks[name].cost);
    }
    assert!(
        checks["steal_time"].found.ends_with("stolen from cpu1 since boot"),
        "{}",
        checks["steal_time"].found
    );
}

#[test]
fn an_empty_tree_is_not_available_everywhere_and_never_a_crash() {
    let (_dir, host) = tree(&[]);
    for measured in [None, Some(measured()), Some(Measured::default())] {
        let diagnosis = examine(&host, 3, measured.as_ref());
        assert_eq!(diagnosis.checks.len(), CHECK_NAMES.len());
        let checks = by_name(&diagnosis);
        for name in ["nohz_full", "irq_affinity", "rt_throttling", "smt_sibling"] {
            assert!(checks[name].found.starts_with("not available here: "), "{name}: {}", checks[name].found);
            assert!(!checks[name].ok, "{name}: cannot tell, so not ok");
        }
        assert!(checks["nmi_watchdog"].ok, "no watchdog file: no watchdog");
        assert!(
            checks["cpufreq_governor"].ok && checks["cpufreq_governor"].found.contains("no cpufreq driver")
        );
        assert!(checks["isolcpus"].found.contains("not available here"));
        assert!(checks["cpuidle"].found.contains("no cpuidle states"), "{}", checks["cpuidle"].found);
    }
    assert!(matches!(lane_core(&host, None), Err(DoctorError::Host(e)) if e.is_absent()));
}

#[test]
fn a_malformed_file_is_not_available_with_its_content() {
    let mut files = like_this_machine();
    files.retain(|(p, _)| *p != "/proc/sys/kernel/sched_rt_runtime_us");
    files.push(("/proc/sys/kernel/sched_rt_runtime_us", "lots\n"));
    files.push(("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1-0\n"));
    let (_dir, host) = tree(&files);
    let checks = examine(&host, 1, None);
    let checks = by_name(&checks);
    assert!(
        checks["rt_throttling"].found.contains("unexpected content \"lots\""),
        "{}",
        checks["rt_throttling"].found
    );
    assert!(checks["smt_sibling"].found.starts_with("not available here"));
}

#[test]
fn isolation_is_read_from_the_command_line_when_sysfs_does_not_say() {
    let mut files: Vec<_> =
        like_this_machine().into_iter().filter(|(p, _)| *p != "/sys/devices/system/cpu/isolated").collect();
    files.retain(|(p, _)| *p != "/proc/cmdline");
    for (cmdline, ok) in [
        ("isolcpus=1\n", true),
        ("isolcpus=domain,managed_irq,0-1\n", true),
        ("isolcpus=nohz,1\n", false),
        ("isolcpus=2\n", false),
    ] {
        let mut with = files.clone();
        with.push(("/proc/cmdline", cmdline));
        let (_dir, host) = tree(&with);
        let diagnosis = examine(&host, 1, None);
        let isolcpus = &diagnosis.checks[0];
        assert_eq!(isolcpus.ok, ok, "{cmdline}: {isolcpus:?}");
    }
    let mut with = files.clone();
    with.push(("/proc/cmdline", "isolcpus=2-3\n"));
    let (_dir, host) = tree(&with);
    let diagnosis = examine(&host, 1, None);
    assert!(
        diagnosis.checks[0].fix.contains("isolcpus=managed_irq,domain,1-3"),
        "keeps the cores already isolated"
    );
}

#[test]
fn rcu_callbacks_are_offloaded_by_rcu_nocbs_or_nohz_full() {
    for (cmdline, nohz, ok) in [
        ("rcu_nocbs\n", "(null)\n", true),
        ("rcu_nocbs=0-3\n", "(null)\n", true),
        ("rcu_nocbs=0\n", "(null)\n", false),
        ("quiet\n", "1\n", true),
        ("quiet\n", "(null)\n", false),
    ] {
        let mut files = like_this_machine();
        files.retain(|(p, _)| *p != "/proc/cmdline");
        files.push(("/proc/cmdline", cmdline));
        files.push(("/sys/devices/system/cpu/nohz_full", nohz));
        let (_dir, host) = tree(&files);
        let diagnosis = examine(&host, 1, None);
        assert_eq!(by_name(&diagnosis)["rcu_nocbs"].ok, ok, "{cmdline} {nohz}");
    }
}

#[test]
fn idle_states_held_off_by_the_latency_target_are_ok() {
    let mut files = like_this_machine();
    // /dev/cpu_dma_latency reads as the current target, a native-endian i32.
    let held = String::from_utf8(0i32.to_ne_bytes().to_vec()).unwrap();
    let (dir, host) = tree(&files);
    write(dir.path(), "/dev/cpu_dma_latency", &held);
    let cpuidle = by_name(&examine(&host, 1, None))["cpuidle"].clone();
    assert!(cpuidle.ok, "{cpuidle:?}");
    assert!(cpuidle.found.contains("held at 0 us by a running process"));
    files.push(("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable", "1\n"));
    let (_dir, host) = tree(&files);
    assert!(by_name(&examine(&host, 1, None))["cpuidle"].ok, "the one deep state disabled");
}

#[test]
fn a_governor_other_than_performance_and_an_smt_sibling_fail() {
    let mut files = like_this_machine();
    files.retain(|(p, _)| !p.ends_with("thread_siblings_list"));
    files.push(("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n"));
    files.push(("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1,5\n"));
    let (_dir, host) = tree(&files);
    let diagnosis = examine(&host, 1, None);
    let checks = by_name(&diagnosis);
    assert!(!checks["cpufreq_governor"].ok);
    assert!(
        checks["cpufreq_governor"]
            .fix
            .contains("echo performance > /sys/devices/system/cpu/cpu1/cpufreq/scaling_governor")
    );
    assert!(!checks["smt_sibling"].ok);
    assert!(checks["smt_sibling"].fix.contains("echo 0 > /sys/devices/system/cpu/cpu5/online"));
    assert!(diagnosis.boot_parameters.contains(&"nosmt".to_string()));
}

#[test]
fn the_lane_core_is_the_last_online_one_unless_asked() {
    let (_dir, host) = tree(&[("/sys/devices/system/cpu/online", "0-3,6\n")]);
    assert_eq!(lane_core(&host, None).unwrap(), 6);
    assert_eq!(lane_core(&host, Some(2)).unwrap(), 2);
    let offline = lane_core(&host, Some(5)).unwrap_err();
    assert_eq!(offline.to_string(), "--core 5: not an online core (online: 0-3,6)");
}

#[test]
fn the_plan_moves_irqs_away_and_switches_throttling_and_the_watchdog_off() {
    let mut files = like_this_machine();
    files.push(("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n"));
    let (_dir, host) = tree(&files);
    let plan = apply::plan(&host, 1, &[]).unwrap();
    assert_eq!(
        plan.steps,
        [
            (Tunable::IrqAffinity(24), "0".to_string()),
            (Tunable::IrqAffinity(36), "0".into()),
            // Only the lane's core: it goes to the others.
            (Tunable::IrqAffinity(40), "0".into()),
            (Tunable::DefaultIrqAffinity, "1".into()),
            (Tunable::RtRuntime, "-1".into()),
            (Tunable::WatchdogCpumask, "0".into()),
            (Tunable::ScalingGovernor(1), "performance".into()),
        ]
    );
    let (_dir, tuned_host) = tree(&tuned());
    assert!(apply::plan(&tuned_host, 1, &[]).unwrap().steps.is_empty(), "nothing to do on a tuned host");
    let (_dir, one_core) =
        tree(&[("/sys/devices/system/cpu/online", "0\n"), ("/proc/irq/3/smp_affinity_list", "0\n")]);
    let plan = apply::plan(&one_core, 0, &[]).unwrap();
    assert!(plan.steps.is_empty());
    assert!(plan.notes[0].contains("no other online core"), "{:?}", plan.notes);
}

#[test]
fn apply_records_each_change_and_revert_puts_back_exactly_what_was_there() {
    let (dir, host) = tree(&like_this_machine());
    let state = dir.path().join("run/kairos/doctor.json");
    let before = snapshot(dir.path());

    let applied = apply::apply(&host, 1, &[], &state).unwrap();
    assert_eq!(applied.changed.len(), 6, "{applied:?}");
    assert!(applied.refused.is_empty() && applied.kept.is_empty());
    assert_eq!(host.read_tunable(Tunable::IrqAffinity(24)).unwrap(), "0");
    assert_eq!(host.read_tunable(Tunable::RtRuntime).unwrap(), "-1");
    assert_eq!(host.read_tunable(Tunable::WatchdogCpumask).unwrap(), "0");
    assert_eq!(host.read_tunable(Tunable::DefaultIrqAffinity).unwrap(), "1");
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(record["core"], 1);
    assert_eq!(record["changes"].as_array().unwrap().len(), 6);
    assert_eq!(
        record["changes"][0],
        serde_json::json!({"setting": "/proc/irq/24/smp_affinity_list", "previous": "0-1", "written": "0"})
    );
    // The checks now see the applied values.
    let checks = examine(&host, 1, None);
    let checks = by_name(&checks);
    assert!(checks["irq_affinity"].ok && checks["rt_throttling"].ok && checks["nmi_watchdog"].ok);
    // The fake kernel never moves an IRQ: those it delivers to the core move at their next one.
    assert!(
        checks["irq_affinity"]
            .found
            .contains("2 delivered there now (36,40) of which 2 move away at their next interrupt"),
        "{}",
        checks["irq_affinity"].found
    );

    let reverted = apply::revert(&host, &state).unwrap();
    assert_eq!(reverted.restored.len(), 6);
    assert!(reverted.failed.is_empty());
    assert!(!state.exists(), "the record is removed");
    let mut after = snapshot(dir.path());
    after.retain(|path, _| !path.starts_with("run/"));
    assert_eq!(after, before, "every file as it was");

    let nothing = apply::revert(&host, &state).unwrap();
    assert!(!nothing.found_record);
}

#[test]
fn applying_twice_keeps_the_first_values() {
    let (dir, host) = tree(&like_this_machine());
    let state = dir.path().join("doctor.json");
    let before = snapshot(dir.path());
    apply::apply(&host, 1, &[], &state).unwrap();
    let second = apply::apply(&host, 1, &[], &state).unwrap();
    assert!(second.changed.is_empty(), "{second:?}");
    assert_eq!(second.kept.len(), 6);
    // Someone puts one setting back in between: applying again changes it again and still
    // remembers the value from before the first apply.
    host.write_tunable(Tunable::RtRuntime, "950000").unwrap();
    let third = apply::apply(&host, 1, &[], &state).unwrap();
    assert_eq!(
        third.changed,
        [Change { setting: Tunable::RtRuntime, previous: "950000".into(), written: "-1".into() }]
    );
    assert_eq!(third.kept.len(), 5);
    host.write_tunable(Tunable::IrqAffinity(24), "1").unwrap();
    apply::apply(&host, 1, &[], &state).unwrap();
    apply::revert(&host, &state).unwrap();
    let mut after = snapshot(dir.path());
    after.retain(|path, _| path != "doctor.json");
    assert_eq!(after, before);
}

#[test]
fn a_record_for_another_core_or_not_the_doctors_is_refused_untouched() {
    let (dir, host) = tree(&like_this_machine());
    let state = dir.path().join("doctor.json");
    apply::apply(&host, 1, &[], &state).unwrap();
    let other = apply::apply(&host, 0, &[], &state).unwrap_err();
    assert!(other.to_string().contains("records changes for core 1; run kairos doctor --revert"), "{other}");
    apply::revert(&host, &state).unwrap();

    for (content, expected) in [
        ("not json", "not a doctor record"),
        (r#"{"version": 2, "core": 1, "changes": []}"#, "record version 2"),
        (
            r#"{"version": 1, "core": 1, "changes": [{"setting": "/etc/passwd", "previous": "x", "written": "y"}]}"#,
            "\"/etc/passwd\" is not a setting the doctor changes",
        ),
        (
            r#"{"version": 1, "core": 1, "changes": [{"setting": "/proc/sys/kernel/sched_rt_runtime_us", "previous": "1\n2", "written": "-1"}]}"#,
            "is not one a kernel file holds",
        ),
    ] {
        std::fs::write(&state, content).unwrap();
        let before = snapshot(dir.path());
        let error = apply::revert(&host, &state).unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
        assert!(apply::apply(&host, 1, &[], &state).is_err());
        assert_eq!(snapshot(dir.path()), before, "nothing written on a bad record");
    }
}

#[test]
fn a_write_the_kernel_refuses_is_reported_and_not_recorded() {
    let (dir, host) = tree(&like_this_machine());
    // A file the kernel will not let even root write, holding a core list with core 0 in it.
    let irq = dir.path().join("proc/irq/77");
    std::fs::create_dir_all(&irq).unwrap();
    std::os::unix::fs::symlink("/sys/devices/system/cpu/online", irq.join("smp_affinity_list")).unwrap();
    let state = dir.path().join("doctor.json");
    let applied = apply::apply(&host, 0, &[], &state).unwrap();
    let refused: Vec<Tunable> = applied.refused.iter().map(|r| r.setting).collect();
    assert_eq!(refused, [Tunable::IrqAffinity(77)], "{applied:?}");
    assert!(applied.refused[0].why.contains("managed or per-core IRQ"), "{}", applied.refused[0].why);
    let recorded = std::fs::read_to_string(&state).unwrap();
    assert!(!recorded.contains("/proc/irq/77/"), "{recorded}");
    apply::revert(&host, &state).unwrap();
}

#[test]
fn a_revert_whose_setting_is_gone_drops_it_and_one_refused_stays_recorded() {
    let (dir, host) = tree(&like_this_machine());
    let state = dir.path().join("doctor.json");
    apply::apply(&host, 1, &[], &state).unwrap();
    // The IRQ was freed since, and the runtime file became a directory the write cannot open.
    std::fs::remove_dir_all(dir.path().join("proc/irq/24")).unwrap();
    let runtime = dir.path().join("proc/sys/kernel/sched_rt_runtime_us");
    std::fs::remove_file(&runtime).unwrap();
    std::fs::create_dir(&runtime).unwrap();
    let reverted = apply::revert(&host, &state).unwrap();
    assert_eq!(reverted.gone.iter().map(|c| c.setting).collect::<Vec<_>>(), [Tunable::IrqAffinity(24)]);
    assert_eq!(reverted.failed.iter().map(|r| r.setting).collect::<Vec<_>>(), [Tunable::RtRuntime]);
    assert_eq!(reverted.restored.len(), 4);
    let left = std::fs::read_to_string(&state).unwrap();
    assert!(left.contains("sched_rt_runtime_us") && !left.contains("smp_affinity_list"), "{left}");
}

#[test]
fn nothing_to_change_leaves_no_record() {
    let (dir, host) = tree(&tuned());
    let state = dir.path().join("doctor.json");
    let applied = apply::apply(&host, 1, &[], &state).unwrap();
    assert!(applied.changed.is_empty());
    assert!(!state.exists());
}

#[test]
fn durations_and_ranges_read_well() {
    assert_eq!(duration(850), "850 ns");
    assert_eq!(duration(12_345), "12.3 us");
    assert_eq!(duration(4_500_000), "4.5 ms");
    assert_eq!(duration(1_200_000_000), "1.20 s");
    assert_eq!(ranges(&[28, 24, 25, 26, 30, 29, 40]), "24-26,28-30,40");
    assert_eq!(kernel_version("6.18.44-fc-v769"), Some((6, 18)));
    assert_eq!(kernel_version("garbage"), None);
}

/// A receive thread's files: its name, its `stat` (start time, policy, priority) and its cores.
fn receive_thread(pid: i32, name: &str, policy: u32, priority: u32, cores: &str) -> Vec<(String, String)> {
    let mut fields: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
    fields[22 - 3] = "77".into();
    fields[40 - 3] = priority.to_string();
    fields[41 - 3] = policy.to_string();
    vec![
        (format!("/proc/{pid}/comm"), format!("{name}\n")),
        (format!("/proc/{pid}/stat"), format!("{pid} ({name}) {}\n", fields.join(" "))),
        (format!("/proc/{pid}/status"), format!("Name:\t{name}\nCpus_allowed_list:\t{cores}\n")),
    ]
}

#[test]
fn lane_receive_threads_off_the_core_fail_and_are_planned_onto_it_above_the_node() {
    use kairos_sys::host::ThreadId;
    let lane = [InterfaceName::new("lane").unwrap()];
    let mut files: Vec<(String, String)> = vec![("/sys/devices/system/cpu/online".into(), "0-1\n".into())];
    files.extend(receive_thread(812, "napi/lane-1049", 0, 0, "0-1"));
    files.extend(receive_thread(813, "napi/lane-h0-1050", 1, 70, "1"));
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let (_dir, host) = tree(&borrowed);

    let check = receive::examine(&host, 1, &lane);
    assert!(!check.ok, "{check:?}");
    assert!(check.found.contains("napi/lane-1049 (pid 812): cpu 0-1, other"), "{}", check.found);
    assert!(check.found.contains("napi/lane-h0-1050 (pid 813): cpu 1, fifo 70"), "{}", check.found);
    assert!(check.fix.contains("--lane-interface lane"), "{}", check.fix);
    let plan = apply::plan(&host, 1, &lane).unwrap();
    let thread = ThreadId { pid: 812, start_ticks: 77 };
    let steps: Vec<_> = plan
        .steps
        .iter()
        .filter(|(s, _)| matches!(s, Tunable::ThreadCores(_) | Tunable::ThreadPolicy(_)))
        .cloned()
        .collect();
    assert_eq!(
        steps,
        [
            (Tunable::ThreadPolicy(thread), "fifo 70".to_string()),
            (Tunable::ThreadCores(thread), "1".to_string())
        ],
        "the placed thread is left alone, the other gets the priority first"
    );

    // Every thread placed: ok.
    let mut placed: Vec<(String, String)> = vec![("/sys/devices/system/cpu/online".into(), "0-1\n".into())];
    placed.extend(receive_thread(812, "napi/lane-1049", 2, 80, "1"));
    let borrowed: Vec<(&str, &str)> = placed.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let (_dir, host) = tree(&borrowed);
    assert!(receive::examine(&host, 1, &lane).ok);
    assert!(!receive::examine(&host, 0, &lane).ok, "on another core than the lane's");
}

#[test]
fn a_lane_interface_without_receive_threads_gets_threaded_napi_here_or_a_note_for_elsewhere() {
    let lane = [InterfaceName::new("lane").unwrap(), InterfaceName::new("elsewhere").unwrap()];
    let (_dir, host) = tree(&[
        ("/sys/devices/system/cpu/online", "0-1\n"),
        ("/sys/class/net/lane/threaded", "0\n"),
        ("/proc/1/comm", "systemd\n"),
    ]);
    let check = receive::examine(&host, 1, &lane);
    assert!(!check.ok);
    assert!(check.found.contains("lane: no receive thread"), "{}", check.found);
    let plan = apply::plan(&host, 1, &lane).unwrap();
    assert!(plan.steps.contains(&(Tunable::NapiThreaded(lane[0]), "1".into())), "{plan:?}");
    assert!(
        plan.notes.iter().any(|n| n.starts_with("elsewhere: not in this network namespace")),
        "{:?}",
        plan.notes
    );
    assert!(!receive::examine(&host, 1, &[]).ok, "no interface named: nothing is served");
}

#[test]
fn the_kernels_unbound_threads_and_workqueues_leave_the_lane_core_and_bound_ones_stay() {
    let kernel_thread = |pid: i32, name: &str, cores: &str| {
        let mut files = receive_thread(pid, name, 0, 0, cores);
        // Started by kthreadd (field 4, the parent).
        files[1].1 = files[1].1.replacen(") 0 0 ", ") 0 2 ", 1);
        files
    };
    let mut files: Vec<(String, String)> = vec![
        ("/sys/devices/system/cpu/online".into(), "0-1\n".into()),
        ("/sys/devices/virtual/workqueue/cpumask".into(), "3\n".into()),
    ];
    files.extend(kernel_thread(79, "kdamond.0", "0-1"));
    files.extend(kernel_thread(22, "ksoftirqd/1", "1"));
    files.extend(kernel_thread(34, "kworker/R-writeback", "0-1"));
    files.extend(kernel_thread(812, "napi/lane-1049", "0-1"));
    files.extend(receive_thread(900, "sshd", 0, 0, "0-1"));
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let (_dir, host) = tree(&borrowed);
    let lane = [InterfaceName::new("lane").unwrap()];
    let plan = apply::plan(&host, 1, &lane).unwrap();
    let cores: Vec<(i32, &str)> = plan
        .steps
        .iter()
        .filter_map(|(s, v)| match s {
            Tunable::ThreadCores(t) => Some((t.pid, v.as_str())),
            _ => None,
        })
        .collect();
    // kdamond leaves; the per-core thread, the rescuer worker and the user's process stay; the
    // lane's receive thread comes to the core.
    assert_eq!(cores, [(79, "0"), (812, "1")], "{plan:?}");
    assert!(plan.steps.contains(&(Tunable::WorkqueueCpumask, "1".into())), "{plan:?}");
}

#[test]
fn preemption_is_read_from_the_command_line_then_debugfs_and_unknown_is_not_ok() {
    let version = ("/proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC @0\n");
    type Files<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Files<'_>, bool, &str); 5] = [
        (&[version, ("/proc/cmdline", "quiet\n")], false, "not known here: a PREEMPT_DYNAMIC kernel"),
        (&[version, ("/proc/cmdline", "preempt=full\n")], true, "preempt=full in /proc/cmdline"),
        (
            &[
                version,
                ("/proc/cmdline", "quiet\n"),
                ("/sys/kernel/debug/sched/preempt", "(none) voluntary full lazy\n"),
            ],
            false,
            "none (/sys/kernel/debug/sched/preempt)",
        ),
        (
            &[("/proc/sys/kernel/version", "#1 SMP PREEMPT_RT Thu\n"), ("/proc/cmdline", "\n")],
            true,
            "PREEMPT_RT",
        ),
        (
            &[("/proc/sys/kernel/version", "#1 SMP Thu\n"), ("/proc/cmdline", "\n")],
            false,
            "built without preemption",
        ),
    ];
    for (files, ok, found) in cases {
        let (_dir, host) = tree(files);
        let check = examine(&host, 1, None).checks.into_iter().find(|c| c.name == "preemption").unwrap();
        assert_eq!(check.ok, ok, "{check:?}");
        assert!(check.found.contains(found), "{check:?}");
        let dynamic = files[0].1.contains("PREEMPT_DYNAMIC");
        assert_eq!(check.boot_parameter.is_some(), !ok && dynamic, "{check:?}");
    }
}
