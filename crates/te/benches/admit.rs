//! Admission cost: one more multicast request (8 receivers) into a k=8 fat-tree (128 hosts, 80
//! switches, 768 links) already holding 100, 1,000 or 10,000 tunnels. Timed: X-OPT's tree,
//! the approximate validity check, and X-ADJ of every tunnel the new one affects (the release
//! that restores the state after each admission is not timed). The state is filled with seeded
//! random requests: a third multicast (2-8 receivers), packets 64-1,500 B, periods 10 us-10 ms,
//! sub-lanes 0-2. The 10,000-tunnel point takes over two minutes to fill here, so it runs only
//! with `KAIROS_LANE_BENCH_10K=1`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kairos_te::{Allocation, LinkSpec, Request, generate};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const NS: u64 = 1_000;

fn random_request(
    rng: &mut SmallRng,
    hosts: &[usize],
    name: String,
    receivers: usize,
    sublane: u8,
) -> Request {
    let mut pick = hosts.to_vec();
    pick.shuffle(rng);
    Request {
        name,
        sender: pick[0],
        receivers: pick[1..=receivers].to_vec(),
        packet_bytes: rng.random_range(64..=1_500),
        period: (10f64.powf(rng.random_range(4.0..7.0)) * NS as f64) as u64,
        sublane,
    }
}

fn filled(tunnels: usize) -> (Allocation, Vec<usize>) {
    let spec = LinkSpec { queue_bytes: 16 << 20, ..LinkSpec::default() };
    let mut alloc = Allocation::new(generate::fat_tree(8, spec).unwrap());
    let hosts: Vec<usize> = alloc.topology().hosts().collect();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut i = 0;
    while alloc.len() < tunnels {
        let receivers = if rng.random_range(0..3) == 0 { rng.random_range(2..=8) } else { 1 };
        let sublane = rng.random_range(0..3);
        let _ = alloc.admit(random_request(&mut rng, &hosts, format!("t{i}"), receivers, sublane));
        i += 1;
    }
    (alloc, hosts)
}

fn admit(c: &mut Criterion) {
    let mut group = c.benchmark_group("admit-multicast-8/fat-tree-k8");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    let mut sizes = vec![100usize, 1_000];
    if std::env::var_os("KAIROS_LANE_BENCH_10K").is_some() {
        sizes.push(10_000);
    }
    for tunnels in sizes {
        let (mut alloc, hosts) = filled(tunnels);
        let mut rng = SmallRng::seed_from_u64(7);
        group.bench_function(BenchmarkId::from_parameter(tunnels), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let sublane = rng.random_range(0..3);
                    let req = random_request(&mut rng, &hosts, "new".into(), 8, sublane);
                    let start = Instant::now();
                    let adm = alloc.admit(black_box(req));
                    total += start.elapsed();
                    let id = adm.expect("room for one more").id;
                    alloc.release(id);
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, admit);
criterion_main!(benches);
