//! The lane's receive path: whether each lane interface's receive runs in kernel threads of its
//! own (threaded NAPI), pinned to the lane's core above the node's loop, as the source's
//! dedicated receive ring served on the lane's core (its section 4.3.3).
//!
//! Without it a lane packet is received in the softirq of whichever core handed it on, one
//! packet after another behind the other traffic's, and a flood's 64 KB segments queue ahead of
//! it there. With threaded NAPI each interface's receive is a thread (`napi/IF-ID`) that can be
//! placed like any other: on the lane's core, at `SCHED_FIFO` [`RECEIVE_PRIORITY`], so a lane
//! packet is received as soon as it is handed on, before the node's loop (at 50 by default)
//! runs again.
//!
//! The threads are found by name across the machine (the pid namespace is shared, so an
//! interface inside a network namespace is served by threads seen here), while
//! `/sys/class/net/IF/threaded` is the current network namespace's: the doctor turns threaded
//! NAPI on for interfaces it sees there and says how to for the others.

use kairos_sys::host::{CpuList, HostFs, InterfaceName, Policy, ThreadId, Tunable, napi_thread_prefix};

use super::{Check, check};

/// The `SCHED_FIFO` priority of the lane's receive threads: above the node's loop (50 unless
/// `--fifo` says otherwise), below the doctor's probe (98).
pub const RECEIVE_PRIORITY: u32 = 70;

/// The check's name in reports.
pub const CHECK_NAME: &str = "lane_receive";

/// The threads that serve `interface`'s receive now.
pub fn receive_threads(host: &HostFs, interface: InterfaceName) -> Vec<ThreadId> {
    host.threads_named(&napi_thread_prefix(interface.as_str()))
        .into_iter()
        .filter_map(|pid| host.thread(pid).ok())
        .collect()
}

/// Whether a receive thread's cores are `core` alone.
fn cores_placed(cores: &CpuList, core: usize) -> bool {
    cores.iter().eq([core])
}

/// Whether a receive thread's policy is `SCHED_FIFO` [`RECEIVE_PRIORITY`] or above.
fn policy_placed(policy: &Policy) -> bool {
    policy.at_least_fifo(RECEIVE_PRIORITY)
}

/// Whether `thread` is placed as [`plan_threads`] places it.
fn placed(host: &HostFs, thread: ThreadId, core: usize) -> bool {
    host.thread_cores(thread).is_ok_and(|cores| cores_placed(&cores, core))
        && host.thread_policy(thread).is_ok_and(|p| policy_placed(&p))
}

/// One thread as a report shows it: `napi/lane-8193 (pid 812): cpu 0-1, other`.
fn described(host: &HostFs, thread: ThreadId) -> String {
    let name = host.thread_name(thread).unwrap_or_else(|_| "?".into());
    let cores =
        host.thread_cores(thread).map_or_else(|e| format!("cores unknown ({e})"), |c| format!("cpu {c}"));
    let policy =
        host.thread_policy(thread).map_or_else(|e| format!("policy unknown ({e})"), |p| p.to_string());
    format!("{name} (pid {}): {cores}, {policy}", thread.pid)
}

/// The check of `interfaces`' receive threads for `core`.
pub fn examine(host: &HostFs, core: usize, interfaces: &[InterfaceName]) -> Check {
    let mut ok = !interfaces.is_empty();
    let mut found = Vec::new();
    for &interface in interfaces {
        let threads = receive_threads(host, interface);
        if threads.is_empty() {
            ok = false;
            found.push(format!(
                "{interface}: no receive thread (threaded NAPI off, or no such interface on this host)"
            ));
            continue;
        }
        ok &= threads.iter().all(|&t| placed(host, t, core));
        let each: Vec<String> = threads.iter().map(|&t| described(host, t)).collect();
        found.push(format!("{interface}: {}", each.join("; ")));
    }
    let names: Vec<&str> = interfaces.iter().map(InterfaceName::as_str).collect();
    let fix = if ok {
        super::NONE_NEEDED.to_string()
    } else {
        format!(
            "kairos doctor --apply --lane-interface {} (threaded NAPI on where the interface is in this namespace, each receive thread on cpu{core} at SCHED_FIFO {RECEIVE_PRIORITY}); an interface in another namespace needs threaded NAPI turned on there first (ip netns exec NS sh -c 'echo 1 > /sys/class/net/IF/threaded'), and a veth GRO on and TSO off (ethtool -K IF gro on tso off)",
            names.join(" --lane-interface ")
        )
    };
    let cost = "not measured by the doctor: lane packets are received in the softirq of the core that hands them on, behind the other traffic's; kairos lane latency measures it (rows 'kairos lane' and 'kairos lane, shared receive path')".to_string();
    check(CHECK_NAME, ok, found.join(". "), fix, cost)
}

/// The steps that turn threaded NAPI on for `interfaces` this namespace has and no thread serves
/// yet, and notes for those it cannot.
pub(crate) fn plan_threaded(host: &HostFs, interfaces: &[InterfaceName], plan: &mut super::apply::Plan) {
    for &interface in interfaces {
        if !receive_threads(host, interface).is_empty() {
            continue;
        }
        let setting = Tunable::NapiThreaded(interface);
        match host.read_tunable(setting) {
            Ok(value) if value != "1" => plan.steps.push((setting, "1".into())),
            Ok(_) => plan.notes.push(format!(
                "{interface}: threaded NAPI is on but no thread serves it (a device without NAPI? a veth needs GRO on)"
            )),
            Err(e) if e.is_absent() => plan.notes.push(format!(
                "{interface}: not in this network namespace and no thread serves it: turn threaded NAPI on where it is (ip netns exec NS sh -c 'echo 1 > /sys/class/net/{interface}/threaded')"
            )),
            Err(e) => plan.notes.push(format!("{interface}: threaded NAPI left alone: {e}")),
        }
    }
}

/// The steps that put every thread serving `interfaces` on `core` at [`RECEIVE_PRIORITY`]
/// (the policy first, so a thread never runs on the lane's core below the node's loop).
pub(crate) fn plan_threads(
    host: &HostFs,
    core: usize,
    interfaces: &[InterfaceName],
    plan: &mut super::apply::Plan,
) {
    let only: CpuList = [core].into_iter().collect();
    let wanted = Policy::Fifo(RECEIVE_PRIORITY);
    for &interface in interfaces {
        for thread in receive_threads(host, interface) {
            match host.thread_policy(thread) {
                Ok(policy) if policy_placed(&policy) => {}
                Ok(_) => plan.steps.push((Tunable::ThreadPolicy(thread), wanted.to_string())),
                Err(e) => plan.notes.push(format!("{interface}'s thread {} left alone: {e}", thread.pid)),
            }
            match host.thread_cores(thread) {
                Ok(cores) if cores_placed(&cores, core) => {}
                Ok(_) => plan.steps.push((Tunable::ThreadCores(thread), only.to_string())),
                Err(e) => plan.notes.push(format!("{interface}'s thread {} left alone: {e}", thread.pid)),
            }
        }
    }
}
