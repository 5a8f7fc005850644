use super::*;

fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, HostFs) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let full = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    let host = HostFs::at(dir.path());
    (dir, host)
}

#[test]
fn cpu_lists_parse_and_print_as_the_kernel_writes_them() {
    let list = CpuList::parse("0-3,8,10-11\n").unwrap();
    assert_eq!(list.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
    assert_eq!(list.to_string(), "0-3,8,10-11");
    assert_eq!(list.without(2).to_string(), "0-1,3,8,10-11");
    assert_eq!(CpuList::parse("").unwrap(), CpuList::new());
    assert_eq!(CpuList::parse("5").unwrap().to_string(), "5");
    assert_eq!(CpuList::parse("3-1").unwrap_err().to_string(), "range \"3-1\" runs backwards");
    assert_eq!(CpuList::parse("a").unwrap_err().to_string(), "\"a\" is not a core number");
    assert!(CpuList::parse("0-4000000000").is_err(), "a huge range is malformed, not a huge set");
    assert_eq!(CpuList::parse("9000").unwrap_err().to_string(), "core 9000 is above 8191");
}

#[test]
fn masks_parse_and_print_in_32_bit_groups() {
    assert_eq!(CpuList::parse_mask("3").unwrap().to_string(), "0-1");
    assert_eq!(CpuList::parse_mask("00000000,00000003").unwrap().to_string(), "0-1");
    let wide = CpuList::parse_mask("1,80000001").unwrap();
    assert_eq!(wide.to_string(), "0,31-32");
    assert_eq!(wide.to_mask(), "1,80000001");
    assert_eq!(CpuList::parse("0").unwrap().to_mask(), "1");
    assert_eq!(CpuList::parse("4-7").unwrap().to_mask(), "f0");
    assert_eq!(CpuList::new().to_mask(), "0");
    assert_eq!(CpuList::parse_mask("xyz").unwrap_err().to_string(), "'z' is not a hexadecimal digit");
    assert_eq!(CpuList::parse_mask("").unwrap_err().to_string(), "an empty mask");
}

#[test]
fn the_command_line_stops_at_init_arguments_and_the_last_value_wins() {
    let cmdline =
        KernelCmdline::parse("quiet isolcpus=2 nohz_full=1-3 isolcpus=domain,3 rcu_nocbs -- nowatchdog\n");
    assert_eq!(cmdline.get("isolcpus"), Some(Some("domain,3")));
    assert_eq!(cmdline.get("rcu_nocbs"), Some(None));
    assert_eq!(cmdline.get("nowatchdog"), None, "after -- the words are init's");
    assert!(cmdline.has("quiet"));
}

#[test]
fn interrupts_are_read_per_core_with_their_devices() {
    let text = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 36:          0    1449629 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\nLOC:    4211745    4517122   Local timer interrupts\nERR:          0\n";
    let table = CounterTable::parse(text).unwrap();
    assert_eq!(table.cores, vec![0, 1]);
    let on_1: Vec<(String, u64, String)> =
        table.on_core(1).into_iter().map(|(r, n)| (r.source.clone(), n, r.description.clone())).collect();
    assert_eq!(on_1[1], ("36".into(), 1_449_629, "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0".into()));
    assert_eq!(on_1[2], ("LOC".into(), 4_517_122, "Local timer interrupts".into()));
    assert_eq!(on_1[3].1, 0, "a total has no column for core 1");
    assert_eq!(CounterTable::parse("").unwrap_err().to_string(), "no header line");
    assert_eq!(
        CounterTable::parse("garbage header\n").unwrap_err().to_string(),
        "header column \"garbage\" is not CPUn"
    );
}

#[test]
fn tunables_round_trip_through_their_paths_and_nothing_else_is_one() {
    for tunable in [
        Tunable::IrqAffinity(36),
        Tunable::DefaultIrqAffinity,
        Tunable::RtRuntime,
        Tunable::WatchdogCpumask,
        Tunable::ScalingGovernor(3),
        Tunable::WorkqueueCpumask,
        Tunable::NapiThreaded(InterfaceName::new("lane-h0").unwrap()),
        Tunable::ThreadCores(ThreadId { pid: 812, start_ticks: 4_786_339 }),
        Tunable::ThreadPolicy(ThreadId { pid: 812, start_ticks: 4_786_339 }),
    ] {
        assert_eq!(Tunable::from_path(&tunable.path()), Some(tunable));
    }
    for other in [
        "/etc/passwd",
        "/proc/irq/36/../../../etc/passwd/smp_affinity_list",
        "/proc/irq//smp_affinity_list",
        "/proc/irq/+1/smp_affinity_list",
        "/proc/sys/kernel/sched_rt_period_us",
        "/sys/devices/system/cpu/cpu99999/cpufreq/scaling_governor",
        "/sys/class/net/../threaded",
        "/sys/class/net/a/b/threaded",
        "/sys/class/net/sixteen-bytes-xx/threaded",
        "thread 812 cores",
        "thread 812@x cores",
        "thread -1@5 cores",
        "thread 812@5 nice",
    ] {
        assert_eq!(Tunable::from_path(other), None, "{other}");
    }
}

#[test]
fn readers_take_their_files_under_the_root_and_say_what_is_absent() {
    let (_dir, host) = tree(&[
        ("/proc/cmdline", "console=ttyS0 isolcpus=1\n"),
        ("/sys/devices/system/cpu/online", "0-1\n"),
        ("/sys/devices/system/cpu/isolated", "\n"),
        ("/sys/devices/system/cpu/nohz_full", "(null)\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/name", "POLL\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/latency", "0\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state0/disable", "0\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/name", "C1\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/latency", "2\n"),
        ("/sys/devices/system/cpu/cpu1/cpuidle/state1/disable", "1\n"),
        ("/sys/devices/system/cpu/cpuidle/current_governor_ro", "menu\n"),
        ("/proc/irq/7/smp_affinity_list", "0-1\n"),
        ("/proc/irq/7/effective_affinity_list", "1\n"),
        ("/proc/irq/12/smp_affinity_list", "garbage\n"),
        ("/proc/irq/default_smp_affinity", "3\n"),
        ("/proc/sys/kernel/sched_rt_runtime_us", "950000\n"),
        ("/proc/stat", "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 9 0 0\n"),
    ]);
    assert_eq!(host.kernel_cmdline().unwrap().get("isolcpus"), Some(Some("1")));
    assert_eq!(host.online_cores().unwrap().to_string(), "0-1");
    assert!(host.isolated_cores().unwrap().is_empty());
    assert!(host.nohz_full_cores().unwrap().is_empty());
    let states = host.idle_states(1).unwrap();
    assert_eq!(states.len(), 2);
    assert_eq!((states[1].name.as_str(), states[1].exit_latency_us, states[1].disabled), ("C1", 2, true));
    assert_eq!(host.cpuidle_governor().unwrap(), "menu", "the read-only file of older kernels");
    let irqs = host.irq_affinities().unwrap();
    assert_eq!(irqs.iter().map(|i| i.irq).collect::<Vec<_>>(), vec![7, 12]);
    assert_eq!(irqs[0].allowed.as_ref().unwrap().to_string(), "0-1");
    assert_eq!(irqs[0].effective.as_ref().unwrap().to_string(), "1");
    assert!(matches!(irqs[1].allowed, Err(HostError::Malformed { .. })));
    assert_eq!(host.default_irq_affinity().unwrap().to_string(), "0-1");
    assert_eq!(host.kernel_sysctl("sched_rt_runtime_us").unwrap(), 950_000);
    assert_eq!(
        host.steal_ns_per_core().unwrap()[1],
        9 * 1_000_000_000 / crate::proc::clock_ticks_per_second()
    );

    for absent in [
        host.kernel_sysctl("nmi_watchdog").unwrap_err(),
        host.scaling_governor(1).unwrap_err(),
        host.idle_states(0).unwrap_err(),
        host.thread_siblings(1).unwrap_err(),
        host.cpu_dma_latency_us().unwrap_err(),
        host.interrupts().unwrap_err(),
        host.fair_server_ns(1).unwrap_err(),
    ] {
        assert!(absent.is_absent(), "{absent}");
        assert!(!absent.to_string().contains(&host.root().display().to_string()), "{absent}");
    }
    assert!(!host.has_cpufreq());
}

#[test]
fn a_write_replaces_the_value_and_names_the_file_when_refused() {
    let (dir, host) = tree(&[("/proc/irq/7/smp_affinity_list", "0-1\n")]);
    host.write_tunable(Tunable::IrqAffinity(7), "0").unwrap();
    assert_eq!(host.read_tunable(Tunable::IrqAffinity(7)).unwrap(), "0");
    let missing = host.write_tunable(Tunable::IrqAffinity(8), "0").unwrap_err();
    assert!(missing.is_absent(), "a write never creates a file: {missing}");
    assert!(!dir.path().join("proc/irq/8/smp_affinity_list").exists());
    // A directory where the file should be: the open is refused.
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel/sched_rt_runtime_us")).unwrap();
    let refused = host.write_tunable(Tunable::RtRuntime, "-1").unwrap_err();
    assert!(matches!(refused, HostError::Refused { .. }), "{refused}");
    assert!(refused.to_string().starts_with("writing \"-1\" to /proc/sys/kernel/sched_rt_runtime_us: "));
}

#[test]
fn this_machine_is_readable() {
    let host = HostFs::real();
    let online = host.online_cores().unwrap();
    assert!(online.contains(0));
    assert!(host.kernel_cmdline().is_ok());
    let interrupts = host.interrupts().unwrap();
    assert!(!interrupts.rows.is_empty());
    assert!(host.steal_ns_per_core().unwrap().len() >= online.len());
}

#[test]
fn interface_names_are_what_the_kernel_takes() {
    for good in ["lane", "lane-h0", "fifteen-bytes-x", "br.lane"] {
        assert_eq!(InterfaceName::new(good).map(|n| n.to_string()), Some(good.to_string()));
    }
    for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-bytes-xx"] {
        assert!(InterfaceName::new(bad).is_none(), "{bad:?}");
    }
}

