//! `kairos doctor`: the JSON other tools read (the core, and five fields per check), one-line
//! errors for bad flags, --apply and --revert refused without root, and, as root, an apply
//! whose revert leaves every setting it may touch exactly as it was.
//!
//! The apply test changes the machine's IRQ affinities, RT throttling and watchdog cores for a
//! moment: it is ignored by the debug test run, and `scripts/test` runs it in release as root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kairos_sys::host::{HostFs, Policy, Tunable};
use kairos_testkit::{json, one_line_error, read_json, scratch_path, skip_if_root, skip_unless_root, text};

use crate::kairos;

/// The last online core, as the doctor picks it by default.
fn last_online_core() -> u64 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let last = online.trim().rsplit([',', '-']).next().unwrap();
    last.parse().unwrap()
}

#[test]
fn json_gives_the_core_and_five_fields_per_check_and_the_probe_says_it_measures() {
    let out = kairos(&["doctor", "--json", "--probe-ms", "200"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("kairos: measuring cpu") && l.contains("0.2 s")),
        "no progress line on stderr: {stderr}"
    );
    assert_eq!(stdout.lines().count(), 1, "one JSON object on one line: {stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["core"].as_u64(), Some(last_online_core()));
    let checks = json["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, kairos_doctor::CHECK_NAMES);
    for check in checks {
        let fields = check.as_object().unwrap();
        assert_eq!(fields.len(), 5, "exactly five fields: {check}");
        assert!(check["ok"].is_boolean(), "{check}");
        for field in ["name", "found", "fix", "cost"] {
            assert!(check[field].as_str().is_some_and(|s| !s.is_empty()), "{field}: {check}");
        }
    }
    // The probe ran on the core and its figures reached the checks.
    assert_eq!(json["probe"]["config"]["core"].as_u64(), Some(last_online_core()));
    assert!(json["probe"]["spin"]["pinned"].as_bool().unwrap());
    assert!(json["combined_cost"].as_str().unwrap().contains("spinning"));
    let irq = checks.iter().find(|c| c["name"] == "irq_affinity").unwrap();
    assert!(!irq["cost"].as_str().unwrap().contains("not measured"), "{irq}");

    let core_0 = kairos(&["doctor", "--json", "--probe-ms", "0", "--core", "0"]);
    assert_eq!(core_0.status.code(), Some(0), "{:?}", text(&core_0));
    let json: serde_json::Value = serde_json::from_str(&text(&core_0).0).unwrap();
    assert_eq!(json["core"], 0);
    assert!(json["probe"].is_null());
    assert!(text(&core_0).1.is_empty(), "no probe, no progress line: {}", text(&core_0).1);
}

#[test]
fn the_table_names_every_check_and_the_boot_parameters() {
    let out = kairos(&["doctor", "--probe-ms", "0"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for check in kairos_doctor::CHECK_NAMES {
        assert!(stdout.lines().any(|l| l.starts_with(check)), "no row for {check}: {stdout}");
    }
    assert!(stdout.contains("combined cost: not measured (--probe-ms 0)"), "{stdout}");
    assert!(stdout.contains("checks not ok"), "{stdout}");
}

#[test]
fn bad_flags_are_one_line_errors_with_exit_code_2() {
    for (flags, expected) in [
        (&["--apply", "--revert"][..], "--apply and --revert cannot be given together"),
        (&["--core", "100000"], "--core 100000: not an online core (online: "),
        (&["--probe-ms", "60001"], "--probe-ms must be from 0 (no probe) to 60000 milliseconds, got 60001"),
    ] {
        let mut args = vec!["doctor"];
        args.extend(flags);
        let out = kairos(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {:?}", text(&out));
        let error = one_line_error(&out);
        assert!(error.contains(expected), "{flags:?}: {error}");
        assert!(text(&out).0.is_empty(), "{flags:?}: nothing on stdout");
    }
}

#[test]
fn apply_and_revert_need_root_and_say_so_at_once() {
    if skip_if_root("run as root, --apply and --revert are permitted") {
        return;
    }
    let state = scratch_path("never-written.json");
    for flag in ["--apply", "--revert"] {
        let started = std::time::Instant::now();
        let out = kairos(&["doctor", flag, "--state", state.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{flag}: {:?}", text(&out));
        let error = one_line_error(&out);
        assert!(error.contains(&format!("kairos doctor {flag} needs root")), "{error}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{flag}: refused at once, before any probe"
        );
        assert!(!state.exists());
    }
}

/// Held by each test that applies and reverts: two at once would each see the other's changes
/// as changes it did not record, or revert them under it.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn machine() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every file `--apply` may write, with its content.
fn settings() -> BTreeMap<String, String> {
    let mut files: Vec<PathBuf> = vec![
        "/proc/irq/default_smp_affinity".into(),
        "/proc/sys/kernel/sched_rt_runtime_us".into(),
        "/proc/sys/kernel/watchdog_cpumask".into(),
    ];
    for entry in std::fs::read_dir("/proc/irq").unwrap().flatten() {
        let affinity = entry.path().join("smp_affinity_list");
        if affinity.exists() {
            files.push(affinity);
        }
    }
    for entry in std::fs::read_dir("/sys/devices/system/cpu").unwrap().flatten() {
        let governor = entry.path().join("cpufreq/scaling_governor");
        if governor.exists() {
            files.push(governor);
        }
    }
    files.push("/sys/devices/virtual/workqueue/cpumask".into());
    let mut settings: BTreeMap<String, String> = files
        .into_iter()
        .filter_map(|f| Some((f.display().to_string(), std::fs::read_to_string(&f).ok()?.trim().to_string())))
        .collect();
    // The kernel's own threads' cores, which --apply moves off the lane core (the workqueues'
    // workers follow the workqueue mask, a setting of its own).
    let host = HostFs::real();
    for (thread, _) in host.kernel_threads().into_iter().filter(|(_, name)| !name.starts_with("kworker/")) {
        if let Ok(cores) = host.thread_cores(thread) {
            settings.insert(Tunable::ThreadCores(thread).path(), cores.to_string());
        }
    }
    settings
}

/// Reverts what the record at its path holds when dropped: a test that fails between its
/// apply and its revert leaves the machine as it found it, not tuned for the next runs.
struct RevertOnDrop(PathBuf, Vec<String>);

impl Drop for RevertOnDrop {
    fn drop(&mut self) {
        if self.0.exists() {
            let mut args: Vec<&str> = self.1.iter().map(String::as_str).collect();
            args.extend([
                env!("CARGO_BIN_EXE_kairos"),
                "doctor",
                "--revert",
                "--state",
                self.0.to_str().unwrap(),
            ]);
            let _ = std::process::Command::new(args[0]).args(&args[1..]).output();
        }
    }
}

/// Asserts every setting of `before` is back in `after`: every file, and every thread that is in
/// both (kernel threads come and go on their own).
fn assert_back(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    for (setting, value) in before {
        match after.get(setting) {
            Some(now) => assert_eq!(now, value, "{setting} is not back as it was"),
            None => assert!(setting.starts_with("thread "), "{setting} is gone"),
        }
    }
}

fn apply(state: &Path) -> serde_json::Value {
    json(&kairos(&["doctor", "--apply", "--json", "--probe-ms", "0", "--state", state.to_str().unwrap()]))
}

#[test]
#[ignore = "changes the machine's IRQ affinities and RT throttling as root: scripts/test runs it in release"]
fn apply_changes_what_it_records_and_revert_puts_every_setting_back() {
    if skip_unless_root("--apply needs root") {
        return;
    }
    let _machine = machine();
    let state = scratch_path("doctor.json");
    let _undo = RevertOnDrop(state.to_path_buf(), vec![]);
    let before = settings();

    let applied = apply(&state);
    let changed = applied["applied"]["changed"].as_array().unwrap().clone();
    if changed.is_empty() {
        eprintln!("skipped: nothing to change, the host is already tuned for the lane's core");
        assert!(!state.exists());
        return;
    }
    // What changed is what the record says, from the values the snapshot holds.
    let record = read_json(&state);
    assert_eq!(record["changes"].as_array().unwrap(), &changed);
    let now = settings();
    for change in &changed {
        let setting = change["setting"].as_str().unwrap();
        assert_eq!(before.get(setting), Some(&change["previous"].as_str().unwrap().to_string()), "{change}");
        assert_eq!(now.get(setting), Some(&change["written"].as_str().unwrap().to_string()), "{change}");
    }
    for (setting, value) in &now {
        if before.get(setting).is_some_and(|was| was != value) {
            assert!(changed.iter().any(|c| c["setting"] == setting.as_str()), "{setting} changed unrecorded");
        }
    }
    // The checks run after the apply see it.
    let checks = applied["checks"].as_array().unwrap();
    let rt = checks.iter().find(|c| c["name"] == "rt_throttling").unwrap();
    if changed.iter().any(|c| c["setting"] == "/proc/sys/kernel/sched_rt_runtime_us") {
        assert_eq!(rt["ok"], true, "{rt}");
    }

    // A second apply keeps the first values.
    let again = apply(&state);
    assert!(again["applied"]["changed"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(again["applied"]["kept"].as_array().unwrap().len(), changed.len());

    let out = kairos(&["doctor", "--revert", "--state", state.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.contains(&format!("removed {}", state.display())), "{}", text(&out).0);
    assert!(!state.exists());
    assert_back(&before, &settings());
    eprintln!("{} settings changed and put back", changed.len());
}

/// A network namespace of this test's own with a veth pair in it, removed (with the pair and
/// its receive threads) when dropped.
struct VethNamespace {
    name: String,
}

impl VethNamespace {
    fn create(name: &str, ends: [&str; 2]) -> Self {
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip").args(args).output().expect("ip runs");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["netns", "add", name]);
        let namespace = Self { name: name.to_string() };
        ip(&["-n", name, "link", "add", ends[0], "type", "veth", "peer", "name", ends[1]]);
        for end in ends {
            ip(&["-n", name, "link", "set", end, "up"]);
            // A veth's receive takes NAPI only with GRO on and its peer's TSO off.
            ip(&["netns", "exec", name, "ethtool", "-K", end, "gro", "on", "tso", "off"]);
        }
        namespace
    }

    /// `/sys/class/net/DEV/threaded` as the namespace sees it.
    fn threaded(&self, device: &str) -> String {
        let path = format!("/sys/class/net/{device}/threaded");
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "cat", &path])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for VethNamespace {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// The threads serving `device`'s receive: (pid, cores, policy), read as the doctor reads them.
fn receive_threads(device: &str) -> Vec<(i32, String, Policy)> {
    let host = HostFs::real();
    kairos_sys::host::kernel_threads_named(&kairos_sys::host::napi_thread_prefix(device))
        .into_iter()
        .filter_map(|pid| {
            let thread = host.thread(pid).ok()?;
            Some((pid, host.thread_cores(thread).ok()?.to_string(), host.thread_policy(thread).ok()?))
        })
        .collect()
}

#[test]
#[ignore = "makes a network namespace and changes the machine's IRQ affinities as root: scripts/test runs it in release"]
fn a_lane_interface_gets_threaded_napi_and_its_threads_the_lane_core_and_revert_gives_back_both() {
    if skip_unless_root("--apply needs root") {
        return;
    }
    let _machine = machine();
    let tag = std::process::id() % 100_000;
    let (a, b) = (format!("kd{tag}a"), format!("kd{tag}b"));
    let namespace = VethNamespace::create(&format!("kairos-doctor-{tag}"), [&a, &b]);
    assert_eq!(namespace.threaded(&a), "0");
    assert!(receive_threads(&a).is_empty());
    let before = settings();
    let state = scratch_path("doctor-lane.json");
    // Reverted in the namespace it was applied in (threaded NAPI is that namespace's), before
    // the namespace goes.
    let _undo = RevertOnDrop(
        state.to_path_buf(),
        ["ip", "netns", "exec", &namespace.name].map(String::from).to_vec(),
    );
    let core = last_online_core().to_string();
    let doctor = |extra: &[&str]| {
        let mut args = vec!["netns", "exec", &namespace.name, env!("CARGO_BIN_EXE_kairos"), "doctor"];
        args.extend([
            "--probe-ms",
            "0",
            "--json",
            "--lane-interface",
            &a,
            "--state",
            state.to_str().unwrap(),
        ]);
        args.extend(extra);
        std::process::Command::new("ip").args(&args).output().unwrap()
    };

    let checked = json(&doctor(&[]));
    let lane =
        checked["checks"].as_array().unwrap().iter().find(|c| c["name"] == "lane_receive").unwrap().clone();
    assert_eq!(lane["ok"], false, "{lane}");
    assert!(lane["found"].as_str().unwrap().contains("no receive thread"), "{lane}");

    let applied = json(&doctor(&["--apply"]));
    let changed = applied["applied"]["changed"].as_array().unwrap();
    let threaded = format!("/sys/class/net/{a}/threaded");
    assert!(
        changed
            .iter()
            .any(|c| c["setting"] == threaded.as_str() && c["previous"] == "0" && c["written"] == "1"),
        "{applied}"
    );
    assert_eq!(namespace.threaded(&a), "1");
    let threads = receive_threads(&a);
    assert!(!threads.is_empty(), "threaded NAPI on {a} started no thread");
    for (pid, cores, policy) in &threads {
        assert_eq!(
            (cores.as_str(), *policy),
            (core.as_str(), Policy::Fifo(70)),
            "thread {pid}: on the lane core at SCHED_FIFO 70"
        );
        assert!(
            changed.iter().any(|c| c["setting"].as_str().unwrap().starts_with(&format!("thread {pid}@"))),
            "{applied}"
        );
    }
    let lane =
        applied["checks"].as_array().unwrap().iter().find(|c| c["name"] == "lane_receive").unwrap().clone();
    assert_eq!(lane["ok"], true, "{lane}");

    let out = doctor(&["--revert"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(!state.exists());
    assert_eq!(namespace.threaded(&a), "0", "threaded NAPI back off");
    assert!(receive_threads(&a).is_empty(), "its threads gone with it");
    assert_back(&before, &settings());
}
