//! A server steers 100,000 flows over 8 worker cores; at night a core allocator parks one
//! worker, in the morning it comes back. Each steering policy is asked, through the `Steer`
//! trait a dispatcher uses, where every flow goes before, while and after: how many flows lose
//! their warm state each time, against the least that must (the parked worker's share).
//! `kairos dispatch remap` is the same count as an experiment, for any number of workers.
//!
//! ```text
//! cargo run --release -p kairos-dispatch --example scale_down
//! ```

use kairos_dispatch::{PolicyKind, Steer, WorkerId, mix};

const WORKERS: usize = 8;
const FLOWS: u64 = 100_000;

fn main() {
    // Flow hashes as a NIC's RSS would give them: well mixed 64-bit values.
    let flows: Vec<u64> = (0..FLOWS).map(mix).collect();
    println!("{FLOWS} flows on {WORKERS} workers; worker 3 parks, then comes back");
    println!(
        "{:<10} {:>16} {:>16}   (the least that must move: {:.1}%)",
        "policy",
        "moved on leave",
        "moved on join",
        100.0 / WORKERS as f64
    );
    for kind in PolicyKind::ALL {
        let mut policy = kind.build(WORKERS);
        let before = place(policy.as_mut(), &flows);
        policy.leave(3);
        let parked = place(policy.as_mut(), &flows);
        policy.join(3);
        let after = place(policy.as_mut(), &flows);
        println!(
            "{:<10} {:>15.1}% {:>15.1}%",
            policy.name(),
            moved(&before, &parked),
            moved(&parked, &after)
        );
    }
    println!(
        "a leave must move the parked worker's {:.1}%; a join moves as much to give the newcomer its \
         share (moving nothing leaves it only new flows)",
        100.0 / WORKERS as f64
    );
}

/// Where the policy sends a packet of each flow now (time is passed in: 0 here).
fn place(policy: &mut dyn Steer, flows: &[u64]) -> Vec<Option<WorkerId>> {
    flows.iter().map(|&hash| policy.pick(hash, 0)).collect()
}

/// The share of flows, percent, whose worker differs between two placements.
fn moved(a: &[Option<WorkerId>], b: &[Option<WorkerId>]) -> f64 {
    let changed = a.iter().zip(b).filter(|(x, y)| x != y).count();
    100.0 * changed as f64 / a.len() as f64
}
