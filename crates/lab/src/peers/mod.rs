//! The programs the experiments measure Kairos against or beside, each started, driven and
//! stopped by the lab on every path: `dpdk-testpmd` forwarding on the same veth as Kairos's
//! forwarder ([`testpmd`]), and `cyclictest` watching the realtime core during an RCU row
//! ([`cyclictest`]).
//!
//! Not here yet: the peers still inside the experiment that runs them, because they use its
//! configuration and helpers: the lane latency experiment's UDP, priority and sockperf rows
//! (`experiments::lane_latency::peers`), kv bench's Redis and etcd
//! (`experiments::kv_bench::systems`), and the RCU experiment's crossbeam-epoch row.

pub mod cyclictest;
pub mod testpmd;