#[test]
fn policies_round_trip_through_their_text() {
    for policy in [
        Policy::Fifo(70),
        Policy::RoundRobin(1),
        Policy::Other,
        Policy::Batch,
        Policy::Idle,
        Policy::Deadline,
    ] {
        assert_eq!(Policy::parse(&policy.to_string()), Some(policy));
    }
    for bad in ["fifo", "fifo 0", "fifo 100", "rr x", "other 5", "FIFO 70", ""] {
        assert_eq!(Policy::parse(bad), None, "{bad:?}");
    }
    assert!(Policy::Fifo(70).at_least_fifo(70) && Policy::RoundRobin(99).at_least_fifo(70));
    assert!(!Policy::Fifo(69).at_least_fifo(70) && !Policy::Other.at_least_fifo(1));
}

/// A thread's `stat` line with its start time, policy and priority in their fields (22, 41, 40).
fn stat_line(pid: i32, name: &str, start: u64, policy: u32, priority: u32) -> String {
    let mut fields: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
    fields[22 - 3] = start.to_string();
    fields[40 - 3] = priority.to_string();
    fields[41 - 3] = policy.to_string();
    format!("{pid} ({name}) {}\n", fields.join(" "))
}

#[test]
fn a_thread_is_found_by_name_and_read_while_its_id_is_its_own() {
    let stat = stat_line(812, "napi/lane-1049", 4242, 1, 70);
    let (dir, host) = tree(&[
        ("/proc/812/comm", "napi/lane-1049\n"),
        ("/proc/812/stat", &stat),
        ("/proc/812/status", "Name:\tnapi/lane-1049\nCpus_allowed_list:\t1\n"),
        ("/proc/900/comm", "napi/lane-h0-10\n"),
        ("/proc/901/comm", "kworker/0:1\n"),
    ]);
    assert_eq!(host.threads_named("napi/lane-").into_iter().collect::<Vec<_>>(), [812, 900]);
    assert_eq!(
        host.threads_named("napi/lane-h0-1050").into_iter().collect::<Vec<_>>(),
        [900],
        "cut to 15 bytes"
    );
    let thread = host.thread(812).unwrap();
    assert_eq!(thread, ThreadId { pid: 812, start_ticks: 4242 });
    assert_eq!(host.read_tunable(Tunable::ThreadCores(thread)).unwrap(), "1");
    assert_eq!(host.read_tunable(Tunable::ThreadPolicy(thread)).unwrap(), "fifo 70");
    assert!(host.has(Tunable::ThreadCores(thread)));
    // The id taken by a later thread: the record's thread is gone, not the newcomer.
    let later = ThreadId { pid: 812, start_ticks: 4241 };
    assert!(host.read_tunable(Tunable::ThreadCores(later)).unwrap_err().is_absent());
    assert!(!host.has(Tunable::ThreadPolicy(later)));
    // Under a fake root a thread is never changed.
    let refused = host.write_tunable(Tunable::ThreadPolicy(thread), "other").unwrap_err();
    assert!(refused.to_string().contains("real host only"), "{refused}");
    drop(dir);
}
