//! The kernel's preemption model: whether a real-time thread woken on the lane's core gets it
//! at once, or only when the kernel code running there yields.
//!
//! Under `none` or `voluntary` a kernel thread (or a system call) running on the core keeps it
//! until it reaches a point where it yields, whatever the lane's priority: on this project's
//! test machine (`PREEMPT_DYNAMIC`, built with `CONFIG_PREEMPT_NONE`, no `preempt=` at boot) a
//! scheduling trace of a flooded lane run showed `kdamond.0` running 5.8 ms at once on the lane
//! core. `full` (and `lazy`, which defers only normal tasks' preemption, and `PREEMPT_RT`)
//! preempts for a real-time thread at once. A `PREEMPT_DYNAMIC` kernel takes `preempt=full` at
//! boot; which model it runs without one is the build's default, readable only from debugfs
//! (or the kernel's configuration), so when neither says, the check cannot pass.

use super::{Check, Context, NONE_NEEDED, check};

/// The models under which a woken real-time thread preempts kernel code at once.
const PREEMPTIVE: [&str; 3] = ["full", "lazy", "rt"];

/// Where the model was read, and the model (`None`: not known here).
fn model(context: &Context<'_>) -> (Option<String>, String, bool) {
    let version = context.host.kernel_version().unwrap_or_default();
    let words: Vec<&str> = version.split_whitespace().collect();
    let dynamic = words.contains(&"PREEMPT_DYNAMIC");
    if words.contains(&"PREEMPT_RT") {
        return (Some("rt".into()), format!("a PREEMPT_RT kernel ({version})"), false);
    }
    if let Some(Some(given)) = context.cmdline.as_ref().ok().and_then(|c| c.get("preempt")) {
        return (Some(given.to_string()), format!("preempt={given} in /proc/cmdline"), dynamic);
    }
    match context.host.preemption_model() {
        Ok(current) => {
            (Some(current.clone()), format!("{current} (/sys/kernel/debug/sched/preempt)"), dynamic)
        }
        Err(e) if dynamic => (
            None,
            format!(
                "not known here: a PREEMPT_DYNAMIC kernel with no preempt= in /proc/cmdline runs its build's default, and debugfs does not say ({e})"
            ),
            true,
        ),
        Err(_) if words.contains(&"PREEMPT") => {
            (Some("full".into()), format!("a PREEMPT kernel ({version})"), false)
        }
        Err(_) => (
            Some("none or voluntary".into()),
            format!("a kernel built without preemption ({version})"),
            false,
        ),
    }
}

impl Context<'_> {
    pub(super) fn preemption(&self) -> Check {
        let cpu = self.cpu();
        let (current, found, dynamic) = model(self);
        let ok = current.as_deref().is_some_and(|m| PREEMPTIVE.contains(&m));
        let fix = match (ok, dynamic) {
            (true, _) => NONE_NEEDED.to_string(),
            (false, true) => "boot with preempt=full (boot-time; the kernel is PREEMPT_DYNAMIC)".to_string(),
            (false, false) => "a kernel built with CONFIG_PREEMPT (or PREEMPT_RT)".to_string(),
        };
        let cost = if ok {
            "none: a real-time thread woken on the core preempts kernel code at once".to_string()
        } else {
            let longest = self
                .measured
                .map(|m| format!("; the probe's longest gap was {}", super::duration(m.max_gap_ns)))
                .unwrap_or_default();
            format!(
                "boot-time, so part of the probe's combined cost: kernel code running on {cpu} keeps it until it yields, whatever the lane's priority (kdamond.0 ran 5.8 ms at once on a lane core of this kind; --apply moves the kernel's unbound threads off {cpu}, the per-core ones stay){longest}"
            )
        };
        let parameter = (!ok && dynamic).then(|| "preempt=full".to_string());
        Check { boot_parameter: parameter, ..check("preemption", ok, found, fix, cost) }
    }
}
